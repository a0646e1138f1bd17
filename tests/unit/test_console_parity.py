"""Everything Relay's HTTP API can change, the console can change too (issue 33, point 4).

Reads the write operations (POST, PUT, PATCH, DELETE) from the OpenAPI document a real (not started) Relay
serves with OAuth on (its largest document: the people's operations too), and fails on one that neither names
the console endpoint doing the same (CONSOLE) nor is excluded with its reason (EXCLUDED). Each console endpoint
must exist and take POST. Stale rows (an operation no longer served) fail too, so the table stays the truth.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.served_document import served_document

WRITE_METHODS = ("post", "put", "patch", "delete")

# operationId -> the console endpoint doing the same change (each behind a confirmation where it changes
# something, and recorded in the audit trail under the operationId: web/audit_trail.py note).
CONSOLE = {
    # applications and their settings (web/console/views.py, autoscaling.py)
    "registerApp": "console.register_app",
    "updateApp": "console.app_settings",
    "deleteApp": "console.delete_app",
    "putDataPlane": "console.app_data_plane",
    "deleteDataPlane": "console.app_data_plane",
    "setAutoscalingPolicy": "console.autoscaling_policy",
    "deleteAutoscalingPolicy": "console.autoscaling_policy",
    # keys
    "createToken": "console.create_key",
    "deleteToken": "console.revoke_key",
    # alerting rules and incidents (web/console/alerts.py, incidents.py)
    "createAlertingRule": "console.create_rule",
    "deleteAlertingRule": "console.delete_rule",
    "acknowledgeRelayIncident": "console.acknowledge_incident",
    "silenceRelayIncident": "console.silence_incident",
    "unsilenceRelayIncident": "console.unsilence_incident",
    # Workflows, schedules and versions: web/console/workflows.py and workflow_import.py.
    "cancelWorkflow": "console.workflow_action",
    "resumeWorkflow": "console.workflow_action",
    "forkWorkflow": "console.workflow_action",
    "deleteWorkflow": "console.workflow_action",
    "bulkCancelWorkflows": "console.bulk",
    "bulkResumeWorkflows": "console.bulk",
    "bulkDeleteWorkflows": "console.bulk",
    "bulkForkWorkflowsFromFailure": "console.bulk",
    "importWorkflow": "console.import_workflow",
    "pauseSchedule": "console.schedule_action",
    "resumeSchedule": "console.schedule_action",
    "triggerSchedule": "console.schedule_action",
    "backfillSchedule": "console.schedule_action",
    "setLatestAppVersion": "console.set_latest",
    # people, in OAuth mode (web/console/members.py, organization.py, sso.py)
    "registerUser": "console.register",
    "joinOrg": "console.join",
    "generateSecret": "console.generate_secret",
    "removeMember": "console.remove_member",
    "grantRole": "console.grant_role",
    "createRole": "console.create_role",
    "deleteRole": "console.delete_role",
    "updateOrg": "console.change_retention",
    "requestDomainClaim": "console.claim_domain",
    "releaseDomainClaim": "console.release_domain",
}

# Write operations the console leaves out, each with why.
EXCLUDED = {
    # Reads that take their question as a body: the console's lists and overview ask them, nothing changes.
    "searchWorkflows": "a read (POST for its body): the workflow list asks it",
    "getWorkflowAggregates": "a read (POST for its body): the overview asks it",
    "getStepAggregates": "a read (POST for its body): the overview's step chart asks it",
    "planConfig": "a read: the plan of a configuration document, as `relay diff` prints it",
    # Operators' tools, not pages.
    "applyConfig": "a whole configuration document, reviewed as a diff: the CLI's `relay apply` (web/cli/config.py)",
    "sendRawExecutorRequest": "any frame to one executor, unchecked: a diagnostic for scripts; every change it "
                              "could make that people need has its own console action",
    # Not a person's call at all.
    "forwardToExecutor": "instance to instance, signed with the cluster's secret (docs/adr/0023)",
}


def _served(**settings: Any) -> Iterator[tuple[dict[str, Any], dict[str, set[str]]]]:
    """The served document and the console's endpoints with their methods."""
    for doc in served_document(**settings):
        endpoints: dict[str, set[str]] = {}
        for method, _rule, endpoint in doc["__rules__"]:
            if endpoint.startswith("console."):
                endpoints.setdefault(endpoint, set()).add(method.upper())
        yield doc, endpoints


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[dict[str, Any], dict[str, set[str]]]]:
    # OAuth on (the issuer is never contacted): the document then has the people's operations too.
    yield from _served(oidc_issuer="http://127.0.0.1:9/idp", oidc_audiences=("relay-api",))


def _write_operations(doc: dict[str, Any]) -> dict[str, str]:
    return {op["operationId"]: f"{method.upper()} {path}" for path, ops in doc["paths"].items()
            for method, op in ops.items() if method in WRITE_METHODS}


def test_every_write_operation_has_a_console_action_or_a_reason(
        served: tuple[dict[str, Any], dict[str, set[str]]]) -> None:
    doc, _ = served
    missing = {op: where for op, where in _write_operations(doc).items() if op not in CONSOLE and op not in EXCLUDED}
    assert not missing, f"write operations the console cannot do (add a console action, or an exclusion): {missing}"


def test_the_table_names_served_operations_and_real_console_endpoints(
        served: tuple[dict[str, Any], dict[str, set[str]]]) -> None:
    doc, endpoints = served
    served_ops = _write_operations(doc)
    assert not set(CONSOLE) & set(EXCLUDED), "an operation is both mapped and excluded"
    stale = sorted((set(CONSOLE) | set(EXCLUDED)) - set(served_ops))
    assert not stale, f"operations no longer served (or no longer writes): {stale}"
    absent = {op: endpoint for op, endpoint in CONSOLE.items() if "POST" not in endpoints.get(endpoint, set())}
    assert not absent, f"console endpoints that do not exist or take no POST: {absent}"
