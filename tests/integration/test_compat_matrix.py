"""The compatibility matrix (README): every message type by every SDK release the suite runs, found by sending it.

Columns: Python ``dbos`` 3.2.0 (and the same release in conductor metadata-only mode), the older Python release
of ``.venv-dbos2`` (2.x), TypeScript 5.2.11, Go v1.6.0 and Java 1.1.0-m6 — each a real, unmodified executor in
its own process against a real ``relay serve``, its system database on PostgreSQL. Rows: the 33 message types of
``dbos`` 3.2.0 plus ``restart``. Each request goes as it is through Relay's raw endpoint
(``POST /relay/v1/.../executors/{id}/requests``) to the one executor, and its answer is classified:

- ``answered``: a response without an error;
- ``answered (error)``: the executor knows the type but its handler failed (the message is kept in the report);
- ``unknown type``: the executor answered "Unknown message type" (a release without that type);
- ``refused (metadata-only)``: the executor refused to move workflow data in metadata-only mode.

The tests check the answers against Relay's own release tables (``relay.wire.support.supported_types``): a type
Relay believes a release has must be answered, one it believes missing must be "unknown type". The last test
renders the matrix and checks the README block between the ``compat-matrix`` markers is that rendering
(tests/support/readme_blocks.py; ``make compat-matrix`` rewrites it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay.wire.messages import METADATA_ONLY_REFUSAL, UNKNOWN_TYPE_ERROR, MessageType
from relay.wire.support import supported_types
from tests.integration.sdk_apps import (
    GO,
    JAVA,
    OLD_PYTHON,
    SKEW_APP,
    TYPESCRIPT,
    OldSdkExecutor,
    Sdk,
    SdkApp,
    new_app,
    ready_info,
)  # fmt: skip
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess
from tests.support.readme_blocks import check_block

pytestmark = pytest.mark.integration

ANSWERED, FAILED, UNKNOWN, REFUSED = "answered", "answered (error)", "unknown type", "refused (metadata-only)"

# Read-only types first, then those that change things, so every read sees the scenario as it was made.
TYPES = (
    "executor_info", "list_workflows", "list_queued_workflows", "get_workflow", "list_steps",
    "get_workflow_events", "get_workflow_notifications", "get_workflow_streams", "get_workflow_aggregates",
    "get_step_aggregates", "list_queues", "get_queue", "get_metrics", "list_application_versions",
    "exist_pending_workflows", "list_schedules", "get_schedule", "pause_schedule", "resume_schedule",
    "trigger_schedule", "backfill_schedule", "set_latest_application_version", "fork_workflow",
    "fork_from_failure", "rewind_workflow", "restart", "cancel", "resume", "export_workflow", "delete",
    "import_workflow", "recovery", "retention", "alert",
)  # fmt: skip


def test_the_rows_are_every_message_type_relay_knows() -> None:
    assert sorted(TYPES) == sorted(MessageType), "TYPES must list each MessageType once"


@dataclass
class Scenario:
    """What one column's requests refer to: workflows the app really ran, its queue, schedule and version."""

    executor_id: str
    version: str
    greet: str  # finished with SUCCESS, two steps
    chatty: str  # set an event, wrote a stream, received a notification
    flaky: str  # failed in its second step
    queue: str
    schedule: str
    exported: str | None = None  # the serialized workflow export_workflow answered, for import_workflow


def request_for(message_type: str, s: Scenario) -> dict[str, Any]:
    """The fields of one request of ``message_type`` (without ``request_id``: Relay sets it)."""
    list_filter = {"workflow_uuids": None, "workflow_name": None, "start_time": None, "end_time": None,
                   "status": None, "application_version": None, "limit": 50, "offset": None,
                   "sort_desc": True, "load_input": False, "load_output": False}  # fmt: skip
    fields: dict[str, Any] = {
        "executor_info": {},
        "list_workflows": {"body": list_filter},
        "list_queued_workflows": {"body": list_filter},
        "get_workflow": {"workflow_id": s.greet, "load_input": True, "load_output": True},
        "list_steps": {"workflow_id": s.greet, "load_output": True},
        "get_workflow_events": {"workflow_id": s.chatty},
        "get_workflow_notifications": {"workflow_id": s.chatty},
        "get_workflow_streams": {"workflow_id": s.chatty},
        "get_workflow_aggregates": {"body": {"group_by_status": True, "group_by_name": True, "select_count": True}},
        "get_step_aggregates": {"body": {"group_by_function_name": True, "select_count": True}},
        "list_queues": {"body": {}},
        "get_queue": {"name": s.queue},
        "get_metrics": {"start_time": "2020-01-01T00:00:00+00:00", "end_time": "2100-01-01T00:00:00+00:00",
                        "metric_class": "workflow_step_count"},
        "list_application_versions": {},
        "exist_pending_workflows": {"executor_id": s.executor_id, "application_version": s.version},
        "list_schedules": {"body": {"load_context": True}},
        "get_schedule": {"schedule_name": s.schedule, "load_context": True},
        "pause_schedule": {"schedule_name": s.schedule},
        "resume_schedule": {"schedule_name": s.schedule},
        "trigger_schedule": {"schedule_name": s.schedule},
        "backfill_schedule": {"schedule_name": s.schedule, "start": "2024-12-31T00:00:00+00:00",
                              "end": "2025-01-02T00:00:00+00:00"},
        "set_latest_application_version": {"version_name": s.version},
        "fork_workflow": {"body": {"workflow_id": s.greet, "start_step": 1, "new_workflow_id": f"{s.greet}-fork",
                                   "application_version": None}},
        "fork_from_failure": {"body": {"workflow_ids": [s.flaky], "from_last_failure": True,
                                       "from_last_step": False}},
        "rewind_workflow": {"body": {"workflow_id": s.greet, "start_step": 1}},
        "restart": {"workflow_id": s.greet},
        "cancel": {"workflow_id": s.flaky, "workflow_ids": [s.flaky], "cancel_children": False},
        "resume": {"workflow_id": s.flaky, "workflow_ids": [s.flaky]},
        "export_workflow": {"workflow_id": s.greet, "export_children": False},
        "delete": {"workflow_id": s.greet, "workflow_ids": [s.greet], "delete_children": False},
        "import_workflow": {"serialized_workflow": s.exported or "H4sIAAAAAAAA/4uOBQApu0wNAgAAAA=="},
        "recovery": {"executor_ids": ["no-such-executor"]},
        "retention": {"body": {"gc_cutoff_epoch_ms": 1, "gc_rows_threshold": None, "gc_batch_size": None,
                               "timeout_cutoff_epoch_ms": None}},
        "alert": {"name": "compat-matrix", "message": "sent by the compatibility matrix", "metadata": {"k": "v"}},
    }[message_type]  # fmt: skip
    return {"type": message_type, **fields}


def classify(answer: dict[str, Any]) -> tuple[str, str | None]:
    error = answer.get("error_message")
    if not error:
        return ANSWERED, None
    if error.strip() == UNKNOWN_TYPE_ERROR:
        return UNKNOWN, None
    if error.strip().endswith(METADATA_ONLY_REFUSAL):
        return REFUSED, None
    return FAILED, error.strip().splitlines()[0][:200]


@dataclass
class Column:
    """One SDK release (and mode) the matrix has a column for."""

    key: str
    title: str
    language: str
    sdk: Sdk | None = None  # the TypeScript/Go/Java app; None for the Python skew app
    python: str | None = None  # the interpreter of the Python app
    metadata_only: bool = False

    def available(self) -> None:
        if self.sdk is not None:
            self.sdk.check_installed()
        elif self.python is not None and not Path(self.python).exists():
            pytest.fail(f"{self.python} is missing: `make test-deps` creates the older dbos's virtualenv")


COLUMNS = (
    Column("py3", "Python 3.2.0", "python", python=sys.executable),
    Column("py3-meta", "Python 3.2.0 metadata-only", "python", python=sys.executable, metadata_only=True),
    Column("py2", "Python {version}", "python", python=str(OLD_PYTHON)),
    Column("ts", "TypeScript 5.2.11", "typescript", sdk=TYPESCRIPT),
    Column("go", "Go v1.6.0", "go", sdk=GO),
    Column("java", "Java 1.1.0-m6", "java", sdk=JAVA),
)


@dataclass
class Found:
    title: str
    version: str
    cells: dict[str, str]
    errors: dict[str, str]


@pytest.fixture(scope="module")
def found() -> dict[str, Found]:
    return {}


def python_scenario(app: SdkApp, column: Column, workdir: Path) -> tuple[Scenario, Callable[[], None], str]:
    """The Python skew app (tests/integration/executor_apps/skew_app.py) with its scenario run; its version."""
    env = {"APP_NAME": app.name, "CONDUCTOR_URL": app.relay.ws_url, "CONDUCTOR_KEY": app.key,
           "SYSTEM_DATABASE_URL": app.db_url, "APP_VERSION": "v1", "SCENARIO_PREFIX": column.key,
           "SCHEDULE": f"{column.key}_yearly", "METADATA_ONLY": "1" if column.metadata_only else "0"}  # fmt: skip
    kind = ExecutorProcess if column.python == sys.executable else OldSdkExecutor
    process = kind(SKEW_APP, name=column.key, cwd=workdir / column.key, env=env)
    process.start()
    try:
        ready = ready_info(process)
    except Exception as exc:
        process.stop()
        raise AssertionError(f"{column.key} never became READY:\n{process.log_tail()}") from exc

    def healthy() -> bool:
        return any(e["executorId"] == ready["executor_id"] and e["status"] == "HEALTHY"
                   for e in app.ok("GET", "/executors"))  # fmt: skip

    wait_until(healthy, 30, message=f"{column.key} never HEALTHY:\n{process.log_tail()}")
    w = ready["workflows"]
    scenario = Scenario(ready["executor_id"], "v1", w["greet"], w["chatty"], w["flaky"], "skew_queue",
                        f"{column.key}_yearly")  # fmt: skip
    return scenario, process.stop, ready["dbos_version"]


def sdk_scenario(app: SdkApp) -> tuple[Scenario, Callable[[], None], str]:
    """The TypeScript/Go/Java app with greet, chatty and flaky run to their end through its control port."""
    info = app.launch("v1")
    key = app.sdk.key
    greet = app.start("greet", "matrix", workflow_id=f"{key}-m-greet")
    chatty = app.start("chatty", "matrix", workflow_id=f"{key}-m-chatty")
    app.control("POST", "/flags", {"failing": True})  # flaky's second step fails only while this is set
    flaky = app.start("flaky", "matrix", workflow_id=f"{key}-m-flaky")
    app.wait_status(greet, "SUCCESS")
    app.wait_status(chatty, "PENDING")
    app.send(chatty, "pong", "ping")
    app.wait_status(chatty, "SUCCESS")
    app.wait_status(flaky, "ERROR")
    app.control("POST", "/flags", {"failing": False})
    scenario = Scenario(info["executor_id"], "v1", greet, chatty, flaky, app.sdk.queue, app.sdk.schedule)
    return scenario, app.stop, app.sdk.version


@pytest.mark.parametrize("column", COLUMNS, ids=[c.key for c in COLUMNS])
def test_every_type_is_answered_as_relay_expects(
    column: Column, relay: RelayProcess, pg_url: str, tmp_path: Path, found: dict[str, Found]
) -> None:
    column.available()
    app = new_app(relay, column.sdk, f"matrix-{column.key}", pg_url, tmp_path)
    scenario, stop, version = python_scenario(app, column, tmp_path) if column.sdk is None else sdk_scenario(app)
    cells: dict[str, str] = {}
    errors: dict[str, str] = {}
    try:
        for message_type in TYPES:
            response = app.raw(scenario.executor_id, request_for(message_type, scenario))
            assert response.status_code == 200, f"{message_type}: {response.status_code} {response.text[:500]}"
            answer = response.json()
            assert answer["type"] == message_type, answer
            cells[message_type], error = classify(answer)
            if error:
                errors[message_type] = error
            if message_type == "export_workflow" and cells[message_type] == ANSWERED:
                scenario.exported = answer.get("serialized_workflow")
    finally:
        stop()
    found[column.key] = Found(column.title.format(version=version), version, cells, errors)

    expected = supported_types(column.language, version)
    assert expected is not None, f"Relay has no release table for {column.language} {version}"
    for message_type, cell in cells.items():
        if message_type in expected:
            assert cell in {ANSWERED, FAILED, REFUSED}, f"{column.title}: Relay expects {message_type}, got {cell}"
        else:
            assert cell == UNKNOWN, f"{column.title}: Relay expects {message_type} unknown, got {cell}"
    refused = {t for t, cell in cells.items() if cell == REFUSED}
    if column.metadata_only:
        assert refused, "metadata-only mode refused nothing"
    else:
        assert not refused, refused
    assert not errors, f"{column.title}: handlers failed: {json.dumps(errors, indent=1)}"


def render(found: dict[str, Found]) -> str:
    keys = [c.key for c in COLUMNS]
    mark = {ANSWERED: "✓", FAILED: "✓ (error)", UNKNOWN: "unknown type", REFUSED: "refused (metadata-only)"}
    lines = ["| Message type | " + " | ".join(found[k].title for k in keys) + " |",
             "|---|" + "---|" * len(keys)]  # fmt: skip
    lines.extend(f"| `{message_type}` | " + " | ".join(mark[found[k].cells[message_type]] for k in keys) + " |"
                 for message_type in TYPES)
    return "\n".join(lines) + "\n"


def test_the_readme_matrix_is_what_this_run_found(found: dict[str, Found]) -> None:
    missing = [c.key for c in COLUMNS if c.key not in found]
    assert not missing, f"columns whose test did not finish: {missing}"
    check_block("compat-matrix", render(found))
