"""THE translation between the executor wire (wire/protocol.py) and the Conductor API v2 schemas.

Out: wire records, as the SDKs send them (``WorkflowUUID``, ``started_at_epoch_ms``, ...), become the v2
schemas of the reference document (``Workflow``, ``Step``, ``Queue``, ``Schedule``, ``ApplicationVersion``,
``WorkflowAggregate``, ``StepAggregate``, ``Event``, ``Notification``, ``StreamEntry``, ``Metric``):
camelCase keys, RFC 3339 UTC times (the SDKs send epoch milliseconds, as numbers or numeric strings, and a
few ISO 8601 strings), integers where the schema says integer.

In: v2 query parameters and JSON bodies become typed protocol requests. Everything is checked here, before
any frame is sent: wrong types, unknown properties, unknown workflow statuses, limits out of range and bad
timestamps raise ``ApiError`` 422 naming the location (``query.limit``, ``body.status[1]``).

Aggregate groups are keyed like the Workflow/Step fields they group by (``workflowName``, ``appVersion``,
``stepName``, ``timeBucket``, ...), not with the SDKs' column names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from relay.web.problems import invalid
from relay.wire import protocol

WORKFLOW_STATUSES = frozenset(
    {"ENQUEUED", "DELAYED", "PENDING", "SUCCESS", "ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED", "CANCELLED"}
)
MAX_LIMIT = 10_000
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# ------------------------------------------------------------------------------------------------ times

_DIGITS = re.compile(r"^-?\d+(\.\d+)?$")


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, e.g. ``2024-04-05T19:34:38.901Z``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def time_from_wire(value: Any) -> str | None:
    """An SDK time (epoch ms as int, float or numeric string; or an ISO 8601 string) as RFC 3339; None
    for null or anything unreadable (a wrong time is not worth failing a whole listing for)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, int | float):
            return format_time(datetime.fromtimestamp(float(value) / 1000, UTC))
        if isinstance(value, str):
            text = value.strip()
            if _DIGITS.match(text):
                return format_time(datetime.fromtimestamp(float(text) / 1000, UTC))
            return format_time(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except (ValueError, OverflowError, OSError):
        return None
    return None


def int_from_wire(value: Any) -> int | None:
    """An SDK integer (a number or a numeric string, as the Python SDK sends most of them) or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(float(value)) if isinstance(value, float | str) else None
    except (ValueError, OverflowError):
        return None


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_time(location: str, value: Any) -> datetime:
    """An RFC 3339 date-time from the caller (an offset or ``Z`` is required), or 422 at ``location``."""
    if not isinstance(value, str):
        raise invalid(location, "must be an RFC 3339 date-time string", value)
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise invalid(location, "must be an RFC 3339 date-time, e.g. 2024-01-01T00:00:00Z", value) from None
    if "T" not in value.upper() or moment.tzinfo is None:
        raise invalid(location, "must be an RFC 3339 date-time with a time zone, e.g. 2024-01-01T00:00:00Z",
                      value)
    return moment


def _wire_time(moment: datetime) -> str:
    # ISO 8601 with an explicit +00:00: Python's fromisoformat before 3.11 refuses "Z", JavaScript takes both.
    return moment.astimezone(UTC).isoformat()


# ------------------------------------------------------------------------------------ out: wire → v2


def workflow(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A workflow status record (list_workflows, get_workflow) as a v2 ``Workflow``."""
    created = time_from_wire(rec.get("CreatedAt"))
    updated = time_from_wire(rec.get("UpdatedAt"))
    return {
        "workflowId": str(rec.get("WorkflowUUID") or ""),
        "status": str(rec.get("Status") or ""),
        "workflowName": _str(rec.get("WorkflowName")),
        "workflowClass": _str(rec.get("WorkflowClassName")),
        "workflowConfig": _str(rec.get("WorkflowConfigName")),
        "user": _str(rec.get("AuthenticatedUser")),
        "assumedRole": _str(rec.get("AssumedRole")),
        "roles": _str(rec.get("AuthenticatedRoles")),
        "input": _str(rec.get("Input")),
        "output": _str(rec.get("Output")),
        "error": _str(rec.get("Error")),
        # Both are required strings in the schema; an SDK always sends them, the fallbacks keep it valid.
        "createdAt": created or updated or format_time(datetime.fromtimestamp(0, UTC)),
        "updatedAt": updated or created or format_time(datetime.fromtimestamp(0, UTC)),
        "queueName": _str(rec.get("QueueName")),
        "appVersion": _str(rec.get("ApplicationVersion")),
        "executorId": _str(rec.get("ExecutorID")),
        "timeoutMs": int_from_wire(rec.get("WorkflowTimeoutMS")),
        "deadline": time_from_wire(rec.get("WorkflowDeadlineEpochMS")),
        "deduplicationId": _str(rec.get("DeduplicationID")),
        "priority": int_from_wire(rec.get("Priority")) or 0,
        "queuePartitionKey": _str(rec.get("QueuePartitionKey")),
        "forkedFrom": _str(rec.get("ForkedFrom")),
        "wasForkedFrom": bool(rec.get("WasForkedFrom") or False),
        "parentWorkflowId": _str(rec.get("ParentWorkflowID")),
        "dequeuedAt": time_from_wire(rec.get("DequeuedAt")),
        "delayUntil": time_from_wire(rec.get("DelayUntilEpochMS")),
        "completedAt": time_from_wire(rec.get("CompletedAt")),
        "attributes": _str(rec.get("Attributes")),
        "scheduleName": _str(rec.get("ScheduleName")),
        "applicationName": _str(rec.get("ApplicationName")),
    }


def step(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A step record (list_steps) as a v2 ``Step``."""
    return {
        "stepId": int_from_wire(rec.get("function_id")) or 0,
        "stepName": str(rec.get("function_name") or ""),
        "output": _str(rec.get("output")),
        "error": _str(rec.get("error")),
        "childWorkflowId": _str(rec.get("child_workflow_id")),
        "startedAt": time_from_wire(rec.get("started_at_epoch_ms")),
        "completedAt": time_from_wire(rec.get("completed_at_epoch_ms")),
    }


def queue(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A queue record (list_queues, get_queue) as a v2 ``Queue``."""
    return {
        "name": str(rec.get("name") or ""),
        "concurrency": int_from_wire(rec.get("concurrency")),
        "workerConcurrency": int_from_wire(rec.get("worker_concurrency")),
        "rateLimitMax": int_from_wire(rec.get("rate_limit_max")),
        "rateLimitPeriodSecs": _float(rec.get("rate_limit_period_sec")),
        "priorityEnabled": bool(rec.get("priority_enabled") or False),
        "partitionQueue": bool(rec.get("partition_queue") or False),
        "pollingIntervalSecs": _float(rec.get("polling_interval_sec")) or 1.0,
        "applicationName": _str(rec.get("application_name")),
    }


def schedule(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A schedule record (list_schedules, get_schedule) as a v2 ``Schedule``."""
    return {
        "scheduleId": str(rec.get("schedule_id") or ""),
        "scheduleName": str(rec.get("schedule_name") or ""),
        "workflowName": str(rec.get("workflow_name") or ""),
        "workflowClass": _str(rec.get("workflow_class_name")),
        "cronExpression": str(rec.get("schedule") or ""),
        "status": str(rec.get("status") or ""),
        "context": _str(rec.get("context")),
        "lastFiredAt": time_from_wire(rec.get("last_fired_at")),
        "automaticBackfill": bool(rec.get("automatic_backfill") or False),
        "cronTimezone": _str(rec.get("cron_timezone")),
        "applicationName": _str(rec.get("application_name")),
    }


def application_version(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A version record (list_application_versions) as a v2 ``ApplicationVersion``."""
    created = time_from_wire(rec.get("created_at"))
    stamped = time_from_wire(rec.get("version_timestamp"))
    epoch = format_time(datetime.fromtimestamp(0, UTC))
    return {
        "versionId": str(rec.get("version_id") or ""),
        "versionName": str(rec.get("version_name") or ""),
        "versionTimestamp": stamped or created or epoch,
        "createdAt": created or stamped or epoch,
    }


def application_versions(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Versions, latest (largest version timestamp) first, as the SDKs order them."""
    ordered = sorted(records, key=lambda r: int_from_wire(r.get("version_timestamp")) or 0, reverse=True)
    return [application_version(r) for r in ordered]


_WORKFLOW_GROUP_KEYS = {
    "status": "status",
    "name": "workflowName",
    "queue_name": "queueName",
    "executor_id": "executorId",
    "application_version": "appVersion",
    "application_name": "applicationName",
    "time_bucket": "timeBucket",
}
_STEP_GROUP_KEYS = {"function_name": "stepName", "status": "status", "time_bucket": "timeBucket"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _group(raw: Any, keys: Mapping[str, str]) -> dict[str, str | None]:
    group: dict[str, str | None] = {}
    for key, value in (raw or {}).items() if isinstance(raw, Mapping) else ():
        name = keys.get(key, _camel(str(key)))
        if value is None:
            group[name] = None
        elif key == "time_bucket":
            group[name] = time_from_wire(value) or str(value)
        else:
            group[name] = str(value)
    return group


def _drop_none(out: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if v is not None}


def workflow_aggregate(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A get_workflow_aggregates row as a v2 ``WorkflowAggregate`` (unselected measures left out)."""
    return _drop_none({
        "group": _group(rec.get("group"), _WORKFLOW_GROUP_KEYS),
        "count": int_from_wire(rec.get("count")),
        "minCreatedAt": time_from_wire(rec.get("min_created_at")),
        "maxQueueWaitMs": int_from_wire(rec.get("max_queue_wait_ms")),
        "maxTotalLatencyMs": int_from_wire(rec.get("max_total_latency_ms")),
    })


def step_aggregate(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A get_step_aggregates row as a v2 ``StepAggregate``."""
    return _drop_none({
        "group": _group(rec.get("group"), _STEP_GROUP_KEYS),
        "count": int_from_wire(rec.get("count")),
        "maxDurationMs": int_from_wire(rec.get("max_duration_ms")),
    })


def event(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A workflow event ``{key, value}`` as a v2 ``Event``."""
    return {"key": str(rec.get("key") or ""), "value": str(rec.get("value"))}


def notification(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A notification ``{topic, message, created_at_epoch_ms, consumed}`` as a v2 ``Notification``."""
    return {
        "topic": _str(rec.get("topic")),
        "message": str(rec.get("message")),
        "createdAt": time_from_wire(rec.get("created_at_epoch_ms")) or format_time(datetime.fromtimestamp(0, UTC)),
        "consumed": bool(rec.get("consumed") or False),
    }


def stream_entry(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A stream ``{key, values}`` as a v2 ``StreamEntry``."""
    values = rec.get("values")
    return {"key": str(rec.get("key") or ""), "values": [str(v) for v in values] if isinstance(values, list) else []}


def metric(rec: Mapping[str, Any], app_id: str, window: tuple[datetime, datetime]) -> dict[str, Any]:
    """A get_metrics entry ``{metric_type, metric_name, value}`` as a v2 ``Metric``: one bucket, the whole
    requested window (``timeBucket`` its start, ``granularity`` its length in seconds)."""
    start, end = window
    return {
        "appId": app_id,
        "metricType": str(rec.get("metric_type") or ""),
        "metricName": str(rec.get("metric_name") or ""),
        "granularity": min(INT32_MAX, max(0, int((end - start).total_seconds()))),
        "timeBucket": format_time(start),
        "value": int_from_wire(rec.get("value")) or 0,
    }


# -------------------------------------------------------------------------------- in: v2 → requests

# A converter takes (location, value) and returns the wire value, or raises a 422 naming the location.
Converter = Callable[[str, Any], Any]


def _boolean(location: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise invalid(location, "must be a boolean", value)
    return value


def _integer(minimum: int, maximum: int) -> Converter:
    def convert(location: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(location, "must be an integer", value)
        if not minimum <= value <= maximum:
            raise invalid(location, f"must be between {minimum} and {maximum}", value)
        return value

    return convert


def _string(location: str, value: Any) -> str:
    if not isinstance(value, str):
        raise invalid(location, "must be a string", value)
    if not value:
        raise invalid(location, "must not be empty", value)
    return value


def _status(location: str, value: Any) -> str:
    text = _string(location, value)
    if text not in WORKFLOW_STATUSES:
        raise invalid(location, f"must be one of {', '.join(sorted(WORKFLOW_STATUSES))}", value)
    return text


def _list_of(item: Converter) -> Converter:
    """An array of items (or null). An empty array, like null, means no filter."""

    def convert(location: str, value: Any) -> list[Any] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            raise invalid(location, "must be an array", value)
        return [item(f"{location}[{i}]", v) for i, v in enumerate(value)] or None

    return convert


def _time(location: str, value: Any) -> str:
    return _wire_time(parse_time(location, value))


def _object(location: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(location, "must be an object", value)
    return value


_LIMIT = _integer(1, MAX_LIMIT)
_OFFSET = _integer(0, INT64_MAX)
_STRINGS = _list_of(_string)
_STATUSES = _list_of(_status)

Spec = Mapping[str, tuple[str, Converter]]  # v2 name → (wire name, converter)


def _fields(body: Mapping[str, Any], spec: Spec, where: str = "body") -> dict[str, Any]:
    """Check a JSON body against ``spec``; the wire fields it sets (unset and empty filters left out)."""
    out: dict[str, Any] = {}
    for name, value in body.items():
        if name == "$schema":
            continue
        if name not in spec:
            raise invalid(f"{where}.{name}", "unexpected property", value)
        wire, convert = spec[name]
        converted = convert(f"{where}.{name}", value)
        if converted is not None:
            out[wire] = converted
    return out


def _query_value(location: str, convert: Converter, raw: str) -> Any:
    """Query strings carry text: read booleans and integers from it, then convert as a body value."""
    value: Any = raw
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
    out: dict[str, Any] = {}
    for name, (wire, convert) in spec.items():
        raw = args.get(name)
        if raw is None or raw == "":
            continue
        out[wire] = _query_value(f"query.{name}", convert, raw)
    return out


def _require(body: Mapping[str, Any], *names: str) -> None:
    for name in names:
        if body.get(name) is None:
            raise invalid(f"body.{name}", "is required", None)


def _build(factory: Callable[..., Any], **fields: Any) -> Any:
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
    "status": ("status", _status),
    "workflowName": ("workflow_name", _string),
    "limit": ("limit", _LIMIT),
    "offset": ("offset", _OFFSET),
    "sortDesc": ("sort_desc", _boolean),
    "loadInput": ("load_input", _boolean),
    "loadOutput": ("load_output", _boolean),
}

_FILTERS: Spec = {
    "workflowName": ("workflow_name", _STRINGS),
    "status": ("status", _STATUSES),
    "user": ("authenticated_user", _STRINGS),
    "appVersion": ("application_version", _STRINGS),
    "executorId": ("executor_id", _STRINGS),
    "queueName": ("queue_name", _STRINGS),
    "workflowIdPrefix": ("workflow_id_prefix", _STRINGS),
    "forkedFrom": ("forked_from", _STRINGS),
    "parentWorkflowId": ("parent_workflow_id", _STRINGS),
    "scheduleName": ("schedule_name", _STRINGS),
    "startTime": ("start_time", _time),
    "endTime": ("end_time", _time),
    "completedAfter": ("completed_after", _time),
    "completedBefore": ("completed_before", _time),
    "dequeuedAfter": ("dequeued_after", _time),
    "dequeuedBefore": ("dequeued_before", _time),
    "wasForkedFrom": ("was_forked_from", _boolean),
    "hasParent": ("has_parent", _boolean),
    "attributes": ("attributes", _object),
}

SEARCH_BODY: Spec = {
    **_FILTERS,
    "workflowIds": ("workflow_uuids", _STRINGS),
    "limit": ("limit", _LIMIT),
    "offset": ("offset", _OFFSET),
    "sortDesc": ("sort_desc", _boolean),
    "loadInput": ("load_input", _boolean),
    "loadOutput": ("load_output", _boolean),
    "queuesOnly": ("queues_only", _boolean),
}

WORKFLOW_AGGREGATES_BODY: Spec = {
    **{k: v for k, v in _FILTERS.items() if k not in ("workflowName", "appVersion", "user")},
    "workflowName": ("name", _STRINGS),
    "appVersion": ("app_version", _STRINGS),
    "user": ("user", _STRINGS),
    "workflowIds": ("workflow_ids", _STRINGS),
    "groupByStatus": ("group_by_status", _boolean),
    "groupByWorkflowName": ("group_by_name", _boolean),
    "groupByQueueName": ("group_by_queue_name", _boolean),
    "groupByExecutorId": ("group_by_executor_id", _boolean),
    "groupByAppVersion": ("group_by_application_version", _boolean),
    "groupByApplicationName": ("group_by_application_name", _boolean),
    "selectCount": ("select_count", _boolean),
    "selectMinCreatedAt": ("select_min_created_at", _boolean),
    "selectMaxQueueWaitMs": ("select_max_queue_wait_ms", _boolean),
    "selectMaxTotalLatencyMs": ("select_max_total_latency_ms", _boolean),
    "timeBucketSizeMs": ("time_bucket_size_ms", _integer(1, INT64_MAX)),
}

STEP_AGGREGATES_BODY: Spec = {
    "groupByFunctionName": ("group_by_function_name", _boolean),
    "groupByStatus": ("group_by_status", _boolean),
    "selectCount": ("select_count", _boolean),
    "selectMaxDurationMs": ("select_max_duration_ms", _boolean),
    "timeBucketSizeMs": ("time_bucket_size_ms", _integer(1, INT64_MAX)),
    # Step statuses are not an enforced enum (the reference: unrecognised values match nothing).
    "status": ("status", _STRINGS),
    "stepName": ("function_name", _STRINGS),
    "workflowIdPrefix": ("workflow_id_prefix", _STRINGS),
    "completedAfter": ("completed_after", _time),
    "completedBefore": ("completed_before", _time),
}


def list_workflows_request(args: Mapping[str, str]) -> protocol.ListWorkflowsRequest:
    """``GET .../workflows`` query parameters (status, workflowName, limit, offset, sortDesc, loadInput,
    loadOutput) as list_workflows. Inputs and outputs only when asked for."""
    return protocol.ListWorkflowsRequest(body=_build(protocol.ListWorkflowsBody, **_query(args, LIST_WORKFLOWS_QUERY)))


def search_workflows_request(body: Mapping[str, Any]) -> protocol.ListWorkflowsRequest:
    """A ``WorkflowSearchBody`` as list_workflows."""
    fields = _fields(body, SEARCH_BODY)
    return protocol.ListWorkflowsRequest(body=_build(protocol.ListWorkflowsBody, **fields))


def workflow_aggregates_request(body: Mapping[str, Any]) -> protocol.GetWorkflowAggregatesRequest:
    """A ``WorkflowAggregatesBody`` as get_workflow_aggregates; something to group by is required."""
    fields = _fields(body, WORKFLOW_AGGREGATES_BODY)
    groups = [f for f in protocol.GetWorkflowAggregatesBody.FLAGS if f.startswith("group_by_")]
    if not any(fields.get(f) for f in groups) and "time_bucket_size_ms" not in fields:
        raise invalid("body", "set at least one groupBy* flag or timeBucketSizeMs", None)
    return protocol.GetWorkflowAggregatesRequest(body=_build(protocol.GetWorkflowAggregatesBody, **fields))


def step_aggregates_request(body: Mapping[str, Any]) -> protocol.GetStepAggregatesRequest:
    """A ``StepAggregatesBody`` as get_step_aggregates; something to group by is required."""
    fields = _fields(body, STEP_AGGREGATES_BODY)
    if not (fields.get("group_by_function_name") or fields.get("group_by_status")
            or "time_bucket_size_ms" in fields):
        raise invalid("body", "set groupByFunctionName, groupByStatus or timeBucketSizeMs", None)
    return protocol.GetStepAggregatesRequest(body=_build(protocol.GetStepAggregatesBody, **fields))


def get_workflow_request(workflow_id: str, *, load: bool = True) -> protocol.GetWorkflowRequest:
    return protocol.GetWorkflowRequest(workflow_id=_string("path.workflowId", workflow_id),
                                       load_input=load, load_output=load)


def list_steps_request(workflow_id: str, args: Mapping[str, str]) -> protocol.ListStepsRequest:
    fields = _query(args, {"limit": ("limit", _LIMIT), "offset": ("offset", _OFFSET)})
    return protocol.ListStepsRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


def export_request(workflow_id: str, args: Mapping[str, str]) -> protocol.ExportWorkflowRequest:
    fields = _query(args, {"exportChildren": ("export_children", _boolean)})
    return protocol.ExportWorkflowRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


def delete_request(workflow_id: str, args: Mapping[str, str]) -> protocol.DeleteRequest:
    fields = _query(args, {"deleteChildren": ("delete_children", _boolean)})
    return protocol.DeleteRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


def cancel_request(workflow_id: str, body: Mapping[str, Any]) -> protocol.CancelRequest:
    """A ``CancelWorkflowInputBody`` (cancelChildren)."""
    fields = _fields(body, {"cancelChildren": ("cancel_children", _boolean)})
    return protocol.CancelRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


def resume_request(workflow_id: str, body: Mapping[str, Any]) -> protocol.ResumeRequest:
    """A ``ResumeWorkflowInputBody`` (queueName)."""
    fields = _fields(body, {"queueName": ("queue_name", _string)})
    return protocol.ResumeRequest(workflow_id=_string("path.workflowId", workflow_id), **fields)


FORK_BODY: Spec = {
    "startStep": ("start_step", _integer(0, INT32_MAX)),
    "newWorkflowId": ("new_workflow_id", _string),
    "appVersion": ("application_version", _string),
    "queueName": ("queue_name", _string),
    "queuePartitionKey": ("queue_partition_key", _string),
}


def fork_request(workflow_id: str, body: Mapping[str, Any]) -> protocol.ForkWorkflowRequest:
    """A ``ForkWorkflowInputBody``. Without ``startStep`` the fork runs from the beginning (0: no step of
    the original is kept, in the Python SDK, which numbers steps from 1, and the TypeScript one, from 0)."""
    fields = _fields(body, FORK_BODY)
    fields.setdefault("start_step", 0)
    return protocol.ForkWorkflowRequest(
        body=_build(protocol.ForkWorkflowBody, workflow_id=_string("path.workflowId", workflow_id), **fields)
    )


def import_request(body: Mapping[str, Any]) -> protocol.ImportWorkflowRequest:
    """An ``ImportWorkflowInputBody`` (serializedWorkflow, from an export of the same SDK language)."""
    _require(body, "serializedWorkflow")
    fields = _fields(body, {"serializedWorkflow": ("serialized_workflow", _string)})
    return protocol.ImportWorkflowRequest(**fields)


def _workflow_ids(body: Mapping[str, Any]) -> list[str]:
    _require(body, "workflowIds")
    ids = _STRINGS("body.workflowIds", body["workflowIds"])
    if not ids:
        raise invalid("body.workflowIds", "must name at least one workflow", body["workflowIds"])
    return ids


def bulk_cancel_request(body: Mapping[str, Any]) -> protocol.CancelRequest:
    """A ``BulkCancelInputBody`` (workflowIds, cancelChildren)."""
    ids = _workflow_ids(body)
    fields = _fields(body, {"workflowIds": ("workflow_ids", _STRINGS),
                            "cancelChildren": ("cancel_children", _boolean)})
    fields["workflow_ids"] = ids
    return protocol.CancelRequest(**fields)


def bulk_resume_request(body: Mapping[str, Any]) -> protocol.ResumeRequest:
    """A ``BulkResumeInputBody`` (workflowIds, queueName)."""
    ids = _workflow_ids(body)
    fields = _fields(body, {"workflowIds": ("workflow_ids", _STRINGS), "queueName": ("queue_name", _string)})
    fields["workflow_ids"] = ids
    return protocol.ResumeRequest(**fields)


def bulk_delete_request(body: Mapping[str, Any]) -> protocol.DeleteRequest:
    """A ``BulkDeleteInputBody`` (workflowIds, deleteChildren)."""
    ids = _workflow_ids(body)
    fields = _fields(body, {"workflowIds": ("workflow_ids", _STRINGS),
                            "deleteChildren": ("delete_children", _boolean)})
    fields["workflow_ids"] = ids
    return protocol.DeleteRequest(**fields)


BULK_FORK_BODY: Spec = {
    "workflowIds": ("workflow_ids", _STRINGS),
    "appVersion": ("application_version", _string),
    "queueName": ("queue_name", _string),
    "queuePartitionKey": ("queue_partition_key", _string),
    "fromLastFailure": ("from_last_failure", _boolean),
    "fromLastStep": ("from_last_step", _boolean),
    "fromStep": ("from_step", _integer(0, INT32_MAX)),
    "fromStepName": ("from_step_name", _string),
}


def bulk_fork_from_failure_request(body: Mapping[str, Any]) -> protocol.ForkFromFailureRequest:
    """A ``BulkForkFromFailureBody``: exactly one of fromLastFailure, fromLastStep, fromStep, fromStepName."""
    ids = _workflow_ids(body)
    fields = _fields(body, BULK_FORK_BODY)
    fields["workflow_ids"] = ids
    modes = [fields.get("from_last_failure", False), fields.get("from_last_step", False),
             "from_step" in fields, "from_step_name" in fields]
    if sum(bool(m) for m in modes) != 1:
        raise invalid("body", "set exactly one of fromLastFailure, fromLastStep, fromStep and fromStepName",
                      None)
    return protocol.ForkFromFailureRequest(body=_build(protocol.ForkFromFailureBody, **fields))


# -- queues, schedules, versions, metrics

LIST_SCHEDULES_QUERY: Spec = {
    # Schedule statuses are not an enforced enum (the reference: unrecognised values match nothing).
    "status": ("status", _string),
    "workflowName": ("workflow_name", _string),
    "scheduleNamePrefix": ("schedule_name_prefix", _string),
    "loadContext": ("load_context", _boolean),
}


def list_schedules_request(args: Mapping[str, str]) -> protocol.ListSchedulesRequest:
    return protocol.ListSchedulesRequest(body=_build(protocol.ListSchedulesBody, **_query(args, LIST_SCHEDULES_QUERY)))


def schedule_name(name: str) -> str:
    return _string("path.scheduleName", name)


def queue_name(name: str) -> str:
    return _string("path.queueName", name)


def backfill_request(name: str, body: Mapping[str, Any]) -> protocol.BackfillScheduleRequest:
    """A ``BackfillInputBody`` (startTime, endTime: RFC 3339, start before end)."""
    _require(body, "startTime", "endTime")
    _fields(body, {"startTime": ("start", _time), "endTime": ("end", _time)})
    start, end = parse_time("body.startTime", body["startTime"]), parse_time("body.endTime", body["endTime"])
    _window(start, end, ("startTime", "endTime"), "body")
    return protocol.BackfillScheduleRequest(schedule_name=schedule_name(name), start=_wire_time(start),
                                            end=_wire_time(end))


def latest_version_name(body: Mapping[str, Any]) -> str:
    """A ``PatchLatestVersionInputBody``'s versionName."""
    _require(body, "versionName")
    return _fields(body, {"versionName": ("version_name", _string)})["version_name"]


def metrics_window(args: Mapping[str, str]) -> tuple[datetime, datetime]:
    """``GET .../metrics`` startTime and endTime (both required, RFC 3339, start before end)."""
    for name in ("startTime", "endTime"):
        if not args.get(name):
            raise invalid(f"query.{name}", "is required", None)
    start, end = parse_time("query.startTime", args["startTime"]), parse_time("query.endTime", args["endTime"])
    _window(start, end, ("startTime", "endTime"), "query")
    return start, end


def metrics_request(window: tuple[datetime, datetime]) -> protocol.GetMetricsRequest:
    start, end = window
    return protocol.GetMetricsRequest(start_time=_wire_time(start), end_time=_wire_time(end))


# -- the raw passthrough

def raw_request(body: Mapping[str, Any]) -> protocol.RawRequest:
    """``{"type", ...fields}`` as a RawRequest; Relay sets the request id."""
    _require(body, "type")
    message_type = _string("body.type", body["type"])
    if "request_id" in body:
        raise invalid("body.request_id", "is set by Relay", body["request_id"])
    fields = {k: v for k, v in body.items() if k != "type"}
    return protocol.RawRequest(type=message_type, fields=fields)


def raw_response(response: protocol.Response) -> dict[str, Any]:
    """A decoded response as the frame's JSON object: the envelope and every field the executor sent
    (for types Relay models, the fields it models)."""
    if isinstance(response, protocol.RawResponse):
        return {"type": response.type, "request_id": response.request_id,
                "error_message": response.error_message, **response.fields}
    out = {"type": response.type, "request_id": response.request_id, "error_message": response.error_message}
    for name, _kind, _required in response.SPEC:
        out[name] = getattr(response, name)
    return out
