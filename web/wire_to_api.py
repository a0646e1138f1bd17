"""Out: wire records, as the SDKs send them (``WorkflowUUID``, ``started_at_epoch_ms``, ...), become the v2
schemas of the reference document (``Workflow``, ``Step``, ``Queue``, ``Schedule``, ``ApplicationVersion``,
``WorkflowAggregate``, ``StepAggregate``, ``Event``, ``Notification``, ``StreamEntry``, ``Metric``): camelCase
keys, RFC 3339 UTC times, integers where the schema says integer. Aggregate groups are keyed like the
Workflow/Step fields they group by (``workflowName``, ``appVersion``, ``stepName``, ``timeBucket``, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from relay.web.api_values import (
    INT32_MAX,
    _float,
    _str,
    format_time,
    int_from_wire,
    time_from_wire,
)

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
