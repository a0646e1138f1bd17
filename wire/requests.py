"""Requests (Relay -> executor): the envelope, the base classes, and the requests about executors and
recovery; `encode_request` writes any of them as one JSON frame (pure)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from relay.wire.fields import (
    FieldChecks,
    _Body,
    _check_id,
    _set,
    _wire_fields,
    count,
    flag,
    identifier,
    listed,
    optional_identifier,
    run_checks,
    string_list,
    text,
)
from relay.wire.json_types import JSON, JSONObject
from relay.wire.messages import (
    MessageType,
    new_request_id,
)
from relay.wire.responses import (
    ExecutorInfoResponse,
    ExistPendingWorkflowsResponse,
    Response,
    SuccessResponse,
    register_answer,
)


@dataclass(frozen=True, kw_only=True)
class Request:
    """Base of the typed requests: ``type`` is fixed per class, ``request_id`` is fresh by default."""

    type: ClassVar[MessageType]
    answer: ClassVar[builtins.type[Response]]  # the response class an executor answers this request with
    ALWAYS: ClassVar[frozenset[str]] = frozenset()
    CHECKS: ClassVar[FieldChecks] = ()  # this class's own fields' checks (see check_fields)
    _CHECKS_IN_ORDER: ClassVar[FieldChecks] = ()  # every class's CHECKS from the bases down, joined once per class

    request_id: str = field(default_factory=new_request_id)

    def __init_subclass__(
        cls, *, message_type: MessageType | None = None, answer: builtins.type[Response] | None = None, **kwargs: object
    ) -> None:
        """A concrete request names its type and answer in its class line; the codec learns the answer."""
        super().__init_subclass__(**kwargs)
        cls._CHECKS_IN_ORDER = tuple(
            check for klass in reversed(cls.__mro__) for check in vars(klass).get("CHECKS", ())
        )
        if message_type is not None and answer is not None:
            cls.type, cls.answer = message_type, answer
            register_answer(message_type, answer)

    def __post_init__(self) -> None:
        _check_id("request_id", self.request_id)
        self.check_fields()

    def check_fields(self) -> None:
        """Run the ``CHECKS`` (see FieldCheck) of each class from the bases down: a base's fields come first."""
        run_checks(self, self._CHECKS_IN_ORDER)

    def wire_fields(self) -> JSONObject:
        """The frame's keys other than ``type`` and ``request_id``."""
        return _wire_fields(self, self.ALWAYS, skip=frozenset({"request_id"}))


@dataclass(frozen=True, kw_only=True)
class ExecutorInfoRequest(Request, message_type=MessageType.EXECUTOR_INFO, answer=ExecutorInfoResponse):
    """Sent first on every connection; answered by ExecutorInfoResponse."""


@dataclass(frozen=True, kw_only=True)
class RecoveryRequest(Request, message_type=MessageType.RECOVERY, answer=SuccessResponse):
    """Recover the PENDING workflows of these (dead) executors; answered by SuccessResponse."""

    executor_ids: list[str]

    CHECKS = ((listed, ("executor_ids",)),)


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

    def check_fields(self) -> None:
        if (self.workflow_id is None) == (self.workflow_ids is None):
            raise ValueError("give exactly one of workflow_id and workflow_ids")
        if self.workflow_id is not None:
            _check_id("workflow_id", self.workflow_id)
        else:
            ids = string_list(self.workflow_ids, "workflow_ids") or []
            _set(self, "workflow_ids", ids)
        super().check_fields()

    @property
    def ids(self) -> list[str]:
        """The workflows this request is about."""
        return [self.workflow_id] if self.workflow_id is not None else list(self.workflow_ids or [])

    def wire_fields(self) -> JSONObject:
        out = _wire_fields(self, self.ALWAYS, skip=frozenset({"request_id", "workflow_id", "workflow_ids"}))
        ids = self.ids
        target: JSONObject = {"workflow_id": ids[0]}
        if len(ids) > 1:
            target["workflow_ids"] = ids
        return {**target, **out}


@dataclass(frozen=True, kw_only=True)
class CancelRequest(_WorkflowsTarget, message_type=MessageType.CANCEL, answer=SuccessResponse):
    """Answered by SuccessResponse."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset({"cancel_children"})
    cancel_children: bool = False

    CHECKS = ((flag, ("cancel_children",)),)


@dataclass(frozen=True, kw_only=True)
class ResumeRequest(_WorkflowsTarget, message_type=MessageType.RESUME, answer=SuccessResponse):
    """Answered by SuccessResponse. ``queue_name``: the queue to resume onto (SDK default when unset)."""

    queue_name: str | None = None

    CHECKS = ((optional_identifier, ("queue_name",)),)


@dataclass(frozen=True, kw_only=True)
class DeleteRequest(_WorkflowsTarget, message_type=MessageType.DELETE, answer=SuccessResponse):
    """Answered by SuccessResponse. The Python SDK requires ``delete_children``: it is always sent."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset({"delete_children"})
    delete_children: bool = False

    CHECKS = ((flag, ("delete_children",)),)


@dataclass(frozen=True, kw_only=True)
class ExistPendingWorkflowsRequest(
    Request, message_type=MessageType.EXIST_PENDING_WORKFLOWS, answer=ExistPendingWorkflowsResponse
):
    """Answered by ExistPendingWorkflowsResponse."""

    executor_id: str
    application_version: str

    CHECKS = ((identifier, ("executor_id",)), (text, ("application_version",)))


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

    CHECKS = ((count, tuple(ALWAYS)),)


@dataclass(frozen=True, kw_only=True)
class RetentionRequest(Request, message_type=MessageType.RETENTION, answer=SuccessResponse):
    """Answered by SuccessResponse at once; the SDKs run the garbage collection in the background."""

    body: RetentionBody



@dataclass(frozen=True)
class RawRequest:
    """A request of a type this module does not model (e.g. one a newer SDK added), sent as given.

    ``encode_request`` checks that ``type`` and ``request_id`` are non-empty strings and refuses
    ``fields`` that try to set either of them.
    """

    type: str
    fields: Mapping[str, JSON] = field(default_factory=dict)
    request_id: str = field(default_factory=new_request_id)


_ENVELOPE_KEYS = frozenset({"type", "request_id"})


def encode_request(req: Request | RawRequest) -> str:
    """The JSON text of a request frame. Raises ValueError/TypeError for a request that cannot be sent."""
    if isinstance(req, Request):
        frame: JSONObject = {"type": req.type.value, "request_id": req.request_id, **req.wire_fields()}
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
