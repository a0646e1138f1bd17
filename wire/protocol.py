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

This module is the package's public face (callers write ``protocol.X``); the parts live by concern in
messages.py, fields.py, requests.py, workflow_requests.py, catalog_requests.py, responses.py, codec.py,
support.py and errors.py.
"""

from __future__ import annotations

from relay.wire.catalog_requests import (
    AlertRequest,
    BackfillScheduleRequest,
    GetMetricsRequest,
    GetQueueRequest,
    GetScheduleRequest,
    ListApplicationVersionsRequest,
    ListQueuesBody,
    ListQueuesRequest,
    ListSchedulesBody,
    ListSchedulesRequest,
    PauseScheduleRequest,
    ResumeScheduleRequest,
    SetLatestApplicationVersionRequest,
    TriggerScheduleRequest,
)
from relay.wire.codec import (
    decode_response,
    is_metadata_only_refusal,
    is_send_race,
    is_unknown_type_error,
)
from relay.wire.errors import (
    ProtocolError,
)
from relay.wire.fields import (
    string_list,
    string_or_list,
)
from relay.wire.messages import (
    MAX_DEPTH,
    MAX_FRAME_BYTES,
    METADATA_ONLY_REFUSAL,
    UNKNOWN_TYPE_ERROR,
    MessageType,
    new_request_id,
)
from relay.wire.requests import (
    CancelRequest,
    DeleteRequest,
    ExecutorInfoRequest,
    ExistPendingWorkflowsRequest,
    RawRequest,
    RecoveryRequest,
    Request,
    ResumeRequest,
    RetentionBody,
    RetentionRequest,
    encode_request,
)
from relay.wire.responses import (
    BackfillScheduleResponse,
    ExecutorInfoResponse,
    ExistPendingWorkflowsResponse,
    ExportWorkflowResponse,
    ForkFromFailureResponse,
    ForkWorkflowResponse,
    GetMetricsResponse,
    GetQueueResponse,
    GetScheduleResponse,
    GetStepAggregatesResponse,
    GetWorkflowAggregatesResponse,
    GetWorkflowEventsResponse,
    GetWorkflowNotificationsResponse,
    GetWorkflowResponse,
    GetWorkflowStreamsResponse,
    ListApplicationVersionsResponse,
    ListQueuesResponse,
    ListSchedulesResponse,
    ListStepsResponse,
    ListWorkflowsResponse,
    RawResponse,
    Response,
    SuccessResponse,
    TriggerScheduleResponse,
    response_for,
)
from relay.wire.support import (
    supported_types,
    supports_bulk_ids,
)
from relay.wire.workflow_requests import (
    ExportWorkflowRequest,
    ForkFromFailureBody,
    ForkFromFailureRequest,
    ForkWorkflowBody,
    ForkWorkflowRequest,
    GetStepAggregatesBody,
    GetStepAggregatesRequest,
    GetWorkflowAggregatesBody,
    GetWorkflowAggregatesRequest,
    GetWorkflowEventsRequest,
    GetWorkflowNotificationsRequest,
    GetWorkflowRequest,
    GetWorkflowStreamsRequest,
    ImportWorkflowRequest,
    ListQueuedWorkflowsRequest,
    ListStepsRequest,
    ListWorkflowsBody,
    ListWorkflowsRequest,
    RewindWorkflowBody,
    RewindWorkflowRequest,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_FRAME_BYTES",
    "METADATA_ONLY_REFUSAL",
    "UNKNOWN_TYPE_ERROR",
    "AlertRequest",
    "BackfillScheduleRequest",
    "BackfillScheduleResponse",
    "CancelRequest",
    "DeleteRequest",
    "ExecutorInfoRequest",
    "ExecutorInfoResponse",
    "ExistPendingWorkflowsRequest",
    "ExistPendingWorkflowsResponse",
    "ExportWorkflowRequest",
    "ExportWorkflowResponse",
    "ForkFromFailureBody",
    "ForkFromFailureRequest",
    "ForkFromFailureResponse",
    "ForkWorkflowBody",
    "ForkWorkflowRequest",
    "ForkWorkflowResponse",
    "GetMetricsRequest",
    "GetMetricsResponse",
    "GetQueueRequest",
    "GetQueueResponse",
    "GetScheduleRequest",
    "GetScheduleResponse",
    "GetStepAggregatesBody",
    "GetStepAggregatesRequest",
    "GetStepAggregatesResponse",
    "GetWorkflowAggregatesBody",
    "GetWorkflowAggregatesRequest",
    "GetWorkflowAggregatesResponse",
    "GetWorkflowEventsRequest",
    "GetWorkflowEventsResponse",
    "GetWorkflowNotificationsRequest",
    "GetWorkflowNotificationsResponse",
    "GetWorkflowRequest",
    "GetWorkflowResponse",
    "GetWorkflowStreamsRequest",
    "GetWorkflowStreamsResponse",
    "ImportWorkflowRequest",
    "ListApplicationVersionsRequest",
    "ListApplicationVersionsResponse",
    "ListQueuedWorkflowsRequest",
    "ListQueuesBody",
    "ListQueuesRequest",
    "ListQueuesResponse",
    "ListSchedulesBody",
    "ListSchedulesRequest",
    "ListSchedulesResponse",
    "ListStepsRequest",
    "ListStepsResponse",
    "ListWorkflowsBody",
    "ListWorkflowsRequest",
    "ListWorkflowsResponse",
    "MessageType",
    "PauseScheduleRequest",
    "ProtocolError",
    "RawRequest",
    "RawResponse",
    "RecoveryRequest",
    "Request",
    "Response",
    "ResumeRequest",
    "ResumeScheduleRequest",
    "RetentionBody",
    "RetentionRequest",
    "RewindWorkflowBody",
    "RewindWorkflowRequest",
    "SetLatestApplicationVersionRequest",
    "SuccessResponse",
    "TriggerScheduleRequest",
    "TriggerScheduleResponse",
    "decode_response",
    "encode_request",
    "is_metadata_only_refusal",
    "is_send_race",
    "is_unknown_type_error",
    "new_request_id",
    "response_for",
    "string_list",
    "string_or_list",
    "supported_types",
    "supports_bulk_ids",
]
