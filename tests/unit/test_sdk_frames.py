"""Frames the Go and Java SDKs really sent, through Relay's wire module and its Conductor API v2 translation.

tests/unit/sdk_frames/ holds, per SDK release, one request Relay sent and the executor's answer for every type,
recorded by a WebSocket proxy between an unmodified executor (tests/integration/go_app, java_app) and
``relay serve``: ``{sdk, captured_with, pairs: {type: {request, response}}, unsolicited}``. Every answer must
decode, and what the v2 API makes of it must fit the reference schemas. Where an SDK's shapes differ from the
Python SDK's (absent vs null fields, epoch ms as strings vs numbers, missing application names), the
difference is pinned below with the frame that shows it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from relay.actors.services.executor_calls import ExecutorCalls
from relay.web.shapes import api_to_wire, wire_to_api
from relay.wire.codec import decode_response, is_unknown_type_error
from relay.wire.messages import MessageType
from relay.wire.requests import CancelRequest, DeleteRequest, ResumeRequest
from relay.wire.responses import RawResponse, SuccessResponse
from relay.wire.support import supported_types, supports_bulk_ids
from tests.support.openapi_ref import check, reference

FRAMES_DIR = Path(__file__).parent / "sdk_frames"
FILES = sorted(FRAMES_DIR.glob("*.json"))
APP = "frames-app"
APP_ID = "app-id"
WINDOW = (datetime(2026, 12, 3, 9, 0, tzinfo=UTC), datetime(2026, 12, 3, 10, 0, tzinfo=UTC))


def load(name: str) -> dict[str, Any]:
    return json.loads((FRAMES_DIR / name).read_text())


GO = load("go-v1.6.0.json")
JAVA = load("java-1.1.0-m6.json")


def response(recording: dict[str, Any], message_type: str) -> dict[str, Any]:
    """The frame the executor sent, as it sent it."""
    return recording["pairs"][message_type]["response"]


def decoded(recording: dict[str, Any], message_type: str) -> Any:
    return decode_response(json.dumps(response(recording, message_type)))


def release(recording: dict[str, Any]) -> tuple[str, str]:
    """The executor's own ``language`` and ``dbos_version`` (from its executor_info answer)."""
    info = response(recording, "executor_info")
    return info["language"], info["dbos_version"]


def conforms(schema_name: str, value: Any) -> None:
    errors = check(reference(), {"$ref": f"#/components/schemas/{schema_name}"}, value)
    assert not errors, (schema_name, errors)


# What the v2 API answers for each type (web/api/workflows.py, web/api/catalog.py): (schema, value) pairs.
_V2: dict[str, Any] = {
    "list_workflows": lambda r: [("Workflow", wire_to_api.workflow(w)) for w in r.output],
    "list_queued_workflows": lambda r: [("Workflow", wire_to_api.workflow(w)) for w in r.output],
    "get_workflow": lambda r: [("Workflow", wire_to_api.workflow(r.output))],
    "list_steps": lambda r: [("Step", wire_to_api.step(s)) for s in r.output],
    "get_workflow_events": lambda r: [("Event", wire_to_api.event(e)) for e in r.events],
    "get_workflow_notifications": lambda r: [("Notification", wire_to_api.notification(n)) for n in r.notifications],
    "get_workflow_streams": lambda r: [("StreamEntry", wire_to_api.stream_entry(s)) for s in r.streams],
    "get_workflow_aggregates": lambda r: [("WorkflowAggregate", wire_to_api.workflow_aggregate(a)) for a in r.output],
    "get_step_aggregates": lambda r: [("StepAggregate", wire_to_api.step_aggregate(a)) for a in r.output],
    "list_queues": lambda r: [("Queue", wire_to_api.of_app(wire_to_api.queue(q), APP)) for q in r.output],
    "get_queue": lambda r: [("Queue", wire_to_api.of_app(wire_to_api.queue(r.output), APP))],
    "list_schedules": lambda r: [("Schedule", wire_to_api.of_app(wire_to_api.schedule(s), APP)) for s in r.output],
    "get_schedule": lambda r: [("Schedule", wire_to_api.of_app(wire_to_api.schedule(r.output), APP))],
    "list_application_versions": lambda r: [("ApplicationVersion", v)
                                            for v in wire_to_api.application_versions(r.output)],
    "get_metrics": lambda r: [("Metric", wire_to_api.metric(m, APP_ID, WINDOW)) for m in r.metrics],
    "export_workflow": lambda r: [("ExportWorkflowOutputBody", {"serializedWorkflow": r.serialized_workflow})],
    "fork_workflow": lambda r: [("ForkWorkflowOutputBody", {"workflowId": r.new_workflow_id})],
    "fork_from_failure": lambda r: [("BulkForkFromFailureOutputBody", {"workflowIds": r.forked_workflow_ids})],
    "trigger_schedule": lambda r: [("TriggerOutputBody", {"workflowId": r.workflow_id})],
    "backfill_schedule": lambda r: [("BackfillOutputBody", {"workflowIds": r.workflow_ids})],
}
# Answered with success; the v2 API answers 204/201 without a body (or, for restart, retention, recovery and
# alert, Relay uses them itself or through the raw endpoint).
_SUCCESS = {"cancel", "resume", "delete", "import_workflow", "pause_schedule", "resume_schedule",
            "set_latest_application_version", "restart", "retention", "recovery", "alert"}

PAIRS = [
    pytest.param(path.name, message_type, id=f"{path.stem}:{message_type}")
    for path in FILES
    for message_type in sorted(json.loads(path.read_text())["pairs"])
]


# ------------------------------------------------------------------------------------ the recordings


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recordings_are_whole_and_hold_no_secret(path: Path) -> None:
    text = path.read_text()
    recording = json.loads(text)
    assert set(recording) == {"sdk", "captured_with", "pairs", "unsolicited"}
    assert not recording["unsolicited"]  # executors only ever answer
    for message_type, pair in recording["pairs"].items():
        request, answer = pair["request"], pair["response"]
        assert request["type"] == answer["type"] == message_type
        assert request["request_id"] == answer["request_id"]
    assert "executor_info" in recording["pairs"]
    # API keys (dbos_...) travel only in the socket's URL, never in a frame; none may be committed.
    assert not re.search(r"dbos_[A-Za-z0-9_-]{20,}", text)


def test_the_releases_report_themselves_as_pinned() -> None:
    assert release(GO) == ("go", "v1.6.0")
    assert release(JAVA) == ("java", "1.1.0-m6")  # a milestone: the only release Maven Central serves here
    assert response(GO, "executor_info")["executor_metadata"] == {"pid": 22516, "runtime": "go"}
    assert response(JAVA, "executor_info")["executor_metadata"]["runtime"] == "java"


# --------------------------------------------------------------------------------- decode and translate


@pytest.mark.parametrize(("file", "message_type"), PAIRS)
def test_every_answer_decodes(file: str, message_type: str) -> None:
    recording = load(file)
    answer = decoded(recording, message_type)
    assert not isinstance(answer, RawResponse)  # every recorded type is one Relay models
    assert (answer.type, answer.request_id) == (message_type, recording["pairs"][message_type]["request"]["request_id"])
    known = supported_types(*release(recording))
    assert known is not None
    if answer.ok:
        assert message_type in known
    else:
        # Only a type this release lacks fails, and it says so as every SDK does.
        assert is_unknown_type_error(answer) and message_type not in known


@pytest.mark.parametrize(("file", "message_type"), PAIRS)
def test_every_answer_translates_to_the_v2_schemas(file: str, message_type: str) -> None:
    answer = decoded(load(file), message_type)
    if not answer.ok:
        return
    if message_type in _SUCCESS:
        assert answer.success is True
    elif message_type == "exist_pending_workflows":
        assert answer.exist is False
    elif message_type != "executor_info":
        shaped = _V2[message_type](answer)
        assert shaped, message_type  # every recording lists something
        for schema, value in shaped:
            conforms(schema, value)


@pytest.mark.parametrize(("file", "message_type"), PAIRS)
def test_the_raw_endpoint_returns_every_field_sent(file: str, message_type: str) -> None:
    frame = response(load(file), message_type)
    out = api_to_wire.raw_response(decode_response(json.dumps(frame)))
    for key, value in frame.items():
        assert out[key] == value, key
    # Go and Java leave error_message out of a successful answer; the raw endpoint says null.
    assert out["error_message"] == frame.get("error_message")


# ------------------------------------------------------------------------- where the SDKs' shapes differ


def test_workflow_records_go_leaves_empty_fields_out_java_sends_null() -> None:
    [go] = response(GO, "list_workflows")["output"]
    [java] = response(JAVA, "list_workflows")["output"]
    assert "Error" not in go and "QueueName" not in go and "Input" not in go  # load_input was false
    assert java["Error"] is None and java["QueueName"] is None and java["DequeuedAt"] is None
    assert "Request" in java  # a key only Java sends: ignored
    out_go, out_java = wire_to_api.workflow(go), wire_to_api.workflow(java)
    assert out_go.keys() == out_java.keys()
    assert (out_go["error"], out_go["queueName"], out_go["input"], out_go["dequeuedAt"]) == (None,) * 4
    assert (out_java["error"], out_java["queueName"], out_java["dequeuedAt"]) == (None,) * 3
    assert out_java["parentWorkflowId"] == "java-parent-1" and out_java["input"] == '["kid"]'
    assert out_java["workflowClass"] == "RelayJavaApp" and out_go["workflowClass"] is None


def test_workflow_times_are_epoch_ms_strings_and_priority_a_string() -> None:
    go = response(GO, "get_workflow")["output"]
    java = response(JAVA, "get_workflow")["output"]
    assert (go["CreatedAt"], go["CompletedAt"], go["Priority"]) == ("1796288856720", "1796288856726", "0")
    assert (java["CreatedAt"], java["CompletedAt"], java["Priority"]) == ("1796328093418", "1796328093430", "0")
    out_go, out_java = wire_to_api.workflow(go), wire_to_api.workflow(java)
    assert (out_go["createdAt"], out_go["completedAt"]) == ("2026-12-03T09:07:36.720Z", "2026-12-03T09:07:36.726Z")
    assert (out_java["createdAt"], out_java["completedAt"]) == ("2026-12-03T20:01:33.418Z",
                                                               "2026-12-03T20:01:33.430Z")
    assert out_go["priority"] == out_java["priority"] == 0
    assert wire_to_api.workflow({**java, "Priority": "7"})["priority"] == 7  # the string is read, not defaulted


def test_workflow_application_name_go_sends_java_does_not_relay_names_the_app() -> None:
    go = response(GO, "get_workflow")["output"]
    java = response(JAVA, "get_workflow")["output"]
    assert go["ApplicationName"] == "ts-list-get-steps-children-eve"
    assert "ApplicationName" not in java  # Java 1.1's WorkflowsOutput has no such field
    assert wire_to_api.of_app(wire_to_api.workflow(go), APP)["applicationName"] == "ts-list-get-steps-children-eve"
    # As for queues and schedules: every workflow an executor of this app reports is the app's own.
    assert wire_to_api.of_app(wire_to_api.workflow(java), APP)["applicationName"] == APP
    [listed] = response(JAVA, "list_workflows")["output"]
    assert wire_to_api.of_app(wire_to_api.workflow(listed), APP)["applicationName"] == APP


def test_a_dequeued_workflow_keeps_its_dequeue_time() -> None:
    [waiting] = response(JAVA, "list_queued_workflows")["output"]
    assert (waiting["Status"], waiting["QueueName"], waiting["DequeuedAt"]) == ("PENDING", "java_queue",
                                                                               "1796328098072")
    out = wire_to_api.workflow(waiting)
    assert (out["queueName"], out["dequeuedAt"], out["completedAt"]) == ("java_queue", "2026-12-03T20:01:38.072Z",
                                                                        None)


def test_steps_go_leaves_empty_fields_out_java_sends_null() -> None:
    go = response(GO, "list_steps")["output"]
    java = response(JAVA, "list_steps")["output"]
    assert [s["function_id"] for s in go] == [0, 1] and "error" not in go[0] and "child_workflow_id" not in go[0]
    assert go[0]["started_at_epoch_ms"] == "1796288856722"
    assert wire_to_api.step(go[0]) == {
        "stepId": 0, "stepName": "shout", "output": '"HELLO TS"', "error": None, "childWorkflowId": None,
        "startedAt": "2026-12-03T09:07:36.722Z", "completedAt": "2026-12-03T09:07:36.724Z",
    }
    # Java's step that starts a child workflow has no times at all, and the child's id.
    assert java[0] == {"child_workflow_id": "java-parent-1-0", "completed_at_epoch_ms": None, "error": None,
                       "function_id": 0, "function_name": "greet", "output": None, "started_at_epoch_ms": None}
    assert wire_to_api.step(java[0]) == {
        "stepId": 0, "stepName": "greet", "output": None, "error": None, "childWorkflowId": "java-parent-1-0",
        "startedAt": None, "completedAt": None,
    }
    assert wire_to_api.step(java[1])["startedAt"] == "2026-12-03T20:01:33.625Z"


def test_notification_and_version_times_are_numbers() -> None:
    [go_note] = response(GO, "get_workflow_notifications")["notifications"]
    [java_note] = response(JAVA, "get_workflow_notifications")["notifications"]
    assert isinstance(go_note["created_at_epoch_ms"], int) and isinstance(java_note["created_at_epoch_ms"], int)
    assert wire_to_api.notification(go_note) == {"topic": "ping", "message": '"pong"',
                                               "createdAt": "2026-12-03T09:07:37.331Z", "consumed": True}
    assert wire_to_api.notification(java_note)["createdAt"] == "2026-12-03T20:01:33.948Z"
    for recording, newest, stamp in ((GO, "ts-v2", "2026-12-03T09:07:47.247Z"),
                                     (JAVA, "java-v2", "2026-12-03T20:01:42.174Z")):
        versions = response(recording, "list_application_versions")["output"]
        assert all(isinstance(v["version_timestamp"], int) and isinstance(v["created_at"], int) for v in versions)
        first = wire_to_api.application_versions(versions)[0]
        assert (first["versionName"], first["versionTimestamp"]) == (newest, stamp)


def test_workflow_aggregates_group_by_name_with_unselected_measures_null() -> None:
    go = response(GO, "get_workflow_aggregates")["output"]
    assert go[0] == {"group": {"name": "greet"}, "count": 1, "min_created_at": None, "max_queue_wait_ms": None,
                     "max_total_latency_ms": None}
    # Grouped by workflowName, like the Workflow field; the measures not asked for are left out.
    assert [wire_to_api.workflow_aggregate(row) for row in go] == [
        {"group": {"workflowName": "greet"}, "count": 1}, {"group": {"workflowName": "tick"}, "count": 4}]
    # Java, every measure selected: min_created_at a number, a null queue name kept as a null group value.
    java = response(JAVA, "get_workflow_aggregates")["output"]
    assert java[1] == {"group": {"status": "ERROR", "queue_name": None}, "count": 2,
                       "min_created_at": 1796328095950, "max_queue_wait_ms": None, "max_total_latency_ms": 21}
    assert wire_to_api.workflow_aggregate(java[1]) == {
        "group": {"status": "ERROR", "queueName": None}, "count": 2, "minCreatedAt": "2026-12-03T20:01:35.950Z",
        "maxTotalLatencyMs": 21}


def test_step_aggregates_group_by_function_name() -> None:
    for recording in (GO, JAVA):
        rows = response(recording, "get_step_aggregates")["output"]
        assert all(set(row["group"]) == {"function_name"} and row["max_duration_ms"] is None for row in rows)
        shout = next(row for row in rows if row["group"]["function_name"] == "shout")
        assert wire_to_api.step_aggregate(shout) == {"group": {"stepName": "shout"}, "count": shout["count"]}


def test_queues_java_sends_no_application_name_relay_names_the_app() -> None:
    [go] = response(GO, "list_queues")["output"]
    [java] = response(JAVA, "list_queues")["output"]
    assert go["application_name"] == "ts-queues-schedules-versions-a" and go["polling_interval_sec"] == 1
    assert "application_name" not in java and java["polling_interval_sec"] == 1.0
    assert "partition_concurrency" in go  # newer Go fields Relay does not model: ignored
    assert wire_to_api.of_app(wire_to_api.queue(go), APP)["applicationName"] == "ts-queues-schedules-versions-a"
    out = wire_to_api.of_app(wire_to_api.queue(java), APP)
    assert out == {"name": "java_queue", "concurrency": None, "workerConcurrency": 2, "rateLimitMax": None,
                   "rateLimitPeriodSecs": None, "priorityEnabled": False, "partitionQueue": False,
                   "pollingIntervalSecs": 1.0, "applicationName": APP}


def test_schedules_java_sends_no_application_name_relay_names_the_app() -> None:
    go = response(GO, "get_schedule")["output"]
    java = response(JAVA, "get_schedule")["output"]
    assert go["application_name"] == "ts-queues-schedules-versions-a" and go["workflow_class_name"] is None
    assert "application_name" not in java and java["workflow_class_name"] == "RelayJavaApp"
    assert go["schedule"] == java["schedule"] == "0 0 0 1 1 *"  # both crons have a seconds field
    out = wire_to_api.of_app(wire_to_api.schedule(java), APP)
    assert (out["applicationName"], out["workflowClass"], out["cronExpression"], out["lastFiredAt"]) == (
        APP, "RelayJavaApp", "0 0 0 1 1 *", None)
    assert wire_to_api.of_app(wire_to_api.schedule(go), APP)["applicationName"] == "ts-queues-schedules-versions-a"


def test_successful_answers_leave_error_message_out() -> None:
    for recording in (GO, JAVA):
        frame = response(recording, "cancel")
        assert "error_message" not in frame and frame["success"] is True
        assert decoded(recording, "cancel").ok


def test_java_answers_rewind_workflow_as_an_unknown_type() -> None:
    frame = response(JAVA, "rewind_workflow")
    assert frame == {"error_message": "Unknown message type", "request_id": frame["request_id"],
                     "type": "rewind_workflow"}
    answer = decoded(JAVA, "rewind_workflow")
    assert is_unknown_type_error(answer) and answer.success is None


def test_java_acts_on_several_workflow_ids_in_one_request() -> None:
    for message_type in ("cancel", "resume", "delete"):
        request = JAVA["pairs"][message_type]["request"]
        assert len(request["workflow_ids"]) > 1 and request["workflow_id"] == request["workflow_ids"][0]
        assert response(JAVA, message_type)["success"] is True


# ------------------------------------------------------------------------ what each release supports


def test_supported_types_of_the_recorded_releases() -> None:
    go = supported_types("go", "v1.6.0")
    java = supported_types("java", "1.1.0-m6")
    assert go is not None and java is not None
    assert "restart" not in go and "rewind_workflow" in go
    assert "rewind_workflow" not in java and "restart" in java
    assert len(go) == len(java) == 33
    assert go - {"rewind_workflow"} == java - {"restart"}
    assert set(GO["pairs"]) <= go
    assert {t for t in JAVA["pairs"] if decoded(JAVA, t).ok} == java  # one recorded pair for each of its types
    assert java <= {m.value for m in MessageType} and go <= {m.value for m in MessageType}


@pytest.mark.parametrize(("version", "count", "present", "absent"), [
    ("v0.6.0", 11, {"fork_workflow", "retention", "exist_pending_workflows"}, {"get_metrics", "delete", "restart"}),
    ("v0.9.0", 12, {"get_metrics"}, {"alert", "delete"}),
    ("v0.12.0", 16, {"alert", "delete", "export_workflow", "import_workflow"}, {"list_schedules", "list_queues"}),
    ("v1.0.0", 32, {"list_schedules", "get_step_aggregates", "get_queue"}, {"rewind_workflow", "restart"}),
    ("v1.4.2", 32, set(), {"rewind_workflow"}),
    ("v1.5.0", 33, {"rewind_workflow"}, {"restart"}),
    ("1.6.0", 33, {"rewind_workflow"}, {"restart"}),
])  # fmt: skip
def test_supported_types_of_go_releases(version: str, count: int, present: set[str], absent: set[str]) -> None:
    types = supported_types("go", version)
    assert types is not None and len(types) == count
    assert present <= types and not absent & types


@pytest.mark.parametrize(("language", "version"), [
    ("go", "v0.5.0"), ("go", "v1.7.0"), ("go", "v1.9.0"),  # before the client; in the proprietary module after
    ("java", "1.0.3"), ("java", "1.2.0"), ("java", "1.3.0"), ("java", "m6"),
])  # fmt: skip
def test_unread_go_and_java_releases_are_unknown(language: str, version: str) -> None:
    assert supported_types(language, version) is None
    assert supports_bulk_ids(language, version) is None


def test_milestone_versions_parse() -> None:
    assert supported_types("java", "1.1.0-m6") == supported_types("java", "1.1.0-m1")
    assert supported_types("Java", " 1.1.0-M6") == supported_types("java", "1.1.0-m6")


@pytest.mark.parametrize(("language", "version", "expected"), [
    ("go", "v0.11.0", {"cancel": False, "resume": False, "delete": False}),
    ("go", "v0.12.0", {"cancel": False, "resume": False, "delete": True}),
    ("go", "v1.0.0", {"cancel": True, "resume": True, "delete": True}),
    ("java", "1.1.0-m6", {"cancel": True, "resume": True, "delete": True}),
    ("python", "2.14.0", {"cancel": False, "resume": False, "delete": False}),
    ("python", "2.15.0", {"cancel": True, "resume": True, "delete": True}),
    ("typescript", "4.11.0", {"cancel": True, "resume": True, "delete": True}),
])  # fmt: skip
def test_bulk_ids_by_type(language: str, version: str, expected: dict[str, bool]) -> None:
    assert {t: supports_bulk_ids(language, version, t) for t in expected} == expected
    assert supports_bulk_ids(language, version) is all(expected.values())  # no type: all three


def test_several_workflows_go_one_by_one_only_for_types_the_release_lacks_bulk_for(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    sent: list[Any] = []

    def send_one(_calls: Any, org: str, app: str, executor: Any, request: Any) -> Any:
        sent.append(request)
        return SuccessResponse(type=str(request.type.value), request_id=request.request_id, success=True)

    monkeypatch.setattr(ExecutorCalls, "_send_one", send_one)
    calls = ExecutorCalls(SimpleNamespace())  # type: ignore[arg-type]  # _send_all reads no runtime
    go_012 = SimpleNamespace(executor_id="go-ex", language="go", dbos_version="v0.12.0")
    calls._send_all("local", APP, go_012, DeleteRequest(workflow_ids=["a", "b"]))
    assert [r.ids for r in sent] == [["a", "b"]]  # v0.12.0 reads workflow_ids for delete
    sent.clear()
    calls._send_all("local", APP, go_012, CancelRequest(workflow_ids=["a", "b"]))
    assert [r.ids for r in sent] == [["a"], ["b"]]  # but not for cancel (v1.0.0)
    sent.clear()
    java = SimpleNamespace(executor_id="java-ex", language="java", dbos_version="1.1.0-m6")
    calls._send_all("local", APP, java, ResumeRequest(workflow_ids=["a", "b"]))
    assert [r.ids for r in sent] == [["a", "b"]]
