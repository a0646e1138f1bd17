"""actors/services/executor_calls.py (its errors as web/problems.py answers them) with actors and no sockets (a
stand-in for ApplicationActor's routing side, scripted executor actors): the answers for every way an executor
call can fail, and what each executor was sent."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pykka
import pytest
from flask import Flask

from relay.actors.adapters.dataplane import answers as dataplane_answers
from relay.actors.adapters.dataplane.client import DataPlanes
from relay.actors.configuration.limits import Limits
from relay.actors.directory import Directory
from relay.actors.executor import LiveExecutor
from relay.actors.services import executor_calls
from relay.actors.services.executor_calls import summarize_error
from relay.actors.services.workflows import WorkflowActions
from relay.web.context import executor_calls as request_calls
from relay.web.problems import ApiError, DomainFailure, api_error
from relay.wire.catalog_requests import ListQueuesRequest
from relay.wire.codec import decode_response
from relay.wire.errors import ExecutorGoneError
from relay.wire.requests import CancelRequest, DeleteRequest, ResumeRequest
from relay.wire.workflow_requests import (
    ExportWorkflowRequest,
    GetWorkflowRequest,
    ImportWorkflowRequest,
)

ORG, APP = "local", "calls-app"


class FakeApplication(pykka.ThreadingActor):
    """The part of ApplicationActor that executor calls use: the live executors, marks, the latest version."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[str, LiveExecutor] = {}
        self.latest_version: str | None = None

    def claim(self, executor: LiveExecutor) -> None:
        self.live[executor.executor_id] = executor

    def mark_unsupported(self, executor_id: str, message_type: str) -> None:
        self.live[executor_id].unsupported.add(message_type)

    def live_executors(self) -> list[LiveExecutor]:
        return list(self.live.values())

    def routing_snapshot(self) -> tuple[list[LiveExecutor], str | None]:
        return list(self.live.values()), self.latest_version


class ScriptedExecutor(pykka.ThreadingActor):
    """Answers each request with ``script(request)``: a dict of response fields, an exception class to fail
    the future with, or None to never answer."""

    def __init__(self, script: Callable[[Any], Any]) -> None:
        super().__init__()
        self.script = script
        self.received: list[Any] = []
        self.forgotten: list[str] = []

    def request(self, request: Any) -> pykka.ThreadingFuture[Any]:
        self.received.append(request)
        future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
        answer = self.script(request)
        if isinstance(answer, type) and issubclass(answer, Exception):
            future.set_exception((answer, answer("scripted"), None))
        elif answer is not None:
            frame = {"type": str(request.type), "request_id": request.request_id, **answer}
            future.set(decode_response(json.dumps(frame)))
        return future

    def forget(self, request_id: str) -> None:
        self.forgotten.append(request_id)

    def seen(self) -> tuple[list[Any], list[str]]:
        return list(self.received), list(self.forgotten)


@pytest.fixture
def world() -> Iterator[SimpleNamespace]:
    directory = Directory(lambda org, app: FakeApplication.start())
    flask_app = Flask("calls-test")
    settings: dict[str, Any] = {}  # the application's settings row, as the applications view keeps it
    registry: list[dict[str, Any]] = []  # the registry's rows of the application (what it expects back)
    flask_app.extensions["relay"] = SimpleNamespace(
        directory=directory, settings=SimpleNamespace(limits=Limits(request_timeout_s=0.3)),
        views=SimpleNamespace(applications=SimpleNamespace(app=lambda org, app: {"settings": settings},
                                                           app_setting=lambda org, app, name: settings.get(name)),
                              registry=SimpleNamespace(
                                  executors=lambda org, app: list(registry),
                                  counts_by_status=lambda org, app: Counter(r["status"] for r in registry),
                                  executor=lambda org, app, eid: next(
                                      (r for r in registry if r["executor_id"] == eid), None))),
        data_planes=DataPlanes(environ={}),
    )
    executors: dict[str, pykka.ActorRef[Any]] = {}

    def add(executor_id: str, script: Callable[[Any], Any], *, dbos: str = "3.2.0", connected_at: float = 0.0,
            version: str = "v1") -> pykka.ActorRef[Any]:
        ref = ScriptedExecutor.start(script)
        executors[executor_id] = ref
        live = LiveExecutor(executor_id=executor_id, ref=ref, application_version=version, language="python",
                            dbos_version=dbos, connected_at=connected_at)
        directory.application(ORG, APP).proxy().claim(live).get()
        return ref

    def seen(executor_id: str) -> tuple[list[Any], list[str]]:
        return executors[executor_id].proxy().seen().get()

    def unsupported(executor_id: str) -> set[str]:
        live = directory.application(ORG, APP).proxy().live_executors().get()
        return next(e.unsupported for e in live if e.executor_id == executor_id)

    with flask_app.app_context():
        yield SimpleNamespace(add=add, seen=seen, unsupported=unsupported, settings=settings, registry=registry)
    pykka.ActorRegistry.stop_all()


OK = {"output": {"WorkflowUUID": "wf"}}
UNKNOWN = {"error_message": "Unknown message type"}
GET = GetWorkflowRequest(workflow_id="wf")


def call(org: str, app: str, request: Any) -> Any:
    """One call, as a view makes it: through the request's ExecutorCalls."""
    return request_calls().call(org, app, request)


def failure(request: Any, status: int) -> ApiError:
    """The call's domain error, as the API answers it."""
    with pytest.raises(DomainFailure) as caught:
        call(ORG, APP, request)
    problem = api_error(caught.value)
    assert problem.status == status, problem.detail
    return problem


def test_no_executor_is_503(world: SimpleNamespace) -> None:
    assert "no executor" in failure(GET, 503).detail


def test_the_preferred_executor_answers(world: SimpleNamespace) -> None:
    world.add("older", lambda r: OK, connected_at=1)
    world.add("newer", lambda r: OK, connected_at=2)
    assert call(ORG, APP, GET).output == {"WorkflowUUID": "wf"}
    assert len(world.seen("newer")[0]) == 1 and world.seen("older")[0] == []
    # A fresh request id per attempt, never the caller's.
    assert world.seen("newer")[0][0].request_id != GET.request_id


def test_unknown_type_marks_and_moves_on_then_501(world: SimpleNamespace) -> None:
    world.add("lacks", lambda r: UNKNOWN, connected_at=2)
    world.add("has", lambda r: OK, connected_at=1)
    assert call(ORG, APP, GET).output == {"WorkflowUUID": "wf"}
    assert world.unsupported("lacks") == {"get_workflow"}
    call(ORG, APP, GET)
    assert len(world.seen("lacks")[0]) == 1  # marked: not asked again
    queues = ListQueuesRequest()
    world.add("old", lambda r: OK, dbos="2.12.0", connected_at=3)  # lacks list_queues: never sent
    world.add("also-lacks", lambda r: UNKNOWN, connected_at=0)
    world.add("has-not-either", lambda r: UNKNOWN, connected_at=0.5)
    world.unsupported("has").add("list_queues")
    problem = failure(queues, 501)
    assert "list_queues" in problem.detail
    assert "python 2.12.0" in problem.detail and "python 3.2.0 (4 executors)" in problem.detail
    assert world.seen("old")[0] == []


def test_an_executor_that_leaves_is_replaced_by_the_next(world: SimpleNamespace) -> None:
    world.add("leaves", lambda r: ExecutorGoneError, connected_at=2)
    world.add("stays", lambda r: OK, connected_at=1)
    assert call(ORG, APP, GET).output == {"WorkflowUUID": "wf"}


def test_every_executor_leaving_is_502(world: SimpleNamespace) -> None:
    world.add("a", lambda r: ExecutorGoneError)
    world.add("b", lambda r: ExecutorGoneError)
    assert "disconnected" in failure(GET, 502).detail


def test_while_the_executors_reconnect_a_request_waits_for_one(world: SimpleNamespace) -> None:
    """Issue 32: a stopping instance closed their sockets; the registry still expects them (HEALTHY or
    DISCONNECTED): the request waits (up to the request timeout here, 0.3 s) and is answered once one is back."""
    world.registry.append({"executor_id": "moving", "status": "DISCONNECTED"})
    back = threading.Timer(0.1, lambda: world.add("moving", lambda r: OK))
    started = time.monotonic()
    back.start()
    try:
        assert call(ORG, APP, GET).output == {"WorkflowUUID": "wf"}
    finally:
        back.join()
    assert 0.1 <= time.monotonic() - started < 0.3


def test_a_read_whose_executors_all_left_is_asked_again_once_one_is_back(world: SimpleNamespace) -> None:
    world.registry.append({"executor_id": "a", "status": "HEALTHY"})
    answers = iter([ExecutorGoneError, OK])
    world.add("a", lambda r: next(answers))
    assert call(ORG, APP, GET).output == {"WorkflowUUID": "wf"}
    assert len(world.seen("a")[0]) == 2


def test_a_change_whose_executor_left_is_not_sent_again(world: SimpleNamespace) -> None:
    world.registry.append({"executor_id": "a", "status": "HEALTHY"})
    world.add("a", lambda r: ExecutorGoneError)
    assert "disconnected" in failure(CancelRequest(workflow_id="wf"), 502).detail
    assert len(world.seen("a")[0]) == 1  # it may have cancelled before it went: not sent twice


def test_no_wait_for_executors_the_registry_does_not_expect_back(world: SimpleNamespace) -> None:
    world.registry.append({"executor_id": "gone", "status": "DEAD"})
    started = time.monotonic()
    assert "no executor" in failure(GET, 503).detail
    assert time.monotonic() - started < 0.1


def test_an_executor_error_is_502_with_its_message_and_no_retry(world: SimpleNamespace) -> None:
    message = ("Exception encountered when getting workflow wf: Traceback (most recent call last):\n"
               '  File "conductor.py", line 3, in run\n    raise KeyError("x")\nKeyError: \'x\'\n')
    world.add("fails", lambda r: {"error_message": message}, connected_at=2)
    world.add("fine", lambda r: OK, connected_at=1)
    problem = failure(GET, 502)
    assert problem.detail == ("python 3.2.0 executor 'fails' answered 'get_workflow' with an error: "
                              "Exception encountered when getting workflow wf: KeyError: 'x'")
    assert world.seen("fine")[0] == []


RACE = {"error_message": "Failed to send websocket frame"}  # the Java SDK's export, sent without its lock


def test_an_export_that_lost_a_send_race_is_asked_again(world: SimpleNamespace) -> None:
    answers = iter([RACE, RACE, {"serialized_workflow": "H4sI"}])
    world.add("java", lambda r: next(answers))
    export = ExportWorkflowRequest(workflow_id="wf")
    assert call(ORG, APP, export).serialized_workflow == "H4sI"
    sent = world.seen("java")[0]
    assert len(sent) == 3 and len({r.request_id for r in sent}) == 3  # a fresh id each time


def test_a_send_race_that_persists_is_502_after_the_retries(world: SimpleNamespace) -> None:
    world.add("java", lambda r: RACE)
    problem = failure(ExportWorkflowRequest(workflow_id="wf"), 502)
    assert problem.detail.endswith("Failed to send websocket frame")
    assert len(world.seen("java")[0]) == 1 + len(executor_calls.SEND_RACE_RETRY_DELAYS_S)


def test_a_send_race_on_a_type_that_changes_state_is_not_asked_again(world: SimpleNamespace) -> None:
    world.add("java", lambda r: RACE)
    failure(ImportWorkflowRequest(serialized_workflow="H4sI"), 502)
    assert len(world.seen("java")[0]) == 1  # an import may have happened: never twice


def test_no_answer_in_time_is_504_and_forgotten(world: SimpleNamespace) -> None:
    world.add("silent", lambda r: None, connected_at=2)
    world.add("unused", lambda r: OK, connected_at=1)
    problem = failure(GET, 504)
    assert "did not answer" in problem.detail
    received, forgotten = world.seen("silent")
    assert forgotten == [received[0].request_id]
    assert world.seen("unused")[0] == []


def test_several_workflows_go_one_by_one_to_releases_without_bulk_ids(world: SimpleNamespace) -> None:
    world.add("old", lambda r: {"success": True}, dbos="2.14.0")
    cancel = CancelRequest(workflow_ids=["a", "b", "c"], cancel_children=True)
    assert call(ORG, APP, cancel).success is True
    sent = world.seen("old")[0]
    assert [(r.workflow_id, r.workflow_ids, r.cancel_children) for r in sent] == [
        ("a", None, True), ("b", None, True), ("c", None, True)]


def test_several_workflows_go_in_one_request_to_newer_releases(world: SimpleNamespace) -> None:
    world.add("new", lambda r: {"success": True}, dbos="3.2.0")
    call(ORG, APP, DeleteRequest(workflow_ids=["a", "b"]))
    (sent,) = world.seen("new")[0]
    assert sent.workflow_ids == ["a", "b"]


@pytest.mark.parametrize(("message", "expected"), [
    ("plain failure", "plain failure"),
    ("ctx: Traceback (most recent call last):\n  File \"a\", line 1\nValueError: boom\n", "ctx: ValueError: boom"),
    ("ctx: Traceback (most recent call last):", "ctx"),
    ("x" * 5000, "x" * 1999 + "…"),
])
def test_summarize_error(message: str, expected: str) -> None:
    assert summarize_error(message) == expected


# What each SDK really answers (read from their sources, checked against real dbos 3.2.0 executors in
# tests/integration/test_operations_python.py): the caller's mistakes are 4xx, the rest stays 502.
PY_MISSING = ("Exception encountered when resuming workflow(s) ['a', 'b']: Traceback (most recent call last):\n"
              '  File "_sys_db.py", line 1279, in resume_workflows\n'
              '    raise DBOSNonExistentWorkflowError("target", ", ".join(missing))\n'
              "dbos._error.DBOSNonExistentWorkflowError: DBOS Error 5: Non-existent target workflow ID: a, b\n")
CLASSIFIED = [
    ("resume", PY_MISSING, 404, None),
    ("fork_workflow", ("Exception encountered when forking workflow x to new workflow y on step 0, app version "
     "None: dbos._error.DBOSNonExistentWorkflowError: DBOS Error 5: Non-existent target workflow ID: x"), 404, None),
    ("export_workflow", ("Exception encountered when exporting workflow x: dbos._error.DBOSNonExistentWorkflowError: "
     "DBOS Error 5: Non-existent export workflow ID: x"), 404, None),
    ("resume", "Exception encountered when resuming workflow(s) a,b: Workflow a, b does not exist", 404, None),  # TS
    ("fork_workflow", "failed to fork workflow: DBOS Error NonExistentWorkflow: workflow x does not exist", 404,
     None),  # Go
    ("resume", "failed to resume workflows: NonExistentWorkflow (details withheld in metadata-only mode)", 404, None),
    ("resume", "Workflow does not exist x", 404, None),  # Java
    ("list_workflows", ("Exception encountered when listing workflows: dbos._error.DBOSException: DBOS Error: "
     "Filtering workflows by attributes is not supported on SQLite. Use a Postgres system database to filter by "
     "attributes."), 422, "body.attributes"),
    ("get_workflow_aggregates", ("Exception encountered when getting workflow aggregates: DBOS Error: Filtering "
     "workflows by attributes is not supported on SQLite."), 422, "body.attributes"),
    ("import_workflow", ("Exception encountered when importing workflow: _pickle.UnpicklingError: invalid load key, "
     "'['."), 422, "body.serializedWorkflow"),
    ("import_workflow", "Exception encountered when importing workflow: EOFError: Ran out of input", 422,
     "body.serializedWorkflow"),
    ("import_workflow", ("Exception encountered when importing workflow: Unexpected token 'x', \"xx\" is not valid "
     "JSON"), 422, "body.serializedWorkflow"),
    ("import_workflow", ("Exception encountered when importing workflow: sqlalchemy.exc.IntegrityError: "
     "(psycopg.errors.UniqueViolation) duplicate key value violates unique constraint \"workflow_status_pkey\""),
     409, "body.serializedWorkflow"),
    ("import_workflow", ("Exception encountered when importing workflow: Cannot read properties of undefined "
     "(reading 'workflow_uuid')"), 422, "body.serializedWorkflow"),  # TS, JSON of another shape
    ("import_workflow", ("Exception encountered when importing workflow: failed to import workflow_status: ERROR: null "
     'value in column "workflow_uuid" of relation "workflow_status" violates not-null constraint (SQLSTATE 23502)'),
     422, "body.serializedWorkflow"),  # Go
    ("import_workflow", ('Cannot invoke "dev.dbos.transact.workflow.WorkflowStatus.workflowId()" because "status" is '
     "null"), 422, "body.serializedWorkflow"),  # Java
    ("import_workflow", ("Exception encountered when importing workflow: failed to import workflow_status: ERROR: "
     'duplicate key value violates unique constraint "workflow_status_pkey" (SQLSTATE 23505)'), 409,
     "body.serializedWorkflow"),  # Go
    # A fork to a newWorkflowId that already exists: each SDK's unique violation (Python, TS and Java, Go, SQLite).
    ("fork_workflow", ("Exception encountered when forking workflow x to new workflow y on step 0, app version None: "
     "sqlalchemy.exc.IntegrityError: (psycopg.errors.UniqueViolation) duplicate key value violates unique "
     'constraint "workflow_status_pkey"'), 409, "body.newWorkflowId"),
    ("fork_workflow", 'duplicate key value violates unique constraint "workflow_status_pkey"', 409,
     "body.newWorkflowId"),
    ("fork_workflow", ("failed to fork workflow: failed to insert forked workflow statuses: ERROR: duplicate key value "
     'violates unique constraint "workflow_status_pkey" (SQLSTATE 23505)'), 409, "body.newWorkflowId"),
    ("fork_workflow", ("sqlalchemy.exc.IntegrityError: (sqlite3.IntegrityError) UNIQUE constraint failed: "
     "workflow_status.workflow_uuid"), 409, "body.newWorkflowId"),
    ("fork_from_failure", "failed to fork workflows from failure: workflow wf-1 has no steps", 422,
     "body.workflowIds"),  # Go
    ("fork_from_failure", "Workflow wf-1 has no steps", 422, "body.workflowIds"),  # Java
    ("import_workflow", "Failed to unmarshal workflow data: invalid character 'g' looking for beginning of value",
     422, "body.serializedWorkflow"),  # Go
    ("import_workflow", ("Exception encountered when importing workflow: failed to import workflow_status: "
     "unexpected EOF"), 502, None),  # Go, its database connection dropped
    # Genuine faults stay 502: a missing table is not a missing workflow; the same text on another type.
    ("resume", ('Exception encountered when resuming workflow(s) [\'a\']: psycopg.errors.UndefinedTable: relation '
     '"dbos.workflow_status" does not exist'), 502, None),
    ("list_workflows", "Exception encountered when listing workflows: OperationalError: database is locked", 502,
     None),
    ("list_workflows", "Exception encountered when listing workflows: EOFError: Ran out of input", 502, None),
    ("get_workflow", "failed to get workflow: connection refused", 502, None),
]


@pytest.mark.parametrize(("message_type", "message", "status", "location"), CLASSIFIED)
def test_executor_errors_that_are_the_callers_are_4xx(message_type: str, message: str, status: int,
                                                      location: str | None) -> None:
    from relay.actors.services.executor_errors import classify

    found = classify(message_type, summarize_error(message))
    assert (api_error(found.kind("")).status if found else 502) == status
    assert (found.location if found else None) == location


def test_a_missing_workflow_answered_by_an_executor_is_404_with_its_message(world: SimpleNamespace) -> None:
    world.add("sdk", lambda r: {"error_message": PY_MISSING, "success": False})
    problem = failure(ResumeRequest(workflow_ids=["a", "b"]), 404)
    assert problem.detail.startswith("no such workflow: python 3.2.0 executor 'sdk' answered 'resume'")
    assert problem.detail.endswith("Non-existent target workflow ID: a, b") and "Traceback" not in problem.detail


def test_the_summary_keeps_the_exceptions_line_not_sqlalchemys_trailer() -> None:
    message = ("Exception encountered when importing workflow: Traceback (most recent call last):\n"
               '  File "_sys_db.py", line 9, in import_workflow\n    c.execute(x)\n'
               'sqlalchemy.exc.IntegrityError: (psycopg.errors.UniqueViolation) duplicate key value violates unique '
               'constraint "workflow_status_pkey"\nDETAIL:  Key (workflow_uuid)=(wf) already exists.\n'
               "[SQL: INSERT INTO dbos.workflow_status ...]\n[parameters: {...}]\n"
               "(Background on this error at: https://sqlalche.me/e/21/gkpj)\n")
    assert summarize_error(message) == (
        "Exception encountered when importing workflow: sqlalchemy.exc.IntegrityError: "
        '(psycopg.errors.UniqueViolation) duplicate key value violates unique constraint "workflow_status_pkey"')


def test_bulk_ids_are_checked_with_one_list_request(world: SimpleNamespace) -> None:
    require_workflows = WorkflowActions(request_calls()).require_all
    known = {"a", "b"}
    world.add("sdk", lambda r: {"output": [{"WorkflowUUID": w} for w in r.body.workflow_uuids if w in known]})
    require_workflows(ORG, APP, ["a", "b", "a"])
    with pytest.raises(DomainFailure) as caught:
        require_workflows(ORG, APP, ["a", "x", "y"])
    problem = api_error(caught.value)
    assert problem.status == 404 and "'x', 'y'" in problem.detail and "'a'" not in problem.detail
    [first, *_] = world.seen("sdk")[0]
    assert (first.body.workflow_uuids, first.body.limit, first.body.load_input) == (["a", "b"], 2, False)


def test_an_executor_ignoring_the_id_filter_cannot_fail_the_check(world: SimpleNamespace) -> None:
    world.add("old", lambda r: {"output": [{"WorkflowUUID": "other"}]})
    WorkflowActions(request_calls()).require_all(ORG, APP, ["a"])  # it cannot tell: the action itself will


# -- the routing rule between executors and the data plane (issue 15) ---------------------------------------------
PLANE = {"systemDatabaseUrlFrom": "env:SYSDB", "mode": "read-write", "statementTimeoutMs": 1000, "poolSize": 1,
         "schema": "dbos"}


@pytest.fixture
def database(world: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The application gets a data plane whose answers are recorded (the client itself is tested against real
    system databases in tests/integration/test_dataplane_*.py)."""
    world.settings["dataPlane"] = dict(PLANE)
    asked: list[Any] = []

    def answer(plane: Any, request: Any) -> Any:
        asked.append(request)
        return request.answer(type=request.type.value, request_id=request.request_id, output={"WorkflowUUID": "db"})

    monkeypatch.setattr(dataplane_answers, "answer", answer)
    return asked


def test_with_no_executor_the_database_answers(world: SimpleNamespace, database: list[Any]) -> None:
    assert call(ORG, APP, GET).output == {"WorkflowUUID": "db"}
    assert request_calls().served_from == "database"
    assert [r.type for r in database] == [GET.type]


def test_a_connected_executor_answers_before_the_database(world: SimpleNamespace, database: list[Any]) -> None:
    world.add("one", lambda r: OK)
    assert call(ORG, APP, GET).output == {"WorkflowUUID": "wf"}
    assert request_calls().served_from == "executor"
    assert database == []


def test_the_database_answers_what_the_connected_executors_lack(world: SimpleNamespace, database: list[Any]) -> None:
    world.add("old", lambda r: UNKNOWN)
    assert call(ORG, APP, GET).output == {"WorkflowUUID": "db"}
    assert request_calls().served_from == "database"


def test_what_only_an_executor_does_says_so_with_no_executor(world: SimpleNamespace) -> None:
    world.settings["dataPlane"] = dict(PLANE)
    detail = failure(ExportWorkflowRequest(workflow_id="wf"), 503).detail
    assert "needs a connected executor" in detail


def test_a_read_only_data_plane_refuses_changes(world: SimpleNamespace) -> None:
    world.settings["dataPlane"] = {**PLANE, "mode": "read"}
    detail = failure(CancelRequest(workflow_id="wf"), 503).detail
    assert "read-only" in detail


def test_an_unusable_reference_is_503_without_saying_why(world: SimpleNamespace) -> None:
    world.settings["dataPlane"] = dict(PLANE)  # not bound by the operator, and unset: why is in Relay's log
    detail = failure(GET, 503).detail
    assert "cannot be used" in detail and "SYSDB" not in detail and "not set" not in detail
