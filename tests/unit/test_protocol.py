"""The executor wire format (the wire/ package), pinned to the real Python SDK (dbos 3.2.0).

Requests are encoded by Relay and read back with the SDK's own parser (``<X>Request.from_json``, which is
what the SDK's receive loop does); responses are produced with the SDK's own response classes
(``to_json``) and decoded by Relay. TypeScript-shaped frames are written out by hand, as the TypeScript
SDK 5.2.11 produces them with ``JSON.stringify`` (which drops undefined fields).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from datetime import datetime

import dbos._conductor.conductor as sdk_conductor
import dbos._conductor.protocol as sdk
import pytest

from relay.wire.catalog_requests import (
    AlertRequest,
    BackfillScheduleRequest,
    GetMetricsRequest,
    GetQueueRequest,
    GetScheduleRequest,
    ListApplicationVersionsRequest,
    ListQueuesBody,
    ListQueuesRequest,
    ListSchedulesBody,
    ListSchedulesRequest,
    PauseScheduleRequest,
    ResumeScheduleRequest,
    SetLatestApplicationVersionRequest,
    TriggerScheduleRequest,
)
from relay.wire.codec import decode_response, is_metadata_only_refusal, is_unknown_type_error
from relay.wire.errors import ProtocolError
from relay.wire.fields import string_list, string_or_list
from relay.wire.messages import MAX_DEPTH, MAX_FRAME_BYTES, UNKNOWN_TYPE_ERROR, MessageType, new_request_id
from relay.wire.requests import (
    CancelRequest,
    DeleteRequest,
    ExecutorInfoRequest,
    ExistPendingWorkflowsRequest,
    RawRequest,
    RecoveryRequest,
    Request,
    ResumeRequest,
    RetentionBody,
    RetentionRequest,
    encode_request,
)
from relay.wire.responses import (
    BackfillScheduleResponse,
    ExecutorInfoResponse,
    ExistPendingWorkflowsResponse,
    ExportWorkflowResponse,
    ForkFromFailureResponse,
    ForkWorkflowResponse,
    GetMetricsResponse,
    GetQueueResponse,
    GetScheduleResponse,
    GetStepAggregatesResponse,
    GetWorkflowAggregatesResponse,
    GetWorkflowEventsResponse,
    GetWorkflowNotificationsResponse,
    GetWorkflowResponse,
    GetWorkflowStreamsResponse,
    ListApplicationVersionsResponse,
    ListQueuesResponse,
    ListSchedulesResponse,
    ListStepsResponse,
    ListWorkflowsResponse,
    RawResponse,
    SuccessResponse,
    TriggerScheduleResponse,
)
from relay.wire.support import supported_types, supports_bulk_ids
from relay.wire.workflow_requests import (
    ExportWorkflowRequest,
    ForkFromFailureBody,
    ForkFromFailureRequest,
    ForkWorkflowBody,
    ForkWorkflowRequest,
    GetStepAggregatesBody,
    GetStepAggregatesRequest,
    GetWorkflowAggregatesBody,
    GetWorkflowAggregatesRequest,
    GetWorkflowEventsRequest,
    GetWorkflowNotificationsRequest,
    GetWorkflowRequest,
    GetWorkflowStreamsRequest,
    ImportWorkflowRequest,
    ListQueuedWorkflowsRequest,
    ListStepsRequest,
    ListWorkflowsBody,
    ListWorkflowsRequest,
    RewindWorkflowBody,
    RewindWorkflowRequest,
)

SECRET = "SECRET-CONDUCTOR-KEY-0123456789"


def roundtrip(req, sdk_cls):
    """Encode with Relay, parse with the SDK exactly as its receive loop does."""
    text = encode_request(req)
    base = sdk.BaseMessage.from_json(text)
    assert base.type == req.type
    assert base.request_id == req.request_id
    parsed = sdk_cls.from_json(text)
    assert parsed.type == req.type
    assert parsed.request_id == req.request_id
    return parsed


# --------------------------------------------------------------------------------------------------
# Message types


def test_message_types_cover_the_sdk():
    ours = {m.value for m in MessageType}
    theirs = {m.value for m in sdk.MessageType}
    assert theirs <= ours
    assert ours - theirs == {"restart"}  # older SDKs only
    assert len(theirs) == 33  # the 32 of PROTOCOL.md plus rewind_workflow
    assert MessageType.REWIND_WORKFLOW == "rewind_workflow"


def _public_request_classes():
    found, todo = set(), [Request]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if not sub.__name__.startswith("_"):
                found.add(sub)
    return found


def test_every_type_but_restart_has_a_typed_request():
    types = {cls.type for cls in _public_request_classes()}
    assert types == set(MessageType) - {MessageType.RESTART}


# --------------------------------------------------------------------------------------------------
# Requests through the SDK's parser

FULL_LIST_BODY = ListWorkflowsBody(
    workflow_uuids=["w1", "w2"],
    workflow_name="checkout",
    authenticated_user=["alice", "bob"],
    start_time="2025-01-01T00:00:00Z",
    end_time="2025-01-02T00:00:00Z",
    completed_after="2025-01-01T01:00:00Z",
    status=["PENDING", "ERROR"],
    application_version=["v1"],
    queue_name="q",
    workflow_id_prefix="wf-",
    executor_id=["e1", "e2"],
    application_name="shop",
    was_forked_from=True,
    has_parent=False,
    attributes={"tenant": "t1"},
    limit=50,
    offset=100,
    sort_desc=True,
    load_input=True,
    load_output=False,
    queues_only=True,
)

REQUEST_CASES = [
    (ExecutorInfoRequest(), sdk.ExecutorInfoRequest, {}),
    (RecoveryRequest(executor_ids=["e1", "e2"]), sdk.RecoveryRequest, {"executor_ids": ["e1", "e2"]}),
    (
        CancelRequest(workflow_id="w1"),
        sdk.CancelRequest,
        {"workflow_id": "w1", "workflow_ids": None, "cancel_children": False},
    ),
    (
        CancelRequest(workflow_ids=["w1", "w2"], cancel_children=True),
        sdk.CancelRequest,
        {"workflow_id": "w1", "workflow_ids": ["w1", "w2"], "cancel_children": True},
    ),
    (
        ResumeRequest(workflow_ids=["w1", "w2"], queue_name="q"),
        sdk.ResumeRequest,
        {"workflow_ids": ["w1", "w2"], "queue_name": "q"},
    ),
    (ResumeRequest(workflow_id="w1"), sdk.ResumeRequest, {"workflow_id": "w1", "queue_name": None}),
    (
        DeleteRequest(workflow_id="w1", delete_children=True),
        sdk.DeleteRequest,
        {"workflow_id": "w1", "delete_children": True, "workflow_ids": None},
    ),
    (
        DeleteRequest(workflow_ids=["a", "b", "c"]),
        sdk.DeleteRequest,
        {"workflow_ids": ["a", "b", "c"], "delete_children": False},
    ),
    (
        ExistPendingWorkflowsRequest(executor_id="e1", application_version="v1"),
        sdk.ExistPendingWorkflowsRequest,
        {"executor_id": "e1", "application_version": "v1"},
    ),
    (
        RetentionRequest(body=RetentionBody(gc_cutoff_epoch_ms=1000, timeout_cutoff_epoch_ms=2000)),
        sdk.RetentionRequest,
        {
            "body": {
                "gc_cutoff_epoch_ms": 1000,
                "gc_rows_threshold": None,
                "gc_batch_size": None,
                "timeout_cutoff_epoch_ms": 2000,
            }
        },
    ),
    (
        ListWorkflowsRequest(body=FULL_LIST_BODY),
        sdk.ListWorkflowsRequest,
        {
            "body": {
                "workflow_uuids": ["w1", "w2"],
                "workflow_name": "checkout",
                "authenticated_user": ["alice", "bob"],
                "start_time": "2025-01-01T00:00:00Z",
                "end_time": "2025-01-02T00:00:00Z",
                "completed_after": "2025-01-01T01:00:00Z",
                "status": ["PENDING", "ERROR"],
                "application_version": "v1",  # a list of one goes out as a plain string
                "queue_name": "q",
                "workflow_id_prefix": "wf-",
                "executor_id": ["e1", "e2"],
                "application_name": "shop",
                "was_forked_from": True,
                "has_parent": False,
                "attributes": {"tenant": "t1"},
                "limit": 50,
                "offset": 100,
                "sort_desc": True,
                "load_input": True,
                "load_output": False,
                "queues_only": True,
            }
        },
    ),
    (
        ListQueuedWorkflowsRequest(body=ListWorkflowsBody(queue_name=["q1", "q2"], limit=10)),
        sdk.ListQueuedWorkflowsRequest,
        {
            "body": {
                "workflow_uuids": None,
                "workflow_name": None,
                "authenticated_user": None,
                "start_time": None,
                "end_time": None,
                "status": None,
                "application_version": None,
                "queue_name": ["q1", "q2"],
                "limit": 10,
                "offset": None,
                "sort_desc": False,
                "load_input": False,
                "load_output": False,
                "queues_only": False,
            }
        },
    ),
    (
        GetWorkflowRequest(workflow_id="w1", load_input=False),
        sdk.GetWorkflowRequest,
        {"workflow_id": "w1", "load_input": False, "load_output": True},
    ),
    (
        ListStepsRequest(workflow_id="w1", load_output=False, limit=10, offset=5),
        sdk.ListStepsRequest,
        {"workflow_id": "w1", "load_output": False, "limit": 10, "offset": 5},
    ),
    (
        ListStepsRequest(workflow_id="w1"),
        sdk.ListStepsRequest,
        {"workflow_id": "w1", "load_output": True, "limit": None, "offset": None},
    ),
    (GetWorkflowEventsRequest(workflow_id="w1"), sdk.GetWorkflowEventsRequest, {"workflow_id": "w1"}),
    (
        GetWorkflowNotificationsRequest(workflow_id="w1"),
        sdk.GetWorkflowNotificationsRequest,
        {"workflow_id": "w1"},
    ),
    (GetWorkflowStreamsRequest(workflow_id="w1"), sdk.GetWorkflowStreamsRequest, {"workflow_id": "w1"}),
    (
        GetWorkflowAggregatesRequest(
            body=GetWorkflowAggregatesBody(
                group_by_status=True,
                group_by_name=True,
                select_max_queue_wait_ms=True,
                time_bucket_size_ms=60000,
                status="PENDING",
                app_version=["v1", "v2"],
                user=["alice"],
                start_time="2025-01-01T00:00:00Z",
                has_parent=True,
            )
        ),
        sdk.GetWorkflowAggregatesRequest,
        {
            "body": {
                "group_by_status": True,
                "group_by_name": True,
                "group_by_queue_name": False,
                "group_by_executor_id": False,
                "group_by_application_version": False,
                "group_by_application_name": False,
                "select_count": False,
                "select_min_created_at": False,
                "select_max_queue_wait_ms": True,
                "select_max_total_latency_ms": False,
                "time_bucket_size_ms": 60000,
                "status": ["PENDING"],  # aggregates take lists only
                "app_version": ["v1", "v2"],
                "user": ["alice"],
                "start_time": "2025-01-01T00:00:00Z",
                "has_parent": True,
            }
        },
    ),
    (
        GetStepAggregatesRequest(
            body=GetStepAggregatesBody(
                group_by_function_name=True, select_max_duration_ms=True, function_name="charge"
            )
        ),
        sdk.GetStepAggregatesRequest,
        {
            "body": {
                "group_by_function_name": True,
                "group_by_status": False,
                "select_count": False,
                "select_max_duration_ms": True,
                "function_name": ["charge"],
            }
        },
    ),
    (
        ForkWorkflowRequest(body=ForkWorkflowBody(workflow_id="w1", start_step=3)),
        sdk.ForkWorkflowRequest,
        {"body": {"workflow_id": "w1", "start_step": 3, "new_workflow_id": None, "application_version": None}},
    ),
    (
        ForkWorkflowRequest(
            body=ForkWorkflowBody(
                workflow_id="w1",
                start_step=2,
                new_workflow_id="w1-fork",
                application_version="v2",
                queue_name="q",
                queue_partition_key="k",
            )
        ),
        sdk.ForkWorkflowRequest,
        {
            "body": {
                "workflow_id": "w1",
                "start_step": 2,
                "new_workflow_id": "w1-fork",
                "application_version": "v2",
                "queue_name": "q",
                "queue_partition_key": "k",
            }
        },
    ),
    (
        ForkFromFailureRequest(
            body=ForkFromFailureBody(workflow_ids=["w1", "w2"], from_last_failure=True, queue_name="q")
        ),
        sdk.ForkFromFailureRequest,
        {
            "body": {
                "workflow_ids": ["w1", "w2"],
                "queue_name": "q",
                "from_last_failure": True,
                "from_last_step": False,
            }
        },
    ),
    (
        RewindWorkflowRequest(body=RewindWorkflowBody(workflow_id="w1", start_step=4, queue_name="q")),
        sdk.RewindWorkflowRequest,
        {"body": {"workflow_id": "w1", "start_step": 4, "queue_name": "q"}},
    ),
    (
        ExportWorkflowRequest(workflow_id="w1", export_children=True),
        sdk.ExportWorkflowRequest,
        {"workflow_id": "w1", "export_children": True},
    ),
    (
        ImportWorkflowRequest(serialized_workflow="H4sIAAAA"),
        sdk.ImportWorkflowRequest,
        {"serialized_workflow": "H4sIAAAA"},
    ),
    (ListSchedulesRequest(), sdk.ListSchedulesRequest, {"body": {}}),
    (
        ListSchedulesRequest(
            body=ListSchedulesBody(status=["ACTIVE", "PAUSED"], schedule_name_prefix="nightly", load_context=False)
        ),
        sdk.ListSchedulesRequest,
        {"body": {"status": ["ACTIVE", "PAUSED"], "schedule_name_prefix": "nightly", "load_context": False}},
    ),
    (
        GetScheduleRequest(schedule_name="nightly", load_context=False),
        sdk.GetScheduleRequest,
        {"schedule_name": "nightly", "load_context": False},
    ),
    (PauseScheduleRequest(schedule_name="nightly"), sdk.PauseScheduleRequest, {"schedule_name": "nightly"}),
    (ResumeScheduleRequest(schedule_name="nightly"), sdk.ResumeScheduleRequest, {"schedule_name": "nightly"}),
    (
        TriggerScheduleRequest(schedule_name="nightly"),
        sdk.TriggerScheduleRequest,
        {"schedule_name": "nightly"},
    ),
    (
        BackfillScheduleRequest(
            schedule_name="nightly", start="2025-01-01T00:00:00+00:00", end="2025-01-02T00:00:00+00:00"
        ),
        sdk.BackfillScheduleRequest,
        {"schedule_name": "nightly", "start": "2025-01-01T00:00:00+00:00", "end": "2025-01-02T00:00:00+00:00"},
    ),
    (ListQueuesRequest(), sdk.ListQueuesRequest, {"body": {}}),
    (
        ListQueuesRequest(body=ListQueuesBody(application_name=["a", "b"])),
        sdk.ListQueuesRequest,
        {"body": {"application_name": ["a", "b"]}},
    ),
    (GetQueueRequest(name="q"), sdk.GetQueueRequest, {"name": "q"}),
    (
        GetMetricsRequest(start_time="2025-01-01T00:00:00Z", end_time="2025-01-01T01:00:00Z"),
        sdk.GetMetricsRequest,
        {
            "start_time": "2025-01-01T00:00:00Z",
            "end_time": "2025-01-01T01:00:00Z",
            "metric_class": "workflow_step_count",
            "application_name": None,
        },
    ),
    (
        GetMetricsRequest(start_time="s", end_time="e", application_name="shop"),
        sdk.GetMetricsRequest,
        {"application_name": ["shop"]},
    ),
    (ListApplicationVersionsRequest(), sdk.BaseMessage, {}),  # the SDK has no class of its own for it
    (
        SetLatestApplicationVersionRequest(version_name="v2"),
        sdk.SetLatestApplicationVersionRequest,
        {"version_name": "v2"},
    ),
    (
        AlertRequest(name="high-error-rate", message="5% of workflows failed", metadata={"app": "shop"}),
        sdk.AlertRequest,
        {"name": "high-error-rate", "message": "5% of workflows failed", "metadata": {"app": "shop"}},
    ),
]


@pytest.mark.parametrize(("req", "sdk_cls", "expected"), REQUEST_CASES, ids=lambda v: getattr(v, "type", ""))
def test_request_reads_back_through_the_sdk_parser(req, sdk_cls, expected):
    parsed = roundtrip(req, sdk_cls)
    for name, value in expected.items():
        assert getattr(parsed, name) == value, name


def test_every_request_class_is_round_tripped():
    assert {type(req) for req, _, _ in REQUEST_CASES} == _public_request_classes()


def test_frame_envelope_comes_first_and_is_json_text():
    text = encode_request(GetQueueRequest(name="q", request_id="rid-1"))
    assert isinstance(text, str)
    assert list(json.loads(text)) == ["type", "request_id", "name"]
    assert json.loads(text) == {"type": "get_queue", "request_id": "rid-1", "name": "q"}


def test_bulk_ids_are_read_the_way_the_sdk_handlers_read_them():
    # conductor.py: ids = msg.workflow_ids or [msg.workflow_id]; TypeScript: workflow_ids ?? [workflow_id]
    for req, cls in (
        (CancelRequest(workflow_ids=["a", "b"]), sdk.CancelRequest),
        (ResumeRequest(workflow_ids=["a", "b"]), sdk.ResumeRequest),
        (DeleteRequest(workflow_ids=["a", "b"]), sdk.DeleteRequest),
    ):
        parsed = roundtrip(req, cls)
        assert (parsed.workflow_ids or [parsed.workflow_id]) == ["a", "b"] == req.ids
    single = CancelRequest(workflow_ids=["only"])
    assert json.loads(encode_request(single)) == {
        "type": "cancel",
        "request_id": single.request_id,
        "workflow_id": "only",  # understood by SDKs that predate workflow_ids
        "cancel_children": False,
    }


def test_keys_the_python_sdk_indexes_are_always_present():
    fork = roundtrip(
        ForkWorkflowRequest(body=ForkWorkflowBody(workflow_id="w", start_step=1)), sdk.ForkWorkflowRequest
    )
    for key in ("workflow_id", "start_step", "new_workflow_id", "application_version"):
        fork.body[key]  # conductor.py reads these with body["..."]: a KeyError would drop the socket
    retention = roundtrip(RetentionRequest(body=RetentionBody()), sdk.RetentionRequest)
    for key in ("gc_cutoff_epoch_ms", "gc_rows_threshold", "timeout_cutoff_epoch_ms"):
        assert retention.body[key] is None
    listed = json.loads(encode_request(ListWorkflowsRequest()))["body"]
    # dbos before 2.10 read these with body["..."] too
    for key in ("workflow_uuids", "workflow_name", "authenticated_user", "start_time", "end_time", "status",
                "application_version", "limit", "offset", "sort_desc"):  # fmt: skip
        assert key in listed
    assert roundtrip(ListSchedulesRequest(), sdk.ListSchedulesRequest).body == {}


def test_unset_optional_filters_are_left_out_not_null():
    # The TypeScript SDK compares was_forked_from/has_parent with `!== undefined`: a null would filter.
    body = json.loads(encode_request(ListWorkflowsRequest()))["body"]
    assert "was_forked_from" not in body
    assert "has_parent" not in body
    assert "attributes" not in body
    agg = json.loads(encode_request(GetWorkflowAggregatesRequest()))["body"]
    assert "was_forked_from" not in agg
    assert "time_bucket_size_ms" not in agg


def test_load_flags_are_always_explicit():
    # Defaults differ: the Python SDK loads input/output when absent, the TypeScript SDK does not.
    body = json.loads(encode_request(ListWorkflowsRequest()))["body"]
    assert body["load_input"] is False
    assert body["load_output"] is False
    get = json.loads(encode_request(GetWorkflowRequest(workflow_id="w")))
    assert get["load_input"] is True
    assert get["load_output"] is True


def test_backfill_times_parse_as_the_sdk_parses_them():
    parsed = roundtrip(
        BackfillScheduleRequest(schedule_name="s", start="2025-01-01T00:00:00Z", end="2025-01-02T00:00:00Z"),
        sdk.BackfillScheduleRequest,
    )
    assert datetime.fromisoformat(parsed.start) < datetime.fromisoformat(parsed.end)


# --------------------------------------------------------------------------------------------------
# Request validation


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (CancelRequest, ValueError),
        (lambda: CancelRequest(workflow_id="a", workflow_ids=["b"]), ValueError),
        (lambda: CancelRequest(workflow_ids=[]), ValueError),
        (lambda: CancelRequest(workflow_ids="a,b"), None),  # a lone string is one id
        (lambda: ResumeRequest(workflow_id=""), ValueError),
        (lambda: DeleteRequest(workflow_id="a", delete_children="yes"), TypeError),
        (lambda: RecoveryRequest(executor_ids=[]), ValueError),
        (lambda: RecoveryRequest(executor_ids=[1]), TypeError),
        (lambda: GetWorkflowRequest(workflow_id=5), TypeError),
        (lambda: GetQueueRequest(name="q", request_id=""), ValueError),
        (lambda: GetQueueRequest(name="q", request_id=7), TypeError),
        (lambda: ListWorkflowsBody(limit=True), TypeError),
        (lambda: ListWorkflowsBody(limit=-1), ValueError),
        (lambda: ListWorkflowsBody(status=[]), ValueError),
        (lambda: ListWorkflowsBody(status=[""]), ValueError),
        (lambda: ListWorkflowsBody(start_time=datetime(2025, 1, 1)), TypeError),  # noqa: DTZ001 (naive: the input refused)
        (lambda: GetWorkflowAggregatesBody(time_bucket_size_ms=0), ValueError),
        (lambda: ForkWorkflowBody(workflow_id="w", start_step="1"), TypeError),
        (lambda: RewindWorkflowBody(workflow_id="w", start_step=None), TypeError),
        (lambda: AlertRequest(name="a", message="m", metadata={"n": 1}), TypeError),
    ],
)
def test_requests_are_checked_when_built(build, error):
    if error is None:
        assert build().ids == ["a,b"]
        return
    with pytest.raises(error):
        build()


def test_requests_are_immutable_and_get_fresh_ids():
    a, b = ExecutorInfoRequest(), ExecutorInfoRequest()
    assert a.request_id != b.request_id
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.request_id = "x"


def test_new_request_id_is_uuid4_hex():
    ids = {new_request_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) and i[12] == "4" for i in ids)


# --------------------------------------------------------------------------------------------------
# Raw requests


def test_raw_request_passes_through_and_the_sdk_reads_it():
    raw = RawRequest("rewind_workflow", {"body": {"workflow_id": "w1", "start_step": 2}})
    parsed = sdk.RewindWorkflowRequest.from_json(encode_request(raw))
    assert parsed.type == "rewind_workflow"
    assert parsed.request_id == raw.request_id
    assert parsed.body == {"workflow_id": "w1", "start_step": 2}
    frame = json.loads(encode_request(RawRequest("some_future_type", {"x": [1, 2]}, request_id="r9")))
    assert frame == {"type": "some_future_type", "request_id": "r9", "x": [1, 2]}


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (RawRequest(5, {}), TypeError),
        (RawRequest("", {}), TypeError),
        (RawRequest("t", {}, request_id=None), TypeError),
        (RawRequest("t", {}, request_id=42), TypeError),
        (RawRequest("t", {}, request_id=""), TypeError),
        (RawRequest("t", {"type": "cancel"}), ValueError),
        (RawRequest("t", {"request_id": "other"}), ValueError),
        (RawRequest("t", {1: "x"}), TypeError),
        (RawRequest("t", ["not", "a", "mapping"]), TypeError),
        (RawRequest("t", {"x": float("nan")}), ValueError),
        (RawRequest("t", {"x": object()}), ValueError),
    ],
)
def test_raw_request_envelope_is_enforced(raw, error):
    with pytest.raises(error):
        encode_request(raw)


def test_encode_refuses_non_requests():
    with pytest.raises(TypeError):
        encode_request({"type": "cancel", "request_id": "r"})


# --------------------------------------------------------------------------------------------------
# Responses built by the SDK's own classes


def _record(cls, **values):
    """An SDK output dataclass with every field set (None unless given)."""
    return cls(**{f.name: values.get(f.name) for f in dataclasses.fields(cls)})


WORKFLOW = _record(
    sdk.WorkflowsOutput,
    WorkflowUUID="w1",
    Status="SUCCESS",
    WorkflowName="checkout",
    Input="(1, 2)",
    Output="3",
    CreatedAt="1735689600000",
    ApplicationVersion="v1",
    ExecutorID="e1",
    WasForkedFrom=False,
    Attributes='{"tenant": "t1"}',
)
STEP = sdk.WorkflowSteps(
    function_id=1,
    function_name="charge",
    output="ok",
    error=None,
    child_workflow_id=None,
    started_at_epoch_ms="1",
    completed_at_epoch_ms="2",
)
SCHEDULE = _record(
    sdk.ScheduleOutput,
    schedule_id="s1",
    schedule_name="nightly",
    workflow_name="report",
    schedule="0 0 * * *",
    status="ACTIVE",
    automatic_backfill=False,
)
QUEUE = _record(sdk.QueueOutput, name="q", priority_enabled=True, partition_queue=False, polling_interval_sec=1.0)


def _r(cls, type_, **fields):
    return cls(type=type_, request_id="rid", **fields)


T = sdk.MessageType
SDK_RESPONSES = [
    (
        _r(
            sdk.ExecutorInfoResponse,
            T.EXECUTOR_INFO,
            executor_id="e1",
            application_version="v1",
            hostname="host",
            language="python",
            dbos_version="3.2.0",
        ),
        ExecutorInfoResponse,
    ),
    (_r(sdk.RecoveryResponse, T.RECOVERY, success=True), SuccessResponse),
    (_r(sdk.CancelResponse, T.CANCEL, success=False, error_message="Exception: boom"), SuccessResponse),
    (_r(sdk.DeleteResponse, T.DELETE, success=True), SuccessResponse),
    (_r(sdk.ResumeResponse, T.RESUME, success=True), SuccessResponse),
    (_r(sdk.ListWorkflowsResponse, T.LIST_WORKFLOWS, output=[WORKFLOW, WORKFLOW]), ListWorkflowsResponse),
    (_r(sdk.ListQueuedWorkflowsResponse, T.LIST_QUEUED_WORKFLOWS, output=[]), ListWorkflowsResponse),
    (_r(sdk.GetWorkflowResponse, T.GET_WORKFLOW, output=WORKFLOW), GetWorkflowResponse),
    (_r(sdk.ExistPendingWorkflowsResponse, T.EXIST_PENDING_WORKFLOWS, exist=True), ExistPendingWorkflowsResponse),
    (_r(sdk.ListStepsResponse, T.LIST_STEPS, output=[STEP]), ListStepsResponse),
    (_r(sdk.ForkWorkflowResponse, T.FORK_WORKFLOW, new_workflow_id="w2"), ForkWorkflowResponse),
    (
        _r(sdk.ForkFromFailureResponse, T.FORK_FROM_FAILURE, forked_workflow_ids=["f1", "f2"]),
        ForkFromFailureResponse,
    ),
    (_r(sdk.RewindWorkflowResponse, T.REWIND_WORKFLOW, success=True), SuccessResponse),
    (_r(sdk.RetentionResponse, T.RETENTION, success=True), SuccessResponse),
    (
        _r(
            sdk.GetMetricsResponse,
            T.GET_METRICS,
            metrics=[sdk.MetricData(metric_type="workflow_count", metric_name="checkout", value=7)],
        ),
        GetMetricsResponse,
    ),
    (_r(sdk.AlertResponse, T.ALERT, success=True), SuccessResponse),
    (_r(sdk.ExportWorkflowResponse, T.EXPORT_WORKFLOW, serialized_workflow="H4sI"), ExportWorkflowResponse),
    (_r(sdk.ImportWorkflowResponse, T.IMPORT_WORKFLOW, success=True), SuccessResponse),
    (_r(sdk.ListSchedulesResponse, T.LIST_SCHEDULES, output=[SCHEDULE]), ListSchedulesResponse),
    (_r(sdk.GetScheduleResponse, T.GET_SCHEDULE, output=None), GetScheduleResponse),
    (_r(sdk.PauseScheduleResponse, T.PAUSE_SCHEDULE, success=True), SuccessResponse),
    (_r(sdk.ResumeScheduleResponse, T.RESUME_SCHEDULE, success=True), SuccessResponse),
    (
        _r(sdk.BackfillScheduleResponse, T.BACKFILL_SCHEDULE, workflow_ids=["b1", "b2"]),
        BackfillScheduleResponse,
    ),
    (_r(sdk.TriggerScheduleResponse, T.TRIGGER_SCHEDULE, workflow_id="t1"), TriggerScheduleResponse),
    (
        _r(
            sdk.ListApplicationVersionsResponse,
            T.LIST_APPLICATION_VERSIONS,
            output=[
                sdk.ApplicationVersionOutput(version_id="id1", version_name="v1", version_timestamp=10, created_at=5)
            ],
        ),
        ListApplicationVersionsResponse,
    ),
    (
        _r(sdk.SetLatestApplicationVersionResponse, T.SET_LATEST_APPLICATION_VERSION, success=True),
        SuccessResponse,
    ),
    (
        _r(sdk.GetWorkflowEventsResponse, T.GET_WORKFLOW_EVENTS, events=[sdk.EventOutput(key="k", value="v")]),
        GetWorkflowEventsResponse,
    ),
    (
        _r(
            sdk.GetWorkflowNotificationsResponse,
            T.GET_WORKFLOW_NOTIFICATIONS,
            notifications=[sdk.NotificationOutput(topic=None, message="hi", created_at_epoch_ms=1, consumed=False)],
        ),
        GetWorkflowNotificationsResponse,
    ),
    (
        _r(
            sdk.GetWorkflowStreamsResponse,
            T.GET_WORKFLOW_STREAMS,
            streams=[sdk.StreamEntryOutput(key="s", values=["1", "2"])],
        ),
        GetWorkflowStreamsResponse,
    ),
    (
        _r(
            sdk.GetWorkflowAggregatesResponse,
            T.GET_WORKFLOW_AGGREGATES,
            output=[sdk.WorkflowAggregateOutput(group={"status": "SUCCESS"}, count=3)],
        ),
        GetWorkflowAggregatesResponse,
    ),
    (
        _r(
            sdk.GetStepAggregatesResponse,
            T.GET_STEP_AGGREGATES,
            output=[sdk.StepAggregateOutput(group={"function_name": "charge"}, max_duration_ms=9)],
        ),
        GetStepAggregatesResponse,
    ),
    (_r(sdk.ListQueuesResponse, T.LIST_QUEUES, output=[QUEUE]), ListQueuesResponse),
    (_r(sdk.GetQueueResponse, T.GET_QUEUE, output=QUEUE), GetQueueResponse),
]


@pytest.mark.parametrize(("sdk_resp", "cls"), SDK_RESPONSES, ids=lambda v: getattr(v, "type", ""))
def test_sdk_responses_decode_into_their_class(sdk_resp, cls):
    text = sdk_resp.to_json()
    sent = json.loads(text)
    resp = decode_response(text)
    assert type(resp) is cls
    assert resp.type == sdk_resp.type
    assert resp.request_id == "rid"
    assert resp.error_message == sdk_resp.error_message
    assert resp.ok is (sdk_resp.error_message is None)
    for name, _, _ in cls.SPEC:
        assert getattr(resp, name) == sent[name], name
    assert decode_response(text.encode("utf-8")) == resp  # binary frames too


def test_every_sdk_response_class_is_covered():
    sdk_classes = {
        obj
        for name, obj in vars(sdk).items()
        if name.endswith("Response") and name != "BaseResponse" and inspect.isclass(obj)
    }
    assert {type(r) for r, _ in SDK_RESPONSES} == sdk_classes


def test_records_stay_as_the_executor_sent_them():
    resp = decode_response(_r(sdk.ListWorkflowsResponse, T.LIST_WORKFLOWS, output=[WORKFLOW]).to_json())
    assert resp.output == [dataclasses.asdict(WORKFLOW)]
    assert list(resp.output[0]) == [f.name for f in dataclasses.fields(sdk.WorkflowsOutput)]
    assert resp.output[0]["WorkflowUUID"] == "w1"
    steps = decode_response(_r(sdk.ListStepsResponse, T.LIST_STEPS, output=[STEP]).to_json())
    assert steps.output == [dataclasses.asdict(STEP)]


def test_executor_info_from_python_sdk():
    resp = decode_response(
        _r(
            sdk.ExecutorInfoResponse,
            T.EXECUTOR_INFO,
            executor_id="e1",
            application_version="v1",
            hostname=None,
            language="python",
            dbos_version="3.2.0",
            executor_metadata={"region": "eu", "nested": {"a": [1]}},
        ).to_json()
    )
    assert resp == ExecutorInfoResponse(
        type="executor_info",
        request_id="rid",
        executor_id="e1",
        application_version="v1",
        hostname=None,
        language="python",
        dbos_version="3.2.0",
        executor_metadata={"region": "eu", "nested": {"a": [1]}},
    )


# TypeScript SDK 5.2.11 frames, as JSON.stringify(new protocol.XResponse(...)) writes them: undefined
# fields (error_message on success, a missing output, executor_metadata...) are absent, not null.
TS_FRAMES = [
    (
        ('{"type":"executor_info","request_id":"r","executor_id":"e1","application_version":"v1",'
        '"hostname":"h","language":"typescript","dbos_version":"5.2.11"}'),
        {"executor_id": "e1", "language": "typescript", "executor_metadata": None, "error_message": None},
    ),
    ('{"type":"get_workflow","request_id":"r"}', {"output": None, "ok": True}),
    ('{"type":"get_queue","request_id":"r","output":null}', {"output": None}),
    (
        '{"type":"list_steps","request_id":"r","error_message":"Exception encountered when listing steps w: x"}',
        {"output": None, "ok": False},
    ),
    ('{"type":"fork_workflow","request_id":"r","error_message":"boom"}', {"new_workflow_id": None}),
    ('{"type":"retention","request_id":"r","success":true}', {"success": True}),
    ('{"type":"trigger_schedule","request_id":"r"}', {"workflow_id": None}),
    ('{"type":"export_workflow","request_id":"r","serialized_workflow":null}', {"serialized_workflow": None}),
    ('{"type":"list_workflows","request_id":"r","output":[{"WorkflowUUID":"w","WasForkedFrom":false}]}',
     {"output": [{"WorkflowUUID": "w", "WasForkedFrom": False}]}),
]  # fmt: skip


@pytest.mark.parametrize(("frame", "expected"), TS_FRAMES)
def test_typescript_shaped_responses(frame, expected):
    resp = decode_response(frame)
    for name, value in expected.items():
        assert getattr(resp, name) == value, name


def test_unknown_fields_are_ignored():
    resp = decode_response(
        '{"type":"cancel","request_id":"r","success":true,"error_message":null,'
        '"new_in_sdk_9":{"deep":[1,2,3]},"another":"x"}'
    )
    assert resp == SuccessResponse(type="cancel", request_id="r", success=True)
    assert not hasattr(resp, "new_in_sdk_9")


def test_unknown_types_decode_into_raw_response():
    resp = decode_response('{"type":"shiny_new_thing","request_id":"r","answer":42,"error_message":null}')
    assert resp == RawResponse(type="shiny_new_thing", request_id="r", fields={"answer": 42})
    assert resp.ok


# --------------------------------------------------------------------------------------------------
# Unknown-type and metadata-only answers


def test_unknown_type_text_is_the_sdks():
    source = inspect.getsource(sdk_conductor)
    assert f'error_message="{UNKNOWN_TYPE_ERROR}"' in source
    # TypeScript 5.2.11 conductor.js: new protocol.BaseResponse(baseMsg.type, baseMsg.request_id,
    # 'Unknown message type'); Go and Java send the same text.
    assert UNKNOWN_TYPE_ERROR == "Unknown message type"


def test_unknown_type_error_from_python_sdk_for_a_type_it_lacks():
    frame = sdk.BaseResponse(type="frobnicate", request_id="r1", error_message="Unknown message type").to_json()
    resp = decode_response(frame)
    assert isinstance(resp, RawResponse)
    assert is_unknown_type_error(resp)


def test_unknown_type_error_from_an_older_sdk_for_a_known_type():
    # An SDK older than the type answers with the envelope only: no output, no success.
    for msg_type, cls, field_name in (
        ("list_queues", ListQueuesResponse, "output"),
        ("rewind_workflow", SuccessResponse, "success"),
        ("get_metrics", GetMetricsResponse, "metrics"),
        ("backfill_schedule", BackfillScheduleResponse, "workflow_ids"),
    ):
        frame = json.dumps({"type": msg_type, "request_id": "r", "error_message": "Unknown message type"})
        resp = decode_response(frame)
        assert type(resp) is cls
        assert getattr(resp, field_name) is None
        assert is_unknown_type_error(resp)
        assert not resp.ok


def test_other_errors_are_not_unknown_type_errors():
    assert not is_unknown_type_error(decode_response('{"type":"cancel","request_id":"r","success":true}'))
    failed = decode_response(
        '{"type":"cancel","request_id":"r","success":false,"error_message":"Unknown message type: cancel?"}'
    )
    assert not is_unknown_type_error(failed)


def test_metadata_only_refusal_is_recognised():
    # conductor.py answers with BaseResponse(..., error_message=f"{msg_type} is not allowed in conductor
    # metadata-only mode")
    assert 'is not allowed in conductor metadata-only mode"' in inspect.getsource(sdk_conductor)
    frame = sdk.BaseResponse(
        type=sdk.MessageType.IMPORT_WORKFLOW,
        request_id="r",
        error_message="import_workflow is not allowed in conductor metadata-only mode",
    ).to_json()
    resp = decode_response(frame)
    assert type(resp) is SuccessResponse
    assert resp.success is None
    assert is_metadata_only_refusal(resp)
    assert not is_unknown_type_error(resp)


# --------------------------------------------------------------------------------------------------
# Malformed frames

DEEP = 100_000
TOO_DEEP = f"frame nests deeper than {MAX_DEPTH} levels"


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ('{"type": "cancel", "request_id": ', "frame is not valid JSON"),
        ("", "frame is not valid JSON"),
        ("not json at all", "frame is not valid JSON"),
        (b"\xff\xfe{\x00", "frame is not valid UTF-8"),
        (b'{"type":"cancel","request_id":"r","x":"\xc3\x28"}', "frame is not valid UTF-8"),
        ("[1, 2, 3]", "frame is not a JSON object"),
        ('["type", "request_id"]', "frame is not a JSON object"),
        ('"cancel"', "frame is not a JSON object"),
        ("null", "frame is not a JSON object"),
        ("42", "frame is not a JSON object"),
        ('{"request_id": "r", "success": true}', "frame has no type"),
        ('{"type": "cancel", "success": true}', "frame has no request_id"),
        ('{"type": "cancel", "request_id": 123, "success": true}', "frame request_id must be a string"),
        ('{"type": "cancel", "request_id": null, "success": true}', "frame request_id must be a string"),
        ('{"type": ["cancel"], "request_id": "r"}', "frame type must be a string"),
        ('{"type": "cancel", "request_id": "r", "error_message": 5}', "field 'error_message' must be a string or null"),
        ('{"type": "cancel", "request_id": "r", "success": "yes"}', "field 'success' must be a boolean"),
        ('{"type": "cancel", "request_id": "r", "success": 1}', "field 'success' must be a boolean"),
        ('{"type": "cancel", "request_id": "r"}', "field 'success' is missing"),
        ('{"type": "cancel", "request_id": "r", "success": null}', "field 'success' must be a boolean, not null"),
        ('{"type": "exist_pending_workflows", "request_id": "r", "exist": 0}', "field 'exist' must be a boolean"),
        ('{"type": "list_workflows", "request_id": "r", "output": {}}', "field 'output' must be a list of objects"),
        ('{"type": "list_workflows", "request_id": "r", "output": [1]}', "field 'output' must be a list of objects"),
        ('{"type": "get_workflow", "request_id": "r", "output": []}', "field 'output' must be an object or null"),
        ('{"type": "list_steps", "request_id": "r", "output": "x"}',
         "field 'output' must be a list of objects or null"),
        ('{"type": "fork_from_failure", "request_id": "r", "forked_workflow_ids": [1]}',
         "field 'forked_workflow_ids' must be a list of strings or null"),
        ('{"type": "backfill_schedule", "request_id": "r", "workflow_ids": "w"}',
         "field 'workflow_ids' must be a list of strings"),
        ('{"type": "executor_info", "request_id": "r", "executor_id": 5, "application_version": "v"}',
         "field 'executor_id' must be a string"),
        ('{"type": "executor_info", "request_id": "r", "application_version": "v"}',
         "field 'executor_id' is missing"),
        (('{"type": "executor_info", "request_id": "r", "executor_id": "e", "application_version": "v",'
         ' "executor_metadata": "x"}'), "field 'executor_metadata' must be an object or null"),
        ('{"type": "get_metrics", "request_id": "r", "metrics": null}',
         "field 'metrics' must be a list of objects, not null"),
        ('{"type": "x", "request_id": "r", "n": ' + "1" * 5000 + "}", "frame is not valid JSON"),  # int too long
        ("[" * DEEP + "]" * DEEP, TOO_DEEP),
        ('{"type": "x", "request_id": "r", "a": ' + "[" * DEEP + "]" * DEEP + "}",
         TOO_DEEP),
        ('{"a": ' * DEEP + "1" + "}" * DEEP, TOO_DEEP),
        ("[" * DEEP, TOO_DEEP),
    ],
)  # fmt: skip
def test_malformed_frames_raise_protocol_error(frame, reason):
    with pytest.raises(ProtocolError) as info:
        decode_response(frame)
    assert info.value.reason == reason
    assert str(info.value) == reason


def test_deep_nesting_is_caught_whatever_the_depth_limit():
    # Measured before parsing (wire/json_depth.py); with a limit past json's recursion guard, the guard's
    # RecursionError is still only a ProtocolError.
    frame = '{"type": "x", "request_id": "r", "a": ' + "[" * DEEP + "]" * DEEP + "}"
    for max_depth in (1, MAX_DEPTH):
        with pytest.raises(ProtocolError) as info:
            decode_response(frame, max_depth=max_depth)
        assert info.value.reason == f"frame nests deeper than {max_depth} levels"
    with pytest.raises(ProtocolError) as info:
        decode_response(frame, max_depth=10 * DEEP)
    assert info.value.reason == "frame nests too deeply"


def _nested(depth, inner="[]"):
    """A frame whose containers nest ``depth`` deep (the frame object is level 1)."""
    return '{"type": "x", "request_id": "r", "a": ' + "[" * (depth - 2) + inner + "]" * (depth - 2) + "}"


def test_depth_limit_is_exact():
    assert isinstance(decode_response(_nested(10), max_depth=10), RawResponse)
    with pytest.raises(ProtocolError) as info:
        decode_response(_nested(11), max_depth=10)
    assert info.value.reason == "frame nests deeper than 10 levels"
    # within json's recursion guard but past the default limit: our walk catches it
    assert isinstance(decode_response(_nested(MAX_DEPTH)), RawResponse)
    with pytest.raises(ProtocolError) as info:
        decode_response(_nested(MAX_DEPTH + 1))
    assert info.value.reason == f"frame nests deeper than {MAX_DEPTH} levels"
    with pytest.raises(ProtocolError):  # objects count as much as arrays
        decode_response(_nested(MAX_DEPTH, inner='[{"k": {}}]'))


def test_many_containers_are_not_depth():
    wide = json.dumps(
        {"type": "list_workflows", "request_id": "r", "output": [{"WorkflowUUID": str(i)} for i in range(5000)]}
    )
    assert len(decode_response(wide).output) == 5000


def test_brackets_inside_strings_do_not_count():
    text = '{"type": "x", "request_id": "r", "s": "' + "[{" * DEEP + '", "t": "\\"[[[\\\\"}'
    resp = decode_response(text)
    assert resp.fields == {"s": "[{" * DEEP, "t": '"[[[\\'}


def test_frame_size_limit_is_checked():
    frame = '{"type": "x", "request_id": "r", "pad": "' + "a" * 2000 + '"}'
    with pytest.raises(ProtocolError) as info:
        decode_response(frame, max_bytes=1000)
    assert info.value.reason == "frame is larger than the 1000-byte limit"
    with pytest.raises(ProtocolError):
        decode_response(frame.encode(), max_bytes=1000)
    # counted in UTF-8 bytes, not characters: 600 x "é" is 1200 bytes
    wide = '{"type": "x", "request_id": "r", "pad": "' + "é" * 600 + '"}'
    assert len(wide) < 1000
    with pytest.raises(ProtocolError):
        decode_response(wide, max_bytes=1000)
    exact = len(wide.encode("utf-8"))
    assert decode_response(wide, max_bytes=exact).fields == {"pad": "é" * 600}
    assert MAX_FRAME_BYTES == 64 * 1024 * 1024


def test_size_is_checked_before_parsing():
    # Not JSON at all, but too big: the size is what is reported.
    with pytest.raises(ProtocolError) as info:
        decode_response("x" * 101, max_bytes=100)
    assert "limit" in info.value.reason


@pytest.mark.parametrize("frame", [None, 42, ["{}"], {"type": "x"}])
def test_non_text_input_is_a_protocol_error(frame):
    with pytest.raises(ProtocolError) as info:
        decode_response(frame)
    assert info.value.reason == "frame is neither text nor bytes"


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "cancel", "request_id": "' + SECRET + '", ',
        '{"type": "cancel", "request_id": "r", "success": "' + SECRET + '"}',
        '{"type": "cancel", "request_id": "r", "error_message": {"k": "' + SECRET + '"}}',
        '{"type": "list_workflows", "request_id": "r", "output": ["' + SECRET + '"]}',
        '["' + SECRET + '"]',
        '{"type": "x", "' + SECRET + '": 1}',
        b'{"x": "' + SECRET.encode() + b'\xff"}',
        '{"type": "x", "request_id": "' + SECRET + '", "pad": "' + "a" * 500 + '"}',
        '{"k": "' + SECRET + '", "a": ' + "[" * 200 + "]" * 200 + "}",
        '{"k": "' + SECRET + '", "n": ' + "9" * 5000 + "}",
    ],
)
def test_errors_never_quote_the_frame(frame):
    with pytest.raises(ProtocolError) as info:
        decode_response(frame, max_bytes=500 if '"pad"' in str(frame) else MAX_FRAME_BYTES)
    exc = info.value
    for text in (str(exc), repr(exc), exc.reason):
        assert SECRET not in text
        assert len(text) < 120
    # the parser's exception (whose attributes hold the frame) is not chained for display
    assert exc.__cause__ is None
    assert exc.__context__ is None or exc.__suppress_context__


# --------------------------------------------------------------------------------------------------
# Filters


@pytest.mark.parametrize(
    ("value", "as_filter", "as_list"),
    [
        (None, None, None),
        ("SUCCESS", "SUCCESS", ["SUCCESS"]),
        (["SUCCESS"], "SUCCESS", ["SUCCESS"]),
        (("SUCCESS", "ERROR"), ["SUCCESS", "ERROR"], ["SUCCESS", "ERROR"]),
        (["a", "b", "a"], ["a", "b", "a"], ["a", "b", "a"]),
    ],
)
def test_string_or_list_filters(value, as_filter, as_list):
    assert string_or_list(value) == as_filter
    assert string_list(value) == as_list


@pytest.mark.parametrize(
    ("value", "error"),
    [([], ValueError), ("", ValueError), (["a", ""], ValueError), ([1], TypeError), (b"x", TypeError),
     ({"a": "b"}, TypeError), (5, TypeError)],
)  # fmt: skip
def test_bad_filters(value, error):
    with pytest.raises(error):
        string_or_list(value, "status")
    with pytest.raises(error):
        string_list(value, "status")


def test_filters_reach_the_sdk_in_the_shape_it_accepts():
    parsed = roundtrip(
        ListWorkflowsRequest(body=ListWorkflowsBody(status="PENDING", workflow_name=["a", "b"])),
        sdk.ListWorkflowsRequest,
    )
    assert parsed.body["status"] == "PENDING"
    assert parsed.body["workflow_name"] == ["a", "b"]
    # fields the SDK types as lists only are always lists
    metrics = roundtrip(GetMetricsRequest(start_time="s", end_time="e", application_name="a"), sdk.GetMetricsRequest)
    assert metrics.application_name == ["a"]


# --------------------------------------------------------------------------------------------------
# What each SDK release supports


def test_supported_types_of_the_pinned_releases_match_the_sdk():
    python_320 = supported_types("python", "3.2.0")
    assert python_320 == frozenset(m.value for m in sdk.MessageType)
    # @dbos-inc/dbos-sdk 5.2.11 knows the same 33 types (dist/src/conductor/protocol.js)
    assert supported_types("typescript", "5.2.11") == python_320


@pytest.mark.parametrize(
    ("language", "version", "present", "absent"),
    [
        ("python", "3.1.0", {"rewind_workflow"}, {"restart"}),
        ("python", "3.0.0", set(), {"restart", "rewind_workflow"}),
        ("python", "2.31.1", {"restart", "get_step_aggregates", "list_queues"}, {"rewind_workflow"}),
        ("python", "2.12.0", {"alert", "delete"}, {"list_schedules", "get_queue", "fork_from_failure"}),
        ("python", "0.23.0", {"executor_info", "recovery", "restart"}, {"exist_pending_workflows", "list_steps"}),
        ("Python", "3.2.0a1", {"rewind_workflow"}, {"restart"}),
        ("typescript", "4.26.3", {"restart", "get_step_aggregates"}, {"rewind_workflow"}),
        ("typescript", "4.18.0", {"list_queues"}, {"get_step_aggregates"}),
        ("typescript", "5.0.2", set(), {"restart", "rewind_workflow"}),
        ("typescript", "v2.6.0", {"exist_pending_workflows"}, {"list_steps", "retention"}),
    ],
)
def test_supported_types_by_release(language, version, present, absent):
    types = supported_types(language, version)
    assert types is not None
    assert present <= types
    assert not (absent & types)
    assert types <= {m.value for m in MessageType}


@pytest.mark.parametrize(
    ("language", "version"),
    [("go", "v1.7.0"), ("java", "0.6.0"), ("python", "banana"), ("python", ""), ("python", "0.22.0"),
     ("typescript", "2.5.0"), ("python", "3.3.0"), ("typescript", "5.3.0"), ("", "3.2.0")],
)  # fmt: skip
def test_supported_types_unknown(language, version):
    assert supported_types(language, version) is None
    assert supports_bulk_ids(language, version) is None


def test_supports_bulk_ids():
    assert supports_bulk_ids("python", "3.2.0") is True
    assert supports_bulk_ids("python", "2.15.0") is True
    assert supports_bulk_ids("python", "2.14.0") is False
    assert supports_bulk_ids("typescript", "4.11.0") is True
    assert supports_bulk_ids("typescript", "4.10.2") is False
