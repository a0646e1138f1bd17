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

The parts: api_values.py (times, numbers, limits), wire_to_api.py (out), api_to_wire.py (in); this module is
their one public face (callers write ``translate.X``).
"""

from __future__ import annotations

from relay.web.api.api_to_wire import (
    BULK_FORK_BODY,
    FORK_BODY,
    LIST_SCHEDULES_QUERY,
    LIST_WORKFLOWS_QUERY,
    SEARCH_BODY,
    STEP_AGGREGATES_BODY,
    WORKFLOW_AGGREGATES_BODY,
    Converter,
    Spec,
    backfill_request,
    bulk_cancel_request,
    bulk_delete_request,
    bulk_fork_from_failure_request,
    bulk_resume_request,
    cancel_request,
    delete_request,
    export_request,
    fork_request,
    get_workflow_request,
    import_request,
    latest_version_name,
    list_schedules_request,
    list_steps_request,
    list_workflows_request,
    metrics_request,
    metrics_window,
    queue_name,
    raw_request,
    raw_response,
    resume_request,
    schedule_name,
    search_workflows_request,
    step_aggregates_request,
    workflow_aggregates_request,
)
from relay.web.api.values import (
    INT32_MAX,
    INT64_MAX,
    MAX_LIMIT,
    WORKFLOW_STATUSES,
    format_time,
    int_from_wire,
    parse_time,
    time_from_wire,
    view_time,
)
from relay.web.api.wire_to_api import (
    application_version,
    application_versions,
    event,
    metric,
    notification,
    of_app,
    queue,
    schedule,
    step,
    step_aggregate,
    stream_entry,
    workflow,
    workflow_aggregate,
)

__all__ = [
    "BULK_FORK_BODY",
    "FORK_BODY",
    "INT32_MAX",
    "INT64_MAX",
    "LIST_SCHEDULES_QUERY",
    "LIST_WORKFLOWS_QUERY",
    "MAX_LIMIT",
    "SEARCH_BODY",
    "STEP_AGGREGATES_BODY",
    "WORKFLOW_AGGREGATES_BODY",
    "WORKFLOW_STATUSES",
    "Converter",
    "Spec",
    "application_version",
    "application_versions",
    "backfill_request",
    "bulk_cancel_request",
    "bulk_delete_request",
    "bulk_fork_from_failure_request",
    "bulk_resume_request",
    "cancel_request",
    "delete_request",
    "event",
    "export_request",
    "fork_request",
    "format_time",
    "get_workflow_request",
    "import_request",
    "int_from_wire",
    "latest_version_name",
    "list_schedules_request",
    "list_steps_request",
    "list_workflows_request",
    "metric",
    "metrics_request",
    "metrics_window",
    "notification",
    "of_app",
    "parse_time",
    "queue",
    "queue_name",
    "raw_request",
    "raw_response",
    "resume_request",
    "schedule",
    "schedule_name",
    "search_workflows_request",
    "step",
    "step_aggregate",
    "step_aggregates_request",
    "stream_entry",
    "time_from_wire",
    "view_time",
    "workflow",
    "workflow_aggregate",
    "workflow_aggregates_request",
]
