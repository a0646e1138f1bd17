"""Issue 14: the `Operation` aggregate (events/operation.py) and which API calls the audit trail records
(web/audit_trail.py). End to end: tests/integration/test_operations_python.py and test_audit_console.py."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest

from relay.events.errors import InvalidValueError
from relay.events.operation import FAILURE, MAX_TARGETS, SUCCESS, Operation
from relay.web import audit_trail
from relay.web.operations import operation_of

T0 = datetime(2026, 12, 4, tzinfo=UTC)
BASE = {"org": "acme", "app": "shop", "operation": "cancelWorkflow", "via": "api", "targets": ["wf-1"],
        "status": 204, "detail": None, "by": "api_key:ops", "source": "10.0.0.7", "at": T0}


def test_an_operation_records_who_what_where_and_its_outcome() -> None:
    done = Operation.perform(uuid4(), **BASE)
    assert (done.outcome, done.targets, done.by, done.source, done.more_targets) == (
        SUCCESS, ["wf-1"], "api_key:ops", "10.0.0.7", 0)
    refused = Operation.perform(uuid4(), **{**BASE, "status": 404, "detail": "no workflow 'wf-1'"})
    assert (refused.outcome, refused.detail) == (FAILURE, "no workflow 'wf-1'")
    (performed,) = done.collect_events()
    rebuilt = performed.mutate(None)
    assert isinstance(rebuilt, Operation) and (rebuilt.targets, rebuilt.status) == (["wf-1"], 204)


def test_a_bulk_operation_lists_its_first_targets_and_counts_the_rest() -> None:
    many = [f"wf-{i}" for i in range(MAX_TARGETS + 7)]
    done = Operation.perform(uuid4(), **{**BASE, "operation": "bulkCancelWorkflows", "targets": many})
    assert done.targets == many[:MAX_TARGETS] and done.more_targets == 7
    long = Operation.perform(uuid4(), **{**BASE, "detail": "x" * 5000, "targets": ["y" * 5000]})
    assert len(long.detail or "") == 500 and len(long.targets[0]) == 256


@pytest.mark.parametrize("change", [
    {"org": "No Such Org"}, {"app": "x"}, {"operation": ""}, {"via": "carrier-pigeon"}, {"status": 99},
    {"status": True}, {"by": ""}, {"targets": [1]},
])
def test_an_operation_refuses_what_it_cannot_hold(change: dict[str, object]) -> None:
    with pytest.raises(InvalidValueError):
        Operation.perform(uuid4(), **{**BASE, **change})


def test_every_api_action_is_audited_and_the_exceptions_are_real_operations() -> None:
    """Every route that does not GET is audited unless named read-only; the names listed exist."""
    from relay.actors.configuration.settings import Settings
    from relay.actors.runtime import Runtime
    from relay.web.wsgi import create_app

    with tempfile.TemporaryDirectory(prefix="relay-audit-") as data_dir:
        rt = Runtime(Settings(data_dir=Path(data_dir), admin_token="audit-test-admin-token"))
        try:
            app = create_app(rt)
            described = {}
            for rule in app.url_map.iter_rules():
                found = operation_of(app.view_functions[rule.endpoint])
                if found is not None:
                    described[found.operation_id] = set(rule.methods or ()) - {"HEAD", "OPTIONS"}
        finally:
            rt.stop()
    assert audit_trail.READ_ONLY | audit_trail.AUDITED_READS | {audit_trail.RAW} <= set(described)
    audited = {name for name, methods in described.items()
               if (methods - {"GET"} and name not in audit_trail.READ_ONLY) or name in audit_trail.AUDITED_READS}
    assert {"cancelWorkflow", "resumeWorkflow", "forkWorkflow", "deleteWorkflow", "importWorkflow",
            "exportWorkflow", "bulkCancelWorkflows", "bulkResumeWorkflows", "bulkDeleteWorkflows",
            "bulkForkWorkflowsFromFailure", "pauseSchedule", "resumeSchedule", "triggerSchedule",
            "backfillSchedule", "setLatestAppVersion", "sendRawExecutorRequest", "registerApp", "updateApp",
            "deleteApp", "createToken", "deleteToken", "createAlertingRule", "deleteAlertingRule"} <= audited
    assert not audited & {"searchWorkflows", "getWorkflow", "listWorkflows", "forwardToExecutor"}


@pytest.mark.parametrize(("message_type", "reads"), [
    ("get_workflow", True), ("list_steps", True), ("exist_pending_workflows", True), ("executor_info", True),
    ("cancel", False), ("rewind_workflow", False), ("fork_workflow", False), (None, False), (7, False),
])
def test_raw_frames_that_only_read_are_not_actions(message_type: object, reads: bool) -> None:
    assert audit_trail.is_read_frame(message_type) is reads
