"""In: v2 query parameters and JSON bodies become typed protocol requests. Everything is checked here, before
any frame is sent: wrong types, unknown properties, unknown workflow statuses, limits out of range and bad
timestamps raise ``ApiError`` 422 naming the location (``query.limit``, ``body.status[1]``). Each area's
properties are declared here; the converters and the reading of a body or query are web/shapes/api_fields.py."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from relay.web.problems import invalid
from relay.web.shapes.api_fields import (
    LIMIT,
    OFFSET,
    STATUSES,
    STRINGS,
    Spec,
    as_bool,
    as_object,
    as_status,
    as_str,
    as_time,
    body_fields,
    build,
    check_window,
    field,
    int_between,
    query_fields,
    require,
)
from relay.web.shapes.json_schema import INT32, INT64, STRS
from relay.web.shapes.values import (
    DEFAULT_LIMIT,
    INT32_MAX,
    INT64_MAX,
    _wire_time,
    parse_time,
)
from relay.wire.catalog_requests import (
    BackfillScheduleRequest,
    GetMetricsRequest,
    ListSchedulesBody,
    ListSchedulesRequest,
)
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

# -- workflows

LIST_WORKFLOWS_QUERY: Spec = {
    "status": field("status", as_status),
    "workflowName": field("workflow_name", as_str),
    "limit": field("limit", LIMIT),
    "offset": field("offset", OFFSET),
    "sortDesc": field("sort_desc", as_bool),
    "loadInput": field("load_input", as_bool),
    "loadOutput": field("load_output", as_bool),
}

_FILTERS: Spec = {
    "workflowName": field("workflow_name", STRINGS),
    "status": field("status", STATUSES),
    "user": field("authenticated_user", STRINGS),
    "appVersion": field("application_version", STRINGS),
    "executorId": field("executor_id", STRINGS),
    "queueName": field("queue_name", STRINGS),
    "workflowIdPrefix": field("workflow_id_prefix", STRINGS),
    "forkedFrom": field("forked_from", STRINGS),
    "parentWorkflowId": field("parent_workflow_id", STRINGS),
    "scheduleName": field("schedule_name", STRINGS),
    "startTime": field("start_time", as_time),
    "endTime": field("end_time", as_time),
    "completedAfter": field("completed_after", as_time),
    "completedBefore": field("completed_before", as_time),
    "dequeuedAfter": field("dequeued_after", as_time),
    "dequeuedBefore": field("dequeued_before", as_time),
    "wasForkedFrom": field("was_forked_from", as_bool),
    "hasParent": field("has_parent", as_bool),
    "attributes": field("attributes", as_object),
}

SEARCH_BODY: Spec = {
    **_FILTERS,
    "workflowIds": field("workflow_uuids", STRINGS),
    "limit": field("limit", LIMIT),
    "offset": field("offset", OFFSET),
    "sortDesc": field("sort_desc", as_bool),
    "loadInput": field("load_input", as_bool),
    "loadOutput": field("load_output", as_bool),
    "queuesOnly": field("queues_only", as_bool),
}

WORKFLOW_AGGREGATES_BODY: Spec = {
    **{k: v for k, v in _FILTERS.items() if k not in ("workflowName", "appVersion", "user")},
    "workflowName": field("name", STRINGS),
    "appVersion": field("app_version", STRINGS),
    "user": field("user", STRINGS),
    "workflowIds": field("workflow_ids", STRINGS),
    "groupByStatus": field("group_by_status", as_bool),
    "groupByWorkflowName": field("group_by_name", as_bool),
    "groupByQueueName": field("group_by_queue_name", as_bool),
    "groupByExecutorId": field("group_by_executor_id", as_bool),
    "groupByAppVersion": field("group_by_application_version", as_bool),
    "groupByApplicationName": field("group_by_application_name", as_bool),
    "selectCount": field("select_count", as_bool),
    "selectMinCreatedAt": field("select_min_created_at", as_bool),
    "selectMaxQueueWaitMs": field("select_max_queue_wait_ms", as_bool),
    "selectMaxTotalLatencyMs": field("select_max_total_latency_ms", as_bool),
    "timeBucketSizeMs": field("time_bucket_size_ms", int_between(1, INT64_MAX), INT64),
}

STEP_AGGREGATES_BODY: Spec = {
    "groupByFunctionName": field("group_by_function_name", as_bool),
    "groupByStatus": field("group_by_status", as_bool),
    "selectCount": field("select_count", as_bool),
    "selectMaxDurationMs": field("select_max_duration_ms", as_bool),
    "timeBucketSizeMs": field("time_bucket_size_ms", int_between(1, INT64_MAX), INT64),
    # Step statuses are not an enforced enum (the reference: unrecognised values match nothing).
    "status": field("status", STRINGS, STRS),
    "stepName": field("function_name", STRINGS, STRS),
    "workflowIdPrefix": field("workflow_id_prefix", STRINGS, STRS),
    "completedAfter": field("completed_after", as_time),
    "completedBefore": field("completed_before", as_time),
}


def list_workflows_request(args: Mapping[str, str]) -> ListWorkflowsRequest:
    """``GET .../workflows`` query parameters (status, workflowName, limit, offset, sortDesc, loadInput,
    loadOutput) as list_workflows. Inputs and outputs only when asked for."""
    fields = {"limit": DEFAULT_LIMIT, **query_fields(args, LIST_WORKFLOWS_QUERY)}
    return ListWorkflowsRequest(body=build(ListWorkflowsBody, **fields))


def search_workflows_request(body: Mapping[str, object]) -> ListWorkflowsRequest:
    """A ``WorkflowSearchBody`` as list_workflows."""
    fields = {"limit": DEFAULT_LIMIT, **body_fields(body, SEARCH_BODY)}
    return ListWorkflowsRequest(body=build(ListWorkflowsBody, **fields))


def workflow_aggregates_request(body: Mapping[str, object]) -> GetWorkflowAggregatesRequest:
    """A ``WorkflowAggregatesBody`` as get_workflow_aggregates; something to group by is required."""
    fields = body_fields(body, WORKFLOW_AGGREGATES_BODY)
    groups = [f for f in GetWorkflowAggregatesBody.FLAGS if f.startswith("group_by_")]
    if not any(fields.get(f) for f in groups) and "time_bucket_size_ms" not in fields:
        raise invalid("body", "set at least one groupBy* flag or timeBucketSizeMs", None)
    return GetWorkflowAggregatesRequest(body=build(GetWorkflowAggregatesBody, **fields))


def step_aggregates_request(body: Mapping[str, object]) -> GetStepAggregatesRequest:
    """A ``StepAggregatesBody`` as get_step_aggregates; something to group by is required."""
    fields = body_fields(body, STEP_AGGREGATES_BODY)
    if not (fields.get("group_by_function_name") or fields.get("group_by_status")
            or "time_bucket_size_ms" in fields):
        raise invalid("body", "set groupByFunctionName, groupByStatus or timeBucketSizeMs", None)
    return GetStepAggregatesRequest(body=build(GetStepAggregatesBody, **fields))


def get_workflow_request(workflow_id: str, *, load: bool = True) -> GetWorkflowRequest:
    return GetWorkflowRequest(workflow_id=as_str("path.workflowId", workflow_id),
                                       load_input=load, load_output=load)


def list_steps_request(workflow_id: str, args: Mapping[str, str]) -> ListStepsRequest:
    page = {"limit": field("limit", LIMIT), "offset": field("offset", OFFSET)}
    fields = {"limit": DEFAULT_LIMIT, **query_fields(args, page)}
    return ListStepsRequest(workflow_id=as_str("path.workflowId", workflow_id), **fields)


def export_request(workflow_id: str, args: Mapping[str, str]) -> ExportWorkflowRequest:
    fields = query_fields(args, {"exportChildren": field("export_children", as_bool)})
    return ExportWorkflowRequest(workflow_id=as_str("path.workflowId", workflow_id), **fields)


def delete_request(workflow_id: str, args: Mapping[str, str]) -> DeleteRequest:
    fields = query_fields(args, {"deleteChildren": field("delete_children", as_bool)})
    return DeleteRequest(workflow_id=as_str("path.workflowId", workflow_id), **fields)


# -- the bodies of workflow actions (each also documents itself: web/api/openapi_schemas.py)
_IDS = field("workflow_ids", STRINGS, STRS)  # required (checked first), at least one
CANCEL_BODY: Spec = {"cancelChildren": field("cancel_children", as_bool)}
RESUME_BODY: Spec = {"queueName": field("queue_name", as_str)}
IMPORT_BODY: Spec = {"serializedWorkflow": field("serialized_workflow", as_str)}
BULK_CANCEL_BODY: Spec = {"workflowIds": _IDS, "cancelChildren": field("cancel_children", as_bool)}
BULK_RESUME_BODY: Spec = {"workflowIds": _IDS, "queueName": field("queue_name", as_str)}
BULK_DELETE_BODY: Spec = {"workflowIds": _IDS, "deleteChildren": field("delete_children", as_bool)}
BACKFILL_BODY: Spec = {"startTime": field("start", as_time), "endTime": field("end", as_time)}
LATEST_VERSION_BODY: Spec = {"versionName": field("version_name", as_str)}


def cancel_request(workflow_id: str, body: Mapping[str, object]) -> CancelRequest:
    """A ``CancelWorkflowInputBody`` (cancelChildren)."""
    fields = body_fields(body, CANCEL_BODY)
    return CancelRequest(workflow_id=as_str("path.workflowId", workflow_id), **fields)


def resume_request(workflow_id: str, body: Mapping[str, object]) -> ResumeRequest:
    """A ``ResumeWorkflowInputBody`` (queueName)."""
    fields = body_fields(body, RESUME_BODY)
    return ResumeRequest(workflow_id=as_str("path.workflowId", workflow_id), **fields)


FORK_BODY: Spec = {
    "startStep": field("start_step", int_between(0, INT32_MAX), INT32),
    "newWorkflowId": field("new_workflow_id", as_str),
    "appVersion": field("application_version", as_str),
    "queueName": field("queue_name", as_str),
    "queuePartitionKey": field("queue_partition_key", as_str),
}


def fork_request(workflow_id: str, body: Mapping[str, object]) -> ForkWorkflowRequest:
    """A ``ForkWorkflowInputBody``. Without ``startStep`` the fork runs from the beginning (0: no step of
    the original is kept, in the Python SDK, which numbers steps from 1, and the TypeScript one, from 0)."""
    fields = body_fields(body, FORK_BODY)
    fields.setdefault("start_step", 0)
    return ForkWorkflowRequest(
        body=build(ForkWorkflowBody, workflow_id=as_str("path.workflowId", workflow_id), **fields)
    )


_GZIP_MAGIC = b"\x1f\x8b"


def import_request(body: Mapping[str, object]) -> ImportWorkflowRequest:
    """An ``ImportWorkflowInputBody`` (serializedWorkflow, from an export of the same SDK language)."""
    require(body, "serializedWorkflow")
    fields = body_fields(body, IMPORT_BODY)
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
    require(body, "workflowIds")
    ids = STRINGS("body.workflowIds", body["workflowIds"])
    if not ids:
        raise invalid("body.workflowIds", "must name at least one workflow", body["workflowIds"])
    return ids


def bulk_cancel_request(body: Mapping[str, object]) -> CancelRequest:
    """A ``BulkCancelInputBody`` (workflowIds, cancelChildren)."""
    ids = _workflow_ids(body)
    fields = body_fields(body, BULK_CANCEL_BODY)
    fields["workflow_ids"] = ids
    return CancelRequest(**fields)


def bulk_resume_request(body: Mapping[str, object]) -> ResumeRequest:
    """A ``BulkResumeInputBody`` (workflowIds, queueName)."""
    ids = _workflow_ids(body)
    fields = body_fields(body, BULK_RESUME_BODY)
    fields["workflow_ids"] = ids
    return ResumeRequest(**fields)


def bulk_delete_request(body: Mapping[str, object]) -> DeleteRequest:
    """A ``BulkDeleteInputBody`` (workflowIds, deleteChildren)."""
    ids = _workflow_ids(body)
    fields = body_fields(body, BULK_DELETE_BODY)
    fields["workflow_ids"] = ids
    return DeleteRequest(**fields)


BULK_FORK_BODY: Spec = {
    "workflowIds": _IDS,
    "appVersion": field("application_version", as_str),
    "queueName": field("queue_name", as_str),
    "queuePartitionKey": field("queue_partition_key", as_str),
    "fromLastFailure": field("from_last_failure", as_bool),
    "fromLastStep": field("from_last_step", as_bool),
    "fromStep": field("from_step", int_between(0, INT32_MAX), INT32),
    "fromStepName": field("from_step_name", as_str),
}


def bulk_fork_from_failure_request(body: Mapping[str, object]) -> ForkFromFailureRequest:
    """A ``BulkForkFromFailureBody``: exactly one of fromLastFailure, fromLastStep, fromStep, fromStepName."""
    ids = _workflow_ids(body)
    fields = body_fields(body, BULK_FORK_BODY)
    fields["workflow_ids"] = ids
    modes = [fields.get("from_last_failure", False), fields.get("from_last_step", False),
             "from_step" in fields, "from_step_name" in fields]
    if sum(bool(m) for m in modes) != 1:
        raise invalid("body", "set exactly one of fromLastFailure, fromLastStep, fromStep and fromStepName",
                      None)
    return ForkFromFailureRequest(body=build(ForkFromFailureBody, **fields))


# -- queues, schedules, versions, metrics

LIST_SCHEDULES_QUERY: Spec = {
    # Schedule statuses are not an enforced enum (the reference: unrecognised values match nothing).
    "status": field("status", as_str),
    "workflowName": field("workflow_name", as_str),
    "scheduleNamePrefix": field("schedule_name_prefix", as_str),
    "loadContext": field("load_context", as_bool),
}


def list_schedules_request(args: Mapping[str, str]) -> ListSchedulesRequest:
    return ListSchedulesRequest(body=build(ListSchedulesBody, **query_fields(args, LIST_SCHEDULES_QUERY)))


def schedule_name(name: str) -> str:
    return as_str("path.scheduleName", name)


def queue_name(name: str) -> str:
    return as_str("path.queueName", name)


def backfill_request(name: str, body: Mapping[str, object]) -> BackfillScheduleRequest:
    """A ``BackfillInputBody`` (startTime, endTime: RFC 3339, start before end)."""
    require(body, "startTime", "endTime")
    body_fields(body, BACKFILL_BODY)
    start, end = parse_time("body.startTime", body["startTime"]), parse_time("body.endTime", body["endTime"])
    check_window(start, end, ("startTime", "endTime"), "body")
    return BackfillScheduleRequest(schedule_name=schedule_name(name), start=_wire_time(start),
                                            end=_wire_time(end))


def latest_version_name(body: Mapping[str, object]) -> str:
    """A ``PatchLatestVersionInputBody``'s versionName."""
    require(body, "versionName")
    return body_fields(body, LATEST_VERSION_BODY)["version_name"]


def metrics_window(args: Mapping[str, str]) -> tuple[datetime, datetime]:
    """``GET .../metrics`` startTime and endTime (both required, RFC 3339, start before end)."""
    for name in ("startTime", "endTime"):
        if not args.get(name):
            raise invalid(f"query.{name}", "is required", None)
    start, end = parse_time("query.startTime", args["startTime"]), parse_time("query.endTime", args["endTime"])
    check_window(start, end, ("startTime", "endTime"), "query")
    return start, end


def metrics_request(window: tuple[datetime, datetime]) -> GetMetricsRequest:
    start, end = window
    return GetMetricsRequest(start_time=_wire_time(start), end_time=_wire_time(end))


# -- the raw passthrough

def raw_request(body: Mapping[str, Any]) -> RawRequest:
    """``{"type", ...fields}`` as a RawRequest; Relay sets the request id."""
    require(body, "type")
    message_type = as_str("body.type", body["type"])
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
