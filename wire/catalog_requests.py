"""Requests about schedules, queues, metrics, application versions and alerts (pure)."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from relay.wire.fields import (
    _Body,
    _check,
    _check_id,
    _set,
    string_list,
    string_or_list,
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
    Response,
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

    def __post_init__(self) -> None:
        for name in ("status", "workflow_name", "schedule_name_prefix", "application_name"):
            _set(self, name, string_or_list(getattr(self, name), name))
        _check("load_context", self.load_context, bool, optional=True)


@dataclass(frozen=True, kw_only=True)
class ListSchedulesRequest(Request):
    """Answered by ListSchedulesResponse. ``body`` is always sent: both SDKs dereference it."""

    type: ClassVar[MessageType] = MessageType.LIST_SCHEDULES
    answer: ClassVar[builtins.type[Response]] = ListSchedulesResponse
    body: ListSchedulesBody = field(default_factory=ListSchedulesBody)


@dataclass(frozen=True, kw_only=True)
class _OneScheduleRequest(Request):
    schedule_name: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("schedule_name", self.schedule_name)


@dataclass(frozen=True, kw_only=True)
class GetScheduleRequest(_OneScheduleRequest):
    """Answered by GetScheduleResponse."""

    type: ClassVar[MessageType] = MessageType.GET_SCHEDULE
    answer: ClassVar[builtins.type[Response]] = GetScheduleResponse
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"load_context"})
    load_context: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("load_context", self.load_context, bool)


@dataclass(frozen=True, kw_only=True)
class PauseScheduleRequest(_OneScheduleRequest):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.PAUSE_SCHEDULE
    answer: ClassVar[builtins.type[Response]] = SuccessResponse


@dataclass(frozen=True, kw_only=True)
class ResumeScheduleRequest(_OneScheduleRequest):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.RESUME_SCHEDULE
    answer: ClassVar[builtins.type[Response]] = SuccessResponse


@dataclass(frozen=True, kw_only=True)
class TriggerScheduleRequest(_OneScheduleRequest):
    """Answered by TriggerScheduleResponse."""

    type: ClassVar[MessageType] = MessageType.TRIGGER_SCHEDULE
    answer: ClassVar[builtins.type[Response]] = TriggerScheduleResponse


@dataclass(frozen=True, kw_only=True)
class BackfillScheduleRequest(_OneScheduleRequest):
    """Answered by BackfillScheduleResponse. ``start``/``end``: ISO 8601 timestamps."""

    type: ClassVar[MessageType] = MessageType.BACKFILL_SCHEDULE
    answer: ClassVar[builtins.type[Response]] = BackfillScheduleResponse
    start: str
    end: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("start", self.start)
        _check_id("end", self.end)


@dataclass(frozen=True, kw_only=True)
class ListQueuesBody(_Body):
    application_name: str | list[str] | None = None

    def __post_init__(self) -> None:
        _set(self, "application_name", string_or_list(self.application_name, "application_name"))


@dataclass(frozen=True, kw_only=True)
class ListQueuesRequest(Request):
    """Answered by ListQueuesResponse."""

    type: ClassVar[MessageType] = MessageType.LIST_QUEUES
    answer: ClassVar[builtins.type[Response]] = ListQueuesResponse
    body: ListQueuesBody = field(default_factory=ListQueuesBody)


@dataclass(frozen=True, kw_only=True)
class GetQueueRequest(Request):
    """Answered by GetQueueResponse (``output`` is None when there is no such queue)."""

    type: ClassVar[MessageType] = MessageType.GET_QUEUE
    answer: ClassVar[builtins.type[Response]] = GetQueueResponse
    name: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("name", self.name)


@dataclass(frozen=True, kw_only=True)
class GetMetricsRequest(Request):
    """Answered by GetMetricsResponse. Times are RFC 3339 strings.

    ``workflow_step_count`` is the only metric class the SDKs know; others get an ``error_message``.
    """

    type: ClassVar[MessageType] = MessageType.GET_METRICS
    answer: ClassVar[builtins.type[Response]] = GetMetricsResponse
    start_time: str
    end_time: str
    metric_class: str = "workflow_step_count"
    application_name: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("start_time", self.start_time)
        _check_id("end_time", self.end_time)
        _check_id("metric_class", self.metric_class)
        _set(self, "application_name", string_list(self.application_name, "application_name"))


@dataclass(frozen=True, kw_only=True)
class ListApplicationVersionsRequest(Request):
    """Answered by ListApplicationVersionsResponse."""

    type: ClassVar[MessageType] = MessageType.LIST_APPLICATION_VERSIONS
    answer: ClassVar[builtins.type[Response]] = ListApplicationVersionsResponse


@dataclass(frozen=True, kw_only=True)
class SetLatestApplicationVersionRequest(Request):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.SET_LATEST_APPLICATION_VERSION
    answer: ClassVar[builtins.type[Response]] = SuccessResponse
    version_name: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("version_name", self.version_name)


@dataclass(frozen=True, kw_only=True)
class AlertRequest(Request):
    """Delivered to the application's alert handler; answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.ALERT
    answer: ClassVar[builtins.type[Response]] = SuccessResponse
    name: str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("name", self.name)
        _check("message", self.message, str)
        _check("metadata", self.metadata, Mapping)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.metadata.items()):
            raise TypeError("metadata must map strings to strings")
