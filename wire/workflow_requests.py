"""Requests about workflows: list, get, steps, events, aggregates, fork, rewind, export, import (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from relay.wire.fields import (
    _Body,
    count,
    flag,
    identifier,
    integer,
    listed,
    one_or_listed,
    optional_flag,
    optional_identifier,
    optional_integer,
    optional_mapping,
    optional_text,
    positive_count,
)
from relay.wire.json_types import JSONObject
from relay.wire.messages import (
    MessageType,
)
from relay.wire.requests import Request
from relay.wire.responses import (
    ExportWorkflowResponse,
    ForkFromFailureResponse,
    ForkWorkflowResponse,
    GetStepAggregatesResponse,
    GetWorkflowAggregatesResponse,
    GetWorkflowEventsResponse,
    GetWorkflowNotificationsResponse,
    GetWorkflowResponse,
    GetWorkflowStreamsResponse,
    ListStepsResponse,
    ListWorkflowsResponse,
    SuccessResponse,
)

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
    attributes: JSONObject | None = None
    limit: int | None = None
    offset: int | None = None
    sort_desc: bool = False
    load_input: bool = False
    load_output: bool = False
    queues_only: bool = False

    CHECKS = (
        (listed, ("workflow_uuids",)), (one_or_listed, STRING_OR_LIST), (optional_text, TIMES),
        (optional_flag, ("was_forked_from", "has_parent")),
        (flag, ("sort_desc", "load_input", "load_output", "queues_only")),
        (optional_mapping, ("attributes",)), (count, ("limit", "offset")),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ListWorkflowsRequest(Request, message_type=MessageType.LIST_WORKFLOWS, answer=ListWorkflowsResponse):
    """Answered by ListWorkflowsResponse."""

    body: ListWorkflowsBody = field(default_factory=ListWorkflowsBody)


@dataclass(frozen=True, kw_only=True)
class ListQueuedWorkflowsRequest(Request, message_type=MessageType.LIST_QUEUED_WORKFLOWS, answer=ListWorkflowsResponse):
    """Answered by ListWorkflowsResponse (type list_queued_workflows)."""

    body: ListWorkflowsBody = field(default_factory=ListWorkflowsBody)


@dataclass(frozen=True, kw_only=True)
class GetWorkflowRequest(Request, message_type=MessageType.GET_WORKFLOW, answer=GetWorkflowResponse):
    """Answered by GetWorkflowResponse (``output`` is None when there is no such workflow)."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset({"load_input", "load_output"})
    workflow_id: str
    load_input: bool = True
    load_output: bool = True

    CHECKS = ((identifier, ("workflow_id",)), (flag, ("load_input", "load_output")))


@dataclass(frozen=True, kw_only=True)
class ListStepsRequest(Request, message_type=MessageType.LIST_STEPS, answer=ListStepsResponse):
    """Answered by ListStepsResponse."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset({"load_output"})
    workflow_id: str
    load_output: bool = True
    limit: int | None = None
    offset: int | None = None

    CHECKS = ((identifier, ("workflow_id",)), (flag, ("load_output",)), (count, ("limit", "offset")))


@dataclass(frozen=True, kw_only=True)
class _OneWorkflowRequest(Request):
    workflow_id: str

    CHECKS = ((identifier, ("workflow_id",)),)


@dataclass(frozen=True, kw_only=True)
class GetWorkflowEventsRequest(
    _OneWorkflowRequest, message_type=MessageType.GET_WORKFLOW_EVENTS, answer=GetWorkflowEventsResponse
):
    """Answered by GetWorkflowEventsResponse."""


@dataclass(frozen=True, kw_only=True)
class GetWorkflowNotificationsRequest(
    _OneWorkflowRequest, message_type=MessageType.GET_WORKFLOW_NOTIFICATIONS, answer=GetWorkflowNotificationsResponse
):
    """Answered by GetWorkflowNotificationsResponse."""


@dataclass(frozen=True, kw_only=True)
class GetWorkflowStreamsRequest(
    _OneWorkflowRequest, message_type=MessageType.GET_WORKFLOW_STREAMS, answer=GetWorkflowStreamsResponse
):
    """Answered by GetWorkflowStreamsResponse."""


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
    attributes: JSONObject | None = None

    CHECKS = (
        (listed, LISTS), (optional_text, TIMES), (flag, FLAGS), (optional_flag, ("was_forked_from", "has_parent")),
        (optional_mapping, ("attributes",)), (positive_count, ("time_bucket_size_ms",)),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class GetWorkflowAggregatesRequest(
    Request, message_type=MessageType.GET_WORKFLOW_AGGREGATES, answer=GetWorkflowAggregatesResponse
):
    """Answered by GetWorkflowAggregatesResponse."""

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

    CHECKS = (
        (listed, LISTS), (flag, FLAGS), (optional_text, ("completed_after", "completed_before")),
        (positive_count, ("time_bucket_size_ms",)),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class GetStepAggregatesRequest(Request, message_type=MessageType.GET_STEP_AGGREGATES, answer=GetStepAggregatesResponse):
    """Answered by GetStepAggregatesResponse."""

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

    CHECKS = (
        (identifier, ("workflow_id",)), (integer, ("start_step",)),
        (optional_identifier, ("new_workflow_id", "application_version", "queue_name", "queue_partition_key")),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ForkWorkflowRequest(Request, message_type=MessageType.FORK_WORKFLOW, answer=ForkWorkflowResponse):
    """Answered by ForkWorkflowResponse."""

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

    CHECKS = (
        (listed, ("workflow_ids",)),
        (optional_identifier, ("application_version", "queue_name", "queue_partition_key", "from_step_name")),
        (flag, ("from_last_failure", "from_last_step")), (optional_integer, ("from_step",)),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ForkFromFailureRequest(Request, message_type=MessageType.FORK_FROM_FAILURE, answer=ForkFromFailureResponse):
    """Answered by ForkFromFailureResponse."""

    body: ForkFromFailureBody


@dataclass(frozen=True, kw_only=True)
class RewindWorkflowBody(_Body):
    """``start_step`` is required here: when absent, Python rewinds from step 1 and TypeScript from 0."""

    workflow_id: str
    start_step: int
    application_version: str | None = None
    queue_name: str | None = None
    queue_partition_key: str | None = None

    CHECKS = (
        (identifier, ("workflow_id",)), (integer, ("start_step",)),
        (optional_identifier, ("application_version", "queue_name", "queue_partition_key")),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class RewindWorkflowRequest(Request, message_type=MessageType.REWIND_WORKFLOW, answer=SuccessResponse):
    """Answered by SuccessResponse (Python >= 3.1, TypeScript >= 5.1)."""

    body: RewindWorkflowBody


@dataclass(frozen=True, kw_only=True)
class ExportWorkflowRequest(Request, message_type=MessageType.EXPORT_WORKFLOW, answer=ExportWorkflowResponse):
    """Answered by ExportWorkflowResponse.

    The export is language-specific (Python: base64 of gzipped pickle; TypeScript: base64 of gzipped
    JSON): import it only into an executor of the same language.
    """

    ALWAYS: ClassVar[frozenset[str]] = frozenset({"export_children"})
    workflow_id: str
    export_children: bool = False

    CHECKS = ((identifier, ("workflow_id",)), (flag, ("export_children",)))


@dataclass(frozen=True, kw_only=True)
class ImportWorkflowRequest(Request, message_type=MessageType.IMPORT_WORKFLOW, answer=SuccessResponse):
    """Answered by SuccessResponse."""

    serialized_workflow: str

    CHECKS = ((identifier, ("serialized_workflow",)),)
