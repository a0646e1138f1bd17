"""Out: wire records, as the SDKs send them (``WorkflowUUID``, ``started_at_epoch_ms``, ...), become the v2
schemas of the reference document (``Workflow``, ``Step``, ``Queue``, ``Schedule``, ``ApplicationVersion``,
``WorkflowAggregate``, ``StepAggregate``, ``Event``, ``Notification``, ``StreamEntry``, ``Metric``): camelCase
keys, RFC 3339 UTC times, integers where the schema says integer. Aggregate groups are keyed like the
Workflow/Step fields they group by (``workflowName``, ``appVersion``, ``stepName``, ``timeBucket``, ...)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from relay.web.shapes.json_schema import BOOL, INT32, NSTR, NTIME, STR, STRS, TIME, Schema, all_required, null, t
from relay.web.shapes.values import (
    INT32_MAX,
    _float,
    _str,
    format_time,
    int_from_wire,
    time_from_wire,
)
from relay.wire.json_types import JSON, JSONObject

# ------------------------------------------------------------------------------------ out: wire → v2


class Out(NamedTuple):
    """How one v2 property is read from a wire record, and its JSON Schema."""

    schema: Schema
    read: Callable[[Any], Any]


def _epoch() -> str:
    return format_time(datetime.fromtimestamp(0, UTC))


STRING = Out(STR, lambda v: str(v or ""))
NULLABLE_STRING = Out(NSTR, _str)
NULLABLE_TIME = Out(NTIME, time_from_wire)
FLAG = Out(BOOL, lambda v: bool(v or False))
COUNT32 = Out(INT32, lambda v: int_from_wire(v) or 0)
NULLABLE_INT32 = Out(null("integer", "int32"), int_from_wire)
NULLABLE_INT64 = Out(null("integer", "int64"), int_from_wire)
NULLABLE_DOUBLE = Out(null("number", "double"), _float)


@dataclass(frozen=True)
class RecordShape:
    """A v2 schema declared once: per property, the wire key it is read from (None: the whole record) and
    how. `read` translates a record; `schema` is its /openapi.json component (every property required)."""

    fields: Mapping[str, tuple[str | None, Out]]

    def read(self, rec: Mapping[str, JSON]) -> JSONObject:
        return {name: out.read(rec if key is None else rec.get(key)) for name, (key, out) in self.fields.items()}

    def schema(self) -> Schema:
        return all_required({name: out.schema for name, (_, out) in self.fields.items()})


def _first_time(*keys: str) -> Callable[[Mapping[str, JSON]], str]:
    """A required time: the first of these wire fields the record has. An SDK always sends them; the fallbacks
    (the other field, then the epoch) keep the answer valid against the schema."""

    def read(rec: Mapping[str, JSON]) -> str:
        return next((found for key in keys if (found := time_from_wire(rec.get(key)))), None) or _epoch()

    return read


# A workflow status record (list_workflows, get_workflow) as a v2 ``Workflow``.
WORKFLOW = RecordShape({
    "workflowId": ("WorkflowUUID", STRING), "status": ("Status", STRING),
    "workflowName": ("WorkflowName", NULLABLE_STRING), "workflowClass": ("WorkflowClassName", NULLABLE_STRING),
    "workflowConfig": ("WorkflowConfigName", NULLABLE_STRING), "user": ("AuthenticatedUser", NULLABLE_STRING),
    "assumedRole": ("AssumedRole", NULLABLE_STRING), "roles": ("AuthenticatedRoles", NULLABLE_STRING),
    "input": ("Input", NULLABLE_STRING), "output": ("Output", NULLABLE_STRING), "error": ("Error", NULLABLE_STRING),
    "createdAt": (None, Out(TIME, _first_time("CreatedAt", "UpdatedAt"))),
    "updatedAt": (None, Out(TIME, _first_time("UpdatedAt", "CreatedAt"))),
    "queueName": ("QueueName", NULLABLE_STRING), "appVersion": ("ApplicationVersion", NULLABLE_STRING),
    "executorId": ("ExecutorID", NULLABLE_STRING), "timeoutMs": ("WorkflowTimeoutMS", NULLABLE_INT64),
    "deadline": ("WorkflowDeadlineEpochMS", NULLABLE_TIME), "deduplicationId": ("DeduplicationID", NULLABLE_STRING),
    "priority": ("Priority", COUNT32), "queuePartitionKey": ("QueuePartitionKey", NULLABLE_STRING),
    "forkedFrom": ("ForkedFrom", NULLABLE_STRING), "wasForkedFrom": ("WasForkedFrom", FLAG),
    "parentWorkflowId": ("ParentWorkflowID", NULLABLE_STRING), "dequeuedAt": ("DequeuedAt", NULLABLE_TIME),
    "delayUntil": ("DelayUntilEpochMS", NULLABLE_TIME), "completedAt": ("CompletedAt", NULLABLE_TIME),
    "attributes": ("Attributes", NULLABLE_STRING), "scheduleName": ("ScheduleName", NULLABLE_STRING),
    "applicationName": ("ApplicationName", NULLABLE_STRING),
})

# A step record (list_steps) as a v2 ``Step``.
STEP = RecordShape({
    "stepId": ("function_id", COUNT32), "stepName": ("function_name", STRING), "output": ("output", NULLABLE_STRING),
    "error": ("error", NULLABLE_STRING), "childWorkflowId": ("child_workflow_id", NULLABLE_STRING),
    "startedAt": ("started_at_epoch_ms", NULLABLE_TIME), "completedAt": ("completed_at_epoch_ms", NULLABLE_TIME),
})

# A queue record (list_queues, get_queue) as a v2 ``Queue``.
QUEUE = RecordShape({
    "name": ("name", STRING), "concurrency": ("concurrency", NULLABLE_INT32),
    "workerConcurrency": ("worker_concurrency", NULLABLE_INT32), "rateLimitMax": ("rate_limit_max", NULLABLE_INT32),
    "rateLimitPeriodSecs": ("rate_limit_period_sec", NULLABLE_DOUBLE),
    "priorityEnabled": ("priority_enabled", FLAG), "partitionQueue": ("partition_queue", FLAG),
    "pollingIntervalSecs": ("polling_interval_sec", Out(t("number", "double"), lambda v: _float(v) or 1.0)),
    "applicationName": ("application_name", NULLABLE_STRING),
})

# A schedule record (list_schedules, get_schedule) as a v2 ``Schedule``.
SCHEDULE = RecordShape({
    "scheduleId": ("schedule_id", STRING), "scheduleName": ("schedule_name", STRING),
    "workflowName": ("workflow_name", STRING), "workflowClass": ("workflow_class_name", NULLABLE_STRING),
    "cronExpression": ("schedule", STRING), "status": ("status", STRING), "context": ("context", NULLABLE_STRING),
    "lastFiredAt": ("last_fired_at", NULLABLE_TIME), "automaticBackfill": ("automatic_backfill", FLAG),
    "cronTimezone": ("cron_timezone", NULLABLE_STRING), "applicationName": ("application_name", NULLABLE_STRING),
})

workflow = WORKFLOW.read
step = STEP.read
queue = QUEUE.read
schedule = SCHEDULE.read


def of_app(record: JSONObject, app: str) -> JSONObject:
    """Name the application a workflow, queue or schedule belongs to when the SDK leaves it out (Java 1.1 sends
    none): every record an executor of this app reports is the app's own."""
    if not record.get("applicationName"):
        record["applicationName"] = app
    return record


# A version record (list_application_versions) as a v2 ``ApplicationVersion``.
APPLICATION_VERSION = RecordShape({
    "versionId": ("version_id", STRING), "versionName": ("version_name", STRING),
    "versionTimestamp": (None, Out(TIME, _first_time("version_timestamp", "created_at"))),
    "createdAt": (None, Out(TIME, _first_time("created_at", "version_timestamp"))),
})
application_version = APPLICATION_VERSION.read


def application_versions(records: list[JSONObject]) -> list[JSONObject]:
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


def _group(raw: object, keys: Mapping[str, str]) -> dict[str, str | None]:
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


def _drop_none(out: JSONObject) -> JSONObject:
    return {k: v for k, v in out.items() if v is not None}


def workflow_aggregate(rec: Mapping[str, JSON]) -> JSONObject:
    """A get_workflow_aggregates row as a v2 ``WorkflowAggregate`` (unselected measures left out)."""
    return _drop_none({
        "group": _group(rec.get("group"), _WORKFLOW_GROUP_KEYS),
        "count": int_from_wire(rec.get("count")),
        "minCreatedAt": time_from_wire(rec.get("min_created_at")),
        "maxQueueWaitMs": int_from_wire(rec.get("max_queue_wait_ms")),
        "maxTotalLatencyMs": int_from_wire(rec.get("max_total_latency_ms")),
    })


def step_aggregate(rec: Mapping[str, JSON]) -> JSONObject:
    """A get_step_aggregates row as a v2 ``StepAggregate``."""
    return _drop_none({
        "group": _group(rec.get("group"), _STEP_GROUP_KEYS),
        "count": int_from_wire(rec.get("count")),
        "maxDurationMs": int_from_wire(rec.get("max_duration_ms")),
    })


def _strings(values: object) -> list[str]:
    return [str(v) for v in values] if isinstance(values, list) else []


# A workflow event ``{key, value}`` as a v2 ``Event``.
EVENT = RecordShape({"key": ("key", STRING), "value": ("value", Out(STR, str))})
# A notification ``{topic, message, created_at_epoch_ms, consumed}`` as a v2 ``Notification``.
NOTIFICATION = RecordShape({
    "topic": ("topic", NULLABLE_STRING), "message": ("message", Out(STR, str)),
    "createdAt": ("created_at_epoch_ms", Out(TIME, lambda v: time_from_wire(v) or _epoch())),
    "consumed": ("consumed", FLAG),
})
# A stream ``{key, values}`` as a v2 ``StreamEntry``.
STREAM_ENTRY = RecordShape({"key": ("key", STRING), "values": ("values", Out(STRS, _strings))})
event = EVENT.read
notification = NOTIFICATION.read
stream_entry = STREAM_ENTRY.read


def metric(rec: Mapping[str, JSON], app_id: str, window: tuple[datetime, datetime]) -> JSONObject:
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
