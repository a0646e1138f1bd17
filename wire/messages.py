"""Frame basics: the message types, size and depth limits, request ids (pure)."""

from __future__ import annotations

import os
from enum import StrEnum

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Default limit on the size of one frame from an executor, checked before it is parsed."""

MAX_DEPTH = 100
"""Default limit on how deeply arrays/objects may nest in a frame (real frames nest 3 or 4 deep)."""

UNKNOWN_TYPE_ERROR = "Unknown message type"
"""What every SDK (Python, TypeScript, Go, Java) answers to a type it does not know, as ``error_message``."""

METADATA_ONLY_REFUSAL = "is not allowed in conductor metadata-only mode"
"""Tail of the ``error_message`` an SDK in metadata-only mode answers to the data-moving types."""

SEND_RACE_ERROR = "Failed to send websocket frame"
"""The Java SDK's answer to ``export_workflow`` when its streamed export lost a race on its own socket: the export
is sent without the lock its other responses take, and java.net.http refuses a text send while the previous one
is still completing ("Send pending"), which happens when the export follows another answer closely. Transient:
the same request succeeds a moment later."""


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



# Request ids made ahead, from one read of the OS's random source per batch rather than one per id (every
# request sent to an executor needs one). list.pop() hands each out once, even across threads.
_ID_BATCH = 256
_ready_ids: list[str] = []
os.register_at_fork(after_in_child=_ready_ids.clear)  # a forked child makes its own


def _uuid4_hex(raw: bytes) -> str:
    """`uuid.UUID(bytes=raw, version=4).hex`: the version and variant bits set, the other 122 random."""
    value = (int.from_bytes(raw, "big") & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48)
    return f"{value:032x}"


def new_request_id() -> str:
    """A fresh request id (uuid4, hex)."""
    try:
        return _ready_ids.pop()
    except IndexError:
        pool = os.urandom(16 * _ID_BATCH)
        _ready_ids.extend(_uuid4_hex(pool[i:i + 16]) for i in range(16, len(pool), 16))
        return _uuid4_hex(pool[:16])
