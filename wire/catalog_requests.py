"""Requests about schedules, queues, metrics, application versions and alerts (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from relay.wire.fields import (
    FieldChecks,
    _Body,
    flag,
    identifier,
    listed,
    one_or_listed,
    optional_flag,
    string_mapping,
    text,
)
from relay.wire.messages import (
    MessageType,
)
from relay.wire.requests import Request
from relay.wire.responses import (
    BackfillScheduleResponse,
    GetMetricsResponse,
    GetQueueResponse,
    GetScheduleResponse,
    ListApplicationVersionsResponse,
    ListQueuesResponse,
    ListSchedulesResponse,
    SuccessResponse,
    TriggerScheduleResponse,
)


@dataclass(frozen=True, kw_only=True)
class ListSchedulesBody(_Body):
    status: str | list[str] | None = None
    workflow_name: str | list[str] | None = None
    schedule_name_prefix: str | list[str] | None = None
    application_name: str | list[str] | None = None
    load_context: bool | None = None

    CHECKS = (
        (one_or_listed, ("status", "workflow_name", "schedule_name_prefix", "application_name")),
        (optional_flag, ("load_context",)),
    )


@dataclass(frozen=True, kw_only=True)
class ListSchedulesRequest(Request, message_type=MessageType.LIST_SCHEDULES, answer=ListSchedulesResponse):
    """Answered by ListSchedulesResponse. ``body`` is always sent: both SDKs dereference it."""

    body: ListSchedulesBody = field(default_factory=ListSchedulesBody)


@dataclass(frozen=True, kw_only=True)
class _OneScheduleRequest(Request):
    schedule_name: str

    CHECKS: ClassVar[FieldChecks] = ((identifier, ("schedule_name",)),)


@dataclass(frozen=True, kw_only=True)
class GetScheduleRequest(_OneScheduleRequest, message_type=MessageType.GET_SCHEDULE, answer=GetScheduleResponse):
    """Answered by GetScheduleResponse."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset({"load_context"})
    load_context: bool = True

    CHECKS = ((flag, ("load_context",)),)


@dataclass(frozen=True, kw_only=True)
class PauseScheduleRequest(_OneScheduleRequest, message_type=MessageType.PAUSE_SCHEDULE, answer=SuccessResponse):
    """Answered by SuccessResponse."""


@dataclass(frozen=True, kw_only=True)
class ResumeScheduleRequest(_OneScheduleRequest, message_type=MessageType.RESUME_SCHEDULE, answer=SuccessResponse):
    """Answered by SuccessResponse."""


@dataclass(frozen=True, kw_only=True)
class TriggerScheduleRequest(
    _OneScheduleRequest, message_type=MessageType.TRIGGER_SCHEDULE, answer=TriggerScheduleResponse
):
    """Answered by TriggerScheduleResponse."""


@dataclass(frozen=True, kw_only=True)
class BackfillScheduleRequest(
    _OneScheduleRequest, message_type=MessageType.BACKFILL_SCHEDULE, answer=BackfillScheduleResponse
):
    """Answered by BackfillScheduleResponse. ``start``/``end``: ISO 8601 timestamps."""

    start: str
    end: str

    CHECKS = ((identifier, ("start", "end")),)


@dataclass(frozen=True, kw_only=True)
class ListQueuesBody(_Body):
    application_name: str | list[str] | None = None

    CHECKS = ((one_or_listed, ("application_name",)),)


@dataclass(frozen=True, kw_only=True)
class ListQueuesRequest(Request, message_type=MessageType.LIST_QUEUES, answer=ListQueuesResponse):
    """Answered by ListQueuesResponse."""

    body: ListQueuesBody = field(default_factory=ListQueuesBody)


@dataclass(frozen=True, kw_only=True)
class GetQueueRequest(Request, message_type=MessageType.GET_QUEUE, answer=GetQueueResponse):
    """Answered by GetQueueResponse (``output`` is None when there is no such queue)."""

    name: str

    CHECKS = ((identifier, ("name",)),)


@dataclass(frozen=True, kw_only=True)
class GetMetricsRequest(Request, message_type=MessageType.GET_METRICS, answer=GetMetricsResponse):
    """Answered by GetMetricsResponse. Times are RFC 3339 strings.

    ``workflow_step_count`` is the only metric class the SDKs know; others get an ``error_message``.
    """

    start_time: str
    end_time: str
    metric_class: str = "workflow_step_count"
    application_name: list[str] | None = None

    CHECKS = ((identifier, ("start_time", "end_time", "metric_class")), (listed, ("application_name",)))


@dataclass(frozen=True, kw_only=True)
class ListApplicationVersionsRequest(
    Request, message_type=MessageType.LIST_APPLICATION_VERSIONS, answer=ListApplicationVersionsResponse
):
    """Answered by ListApplicationVersionsResponse."""


@dataclass(frozen=True, kw_only=True)
class SetLatestApplicationVersionRequest(
    Request, message_type=MessageType.SET_LATEST_APPLICATION_VERSION, answer=SuccessResponse
):
    """Answered by SuccessResponse."""

    version_name: str

    CHECKS = ((identifier, ("version_name",)),)


@dataclass(frozen=True, kw_only=True)
class AlertRequest(Request, message_type=MessageType.ALERT, answer=SuccessResponse):
    """Delivered to the application's alert handler; answered by SuccessResponse."""

    name: str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)

    CHECKS = ((identifier, ("name",)), (text, ("message",)), (string_mapping, ("metadata",)))
