"""Hypothesis against the executor frame decoder (``relay.wire.codec.decode_response``) and every response type.

tests/unit/test_protocol.py pins the decoder on hand-written frames; these properties throw generated ones at it:

- any frame (JSON objects with envelope and fields present, absent, null, of the right or any other JSON type)
  decodes exactly as an independent model of PROTOCOL.md says: into the type's class with the values sent, or
  a ProtocolError with the model's reason;
- for every response type: well-formed frames keep every value; one field of the wrong type, a missing required
  field, a truncation anywhere, bytes cut inside a UTF-8 sequence are refused;
- nesting is refused exactly past the depth limit, size exactly past the byte limit (counted in UTF-8), up to
  frames of several MiB;
- mutated and random text/bytes (lone surrogates, control characters, broken UTF-8) never raise anything but
  ProtocolError, and no reason ever quotes the frame.

Each property's examples are counted and written to README's reliability section (tests/support/reliability_report).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from relay.wire.codec import decode_response
from relay.wire.errors import ProtocolError
from relay.wire.messages import MessageType
from relay.wire.responses import GetWorkflowResponse, ListWorkflowsResponse, RawResponse, Response
from tests.fuzz.hypothesis_settings import fuzz
from tests.support.reliability_report import record

MARKER = "fuzz-marker-5e1f"  # put into frames: never in an error's reason
STATS: Counter[str] = Counter()

# -- an independent model of what a response frame must be (PROTOCOL.md) -------------------------------------------

STR, BOOL, OBJECT, OBJECTS, STRINGS = "str", "bool", "object", "objects", "strings"
KIND_TEXT = {STR: "a string", BOOL: "a boolean", OBJECT: "an object", OBJECTS: "a list of objects",
             STRINGS: "a list of strings"}


def has_kind(value: Any, kind: str) -> bool:
    if kind == STR:
        return type(value) is str
    if kind == BOOL:
        return type(value) is bool
    if kind == OBJECT:
        return type(value) is dict
    if kind == OBJECTS:
        return type(value) is list and all(type(v) is dict for v in value)
    return type(value) is list and all(type(v) is str for v in value)


def _class_of(message_type: str) -> type[Response]:
    """The class the decoder gives a type, found through the public API (an error answer needs no fields)."""
    frame = json.dumps({"type": message_type, "request_id": "r", "error_message": "x"})
    return type(decode_response(frame))


TYPES = sorted(t.value for t in MessageType)
CLASSES = {t: _class_of(t) for t in TYPES}
SPECS: dict[str, tuple[tuple[str, str, bool], ...]] = {t: tuple(CLASSES[t].SPEC) for t in TYPES}


def model(frame: Any) -> str | None:
    """The reason a frame (a parsed JSON value) must be refused for, or None when it must decode."""
    if type(frame) is not dict:
        return "frame is not a JSON object"
    for key in ("type", "request_id"):
        if key not in frame:
            return f"frame has no {key}"
        if type(frame[key]) is not str:
            return f"frame {key} must be a string"
    error = frame.get("error_message")
    if error is not None and type(error) is not str:
        return "field 'error_message' must be a string or null"
    for name, kind, required in SPECS.get(frame["type"], ()):
        value = frame.get(name)
        if value is None:
            if required and error is None:
                return f"field '{name}' is missing" if name not in frame else (
                    f"field '{name}' must be {KIND_TEXT[kind]}, not null")
        elif not has_kind(value, kind):
            return f"field '{name}' must be {KIND_TEXT[kind]}" + ("" if required else " or null")
    return None


def depth(value: Any) -> int:
    """How deep arrays and objects nest in a JSON value (a scalar is 0, ``[]`` is 1)."""
    if type(value) is dict:
        return 1 + max((depth(v) for v in value.values()), default=0)
    if type(value) is list:
        return 1 + max((depth(v) for v in value), default=0)
    return 0


# -- strategies ------------------------------------------------------------------------------------------------------

texts = st.one_of(st.text(max_size=24), st.just(MARKER), st.text(max_size=8).map(lambda t: t + MARKER))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), texts,
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=12
)
objects = st.dictionaries(texts, json_values, max_size=4)
KIND_VALUES = {
    STR: texts,
    BOOL: st.booleans(),
    OBJECT: objects,
    OBJECTS: st.lists(objects, max_size=4),
    STRINGS: st.lists(texts, max_size=4),
}


@st.composite
def any_frames(draw: st.DrawFn) -> dict[str, Any]:
    """Envelope keys and the type's fields each absent, null, of their kind, or any JSON value; extra fields."""
    frame: dict[str, Any] = draw(st.dictionaries(texts, json_values, max_size=3))
    message_type = draw(st.sampled_from(TYPES) | texts)
    for key, good in (("type", st.just(message_type)), ("request_id", texts)):
        mode = draw(st.sampled_from(["good"] * 8 + ["absent", "any"]))
        if mode == "absent":
            frame.pop(key, None)
        else:
            frame[key] = draw(good if mode == "good" else json_values)
    mode = draw(st.sampled_from(["absent", "absent", "null", "text", "text", "any"]))
    if mode == "absent":
        frame.pop("error_message", None)
    else:
        frame["error_message"] = {"null": None, "text": draw(texts), "any": draw(json_values)}.get(mode)
    for name, kind, _required in SPECS.get(message_type, ()):
        mode = draw(st.sampled_from(["absent", "null", "good", "good", "good", "any"]))
        if mode == "absent":
            frame.pop(name, None)
        else:
            frame[name] = None if mode == "null" else draw(KIND_VALUES[kind] if mode == "good" else json_values)
    return frame


@st.composite
def good_frames(draw: st.DrawFn, message_type: str) -> dict[str, Any]:
    """A frame of ``message_type`` that must decode: each field of its kind (optional ones may be left out)."""
    frame: dict[str, Any] = draw(st.dictionaries(st.text(min_size=1, max_size=8).map(lambda t: "x-" + t),
                                                 json_values, max_size=2))
    frame.update(type=message_type, request_id=draw(texts))
    if draw(st.booleans()):
        frame["error_message"] = None
    for name, kind, required in SPECS[message_type]:
        if required or draw(st.booleans()):
            frame[name] = draw(KIND_VALUES[kind])
    return frame


def decode(text: str | bytes, **limits: int) -> Response | ProtocolError:
    """decode_response's answer, whatever it is; anything but a Response or a ProtocolError fails the test."""
    try:
        response = decode_response(text, **limits)
    except ProtocolError as error:
        assert MARKER not in error.reason and MARKER not in str(error)
        assert error.__cause__ is None
        STATS["refused"] += 1
        return error
    assert isinstance(response, Response)
    STATS["decoded"] += 1
    return response


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values (NaN, which the decoder lets through in records, equals itself here)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def check_values(response: Response, frame: dict[str, Any]) -> None:
    """The decoded response holds exactly what the frame sent (records untouched, unknown fields dropped)."""
    assert response.type == frame["type"] and response.request_id == frame["request_id"]
    assert response.error_message == frame.get("error_message")
    if isinstance(response, RawResponse):
        assert same(response.fields, {k: v for k, v in frame.items()
                                      if k not in ("type", "request_id", "error_message")})
        return
    assert type(response) is CLASSES[frame["type"]]
    for name, _kind, _required in SPECS[frame["type"]]:
        assert same(getattr(response, name), frame.get(name))


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["frames"]:
        record(
            "fuzz-1-decoder", area="Frame decoder `decode_response`, every response type (Hypothesis)",
            tried={"frames": STATS["frames"], "decoded": STATS["decoded"], "refused": STATS["refused"],
                   "response types": len(TYPES), "deepest nesting": STATS["deepest"],
                   "largest frame (bytes)": STATS["largest"]},
            outcome="each decoded as the protocol model says or refused with a ProtocolError; no other exception, "
                    "no reason quoting the frame",
        )


# -- the properties --------------------------------------------------------------------------------------------------


@fuzz(700)
@given(any_frames())
def test_any_frame_decodes_exactly_as_the_model_says(frame: dict[str, Any]) -> None:
    STATS["frames"] += 1
    expected = model(frame)
    got = decode(json.dumps(frame))
    if expected is None:
        assert isinstance(got, Response), got
        check_values(got, frame)
    else:
        assert isinstance(got, ProtocolError), f"decoded, but the model refuses it: {expected}"
        assert got.reason == expected


@pytest.mark.parametrize("message_type", TYPES)
@fuzz(12)
@given(data=st.data())
def test_every_type_keeps_what_a_good_frame_sends(message_type: str, data: st.DataObject) -> None:
    frame = data.draw(good_frames(message_type))
    STATS["frames"] += 1
    text = json.dumps(frame, ensure_ascii=data.draw(st.booleans()))
    got = decode(text if data.draw(st.booleans()) else text.encode("utf-8", "surrogatepass"))
    assert isinstance(got, Response), got
    check_values(got, frame)


@pytest.mark.parametrize("message_type", TYPES)
@fuzz(12)
@given(data=st.data())
def test_every_type_refuses_a_field_of_the_wrong_type(message_type: str, data: st.DataObject) -> None:
    frame = data.draw(good_frames(message_type))
    name, kind, required = data.draw(st.sampled_from(SPECS[message_type]))
    if required and data.draw(st.booleans()):
        del frame[name]  # missing: refused unless the frame is an error answer
        frame.pop("error_message", None)
        expected = f"field '{name}' is missing"
    else:
        frame[name] = data.draw(json_values.filter(lambda v: v is not None and not has_kind(v, kind)))
        expected = f"field '{name}' must be {KIND_TEXT[kind]}" + ("" if required else " or null")
    STATS["frames"] += 1
    got = decode(json.dumps(frame))
    assert isinstance(got, ProtocolError)
    assert got.reason == expected


@pytest.mark.parametrize("message_type", TYPES)
@fuzz(12)
@given(data=st.data())
def test_every_type_refuses_a_truncated_frame(message_type: str, data: st.DataObject) -> None:
    frame = data.draw(good_frames(message_type))
    text = json.dumps(frame, ensure_ascii=False)
    raw = text.encode("utf-8", "surrogatepass")
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    STATS["frames"] += 2
    assert isinstance(decode(text[: min(cut, len(text) - 1)]), ProtocolError)
    refused = decode(raw[:cut])
    assert isinstance(refused, ProtocolError)
    assert refused.reason in ("frame is not valid JSON", "frame is not valid UTF-8")


@fuzz(300)
@given(
    levels=st.integers(min_value=1, max_value=400),
    dicts=st.integers(min_value=0, max_value=2**400),
    max_depth=st.integers(min_value=1, max_value=200),
)
def test_nesting_is_refused_exactly_past_the_limit(levels: int, dicts: int, max_depth: int) -> None:
    nested: Any = MARKER
    for level in range(levels):  # bit `level` of `dicts` says whether that level is an object or an array
        nested = {"k": nested} if dicts >> level & 1 else [nested]
    frame = {"type": "list_workflows", "request_id": "r", "output": [{"Input": nested}]}
    STATS["frames"] += 1
    STATS["deepest"] = max(STATS["deepest"], depth(frame))
    got = decode(json.dumps(frame), max_depth=max_depth)
    if depth(frame) > max_depth:
        assert isinstance(got, ProtocolError)
        assert got.reason in (f"frame nests deeper than {max_depth} levels", "frame nests too deeply")
    else:
        assert isinstance(got, ListWorkflowsResponse)
        assert got.output == frame["output"]


@fuzz(300)
@given(
    max_bytes=st.integers(min_value=64, max_value=4096),
    pad=st.lists(st.sampled_from(["a", "é", "€", "𝄞", "\\", '"', "\n", "\x00"]), max_size=2500).map("".join),
    as_bytes=st.booleans(),
)
def test_size_is_refused_exactly_past_the_limit(max_bytes: int, pad: str, as_bytes: bool) -> None:
    frame = {"type": "get_workflow", "request_id": "r", "output": {"Output": pad}}
    text = json.dumps(frame, ensure_ascii=False)
    size = len(text.encode("utf-8"))
    STATS["frames"] += 1
    got = decode(text.encode("utf-8") if as_bytes else text, max_bytes=max_bytes)
    if size > max_bytes:
        assert isinstance(got, ProtocolError)
        assert got.reason == f"frame is larger than the {max_bytes}-byte limit"
    else:
        assert isinstance(got, GetWorkflowResponse) and got.output == frame["output"]


@fuzz(6)
@given(mib=st.integers(min_value=1, max_value=12), records=st.integers(min_value=1, max_value=2000))
def test_frames_of_several_mib_decode_and_one_byte_less_is_refused(mib: int, records: int) -> None:
    size = mib * 1024 * 1024
    filler = "x" * (size // records)
    frame = {"type": "list_workflows", "request_id": "r", "output": [{"Output": filler} for _ in range(records)]}
    text = json.dumps(frame)
    exact = len(text.encode())
    STATS["frames"] += 2
    STATS["largest"] = max(STATS["largest"], exact)
    got = decode(text, max_bytes=exact)
    assert isinstance(got, ListWorkflowsResponse) and len(got.output or []) == records
    refused = decode(text, max_bytes=exact - 1)
    assert isinstance(refused, ProtocolError) and "limit" in refused.reason


EDITS = st.tuples(
    st.sampled_from(["insert", "delete", "replace"]),
    st.floats(min_value=0, max_value=1, exclude_max=True),
    st.text(st.characters(categories=["Cs", "Cc", "Po", "Ps", "Pe", "Sm", "Nd", "Lu"]), min_size=1, max_size=3)
    | st.sampled_from(['"', "{", "}", "[", "]", ",", ":", "\\", "\\u", "\\ud800", "NaN", "1e999", "-"]),
)


@pytest.mark.parametrize("message_type", TYPES)
@fuzz(12)
@given(data=st.data(), edits=st.lists(EDITS, min_size=1, max_size=6))
def test_mutated_frames_never_raise_anything_else(
    message_type: str, data: st.DataObject, edits: list[tuple[str, float, str]]
) -> None:
    text = json.dumps(data.draw(good_frames(message_type)), ensure_ascii=False)
    for op, where, chunk in edits:
        at = int(where * (len(text) + 1))
        if op == "insert":
            text = text[:at] + chunk + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + len(chunk):]
        else:
            text = text[:at] + chunk + text[at + len(chunk):]
    STATS["frames"] += 2
    got = decode(text)
    if isinstance(got, Response):  # still a frame: the model agrees with what the decoder made of it
        parsed = json.loads(text)
        assert model(parsed) is None
        check_values(got, parsed)
    decode(text.encode("utf-8", "surrogatepass"))


@fuzz(400)
@given(st.one_of(st.binary(max_size=300), st.text(st.characters(categories=["Cs", "Cc", "Ps", "Pe", "Po", "L"]),
                                                    max_size=300)))
def test_random_bytes_and_text_never_raise_anything_else(frame: bytes | str) -> None:
    assume(frame)
    STATS["frames"] += 1
    decode(frame)
