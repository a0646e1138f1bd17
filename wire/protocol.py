"""The executor wire format: the one place that builds and parses WebSocket frames.

DBOS executors connect to Relay and answer the requests Relay sends them. The SDKs are the authority on
the format (PROTOCOL.md); these are the releases this module was written against and is tested with:
``dbos`` 3.2.0 (``dbos/_conductor/protocol.py``, ``conductor.py``) and ``@dbos-inc/dbos-sdk`` 5.2.11
(``dist/src/conductor/protocol.js``, ``conductor.js``); the Go (v1.6.0) and Java (1.1.0-m6) SDKs' answers are
pinned by the frames they really sent (tests/unit/sdk_frames/). Notes on how they parse what we send:

- The Python SDK builds a dataclass from every request; a request that lacks a field without a default
  (or a body key it indexes with ``body["..."]``) raises inside its receive loop, which drops the
  connection and reconnects. So every request here always carries the fields the SDKs require.
- The TypeScript SDK treats JSON ``null`` and an absent key differently for some filters
  (``was_forked_from``/``has_parent`` are compared with ``!== undefined``), so optional fields are left
  out when unset, except the few the Python SDK needs present (those are sent as ``null``, which both
  SDKs treat as "unset").
- The TypeScript and Go SDKs drop empty fields from their answers (``JSON.stringify``, ``omitempty``), so a
  response may lack optional fields, ``error_message`` included; the Python SDK sends them as ``null``, and
  Java sends ``null`` for every empty field of a record but leaves ``error_message`` out.

Workflow, step, schedule, queue... records inside responses are kept as the plain dicts the executor
sent, with its keys (``WorkflowUUID``, ``Status``, ...), never renamed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Default limit on the size of one frame from an executor, checked before it is parsed."""

MAX_DEPTH = 100
"""Default limit on how deeply arrays/objects may nest in a frame (real frames nest 3 or 4 deep)."""

UNKNOWN_TYPE_ERROR = "Unknown message type"
"""What every SDK (Python, TypeScript, Go, Java) answers to a type it does not know, as ``error_message``."""

METADATA_ONLY_REFUSAL = "is not allowed in conductor metadata-only mode"
"""Tail of the ``error_message`` an SDK in metadata-only mode answers to the data-moving types."""


class MessageType(StrEnum):
    """Every frame type the SDKs know. A frame's ``type`` is echoed in its response."""

    EXECUTOR_INFO = "executor_info"
    RECOVERY = "recovery"
    CANCEL = "cancel"
    RESUME = "resume"
    DELETE = "delete"
    EXIST_PENDING_WORKFLOWS = "exist_pending_workflows"
    RETENTION = "retention"
    LIST_WORKFLOWS = "list_workflows"
    LIST_QUEUED_WORKFLOWS = "list_queued_workflows"
    GET_WORKFLOW = "get_workflow"
    LIST_STEPS = "list_steps"
    GET_WORKFLOW_EVENTS = "get_workflow_events"
    GET_WORKFLOW_NOTIFICATIONS = "get_workflow_notifications"
    GET_WORKFLOW_STREAMS = "get_workflow_streams"
    GET_WORKFLOW_AGGREGATES = "get_workflow_aggregates"
    GET_STEP_AGGREGATES = "get_step_aggregates"
    FORK_WORKFLOW = "fork_workflow"
    FORK_FROM_FAILURE = "fork_from_failure"
    REWIND_WORKFLOW = "rewind_workflow"
    EXPORT_WORKFLOW = "export_workflow"
    IMPORT_WORKFLOW = "import_workflow"
    LIST_SCHEDULES = "list_schedules"
    GET_SCHEDULE = "get_schedule"
    PAUSE_SCHEDULE = "pause_schedule"
    RESUME_SCHEDULE = "resume_schedule"
    TRIGGER_SCHEDULE = "trigger_schedule"
    BACKFILL_SCHEDULE = "backfill_schedule"
    LIST_QUEUES = "list_queues"
    GET_QUEUE = "get_queue"
    GET_METRICS = "get_metrics"
    LIST_APPLICATION_VERSIONS = "list_application_versions"
    SET_LATEST_APPLICATION_VERSION = "set_latest_application_version"
    ALERT = "alert"
    # Only in older SDKs (Python < 3.0, TypeScript < 5.0) and Java; superseded by fork_workflow. Relay
    # does not send it (RawRequest can), but understands its answer.
    RESTART = "restart"


class ProtocolError(Exception):
    """A frame from an executor that does not follow the protocol.

    ``reason`` describes what is wrong without quoting the frame: frames can carry secrets.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def new_request_id() -> str:
    """A fresh request id (uuid4, hex)."""
    return uuid.uuid4().hex


# --------------------------------------------------------------------------------------------------
# Filter values


def string_or_list(value: str | Iterable[str] | None, name: str = "filter") -> str | list[str] | None:
    """Normalise a filter that the wire takes as a string or a list of strings.

    ``None`` stays ``None`` (no filter). A string, or a list of one string, becomes that string: every SDK
    release takes a single string, while lists need Python >= 2.11 / TypeScript >= 4.8. Several strings
    become a list. An empty list is refused (ValueError): the Python SDK would match nothing and the
    TypeScript SDK would send ``IN ()`` to its database; leave the filter out instead.
    """
    values = string_list(value, name)
    if values is None:
        return None
    return values[0] if len(values) == 1 else values


def string_list(value: str | Iterable[str] | None, name: str = "filter") -> list[str] | None:
    """Normalise a filter that the wire takes only as a list of strings; a lone string is wrapped."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else _as_list(value, name)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} must hold strings")
        if not item:
            raise ValueError(f"{name} must not hold empty strings")
    if not items:
        raise ValueError(f"{name} must not be an empty list (leave it out for no filter)")
    return items


def _as_list(value: object, name: str) -> list[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a string or a list of strings")
    return list(value)


# --------------------------------------------------------------------------------------------------
# Requests (Relay -> executor)


def _check(name: str, value: object, kind: type, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TypeError(f"{name} must be {_TYPE_TEXT.get(kind, kind.__name__)}")


_TYPE_TEXT: dict[type, str] = {str: "a string", bool: "a boolean", int: "an integer", Mapping: "a mapping"}


def _check_id(name: str, value: object, optional: bool = False) -> None:
    _check(name, value, str, optional)
    if value == "":
        raise ValueError(f"{name} must not be empty")


def _check_count(name: str, value: int | None, minimum: int = 0) -> None:
    _check(name, value, int, optional=True)
    if value is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclasses normalise their fields in __post_init__


def _wire_value(value: Any) -> Any:
    if isinstance(value, _Body):
        return value.wire()
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _wire_fields(obj: Any, always: frozenset[str], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The dataclass's fields as wire keys: ``None`` is left out unless the key is in ``always``."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in skip or (value is None and f.name not in always):
            continue
        out[f.name] = _wire_value(value)
    return out


@dataclass(frozen=True, kw_only=True)
class _Body:
    """A request's ``body`` object."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset()

    def wire(self) -> dict[str, Any]:
        return _wire_fields(self, self.ALWAYS)


@dataclass(frozen=True, kw_only=True)
class Request:
    """Base of the typed requests: ``type`` is fixed per class, ``request_id`` is fresh by default."""

    type: ClassVar[MessageType]
    ALWAYS: ClassVar[frozenset[str]] = frozenset()

    request_id: str = field(default_factory=new_request_id)

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)

    def wire_fields(self) -> dict[str, Any]:
        """The frame's keys other than ``type`` and ``request_id``."""
        return _wire_fields(self, self.ALWAYS, skip=frozenset({"request_id"}))


@dataclass(frozen=True, kw_only=True)
class ExecutorInfoRequest(Request):
    """Sent first on every connection; answered by ExecutorInfoResponse."""

    type: ClassVar[MessageType] = MessageType.EXECUTOR_INFO


@dataclass(frozen=True, kw_only=True)
class RecoveryRequest(Request):
    """Recover the PENDING workflows of these (dead) executors; answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.RECOVERY
    executor_ids: list[str]

    def __post_init__(self) -> None:
        super().__post_init__()
        _set(self, "executor_ids", string_list(self.executor_ids, "executor_ids"))


@dataclass(frozen=True, kw_only=True)
class _WorkflowsTarget(Request):
    """One workflow (``workflow_id``) or several (``workflow_ids``): give exactly one of the two.

    On the wire, one id is sent as ``workflow_id`` alone (understood by every SDK release). Several are sent
    as ``workflow_ids`` with ``workflow_id`` set to the first: the Python SDK requires ``workflow_id``, and
    SDKs older than Python 2.15 / TypeScript 4.11 / Go 1.0 (0.12 for delete) ignore ``workflow_ids`` (see
    ``supports_bulk_ids``).
    """

    workflow_id: str | None = None
    workflow_ids: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.workflow_id is None) == (self.workflow_ids is None):
            raise ValueError("give exactly one of workflow_id and workflow_ids")
        if self.workflow_id is not None:
            _check_id("workflow_id", self.workflow_id)
        else:
            ids = string_list(self.workflow_ids, "workflow_ids") or []
            _set(self, "workflow_ids", ids)

    @property
    def ids(self) -> list[str]:
        """The workflows this request is about."""
        return [self.workflow_id] if self.workflow_id is not None else list(self.workflow_ids or [])

    def wire_fields(self) -> dict[str, Any]:
        out = _wire_fields(self, self.ALWAYS, skip=frozenset({"request_id", "workflow_id", "workflow_ids"}))
        ids = self.ids
        target: dict[str, Any] = {"workflow_id": ids[0]}
        if len(ids) > 1:
            target["workflow_ids"] = ids
        return {**target, **out}


@dataclass(frozen=True, kw_only=True)
class CancelRequest(_WorkflowsTarget):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.CANCEL
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"cancel_children"})
    cancel_children: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("cancel_children", self.cancel_children, bool)


@dataclass(frozen=True, kw_only=True)
class ResumeRequest(_WorkflowsTarget):
    """Answered by SuccessResponse. ``queue_name``: the queue to resume onto (SDK default when unset)."""

    type: ClassVar[MessageType] = MessageType.RESUME
    queue_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("queue_name", self.queue_name, optional=True)


@dataclass(frozen=True, kw_only=True)
class DeleteRequest(_WorkflowsTarget):
    """Answered by SuccessResponse. The Python SDK requires ``delete_children``: it is always sent."""

    type: ClassVar[MessageType] = MessageType.DELETE
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"delete_children"})
    delete_children: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("delete_children", self.delete_children, bool)


@dataclass(frozen=True, kw_only=True)
class ExistPendingWorkflowsRequest(Request):
    """Answered by ExistPendingWorkflowsResponse."""

    type: ClassVar[MessageType] = MessageType.EXIST_PENDING_WORKFLOWS
    executor_id: str
    application_version: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("executor_id", self.executor_id)
        _check("application_version", self.application_version, str)


@dataclass(frozen=True, kw_only=True)
class RetentionBody(_Body):
    """All four keys are always sent (``null`` when unset): the Python SDK indexes three of them."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset(
        {"gc_cutoff_epoch_ms", "gc_rows_threshold", "gc_batch_size", "timeout_cutoff_epoch_ms"}
    )
    gc_cutoff_epoch_ms: int | None = None
    gc_rows_threshold: int | None = None
    gc_batch_size: int | None = None
    timeout_cutoff_epoch_ms: int | None = None

    def __post_init__(self) -> None:
        for name in self.ALWAYS:
            _check_count(name, getattr(self, name))


@dataclass(frozen=True, kw_only=True)
class RetentionRequest(Request):
    """Answered by SuccessResponse at once; the SDKs run the garbage collection in the background."""

    type: ClassVar[MessageType] = MessageType.RETENTION
    body: RetentionBody


_OLD_PYTHON_LIST_KEYS = frozenset(
    # Python SDKs before 2.10 read these with body["..."]: they must be present (null is fine).
    {
        "workflow_uuids", "workflow_name", "authenticated_user", "start_time", "end_time", "status",
        "application_version", "queue_name", "limit", "offset", "sort_desc",
    }
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ListWorkflowsBody(_Body):
    """Filters of list_workflows and list_queued_workflows (the queued list ignores ``queues_only``).

    Filters typed ``str | list[str]`` go through ``string_or_list``; times are ISO 8601 strings.
    ``load_input``/``load_output`` are always sent: their defaults differ (Python True, TypeScript False).
    """

    ALWAYS: ClassVar[frozenset[str]] = _OLD_PYTHON_LIST_KEYS | {"load_input", "load_output"}
    STRING_OR_LIST: ClassVar[tuple[str, ...]] = (
        "workflow_name", "authenticated_user", "status", "application_version", "forked_from",
        "parent_workflow_id", "queue_name", "workflow_id_prefix", "executor_id", "schedule_name",
        "application_name",
    )  # fmt: skip
    TIMES: ClassVar[tuple[str, ...]] = (
        "start_time", "end_time", "completed_after", "completed_before", "dequeued_after", "dequeued_before",
    )  # fmt: skip

    workflow_uuids: list[str] | None = None
    workflow_name: str | list[str] | None = None
    authenticated_user: str | list[str] | None = None
    start_time: str | None = None
    end_time: str | None = None
    completed_after: str | None = None
    completed_before: str | None = None
    dequeued_after: str | None = None
    dequeued_before: str | None = None
    status: str | list[str] | None = None
    application_version: str | list[str] | None = None
    forked_from: str | list[str] | None = None
    parent_workflow_id: str | list[str] | None = None
    queue_name: str | list[str] | None = None
    workflow_id_prefix: str | list[str] | None = None
    executor_id: str | list[str] | None = None
    schedule_name: str | list[str] | None = None
    application_name: str | list[str] | None = None
    was_forked_from: bool | None = None
    has_parent: bool | None = None
    attributes: dict[str, Any] | None = None
    limit: int | None = None
    offset: int | None = None
    sort_desc: bool = False
    load_input: bool = False
    load_output: bool = False
    queues_only: bool = False

    def __post_init__(self) -> None:
        _set(self, "workflow_uuids", string_list(self.workflow_uuids, "workflow_uuids"))
        for name in self.STRING_OR_LIST:
            _set(self, name, string_or_list(getattr(self, name), name))
        for name in self.TIMES:
            _check(name, getattr(self, name), str, optional=True)
        for name in ("was_forked_from", "has_parent"):
            _check(name, getattr(self, name), bool, optional=True)
        for name in ("sort_desc", "load_input", "load_output", "queues_only"):
            _check(name, getattr(self, name), bool)
        _check("attributes", self.attributes, Mapping, optional=True)
        _check_count("limit", self.limit)
        _check_count("offset", self.offset)


@dataclass(frozen=True, kw_only=True)
class ListWorkflowsRequest(Request):
    """Answered by ListWorkflowsResponse."""

    type: ClassVar[MessageType] = MessageType.LIST_WORKFLOWS
    body: ListWorkflowsBody = field(default_factory=ListWorkflowsBody)


@dataclass(frozen=True, kw_only=True)
class ListQueuedWorkflowsRequest(Request):
    """Answered by ListWorkflowsResponse (type list_queued_workflows)."""

    type: ClassVar[MessageType] = MessageType.LIST_QUEUED_WORKFLOWS
    body: ListWorkflowsBody = field(default_factory=ListWorkflowsBody)


@dataclass(frozen=True, kw_only=True)
class GetWorkflowRequest(Request):
    """Answered by GetWorkflowResponse (``output`` is None when there is no such workflow)."""

    type: ClassVar[MessageType] = MessageType.GET_WORKFLOW
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"load_input", "load_output"})
    workflow_id: str
    load_input: bool = True
    load_output: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("workflow_id", self.workflow_id)
        _check("load_input", self.load_input, bool)
        _check("load_output", self.load_output, bool)


@dataclass(frozen=True, kw_only=True)
class ListStepsRequest(Request):
    """Answered by ListStepsResponse."""

    type: ClassVar[MessageType] = MessageType.LIST_STEPS
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"load_output"})
    workflow_id: str
    load_output: bool = True
    limit: int | None = None
    offset: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("workflow_id", self.workflow_id)
        _check("load_output", self.load_output, bool)
        _check_count("limit", self.limit)
        _check_count("offset", self.offset)


@dataclass(frozen=True, kw_only=True)
class _OneWorkflowRequest(Request):
    workflow_id: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("workflow_id", self.workflow_id)


@dataclass(frozen=True, kw_only=True)
class GetWorkflowEventsRequest(_OneWorkflowRequest):
    """Answered by GetWorkflowEventsResponse."""

    type: ClassVar[MessageType] = MessageType.GET_WORKFLOW_EVENTS


@dataclass(frozen=True, kw_only=True)
class GetWorkflowNotificationsRequest(_OneWorkflowRequest):
    """Answered by GetWorkflowNotificationsResponse."""

    type: ClassVar[MessageType] = MessageType.GET_WORKFLOW_NOTIFICATIONS


@dataclass(frozen=True, kw_only=True)
class GetWorkflowStreamsRequest(_OneWorkflowRequest):
    """Answered by GetWorkflowStreamsResponse."""

    type: ClassVar[MessageType] = MessageType.GET_WORKFLOW_STREAMS


@dataclass(frozen=True, kw_only=True)
class GetWorkflowAggregatesBody(_Body):
    """Group-by flags, select flags and filters (the filters are lists only, unlike list_workflows)."""

    LISTS: ClassVar[tuple[str, ...]] = (
        "status", "name", "app_version", "executor_id", "queue_name", "workflow_id_prefix", "workflow_ids",
        "forked_from", "parent_workflow_id", "user", "schedule_name", "application_name",
    )  # fmt: skip
    TIMES: ClassVar[tuple[str, ...]] = ListWorkflowsBody.TIMES
    FLAGS: ClassVar[tuple[str, ...]] = (
        "group_by_status", "group_by_name", "group_by_queue_name", "group_by_executor_id",
        "group_by_application_version", "group_by_application_name", "select_count",
        "select_min_created_at", "select_max_queue_wait_ms", "select_max_total_latency_ms",
    )  # fmt: skip

    group_by_status: bool = False
    group_by_name: bool = False
    group_by_queue_name: bool = False
    group_by_executor_id: bool = False
    group_by_application_version: bool = False
    group_by_application_name: bool = False
    select_count: bool = False
    select_min_created_at: bool = False
    select_max_queue_wait_ms: bool = False
    select_max_total_latency_ms: bool = False
    time_bucket_size_ms: int | None = None
    status: list[str] | None = None
    name: list[str] | None = None
    app_version: list[str] | None = None
    executor_id: list[str] | None = None
    queue_name: list[str] | None = None
    workflow_id_prefix: list[str] | None = None
    workflow_ids: list[str] | None = None
    forked_from: list[str] | None = None
    parent_workflow_id: list[str] | None = None
    user: list[str] | None = None
    schedule_name: list[str] | None = None
    application_name: list[str] | None = None
    start_time: str | None = None
    end_time: str | None = None
    completed_after: str | None = None
    completed_before: str | None = None
    dequeued_after: str | None = None
    dequeued_before: str | None = None
    was_forked_from: bool | None = None
    has_parent: bool | None = None
    attributes: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in self.LISTS:
            _set(self, name, string_list(getattr(self, name), name))
        for name in self.TIMES:
            _check(name, getattr(self, name), str, optional=True)
        for name in self.FLAGS:
            _check(name, getattr(self, name), bool)
        for name in ("was_forked_from", "has_parent"):
            _check(name, getattr(self, name), bool, optional=True)
        _check("attributes", self.attributes, Mapping, optional=True)
        _check_count("time_bucket_size_ms", self.time_bucket_size_ms, minimum=1)


@dataclass(frozen=True, kw_only=True)
class GetWorkflowAggregatesRequest(Request):
    """Answered by GetWorkflowAggregatesResponse."""

    type: ClassVar[MessageType] = MessageType.GET_WORKFLOW_AGGREGATES
    body: GetWorkflowAggregatesBody = field(default_factory=GetWorkflowAggregatesBody)


@dataclass(frozen=True, kw_only=True)
class GetStepAggregatesBody(_Body):
    LISTS: ClassVar[tuple[str, ...]] = ("status", "function_name", "workflow_id_prefix", "application_name")
    FLAGS: ClassVar[tuple[str, ...]] = (
        "group_by_function_name", "group_by_status", "select_count", "select_max_duration_ms",
    )  # fmt: skip

    group_by_function_name: bool = False
    group_by_status: bool = False
    select_count: bool = False
    select_max_duration_ms: bool = False
    time_bucket_size_ms: int | None = None
    status: list[str] | None = None
    function_name: list[str] | None = None
    workflow_id_prefix: list[str] | None = None
    application_name: list[str] | None = None
    completed_after: str | None = None
    completed_before: str | None = None

    def __post_init__(self) -> None:
        for name in self.LISTS:
            _set(self, name, string_list(getattr(self, name), name))
        for name in self.FLAGS:
            _check(name, getattr(self, name), bool)
        for name in ("completed_after", "completed_before"):
            _check(name, getattr(self, name), str, optional=True)
        _check_count("time_bucket_size_ms", self.time_bucket_size_ms, minimum=1)


@dataclass(frozen=True, kw_only=True)
class GetStepAggregatesRequest(Request):
    """Answered by GetStepAggregatesResponse."""

    type: ClassVar[MessageType] = MessageType.GET_STEP_AGGREGATES
    body: GetStepAggregatesBody = field(default_factory=GetStepAggregatesBody)


@dataclass(frozen=True, kw_only=True)
class ForkWorkflowBody(_Body):
    """``new_workflow_id`` and ``application_version`` are always sent: the Python SDK indexes them."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset({"new_workflow_id", "application_version"})
    workflow_id: str
    start_step: int
    new_workflow_id: str | None = None
    application_version: str | None = None
    queue_name: str | None = None
    queue_partition_key: str | None = None

    def __post_init__(self) -> None:
        _check_id("workflow_id", self.workflow_id)
        _check("start_step", self.start_step, int)
        for name in ("new_workflow_id", "application_version", "queue_name", "queue_partition_key"):
            _check_id(name, getattr(self, name), optional=True)


@dataclass(frozen=True, kw_only=True)
class ForkWorkflowRequest(Request):
    """Answered by ForkWorkflowResponse."""

    type: ClassVar[MessageType] = MessageType.FORK_WORKFLOW
    body: ForkWorkflowBody


@dataclass(frozen=True, kw_only=True)
class ForkFromFailureBody(_Body):
    workflow_ids: list[str]
    application_version: str | None = None
    queue_name: str | None = None
    queue_partition_key: str | None = None
    from_last_failure: bool = False
    from_last_step: bool = False
    from_step: int | None = None
    from_step_name: str | None = None

    def __post_init__(self) -> None:
        _set(self, "workflow_ids", string_list(self.workflow_ids, "workflow_ids"))
        for name in ("application_version", "queue_name", "queue_partition_key", "from_step_name"):
            _check_id(name, getattr(self, name), optional=True)
        _check("from_last_failure", self.from_last_failure, bool)
        _check("from_last_step", self.from_last_step, bool)
        _check("from_step", self.from_step, int, optional=True)


@dataclass(frozen=True, kw_only=True)
class ForkFromFailureRequest(Request):
    """Answered by ForkFromFailureResponse."""

    type: ClassVar[MessageType] = MessageType.FORK_FROM_FAILURE
    body: ForkFromFailureBody


@dataclass(frozen=True, kw_only=True)
class RewindWorkflowBody(_Body):
    """``start_step`` is required here: when absent, Python rewinds from step 1 and TypeScript from 0."""

    workflow_id: str
    start_step: int
    application_version: str | None = None
    queue_name: str | None = None
    queue_partition_key: str | None = None

    def __post_init__(self) -> None:
        _check_id("workflow_id", self.workflow_id)
        _check("start_step", self.start_step, int)
        for name in ("application_version", "queue_name", "queue_partition_key"):
            _check_id(name, getattr(self, name), optional=True)


@dataclass(frozen=True, kw_only=True)
class RewindWorkflowRequest(Request):
    """Answered by SuccessResponse (Python >= 3.1, TypeScript >= 5.1)."""

    type: ClassVar[MessageType] = MessageType.REWIND_WORKFLOW
    body: RewindWorkflowBody


@dataclass(frozen=True, kw_only=True)
class ExportWorkflowRequest(Request):
    """Answered by ExportWorkflowResponse.

    The export is language-specific (Python: base64 of gzipped pickle; TypeScript: base64 of gzipped
    JSON): import it only into an executor of the same language.
    """

    type: ClassVar[MessageType] = MessageType.EXPORT_WORKFLOW
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"export_children"})
    workflow_id: str
    export_children: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("workflow_id", self.workflow_id)
        _check("export_children", self.export_children, bool)


@dataclass(frozen=True, kw_only=True)
class ImportWorkflowRequest(Request):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.IMPORT_WORKFLOW
    serialized_workflow: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("serialized_workflow", self.serialized_workflow)


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
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"load_context"})
    load_context: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("load_context", self.load_context, bool)


@dataclass(frozen=True, kw_only=True)
class PauseScheduleRequest(_OneScheduleRequest):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.PAUSE_SCHEDULE


@dataclass(frozen=True, kw_only=True)
class ResumeScheduleRequest(_OneScheduleRequest):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.RESUME_SCHEDULE


@dataclass(frozen=True, kw_only=True)
class TriggerScheduleRequest(_OneScheduleRequest):
    """Answered by TriggerScheduleResponse."""

    type: ClassVar[MessageType] = MessageType.TRIGGER_SCHEDULE


@dataclass(frozen=True, kw_only=True)
class BackfillScheduleRequest(_OneScheduleRequest):
    """Answered by BackfillScheduleResponse. ``start``/``end``: ISO 8601 timestamps."""

    type: ClassVar[MessageType] = MessageType.BACKFILL_SCHEDULE
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
    body: ListQueuesBody = field(default_factory=ListQueuesBody)


@dataclass(frozen=True, kw_only=True)
class GetQueueRequest(Request):
    """Answered by GetQueueResponse (``output`` is None when there is no such queue)."""

    type: ClassVar[MessageType] = MessageType.GET_QUEUE
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


@dataclass(frozen=True, kw_only=True)
class SetLatestApplicationVersionRequest(Request):
    """Answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.SET_LATEST_APPLICATION_VERSION
    version_name: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_id("version_name", self.version_name)


@dataclass(frozen=True, kw_only=True)
class AlertRequest(Request):
    """Delivered to the application's alert handler; answered by SuccessResponse."""

    type: ClassVar[MessageType] = MessageType.ALERT
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


@dataclass(frozen=True)
class RawRequest:
    """A request of a type this module does not model (e.g. one a newer SDK added), sent as given.

    ``encode_request`` checks that ``type`` and ``request_id`` are non-empty strings and refuses
    ``fields`` that try to set either of them.
    """

    type: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    request_id: str = field(default_factory=new_request_id)


_ENVELOPE_KEYS = frozenset({"type", "request_id"})


def encode_request(req: Request | RawRequest) -> str:
    """The JSON text of a request frame. Raises ValueError/TypeError for a request that cannot be sent."""
    if isinstance(req, Request):
        frame: dict[str, Any] = {"type": req.type.value, "request_id": req.request_id, **req.wire_fields()}
    elif isinstance(req, RawRequest):
        if not isinstance(req.type, str) or not req.type:
            raise TypeError("RawRequest.type must be a non-empty string")
        if not isinstance(req.fields, Mapping) or not all(isinstance(k, str) for k in req.fields):
            raise TypeError("RawRequest.fields must be a mapping with string keys")
        clash = _ENVELOPE_KEYS & set(req.fields)
        if clash:
            raise ValueError(f"RawRequest.fields must not set {', '.join(sorted(clash))}")
        frame = {"type": req.type, "request_id": req.request_id, **req.fields}
    else:
        raise TypeError("not a request")
    if not isinstance(frame["request_id"], str) or not frame["request_id"]:
        raise TypeError("request_id must be a non-empty string")
    try:
        # allow_nan=False: NaN/Infinity are not JSON, and the TypeScript SDK's JSON.parse rejects them.
        return json.dumps(frame, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{frame['type']} request is not JSON-serialisable: {exc}") from None


# --------------------------------------------------------------------------------------------------
# Responses (executor -> Relay)

# Field kinds for decoding: what a field's JSON value must be.
_STR, _BOOL, _OBJECT, _OBJECTS, _STRINGS = "str", "bool", "object", "objects", "strings"
_KIND_TEXT = {
    _STR: "a string",
    _BOOL: "a boolean",
    _OBJECT: "an object",
    _OBJECTS: "a list of objects",
    _STRINGS: "a list of strings",
}


@dataclass(frozen=True, kw_only=True)
class Response:
    """Base of every decoded response. ``error_message`` is set when the operation failed."""

    # (field, kind, required): a required field may be absent or null only in an error response (an
    # SDK refusing a type, e.g. "Unknown message type", sends nothing but the envelope).
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = ()

    type: str
    request_id: str
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_message is None


@dataclass(frozen=True, kw_only=True)
class ExecutorInfoResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (
        ("executor_id", _STR, True),
        ("application_version", _STR, True),
        ("hostname", _STR, False),
        ("language", _STR, False),
        ("dbos_version", _STR, False),
        ("executor_metadata", _OBJECT, False),
    )
    executor_id: str | None = None
    application_version: str | None = None
    hostname: str | None = None
    language: str | None = None
    dbos_version: str | None = None
    executor_metadata: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class SuccessResponse(Response):
    """The answer to recovery, cancel, resume, delete, retention, rewind_workflow, import_workflow,
    pause_schedule, resume_schedule, set_latest_application_version, alert (and restart)."""

    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("success", _BOOL, True),)
    success: bool | None = None


@dataclass(frozen=True, kw_only=True)
class ExistPendingWorkflowsResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("exist", _BOOL, True),)
    exist: bool | None = None


@dataclass(frozen=True, kw_only=True)
class _OutputListResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("output", _OBJECTS, True),)
    output: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class _OutputResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("output", _OBJECT, False),)
    output: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ListWorkflowsResponse(_OutputListResponse):
    """list_workflows and list_queued_workflows: ``output`` is a list of workflow status records."""


@dataclass(frozen=True, kw_only=True)
class GetWorkflowResponse(_OutputResponse):
    """``output``: the workflow status record, None when not found."""


@dataclass(frozen=True, kw_only=True)
class ListStepsResponse(Response):
    """``output``: step records (``function_id``, ``function_name``, ``output``, ``error``, ...)."""

    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("output", _OBJECTS, False),)
    output: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class GetWorkflowEventsResponse(Response):
    """``events``: ``[{key, value}]``."""

    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("events", _OBJECTS, False),)
    events: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class GetWorkflowNotificationsResponse(Response):
    """``notifications``: ``[{topic, message, created_at_epoch_ms, consumed}]``."""

    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("notifications", _OBJECTS, False),)
    notifications: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class GetWorkflowStreamsResponse(Response):
    """``streams``: ``[{key, values}]``."""

    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("streams", _OBJECTS, False),)
    streams: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class GetWorkflowAggregatesResponse(_OutputListResponse):
    """``output``: ``[{group, count?, min_created_at?, max_queue_wait_ms?, max_total_latency_ms?}]``."""


@dataclass(frozen=True, kw_only=True)
class GetStepAggregatesResponse(_OutputListResponse):
    """``output``: ``[{group, count?, max_duration_ms?}]``."""


@dataclass(frozen=True, kw_only=True)
class ForkWorkflowResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("new_workflow_id", _STR, False),)
    new_workflow_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ForkFromFailureResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("forked_workflow_ids", _STRINGS, False),)
    forked_workflow_ids: list[str] | None = None


@dataclass(frozen=True, kw_only=True)
class ExportWorkflowResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("serialized_workflow", _STR, False),)
    serialized_workflow: str | None = None


@dataclass(frozen=True, kw_only=True)
class ListSchedulesResponse(_OutputListResponse):
    """``output``: schedule records."""


@dataclass(frozen=True, kw_only=True)
class GetScheduleResponse(_OutputResponse):
    """``output``: the schedule record, None when not found."""


@dataclass(frozen=True, kw_only=True)
class TriggerScheduleResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("workflow_id", _STR, False),)
    workflow_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class BackfillScheduleResponse(Response):
    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("workflow_ids", _STRINGS, True),)
    workflow_ids: list[str] | None = None


@dataclass(frozen=True, kw_only=True)
class ListQueuesResponse(_OutputListResponse):
    """``output``: queue records."""


@dataclass(frozen=True, kw_only=True)
class GetQueueResponse(_OutputResponse):
    """``output``: the queue record, None when not found."""


@dataclass(frozen=True, kw_only=True)
class GetMetricsResponse(Response):
    """``metrics``: ``[{metric_type, metric_name, value}]``."""

    SPEC: ClassVar[tuple[tuple[str, str, bool], ...]] = (("metrics", _OBJECTS, True),)
    metrics: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class ListApplicationVersionsResponse(_OutputListResponse):
    """``output``: ``[{version_id, version_name, version_timestamp, created_at}]``."""


@dataclass(frozen=True, kw_only=True)
class RawResponse(Response):
    """A response of a type this module does not model; ``fields`` holds every non-envelope key."""

    fields: dict[str, Any] = field(default_factory=dict)


_RESPONSE_CLASSES: dict[str, type[Response]] = {
    MessageType.EXECUTOR_INFO.value: ExecutorInfoResponse,
    MessageType.RECOVERY.value: SuccessResponse,
    MessageType.CANCEL.value: SuccessResponse,
    MessageType.RESUME.value: SuccessResponse,
    MessageType.DELETE.value: SuccessResponse,
    MessageType.RESTART.value: SuccessResponse,
    MessageType.EXIST_PENDING_WORKFLOWS.value: ExistPendingWorkflowsResponse,
    MessageType.RETENTION.value: SuccessResponse,
    MessageType.LIST_WORKFLOWS.value: ListWorkflowsResponse,
    MessageType.LIST_QUEUED_WORKFLOWS.value: ListWorkflowsResponse,
    MessageType.GET_WORKFLOW.value: GetWorkflowResponse,
    MessageType.LIST_STEPS.value: ListStepsResponse,
    MessageType.GET_WORKFLOW_EVENTS.value: GetWorkflowEventsResponse,
    MessageType.GET_WORKFLOW_NOTIFICATIONS.value: GetWorkflowNotificationsResponse,
    MessageType.GET_WORKFLOW_STREAMS.value: GetWorkflowStreamsResponse,
    MessageType.GET_WORKFLOW_AGGREGATES.value: GetWorkflowAggregatesResponse,
    MessageType.GET_STEP_AGGREGATES.value: GetStepAggregatesResponse,
    MessageType.FORK_WORKFLOW.value: ForkWorkflowResponse,
    MessageType.FORK_FROM_FAILURE.value: ForkFromFailureResponse,
    MessageType.REWIND_WORKFLOW.value: SuccessResponse,
    MessageType.EXPORT_WORKFLOW.value: ExportWorkflowResponse,
    MessageType.IMPORT_WORKFLOW.value: SuccessResponse,
    MessageType.LIST_SCHEDULES.value: ListSchedulesResponse,
    MessageType.GET_SCHEDULE.value: GetScheduleResponse,
    MessageType.PAUSE_SCHEDULE.value: SuccessResponse,
    MessageType.RESUME_SCHEDULE.value: SuccessResponse,
    MessageType.TRIGGER_SCHEDULE.value: TriggerScheduleResponse,
    MessageType.BACKFILL_SCHEDULE.value: BackfillScheduleResponse,
    MessageType.LIST_QUEUES.value: ListQueuesResponse,
    MessageType.GET_QUEUE.value: GetQueueResponse,
    MessageType.GET_METRICS.value: GetMetricsResponse,
    MessageType.LIST_APPLICATION_VERSIONS.value: ListApplicationVersionsResponse,
    MessageType.SET_LATEST_APPLICATION_VERSION.value: SuccessResponse,
    MessageType.ALERT.value: SuccessResponse,
}


def _nests_deeper(data: object, limit: int) -> bool:
    """Whether arrays/objects nest more than ``limit`` deep (the top level is 1), without recursion."""
    if type(data) not in (dict, list):  # json.loads makes exact dicts and lists
        return False
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        container, depth = stack.pop()
        for child in container.values() if type(container) is dict else container:
            if type(child) in (dict, list):
                if depth >= limit:
                    return True
                if child:  # an empty one adds its own level only, checked just above
                    stack.append((child, depth + 1))
    return False


def _frame_size(frame: str | bytes) -> int:
    if isinstance(frame, bytes):
        return len(frame)
    return len(frame.encode("utf-8", "surrogatepass"))


class _NonFiniteNumberError(ValueError):
    """A NaN, Infinity or -Infinity literal, or a number too large for a float (1e999): not JSON (RFC 8259),
    and, once decoded, Python's json would write it back as NaN/Infinity, which API clients cannot parse."""


def _refuse_constant(_: str) -> Any:
    raise _NonFiniteNumberError


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFiniteNumberError
    return value


def _load(frame: object, max_bytes: int, max_depth: int) -> dict[str, Any]:
    if isinstance(frame, bytearray | memoryview):
        frame = bytes(frame)
    if not isinstance(frame, str | bytes):
        raise ProtocolError("frame is neither text nor bytes")
    # A str is at least one byte per character and at most four: count bytes only when it matters.
    if len(frame) > max_bytes or (len(frame) * 4 > max_bytes and _frame_size(frame) > max_bytes):
        raise ProtocolError(f"frame is larger than the {max_bytes}-byte limit")
    if isinstance(frame, bytes):
        try:
            frame = frame.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("frame is not valid UTF-8") from None
    try:
        # json's C parser guards its own recursion (RecursionError, at the interpreter's limit).
        data = json.loads(frame, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ProtocolError("frame nests too deeply") from None
    except _NonFiniteNumberError:
        raise ProtocolError("frame holds a non-finite number (NaN, Infinity or out of range), which is not "
                            "JSON") from None
    except ValueError:  # JSONDecodeError, and ints too long to convert
        raise ProtocolError("frame is not valid JSON") from None
    # Nothing nests deeper than the number of openers: only frames with many need the walk.
    if frame.count("[") + frame.count("{") > max_depth and _nests_deeper(data, max_depth):
        raise ProtocolError(f"frame nests deeper than {max_depth} levels")
    if not isinstance(data, dict):
        raise ProtocolError("frame is not a JSON object")
    return data


def _has_kind(value: object, kind: str) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _OBJECT:
        return isinstance(value, dict)
    if kind == _OBJECTS:
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def decode_response(text: str | bytes, max_bytes: int = MAX_FRAME_BYTES, max_depth: int = MAX_DEPTH) -> Response:
    """Parse and check one frame from an executor.

    Known types give their Response subclass (unknown fields ignored), other types a RawResponse.
    Raises only ProtocolError, whose reason never quotes the frame.
    """
    data = _load(text, max_bytes, max_depth)
    for key in ("type", "request_id"):
        if key not in data:
            raise ProtocolError(f"frame has no {key}")
        if not isinstance(data[key], str):
            raise ProtocolError(f"frame {key} must be a string")
    error_message = data.get("error_message")
    if error_message is not None and not isinstance(error_message, str):
        raise ProtocolError("field 'error_message' must be a string or null")
    msg_type, request_id = data["type"], data["request_id"]

    cls = _RESPONSE_CLASSES.get(msg_type)
    if cls is None:
        extra = {k: v for k, v in data.items() if k not in ("type", "request_id", "error_message")}
        return RawResponse(type=msg_type, request_id=request_id, error_message=error_message, fields=extra)

    values: dict[str, Any] = {}
    for name, kind, required in cls.SPEC:
        value = data.get(name)
        if value is None:
            if required and error_message is None:
                detail = "is missing" if name not in data else f"must be {_KIND_TEXT[kind]}, not null"
                raise ProtocolError(f"field '{name}' {detail}")
        elif not _has_kind(value, kind):
            kinds = _KIND_TEXT[kind] if required else f"{_KIND_TEXT[kind]} or null"
            raise ProtocolError(f"field '{name}' must be {kinds}")
        values[name] = value
    return cls(type=msg_type, request_id=request_id, error_message=error_message, **values)


def is_unknown_type_error(resp: Response) -> bool:
    """Whether the executor answered that it does not know the request's type (an older SDK).

    Python (>= 0.24), TypeScript, Go and Java SDKs all answer exactly ``"Unknown message type"``.
    Python 0.23 does not answer unknown types at all: the request just times out.
    """
    return resp.error_message is not None and resp.error_message.strip() == UNKNOWN_TYPE_ERROR


def is_metadata_only_refusal(resp: Response) -> bool:
    """Whether the executor refused because it runs in conductor metadata-only mode (data-moving types:
    get_workflow_events/notifications/streams, export_workflow, import_workflow)."""
    return resp.error_message is not None and resp.error_message.strip().endswith(METADATA_ONLY_REFUSAL)


# --------------------------------------------------------------------------------------------------
# What each SDK release supports

_Version = tuple[int, int, int]
_Change = tuple[_Version, tuple[str, ...], tuple[str, ...]]  # (release, types added, types removed)

# Python (PyPI "dbos"): from the git tags of dbos-inc/dbos-transact-py (the types each release's
# _conductor/conductor.py dispatches on) and the wheels of 2.31.1, 3.0.0, 3.1.0 and 3.2.0.
_PYTHON: tuple[_Change, ...] = (
    ((0, 23, 0), ("executor_info", "recovery", "cancel", "resume", "restart", "list_workflows",
                  "list_queued_workflows", "get_workflow"), ()),
    ((0, 24, 0), ("exist_pending_workflows",), ()),
    ((0, 25, 0), ("list_steps",), ()),
    ((1, 0, 0), ("fork_workflow",), ()),
    ((1, 5, 0), ("retention",), ()),
    ((2, 6, 0), ("get_metrics",), ()),
    ((2, 9, 0), ("delete", "export_workflow", "import_workflow"), ()),
    ((2, 10, 0), ("alert",), ()),
    ((2, 13, 0), ("list_schedules", "get_schedule", "pause_schedule", "resume_schedule",
                  "backfill_schedule", "trigger_schedule"), ()),
    ((2, 14, 0), ("list_application_versions", "set_latest_application_version"), ()),
    ((2, 15, 0), ("get_workflow_events", "get_workflow_notifications", "get_workflow_streams"), ()),
    ((2, 16, 0), ("fork_from_failure", "get_workflow_aggregates"), ()),
    ((2, 20, 0), ("list_queues", "get_queue"), ()),
    ((2, 23, 0), ("get_step_aggregates",), ()),
    ((3, 0, 0), (), ("restart",)),
    ((3, 1, 0), ("rewind_workflow",), ()),
)  # fmt: skip

# TypeScript (npm "@dbos-inc/dbos-sdk"): from the vX.Y tags of dbos-inc/dbos-transact-ts (the cases of
# src/conductor/conductor.ts) and the packages 5.0.2, 5.1.10 and 5.2.11. Retention is absent at tag v2.10
# and present at v2.10.24 (patch releases in between not checked). restart is gone in 5.0.2 and
# rewind_workflow is present in 5.1.10 (earlier 5.0/5.1 patches not checked).
_TYPESCRIPT: tuple[_Change, ...] = (
    ((2, 6, 0), ("executor_info", "recovery", "cancel", "resume", "restart", "list_workflows",
                 "list_queued_workflows", "get_workflow", "exist_pending_workflows"), ()),
    ((2, 7, 0), ("list_steps",), ()),
    ((2, 9, 0), ("fork_workflow",), ()),
    ((2, 10, 24), ("retention",), ()),
    ((4, 5, 0), ("get_metrics",), ()),
    ((4, 7, 0), ("delete", "export_workflow", "import_workflow"), ()),
    ((4, 8, 0), ("alert",), ()),
    ((4, 9, 0), ("list_schedules", "get_schedule", "pause_schedule", "resume_schedule",
                 "backfill_schedule", "trigger_schedule"), ()),
    ((4, 10, 0), ("list_application_versions", "set_latest_application_version"), ()),
    ((4, 11, 0), ("get_workflow_events", "get_workflow_notifications", "get_workflow_streams"), ()),
    ((4, 12, 0), ("fork_from_failure", "get_workflow_aggregates"), ()),
    ((4, 17, 0), ("list_queues", "get_queue"), ()),
    ((4, 19, 0), ("get_step_aggregates",), ()),
    ((5, 0, 0), (), ("restart",)),
    ((5, 1, 0), ("rewind_workflow",), ()),
)  # fmt: skip

# Go (module github.com/dbos-inc/dbos-transact-golang): from each release's dbos/conductor_protocol.go in the
# module zips v0.6.0 (the oldest the Go proxy serves) to v1.6.0, and frames of a v1.6.0 executor
# (tests/unit/sdk_frames/go-v1.6.0.json). No release has restart. From v1.7.0 the client is in the vendor's
# proprietary module, so those releases are left unknown (they never connect to Relay unmodified).
_GO: tuple[_Change, ...] = (
    ((0, 6, 0), ("executor_info", "recovery", "cancel", "resume", "list_workflows", "list_queued_workflows",
                 "get_workflow", "exist_pending_workflows", "list_steps", "fork_workflow", "retention"), ()),
    ((0, 9, 0), ("get_metrics",), ()),
    ((0, 12, 0), ("alert", "delete", "export_workflow", "import_workflow"), ()),
    ((1, 0, 0), ("list_schedules", "get_schedule", "pause_schedule", "resume_schedule", "backfill_schedule",
                 "trigger_schedule", "list_application_versions", "set_latest_application_version",
                 "get_workflow_events", "get_workflow_notifications", "get_workflow_streams", "fork_from_failure",
                 "get_workflow_aggregates", "get_step_aggregates", "list_queues", "get_queue"), ()),
    ((1, 5, 0), ("rewind_workflow",), ()),
)  # fmt: skip

# Java (Maven "dev.dbos:transact"): 1.1.0-m6 is the only release read (the others are not served here), from
# its jar (dev.dbos.transact.conductor.protocol.MessageType and Conductor's handlers) and frames of a real
# executor (tests/unit/sdk_frames/java-1.1.0-m6.json): the 32 types and restart, no rewind_workflow. It reports
# dbos_version "1.1.0-m6": the milestone suffix is ignored, so the other 1.1.x releases are assumed alike.
_JAVA: tuple[_Change, ...] = (
    ((1, 1, 0), ("executor_info", "recovery", "cancel", "resume", "restart", "delete", "list_workflows",
                 "list_queued_workflows", "get_workflow", "exist_pending_workflows", "list_steps", "fork_workflow",
                 "fork_from_failure", "retention", "get_metrics", "alert", "export_workflow", "import_workflow",
                 "list_schedules", "get_schedule", "pause_schedule", "resume_schedule", "backfill_schedule",
                 "trigger_schedule", "list_application_versions", "set_latest_application_version",
                 "get_workflow_events", "get_workflow_notifications", "get_workflow_streams",
                 "get_workflow_aggregates", "get_step_aggregates", "list_queues", "get_queue"), ()),
)  # fmt: skip

# language -> (changes, newest release line read; anything newer is unknown)
_SUPPORT: dict[str, tuple[tuple[_Change, ...], tuple[int, int]]] = {
    "python": (_PYTHON, (3, 2)),
    "typescript": (_TYPESCRIPT, (5, 2)),
    "go": (_GO, (1, 6)),
    "java": (_JAVA, (1, 1)),
}

# workflow_ids (several workflows in one cancel/resume/delete), per type: the release that reads it (same
# sources as above; Go's delete had it before its cancel and resume did). Older releases ignore it and act
# on workflow_id alone.
_BULK_TYPES = ("cancel", "resume", "delete")
_BULK_IDS: dict[str, dict[str, _Version]] = {
    "python": dict.fromkeys(_BULK_TYPES, (2, 15, 0)),
    "typescript": dict.fromkeys(_BULK_TYPES, (4, 11, 0)),
    "go": {"delete": (0, 12, 0), "cancel": (1, 0, 0), "resume": (1, 0, 0)},
    "java": dict.fromkeys(_BULK_TYPES, (1, 1, 0)),
}

_VERSION = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def _parse_version(text: str) -> _Version | None:
    match = _VERSION.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def _known_release(language: str, dbos_version: str) -> tuple[str, _Version] | None:
    lang = language.strip().lower() if isinstance(language, str) else ""
    version = _parse_version(dbos_version)
    if lang not in _SUPPORT or version is None:
        return None
    changes, newest = _SUPPORT[lang]
    if version < changes[0][0] or version[:2] > newest:
        return None
    return lang, version


@functools.lru_cache(maxsize=256)
def supported_types(language: str, dbos_version: str) -> frozenset[str] | None:
    """Cached: routing asks for every executor on every call, and the answer is a pure function.
    The request types an executor of this SDK language/release answers, best effort; None if unknown
    (other languages, unparseable versions, releases before the SDK had a conductor client or newer
    than the ones read)."""
    known = _known_release(language, dbos_version)
    if known is None:
        return None
    lang, version = known
    types: set[str] = set()
    for release, added, removed in _SUPPORT[lang][0]:
        if release <= version:
            types.update(added)
            types.difference_update(removed)
    return frozenset(types)


def supports_bulk_ids(language: str, dbos_version: str, message_type: str | None = None) -> bool | None:
    """Whether ``message_type`` (cancel, resume or delete; None: all three) may carry several
    ``workflow_ids`` (older SDKs silently act on the first only); None if the release is unknown."""
    known = _known_release(language, dbos_version)
    if known is None:
        return None
    lang, version = known
    types = _BULK_TYPES if message_type is None else (message_type,)
    return all(t in _BULK_IDS[lang] and version >= _BULK_IDS[lang][t] for t in types)
