"""Responses (executor -> Relay): one declared table of every response's fields, from which the response
classes are made and by which the codec (codec.py) checks each frame (pure)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from relay.wire.json_types import JSONObject
from relay.wire.messages import MessageType

# Field kinds for decoding: what a field's JSON value must be.
_STR, _BOOL, _OBJECT, _OBJECTS, _STRINGS = "str", "bool", "object", "objects", "strings"
_KIND_TEXT = {
    _STR: "a string",
    _BOOL: "a boolean",
    _OBJECT: "an object",
    _OBJECTS: "a list of objects",
    _STRINGS: "a list of strings",
}

# (field, kind, required): a required field may be absent or null only in an error response (an SDK refusing
# a type, e.g. "Unknown message type", sends nothing but the envelope). Every field defaults to None.
Spec = tuple[tuple[str, str, bool], ...]


@dataclass(frozen=True, kw_only=True)
class Response:
    """Base of every decoded response. ``error_message`` is set when the operation failed."""

    SPEC: ClassVar[Spec] = ()

    type: str
    request_id: str
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_message is None


@dataclass(frozen=True, kw_only=True)
class RawResponse(Response):
    """A response of a type this module does not model; ``fields`` holds every non-envelope key."""

    fields: JSONObject = field(default_factory=dict)


_OUTPUT_LIST: Spec = (("output", _OBJECTS, True),)  # a list of records
_OUTPUT: Spec = (("output", _OBJECT, False),)  # one record, None when not found

# THE table: each response class and its fields. Records inside (workflows, steps, schedules, queues, ...) are
# the executor's own dicts. Comments name the types answered with each class (see RESPONSE_OF_TYPE).
RESPONSE_FIELDS: dict[str, Spec] = {
    "ExecutorInfoResponse": (
        ("executor_id", _STR, True), ("application_version", _STR, True), ("hostname", _STR, False),
        ("language", _STR, False), ("dbos_version", _STR, False), ("executor_metadata", _OBJECT, False),
    ),
    # Answers recovery, cancel, resume, delete, restart, retention, rewind_workflow, import_workflow, pause_schedule,
    # resume_schedule, set_latest_application_version, alert
    "SuccessResponse": (("success", _BOOL, True),),
    "ExistPendingWorkflowsResponse": (("exist", _BOOL, True),),
    "ListWorkflowsResponse": _OUTPUT_LIST,  # list_workflows, list_queued_workflows: workflow status records
    "GetWorkflowResponse": _OUTPUT,  # the workflow status record
    "ListStepsResponse": (("output", _OBJECTS, False),),  # function_id, function_name, output, error, ...
    "GetWorkflowEventsResponse": (("events", _OBJECTS, False),),  # [{key, value}]
    # notifications carry topic, message, created_at_epoch_ms and consumed
    "GetWorkflowNotificationsResponse": (("notifications", _OBJECTS, False),),
    "GetWorkflowStreamsResponse": (("streams", _OBJECTS, False),),  # [{key, values}]
    # groups: [{group, count?, min_created_at?, max_queue_wait_ms?, max_total_latency_ms?}]
    "GetWorkflowAggregatesResponse": _OUTPUT_LIST,
    "GetStepAggregatesResponse": _OUTPUT_LIST,  # [{group, count?, max_duration_ms?}]
    "ForkWorkflowResponse": (("new_workflow_id", _STR, False),),
    "ForkFromFailureResponse": (("forked_workflow_ids", _STRINGS, False),),
    "ExportWorkflowResponse": (("serialized_workflow", _STR, False),),
    "ListSchedulesResponse": _OUTPUT_LIST,
    "GetScheduleResponse": _OUTPUT,
    "TriggerScheduleResponse": (("workflow_id", _STR, False),),
    "BackfillScheduleResponse": (("workflow_ids", _STRINGS, True),),
    "ListQueuesResponse": _OUTPUT_LIST,
    "GetQueueResponse": _OUTPUT,
    "GetMetricsResponse": (("metrics", _OBJECTS, True),),  # [{metric_type, metric_name, value}]
    # versions carry version_id, version_name, version_timestamp and created_at
    "ListApplicationVersionsResponse": _OUTPUT_LIST,
}


def _response_class(name: str, spec: Spec) -> type[Response]:
    fields = [(field_name, Any, dataclasses.field(default=None)) for field_name, _, _ in spec]
    return dataclasses.make_dataclass(name, fields, bases=(Response,), frozen=True, kw_only=True,
                                      namespace={"SPEC": spec, "__module__": __name__})


_CLASSES = {name: _response_class(name, spec) for name, spec in RESPONSE_FIELDS.items()}
if TYPE_CHECKING:
    # The fields that Relay reads by name, as the type checker sees them (RESPONSE_FIELDS makes the classes).
    @dataclass(frozen=True, kw_only=True)
    class ExecutorInfoResponse(Response):
        executor_id: str  # required: the codec refuses an answer without them (unless it is an error)
        application_version: str
        hostname: str | None = None
        language: str | None = None
        dbos_version: str | None = None
        executor_metadata: JSONObject | None = None

    @dataclass(frozen=True, kw_only=True)
    class SuccessResponse(Response):
        success: bool | None = None

    @dataclass(frozen=True, kw_only=True)
    class ExistPendingWorkflowsResponse(Response):
        exist: bool | None = None
else:
    ExecutorInfoResponse = _CLASSES["ExecutorInfoResponse"]
    SuccessResponse = _CLASSES["SuccessResponse"]
    ExistPendingWorkflowsResponse = _CLASSES["ExistPendingWorkflowsResponse"]
ListWorkflowsResponse = _CLASSES["ListWorkflowsResponse"]
GetWorkflowResponse = _CLASSES["GetWorkflowResponse"]
ListStepsResponse = _CLASSES["ListStepsResponse"]
GetWorkflowEventsResponse = _CLASSES["GetWorkflowEventsResponse"]
GetWorkflowNotificationsResponse = _CLASSES["GetWorkflowNotificationsResponse"]
GetWorkflowStreamsResponse = _CLASSES["GetWorkflowStreamsResponse"]
GetWorkflowAggregatesResponse = _CLASSES["GetWorkflowAggregatesResponse"]
GetStepAggregatesResponse = _CLASSES["GetStepAggregatesResponse"]
ForkWorkflowResponse = _CLASSES["ForkWorkflowResponse"]
ForkFromFailureResponse = _CLASSES["ForkFromFailureResponse"]
ExportWorkflowResponse = _CLASSES["ExportWorkflowResponse"]
ListSchedulesResponse = _CLASSES["ListSchedulesResponse"]
GetScheduleResponse = _CLASSES["GetScheduleResponse"]
TriggerScheduleResponse = _CLASSES["TriggerScheduleResponse"]
BackfillScheduleResponse = _CLASSES["BackfillScheduleResponse"]
ListQueuesResponse = _CLASSES["ListQueuesResponse"]
GetQueueResponse = _CLASSES["GetQueueResponse"]
GetMetricsResponse = _CLASSES["GetMetricsResponse"]
ListApplicationVersionsResponse = _CLASSES["ListApplicationVersionsResponse"]

# Each message type's response class, filled by the request classes themselves (wire/requests.py
# `Request.__init_subclass__`: a request declares its `answer`). restart has no request class (Relay does not send
# it; RawRequest can) but its answer is understood.
_ANSWERS: dict[str, type[Response]] = {MessageType.RESTART.value: _CLASSES["SuccessResponse"]}


def register_answer(message_type: MessageType, answer: type[Response]) -> None:
    """Record the response class that answers ``message_type`` (once per type)."""
    known = _ANSWERS.setdefault(message_type.value, answer)
    if known is not answer:
        raise TypeError(f"{message_type.value} is answered by {known.__name__} already")


def answer_of(message_type: str) -> type[Response] | None:
    """The response class of a message type; None for a type no request class declares. The request classes
    register themselves on import: codec.py imports every module of them."""
    return _ANSWERS.get(message_type)
