"""In: v2 query parameters and JSON bodies become typed protocol requests. Everything is checked here, before
any frame is sent: wrong types, unknown properties, unknown workflow statuses, limits out of range and bad
timestamps raise ``ApiError`` 422 naming the location (``query.limit``, ``body.status[1]``)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from relay.web.problems import invalid
from relay.web.shapes.json_schema import ANY_OBJECT, BOOL, INT32, INT64, NSTRS, STR, STRS, TIME, Schema
from relay.web.shapes.values import (
    DEFAULT_LIMIT,
    INT32_MAX,
    INT64_MAX,
    MAX_LIMIT,
    PAGE_DESCRIPTION,
    WORKFLOW_STATUSES,
    _wire_time,
    parse_time,
)
from relay.wire.catalog_requests import (
    BackfillScheduleRequest,
    GetMetricsRequest,
    ListSchedulesBody,
    ListSchedulesRequest,
)
from relay.wire.json_types import JSONObject
from relay.wire.requests import CancelRequest, DeleteRequest, RawRequest, ResumeRequest
from relay.wire.responses import RawResponse, Response
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
    GetWorkflowRequest,
    ImportWorkflowRequest,
    ListStepsRequest,
    ListWorkflowsBody,
    ListWorkflowsRequest,
)

# -------------------------------------------------------------------------------- in: v2 → requests

# A converter takes (location, value) and returns the wire value, or raises a 422 naming the location.
Converter = Callable[[str, Any], Any]


def _boolean(location: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise invalid(location, "must be a boolean", value)
    return value


def _integer(minimum: int, maximum: int) -> Converter:
    def convert(location: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(location, "must be an integer", value)
        if not minimum <= value <= maximum:
            raise invalid(location, f"must be between {minimum} and {maximum}", value)
        return value

    return convert


def _string(location: str, value: object) -> str:
    if not isinstance(value, str):
        raise invalid(location, "must be a string", value)
    if not value:
        raise invalid(location, "must not be empty", value)
    return value


def _status(location: str, value: object) -> str:
    text = _string(location, value)
    if text not in WORKFLOW_STATUSES:
        raise invalid(location, f"must be one of {', '.join(sorted(WORKFLOW_STATUSES))}", value)
    return text


def _list_of(item: Converter) -> Converter:
    """An array of items (or null). An empty array, like null, means no filter."""

    def convert(location: str, value: object) -> list[object] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            raise invalid(location, "must be an array", value)
        return [item(f"{location}[{i}]", v) for i, v in enumerate(value)] or None

    return convert


def _time(location: str, value: object) -> str:
    return _wire_time(parse_time(location, value))


def _object(location: str, value: object) -> JSONObject:
    if not isinstance(value, dict):
        raise invalid(location, "must be an object", value)
    return value


def _page_limit(location: str, value: object) -> int:
    """At least 1; above MAX_LIMIT served as MAX_LIMIT (api_values: clamped, not refused)."""
    return min(_integer(1, INT64_MAX)(location, value), MAX_LIMIT)


_LIMIT = _page_limit
_OFFSET = _integer(0, INT64_MAX)
_STRINGS = _list_of(_string)
_STATUSES = _list_of(_status)

class Field(NamedTuple):
    """One property of a body or query: the wire field it sets, how its value is checked and converted, and
    its JSON Schema (what /openapi.json documents: web/api/openapi_schemas.py builds the body components from
    these declarations)."""

    wire: str
    convert: Converter
    schema: Schema


_SCHEMA_OF: dict[Converter, Schema] = {
    _boolean: BOOL, _string: STR, _time: TIME, _object: ANY_OBJECT, _OFFSET: INT64,
    _LIMIT: {**INT64, "description": PAGE_DESCRIPTION},
    _STRINGS: NSTRS, _STATUSES: NSTRS, _status: STR,
}


def field(wire: str, convert: Converter, schema: Schema | None = None) -> Field:
    """A declared property; its schema follows from the converter unless given."""
    return Field(wire, convert, schema if schema is not None else _SCHEMA_OF[convert])


Spec = Mapping[str, Field]  # v2 name → its declaration


def _fields(body: Mapping[str, object], spec: Spec, where: str = "body") -> dict[str, Any]:
    """Check a JSON body against ``spec``; the wire fields it sets (unset and empty filters left out)."""
    out: JSONObject = {}
    for name, value in body.items():
        if name == "$schema":
            continue
        if name not in spec:
            raise invalid(f"{where}.{name}", "unexpected property", value)
        wire, convert, _ = spec[name]
        converted = convert(f"{where}.{name}", value)
        if converted is not None:
            out[wire] = converted
    return out


def _query_value(location: str, convert: Converter, raw: str) -> Any:
    """Query strings carry text: read booleans and integers from it, then convert as a body value."""
    value: object = raw
    if convert is _boolean:
        lowered = raw.strip().lower()
        if lowered not in ("true", "false", "1", "0"):
            raise invalid(location, "must be true or false", raw)
        value = lowered in ("true", "1")
    elif convert in (_LIMIT, _OFFSET):
        if not re.fullmatch(r"-?\d{1,19}", raw.strip()):
            raise invalid(location, "must be an integer", raw)
        value = int(raw)
    return convert(location, value)


def _query(args: Mapping[str, str], spec: Spec) -> dict[str, Any]:
    """Read the declared query parameters (others are ignored, as Conductor does); empty means unset."""
    out: JSONObject = {}
    for name, (wire, convert, _) in spec.items():
        raw = args.get(name)
        if raw is None or raw == "":
            continue
        out[wire] = _query_value(f"query.{name}", convert, raw)
    return out


def _require(body: Mapping[str, object], *names: str) -> None:
    for name in names:
        if body.get(name) is None:
            raise invalid(f"body.{name}", "is required", None)


def _build(factory: Callable[..., object], **fields: object) -> Any:
    """Construct a protocol request; its own checks are a second line (the specs here come first)."""
    try:
        return factory(**fields)
    except (TypeError, ValueError) as error:
        raise invalid("body", str(error)) from None


def _window(start: datetime, end: datetime, names: tuple[str, str], where: str) -> None:
    if end <= start:
        raise invalid(f"{where}.{names[1]}", f"must be later than {names[0]}", _wire_time(end))


# -- workflows

LIST_WORKFLOWS_QUERY: Spec = {
    "status": field("status", _status),
    "workflowName": field("workflow_name", _string),
    "limit": field("limit", _LIMIT),
    "offset": field("offset", _OFFSET),
    "sortDesc": field("sort_desc", _boolean),
    "loadInput": field("load_input", _boolean),
    "loadOutput": field("load_output", _boolean),
}

_FILTERS: Spec = {
    "workflowName": field("workflow_name", _STRINGS),
    "status": field("status", _STATUSES),
    "user": field("authenticated_user", _STRINGS),
    "appVersion": field("application_version", _STRINGS),
    "executorId": field("executor_id", _STRINGS),
    "queueName": field("queue_name", _STRINGS),
    "workflowIdPrefix": field("workflow_id_prefix", _STRINGS),
    "forkedFrom": field("forked_from", _STRINGS),
    "parentWorkflowId": field("parent_workflow_id", _STRINGS),
    "scheduleName": field("schedule_name", _STRINGS),
    "startTime": field("start_time", _time),
    "endTime": field("end_time", _time),
    "completedAfter": field("completed_after", _time),
    "completedBefore": field("completed_before", _time),
    "dequeuedAfter": field("dequeued_after", _time),
    "dequeuedBefore": field("dequeued_before", _time),
    "wasForkedFrom": field("was_forked_from", _boolean),
    "hasParent": field("has_parent", _boolean),
    "attributes": field("attributes", _object),
}

SEARCH_BODY: Spec = {
    **_FILTERS,
    "workflowIds": field("workflow_uuids", _STRINGS),
    "limit": field("limit", _LIMIT),
    "offset": field("offset", _OFFSET),
    "sortDesc": field("sort_desc", _boolean),
    "loadInput": field("load_input", _boolean),
    "loadOutput": field("load_output", _boolean),
    "queuesOnly": field("queues_only", _boolean),
}

WORKFLOW_AGGREGATES_BODY: Spec = {
    **{k: v for k, v in _FILTERS.items() if k not in ("workflowName", "appVersion", "user")},
    "workflowName": field("name", _STRINGS),
    "appVersion": field("app_version", _STRINGS),
    "user": field("user", _STRINGS),
    "workflowIds": field("workflow_ids", _STRINGS),
    "groupByStatus": field("group_by_status", _boolean),
    "groupByWorkflowName": field("group_by_name", _boolean),
    "groupByQueueName": field("group_by_queue_name", _boolean),
    "groupByExecutorId": field("group_by_executor_id", _boolean),
    "groupByAppVersion": field("group_by_application_version", _boolean),
    "groupByApplicationName": field("group_by_application_name", _boolean),
    "selectCount": field("select_count", _boolean),
    "selectMinCreatedAt": field("select_min_created_at", _boolean),
    "selectMaxQueueWaitMs": field("select_max_queue_wait_ms", _boolean),
    "selectMaxTotalLatencyMs": field("select_max_total_latency_ms", _boolean),
    "timeBucketSizeMs": field("time_bucket_size_ms", _integer(1, INT64_MAX), INT64),
}

STEP_AGGREGATES_BODY: Spec = {
    "groupByFunctionName": field("group_by_function_name", _boolean),
    "groupByStatus": field("group_by_status", _boolean),
    "selectCount": field("select_count", _boolean),
    "selectMaxDurationMs": field("select_max_duration_ms", _boolean),
    "timeBucketSizeMs": field("time_bucket_size_ms", _integer(1, INT64_MAX), INT64),
    # Step statuses are not an enforced enum (the reference: unrecognised values match nothing).
    "status": field("status", _STRINGS, STRS),
    "stepName": field("function_name", _STRINGS, STRS),
    "workflowIdPrefix": field("workflow_id_prefix", _STRINGS, STRS),
    "completedAfter": field("completed_after", _time),
    "completedBefore": field("completed_before", _time),
}


def list_workflows_request(args: Mapping[str, str]) -> ListWorkflowsRequest:
    """``GET .../workflows`` query parameters (status, workflowName, limit, offset, sortDesc, loadInput,
    loadOutput) as list_workflows. Inputs and outputs only when asked for."""
    fields = {"limit": DEFAULT_LIMIT, **_query(args, LIST_WORKFLOWS_QUERY)}
    return ListWorkflowsRequest(body=_build(ListWorkflowsBody, **fields))


def search_workflows_request(body: Mapping[str, object]) -> ListWorkflowsRequest:
    """A ``WorkflowSearchBody`` as list_workflows."""
    fields = {"limit": DEFAULT_LIMIT, **_fields(body, SEARCH_BODY)}
    return ListWorkflowsRequest(body=_build(ListWorkflowsBody, **fields))


def workflow_aggregates_request(body: Mapping[str, object]) -> GetWorkflowAggregatesRequest:
    """A ``WorkflowAggregatesBody`` as get_workflow_aggregates; something to group by is required."""
    fields = _fields(body, WORKFLOW_AGGREGATES_BODY)
    groups = [f for f in GetWorkflowAggregatesBody.FLAGS if f.startswith("group_by_")]
    if not any(fields.get(f) for f in groups) and "time_bucket_size_ms" not in fields:
        raise invalid("body", "set at least one groupBy* flag or timeBucketSizeMs", None)
    return GetWorkflowAggregatesRequest(body=_build(GetWorkflowAggregatesBody, **fields))


def step_aggregates_request(body: Mapping[str, object]) -> GetStepAggregatesRequest:
    """A ``StepAggregatesBody`` as get_step_aggregates; something to group by is required."""
    fields = _fields(body, STEP_AGGREGATES_BODY)
    if not (fields.get("group_by_function_name") or fields.get("group_by_status")
            or "time_bucket_size_ms" in fields):
        raise invalid("body", "set groupByFunctionName, groupByStatus or timeBucketSizeMs", None)
    return GetStepAggregatesRequest(body=_build(GetStepAggregatesBody, **fields))


def get_workflow_request(workflow_id: str, *, load: bool = True) -> GetWorkflowRequest:
    return GetWorkflowRequest(workflow_id=_string("path.workflowId", workflow_id),
                                       load_input=load, load_output=load)


def list_steps_request(workflow_id: str, args: Mapping[str, str]) -> ListStepsRequest:
    page = {"limit": field("limit", _LIMIT), "offset": field("offset", _OFFSET)}
    fields = {"limit": DEFAULT_LIMIT, **_query(args, page)}
    return ListStepsRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


def export_request(workflow_id: str, args: Mapping[str, str]) -> ExportWorkflowRequest:
    fields = _query(args, {"exportChildren": field("export_children", _boolean)})
    return ExportWorkflowRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


def delete_request(workflow_id: str, args: Mapping[str, str]) -> DeleteRequest:
    fields = _query(args, {"deleteChildren": field("delete_children", _boolean)})
    return DeleteRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


# -- the bodies of workflow actions (each also documents itself: web/api/openapi_schemas.py)
_IDS = field("workflow_ids", _STRINGS, STRS)  # required (checked first), at least one
CANCEL_BODY: Spec = {"cancelChildren": field("cancel_children", _boolean)}
RESUME_BODY: Spec = {"queueName": field("queue_name", _string)}
IMPORT_BODY: Spec = {"serializedWorkflow": field("serialized_workflow", _string)}
BULK_CANCEL_BODY: Spec = {"workflowIds": _IDS, "cancelChildren": field("cancel_children", _boolean)}
BULK_RESUME_BODY: Spec = {"workflowIds": _IDS, "queueName": field("queue_name", _string)}
BULK_DELETE_BODY: Spec = {"workflowIds": _IDS, "deleteChildren": field("delete_children", _boolean)}
BACKFILL_BODY: Spec = {"startTime": field("start", _time), "endTime": field("end", _time)}
LATEST_VERSION_BODY: Spec = {"versionName": field("version_name", _string)}


def cancel_request(workflow_id: str, body: Mapping[str, object]) -> CancelRequest:
    """A ``CancelWorkflowInputBody`` (cancelChildren)."""
    fields = _fields(body, CANCEL_BODY)
    return CancelRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


def resume_request(workflow_id: str, body: Mapping[str, object]) -> ResumeRequest:
    """A ``ResumeWorkflowInputBody`` (queueName)."""
    fields = _fields(body, RESUME_BODY)
    return ResumeRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


FORK_BODY: Spec = {
    "startStep": field("start_step", _integer(0, INT32_MAX), INT32),
    "newWorkflowId": field("new_workflow_id", _string),
    "appVersion": field("application_version", _string),
    "queueName": field("queue_name", _string),
    "queuePartitionKey": field("queue_partition_key", _string),
}


def fork_request(workflow_id: str, body: Mapping[str, object]) -> ForkWorkflowRequest:
    """A ``ForkWorkflowInputBody``. Without ``startStep`` the fork runs from the beginning (0: no step of
    the original is kept, in the Python SDK, which numbers steps from 1, and the TypeScript one, from 0)."""
    fields = _fields(body, FORK_BODY)
    fields.setdefault("start_step", 0)
    return ForkWorkflowRequest(
        body=_build(ForkWorkflowBody, workflow_id=_string("path.workflowId", workflow_id), **fields)
    )


_GZIP_MAGIC = b"\x1f\x8b"


def import_request(body: Mapping[str, object]) -> ImportWorkflowRequest:
    """An ``ImportWorkflowInputBody`` (serializedWorkflow, from an export of the same SDK language)."""
    _require(body, "serializedWorkflow")
    fields = _fields(body, IMPORT_BODY)
    _check_export(fields["serialized_workflow"])
    return ImportWorkflowRequest(**fields)


def _check_export(text: str) -> None:
    """Every SDK exports base64 of gzip (its payload differs: pickle, JSON): anything else is refused here,
    before an executor spends a traceback on it. The payload itself only the executor can judge."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("body.serializedWorkflow", "must be base64, as an export answers it", None) from None
    if not raw.startswith(_GZIP_MAGIC):
        raise invalid("body.serializedWorkflow", "is not an export (not gzip data under the base64)", None)


def _workflow_ids(body: Mapping[str, object]) -> list[str]:
    _require(body, "workflowIds")
    ids = _STRINGS("body.workflowIds", body["workflowIds"])
    if not ids:
        raise invalid("body.workflowIds", "must name at least one workflow", body["workflowIds"])
    return ids


def bulk_cancel_request(body: Mapping[str, object]) -> CancelRequest:
    """A ``BulkCancelInputBody`` (workflowIds, cancelChildren)."""
    ids = _workflow_ids(body)
    fields = _fields(body, BULK_CANCEL_BODY)
    fields["workflow_ids"] = ids
    return CancelRequest(**fields)


def bulk_resume_request(body: Mapping[str, object]) -> ResumeRequest:
    """A ``BulkResumeInputBody`` (workflowIds, queueName)."""
    ids = _workflow_ids(body)
    fields = _fields(body, BULK_RESUME_BODY)
    fields["workflow_ids"] = ids
    return ResumeRequest(**fields)


def bulk_delete_request(body: Mapping[str, object]) -> DeleteRequest:
    """A ``BulkDeleteInputBody`` (workflowIds, deleteChildren)."""
    ids = _workflow_ids(body)
    fields = _fields(body, BULK_DELETE_BODY)
    fields["workflow_ids"] = ids
    return DeleteRequest(**fields)


BULK_FORK_BODY: Spec = {
    "workflowIds": _IDS,
    "appVersion": field("application_version", _string),
    "queueName": field("queue_name", _string),
    "queuePartitionKey": field("queue_partition_key", _string),
    "fromLastFailure": field("from_last_failure", _boolean),
    "fromLastStep": field("from_last_step", _boolean),
    "fromStep": field("from_step", _integer(0, INT32_MAX), INT32),
    "fromStepName": field("from_step_name", _string),
}


def bulk_fork_from_failure_request(body: Mapping[str, object]) -> ForkFromFailureRequest:
    """A ``BulkForkFromFailureBody``: exactly one of fromLastFailure, fromLastStep, fromStep, fromStepName."""
    ids = _workflow_ids(body)
    fields = _fields(body, BULK_FORK_BODY)
    fields["workflow_ids"] = ids
    modes = [fields.get("from_last_failure", False), fields.get("from_last_step", False),
             "from_step" in fields, "from_step_name" in fields]
    if sum(bool(m) for m in modes) != 1:
        raise invalid("body", "set exactly one of fromLastFailure, fromLastStep, fromStep and fromStepName",
                      None)
    return ForkFromFailureRequest(body=_build(ForkFromFailureBody, **fields))


# -- queues, schedules, versions, metrics

LIST_SCHEDULES_QUERY: Spec = {
    # Schedule statuses are not an enforced enum (the reference: unrecognised values match nothing).
    "status": field("status", _string),
    "workflowName": field("workflow_name", _string),
    "scheduleNamePrefix": field("schedule_name_prefix", _string),
    "loadContext": field("load_context", _boolean),
}


def list_schedules_request(args: Mapping[str, str]) -> ListSchedulesRequest:
    return ListSchedulesRequest(body=_build(ListSchedulesBody, **_query(args, LIST_SCHEDULES_QUERY)))


def schedule_name(name: str) -> str:
    return _string("path.scheduleName", name)


def queue_name(name: str) -> str:
    return _string("path.queueName", name)


def backfill_request(name: str, body: Mapping[str, object]) -> BackfillScheduleRequest:
    """A ``BackfillInputBody`` (startTime, endTime: RFC 3339, start before end)."""
    _require(body, "startTime", "endTime")
    _fields(body, BACKFILL_BODY)
    start, end = parse_time("body.startTime", body["startTime"]), parse_time("body.endTime", body["endTime"])
    _window(start, end, ("startTime", "endTime"), "body")
    return BackfillScheduleRequest(schedule_name=schedule_name(name), start=_wire_time(start),
                                            end=_wire_time(end))


def latest_version_name(body: Mapping[str, object]) -> str:
    """A ``PatchLatestVersionInputBody``'s versionName."""
    _require(body, "versionName")
    return _fields(body, LATEST_VERSION_BODY)["version_name"]


def metrics_window(args: Mapping[str, str]) -> tuple[datetime, datetime]:
    """``GET .../metrics`` startTime and endTime (both required, RFC 3339, start before end)."""
    for name in ("startTime", "endTime"):
        if not args.get(name):
            raise invalid(f"query.{name}", "is required", None)
    start, end = parse_time("query.startTime", args["startTime"]), parse_time("query.endTime", args["endTime"])
    _window(start, end, ("startTime", "endTime"), "query")
    return start, end


def metrics_request(window: tuple[datetime, datetime]) -> GetMetricsRequest:
    start, end = window
    return GetMetricsRequest(start_time=_wire_time(start), end_time=_wire_time(end))


# -- the raw passthrough

def raw_request(body: Mapping[str, Any]) -> RawRequest:
    """``{"type", ...fields}`` as a RawRequest; Relay sets the request id."""
    _require(body, "type")
    message_type = _string("body.type", body["type"])
    if "request_id" in body:
        raise invalid("body.request_id", "is set by Relay", body["request_id"])
    fields = {k: v for k, v in body.items() if k != "type"}
    return RawRequest(type=message_type, fields=fields)


def raw_response(response: Response) -> dict[str, Any]:
    """A decoded response as the frame's JSON object: the envelope and every field the executor sent
    (for types Relay models, the fields it models)."""
    if isinstance(response, RawResponse):
        return {"type": response.type, "request_id": response.request_id,
                "error_message": response.error_message, **response.fields}
    out = {"type": response.type, "request_id": response.request_id, "error_message": response.error_message}
    for name, _kind, _required in response.SPEC:
        out[name] = getattr(response, name)
    return out
