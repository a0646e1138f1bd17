"""How a v2 body or query property is declared and checked (web/shapes/api_to_wire.py declares them, per area):
the converters, each taking (location, value) and returning the wire value or raising a 422 naming the location,
a property's declaration (`field`: wire name, converter, JSON Schema), and reading a body or a query against a
declaration."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from relay.web.problems import invalid
from relay.web.shapes.json_schema import ANY_OBJECT, BOOL, INT64, NSTRS, STR, TIME, Schema
from relay.web.shapes.values import (
    INT64_MAX,
    MAX_LIMIT,
    PAGE_DESCRIPTION,
    WORKFLOW_STATUSES,
    _wire_time,
    parse_time,
)
from relay.wire.json_types import JSONObject

# A converter takes (location, value) and returns the wire value, or raises a 422 naming the location.
Converter = Callable[[str, Any], Any]


def as_bool(location: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise invalid(location, "must be a boolean", value)
    return value


def int_between(minimum: int, maximum: int) -> Converter:
    def convert(location: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(location, "must be an integer", value)
        if not minimum <= value <= maximum:
            raise invalid(location, f"must be between {minimum} and {maximum}", value)
        return value

    return convert


def as_str(location: str, value: object) -> str:
    if not isinstance(value, str):
        raise invalid(location, "must be a string", value)
    if not value:
        raise invalid(location, "must not be empty", value)
    return value


def as_status(location: str, value: object) -> str:
    text = as_str(location, value)
    if text not in WORKFLOW_STATUSES:
        raise invalid(location, f"must be one of {', '.join(sorted(WORKFLOW_STATUSES))}", value)
    return text


def list_of(item: Converter) -> Converter:
    """An array of items (or null). An empty array, like null, means no filter."""

    def convert(location: str, value: object) -> list[object] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            raise invalid(location, "must be an array", value)
        return [item(f"{location}[{i}]", v) for i, v in enumerate(value)] or None

    return convert


def as_time(location: str, value: object) -> str:
    return _wire_time(parse_time(location, value))


def as_object(location: str, value: object) -> JSONObject:
    if not isinstance(value, dict):
        raise invalid(location, "must be an object", value)
    return value


_POSITIVE_INT = int_between(1, INT64_MAX)


def page_limit(location: str, value: object) -> int:
    """At least 1; above MAX_LIMIT served as MAX_LIMIT (api_values: clamped, not refused)."""
    return min(_POSITIVE_INT(location, value), MAX_LIMIT)


LIMIT = page_limit
OFFSET = int_between(0, INT64_MAX)
STRINGS = list_of(as_str)
STATUSES = list_of(as_status)

class Field(NamedTuple):
    """One property of a body or query: the wire field it sets, how its value is checked and converted, and
    its JSON Schema (what /openapi.json documents: web/api/openapi_schemas.py builds the body components from
    these declarations)."""

    wire: str
    convert: Converter
    schema: Schema


_SCHEMA_OF: dict[Converter, Schema] = {
    as_bool: BOOL, as_str: STR, as_time: TIME, as_object: ANY_OBJECT, OFFSET: INT64,
    LIMIT: {**INT64, "description": PAGE_DESCRIPTION},
    STRINGS: NSTRS, STATUSES: NSTRS, as_status: STR,
}


def field(wire: str, convert: Converter, schema: Schema | None = None) -> Field:
    """A declared property; its schema follows from the converter unless given."""
    return Field(wire, convert, schema if schema is not None else _SCHEMA_OF[convert])


Spec = Mapping[str, Field]  # v2 name → its declaration


def body_fields(body: Mapping[str, object], spec: Spec, where: str = "body") -> dict[str, Any]:
    """Check a JSON body against ``spec``; the wire fields it sets (unset and empty filters left out)."""
    out: JSONObject = {}
    for name, value in body.items():
        if name == "$schema":
            continue
        if name not in spec:
            raise invalid(f"{where}.{name}", "unexpected property", value)
        wire, convert, _ = spec[name]
        converted = convert(f"{where}.{name}", value)
        if converted is not None:
            out[wire] = converted
    return out


def _query_value(location: str, convert: Converter, raw: str) -> Any:
    """Query strings carry text: read booleans and integers from it, then convert as a body value."""
    value: object = raw
    if convert is as_bool:
        lowered = raw.strip().lower()
        if lowered not in ("true", "false", "1", "0"):
            raise invalid(location, "must be true or false", raw)
        value = lowered in ("true", "1")
    elif convert in (LIMIT, OFFSET):
        if not re.fullmatch(r"-?\d{1,19}", raw.strip()):
            raise invalid(location, "must be an integer", raw)
        value = int(raw)
    return convert(location, value)


def query_fields(args: Mapping[str, str], spec: Spec) -> dict[str, Any]:
    """Read the declared query parameters (others are ignored, as Conductor does); empty means unset."""
    out: JSONObject = {}
    for name, (wire, convert, _) in spec.items():
        raw = args.get(name)
        if raw is None or raw == "":
            continue
        out[wire] = _query_value(f"query.{name}", convert, raw)
    return out


def require(body: Mapping[str, object], *names: str) -> None:
    for name in names:
        if body.get(name) is None:
            raise invalid(f"body.{name}", "is required", None)


def build(factory: Callable[..., object], **fields: object) -> Any:
    """Construct a protocol request; its own checks are a second line (the specs here come first)."""
    try:
        return factory(**fields)
    except (TypeError, ValueError) as error:
        raise invalid("body", str(error)) from None


def check_window(start: datetime, end: datetime, names: tuple[str, str], where: str) -> None:
    if end <= start:
        raise invalid(f"{where}.{names[1]}", f"must be later than {names[0]}", _wire_time(end))
