"""Records of the DBOS SDK's public client (``DBOSClient``: ``WorkflowStatus``, ``StepInfo``, queues, schedules,
versions) as the wire records an executor sends for the same request, so that an answer from an application's
system database (issue 15) goes through the one translation to the v2 API (web/shapes/wire_to_api.py) that executors'
answers go through. Pure: values arrive loaded, `text` turns each into the text an executor would send."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from relay.wire.json_types import JSONObject

Text = Callable[[object], str | None]



# The SDK's own records (dbos: StepInfo, WorkflowSchedule, VersionInfo, TypedDicts there), the fields read here;
# total=False: older releases leave some out.
class StepInfo(TypedDict, total=False):
    function_id: int
    function_name: str
    output: object  # the step's value as the SDK deserialized it: text() shows it
    error: object
    child_workflow_id: str | None
    started_at_epoch_ms: int | None
    completed_at_epoch_ms: int | None


class WorkflowSchedule(TypedDict, total=False):
    schedule_id: str
    schedule_name: str
    workflow_name: str
    workflow_class_name: str | None
    schedule: str
    status: str
    context: object
    last_fired_at: str | None
    automatic_backfill: bool
    cron_timezone: str | None
    application_name: str | None


class VersionInfo(TypedDict, total=False):
    version_id: str
    version_name: str
    version_timestamp: int
    created_at: int

def _ms(value: Any) -> str | None:
    """Epoch milliseconds as the SDKs send them (a string of digits)."""
    return None if value is None else str(int(value))


def _json_or_none(value: object) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def workflow(status: Any, text: Text) -> JSONObject:
    """A ``WorkflowStatus`` as a list_workflows/get_workflow record (``WorkflowUUID``, ``Status``, ...)."""
    def get(name: str, default: object = None) -> object:  # fields newer releases added
        return getattr(status, name, default)

    return {
        "WorkflowUUID": status.workflow_id,
        "Status": status.status,
        "WorkflowName": status.name,
        "WorkflowClassName": status.class_name,
        "WorkflowConfigName": status.config_name,
        "AuthenticatedUser": status.authenticated_user,
        "AssumedRole": status.assumed_role,
        "AuthenticatedRoles": _json_or_none(status.authenticated_roles),
        "Input": text(status.input),
        "Output": text(status.output),
        "Error": text(status.error),
        "CreatedAt": _ms(status.created_at),
        "UpdatedAt": _ms(status.updated_at),
        "QueueName": status.queue_name,
        "ApplicationVersion": status.app_version,
        "ExecutorID": status.executor_id,
        "WorkflowTimeoutMS": _ms(status.workflow_timeout_ms),
        "WorkflowDeadlineEpochMS": _ms(status.workflow_deadline_epoch_ms),
        "DeduplicationID": status.deduplication_id,
        "Priority": status.priority,
        "QueuePartitionKey": status.queue_partition_key,
        "ForkedFrom": status.forked_from,
        "WasForkedFrom": bool(get("was_forked_from", False)),
        "ParentWorkflowID": get("parent_workflow_id"),
        "DequeuedAt": _ms(get("dequeued_at")),
        "DelayUntilEpochMS": _ms(get("delay_until_epoch_ms")),
        "CompletedAt": _ms(get("completed_at")),
        "Attributes": _json_or_none(get("attributes")),
        "ScheduleName": get("schedule_name"),
        "ApplicationName": get("application_name"),
    }


def step(info: StepInfo, text: Text) -> JSONObject:
    """A ``StepInfo`` as a list_steps record."""
    return {
        "function_id": info.get("function_id"),
        "function_name": info.get("function_name"),
        "output": text(info.get("output")),
        "error": text(info.get("error")),
        "child_workflow_id": info.get("child_workflow_id"),
        "started_at_epoch_ms": _ms(info.get("started_at_epoch_ms")),
        "completed_at_epoch_ms": _ms(info.get("completed_at_epoch_ms")),
    }


def queue(found: Any) -> JSONObject:
    """A client ``Queue`` (read through its public properties) as a list_queues/get_queue record. dbos 3.4.0's
    has no ``priority_enabled``: the data plane reads the queue's row instead (`queue_row`), this is the fallback
    on a schema it does not read rows of."""
    limiter = found.limiter or {}
    return {
        "name": found.name,
        "concurrency": found.concurrency,
        "worker_concurrency": found.worker_concurrency,
        "rate_limit_max": limiter.get("limit"),
        "rate_limit_period_sec": limiter.get("period"),
        "priority_enabled": bool(getattr(found, "priority_enabled", False)),
        "partition_queue": bool(getattr(found, "partition_queue", False)),
        "polling_interval_sec": found.polling_interval_sec,
        "application_name": found.application_name,
    }


_PARTITION_LIMITS = ("partition_concurrency", "partition_worker_concurrency", "partition_rate_limit_max")


def queue_row(row: Mapping[str, Any]) -> JSONObject:
    """A row of the SDK's queues table (every setting it records, schema 109 and later) as the list_queues/
    get_queue record an executor sends (the Python SDK's ``QueueOutput``): a rate period only with its limit, as
    the SDK's own ``Queue`` reads the row; partitioned when the row says so or sets a per-partition limit (dbos
    3.4 writes both; other SDKs the flag)."""
    limited, partition_limited = row.get("rate_limit_max") is not None, row.get("partition_rate_limit_max") is not None
    return {
        "name": row["name"],
        "concurrency": row.get("concurrency"),
        "worker_concurrency": row.get("worker_concurrency"),
        "rate_limit_max": row.get("rate_limit_max"),
        "rate_limit_period_sec": row.get("rate_limit_period_sec") if limited else None,
        "priority_enabled": bool(row.get("priority_enabled")),
        "partition_queue": bool(row.get("partition_queue")) or any(row.get(k) is not None for k in _PARTITION_LIMITS),
        "polling_interval_sec": row.get("polling_interval_sec"),
        "application_name": row.get("application_name"),
        "partition_concurrency": row.get("partition_concurrency"),
        "partition_worker_concurrency": row.get("partition_worker_concurrency"),
        "partition_rate_limit_max": row.get("partition_rate_limit_max"),
        "partition_rate_limit_period_sec": row.get("partition_rate_limit_period_sec") if partition_limited else None,
    }


def schedule(found: WorkflowSchedule, text: Text) -> JSONObject:
    """A ``WorkflowSchedule`` as a list_schedules/get_schedule record."""
    return {
        "schedule_id": found.get("schedule_id"),
        "schedule_name": found.get("schedule_name"),
        "workflow_name": found.get("workflow_name"),
        "workflow_class_name": found.get("workflow_class_name"),
        "schedule": found.get("schedule"),
        "status": found.get("status"),
        "context": text(found.get("context")),
        "last_fired_at": found.get("last_fired_at"),
        "automatic_backfill": bool(found.get("automatic_backfill")),
        "cron_timezone": found.get("cron_timezone"),
        "application_name": found.get("application_name"),
    }


def version(found: VersionInfo) -> JSONObject:
    """A ``VersionInfo`` as a list_application_versions record."""
    return {
        "version_id": found.get("version_id"),
        "version_name": found.get("version_name"),
        "version_timestamp": _ms(found.get("version_timestamp")),
        "created_at": _ms(found.get("created_at")),
    }
