"""Decoding an executor's frame: size and depth limits, strict JSON, each field checked against its
response's table; reasons never quote the frame (pure)."""

from __future__ import annotations

import json
import math

# Every module of request classes, imported for what defining them does: each class registers its answer.
import relay.wire.catalog_requests
import relay.wire.requests
import relay.wire.workflow_requests  # noqa: F401
from relay.wire.errors import ProtocolError
from relay.wire.json_depth import nests_deeper
from relay.wire.json_types import JSONObject
from relay.wire.messages import (
    MAX_DEPTH,
    MAX_FRAME_BYTES,
    METADATA_ONLY_REFUSAL,
    SEND_RACE_ERROR,
    UNKNOWN_TYPE_ERROR,
)
from relay.wire.responses import (
    _BOOL,
    _KIND_TEXT,
    _OBJECT,
    _OBJECTS,
    _STR,
    RawResponse,
    Response,
    answer_of,
)


def _frame_size(frame: str | bytes) -> int:
    if isinstance(frame, bytes):
        return len(frame)
    return len(frame.encode("utf-8", "surrogatepass"))


class _NonFiniteNumberError(ValueError):
    """A NaN, Infinity or -Infinity literal, or a number too large for a float (1e999): not JSON (RFC 8259),
    and, once decoded, Python's json would write it back as NaN/Infinity, which API clients cannot parse."""


def _refuse_constant(_: str) -> object:
    raise _NonFiniteNumberError


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFiniteNumberError
    return value


def json_loads_with(decoder: json.JSONDecoder, data: str | bytes | bytearray) -> object:
    """`json.loads(data, ...)` through a decoder built once with those options (json.loads builds one per call
    whenever an option is given): the same handling of bytes (their UTF encoding detected) and of a BOM."""
    if isinstance(data, bytes | bytearray):
        data = data.decode(json.detect_encoding(data), "surrogatepass")
    elif not isinstance(data, str):
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {data.__class__.__name__}")
    if data.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
    return decoder.decode(data)


_STRICT_FRAME = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def _load(frame: object, max_bytes: int, max_depth: int) -> JSONObject:
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
    # Measured before parsing: the parser recurses once per level (wire/json_depth.py).
    if nests_deeper(frame, max_depth):
        raise ProtocolError(f"frame nests deeper than {max_depth} levels")
    try:
        data = json_loads_with(_STRICT_FRAME, frame)
    except RecursionError:  # not reached under the limit; kept as the last guard
        raise ProtocolError("frame nests too deeply") from None
    except _NonFiniteNumberError:
        raise ProtocolError("frame holds a non-finite number (NaN, Infinity or out of range), which is not "
                            "JSON") from None
    except ValueError:  # JSONDecodeError, and ints too long to convert
        raise ProtocolError("frame is not valid JSON") from None
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
    envelope: list[str] = []
    for key in ("type", "request_id"):
        if key not in data:
            raise ProtocolError(f"frame has no {key}")
        value = data[key]
        if not isinstance(value, str):
            raise ProtocolError(f"frame {key} must be a string")
        envelope.append(value)
    error_message = data.get("error_message")
    if error_message is not None and not isinstance(error_message, str):
        raise ProtocolError("field 'error_message' must be a string or null")
    msg_type, request_id = envelope

    cls = answer_of(msg_type)
    if cls is None:
        extra = {k: v for k, v in data.items() if k not in ("type", "request_id", "error_message")}
        return RawResponse(type=msg_type, request_id=request_id, error_message=error_message, fields=extra)

    values: JSONObject = {}  # keyword arguments of the class RESPONSE_FIELDS made: checked against its SPEC
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


def is_send_race(resp: Response) -> bool:
    """Whether the executor failed only to send its answer because another answer was still going out on its
    socket (the Java SDK's export: SEND_RACE_ERROR). Asking again is safe for the read-only types it affects."""
    return resp.error_message is not None and resp.error_message.strip() == SEND_RACE_ERROR


# --------------------------------------------------------------------------------------------------
