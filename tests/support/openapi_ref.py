"""Conductor's reference OpenAPI document, and a small JSON Schema checker for the subset it uses.

The reference is the repository's own copy, ``tests/fixtures/conductor-openapi.json`` (where and when it was
taken: ``tests/fixtures/conductor-openapi.md``), so a fresh clone tests itself with nothing beside it.
``normalize`` resolves ``$ref``s and drops what does not change meaning (descriptions, examples, Huma's
optional ``$schema`` property), so two documents' schemas compare with ``==``. ``check`` validates a JSON
value against a schema: types, required, additionalProperties, items, enums and formats (date-time as
RFC 3339, int32/int64 ranges).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

REFERENCE_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "conductor-openapi.json"
_DROPPED = {"description", "examples", "readOnly", "summary", "title"}
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@cache
def reference() -> dict[str, Any]:
    return json.loads(REFERENCE_PATH.read_text())


def resolve(doc: dict[str, Any], schema: Any) -> Any:
    """``schema`` with every ``$ref`` into ``doc``'s components replaced by its target."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            return resolve(doc, doc["components"]["schemas"][name])
        return {k: resolve(doc, v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [resolve(doc, v) for v in schema]
    return schema


def normalize(doc: dict[str, Any], schema: Any) -> Any:
    """A comparable form: refs resolved, prose dropped, ``required`` sorted, ``type`` lists sorted."""
    schema = resolve(doc, schema)

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED:
                continue
            if key == "properties":
                out[key] = {k: walk(v) for k, v in value.items() if k != "$schema"}
            elif key == "required" or (key == "type" and isinstance(value, list)):
                out[key] = sorted(value)
            else:
                out[key] = walk(value)
        return out

    return walk(schema)


def _is_type(value: Any, kind: str) -> bool:
    return {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "null": value is None,
    }[kind]


def _rfc3339(text: str) -> bool:
    if "T" not in text.upper():
        return False
    try:
        return datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


def check(doc: dict[str, Any], schema: Any, value: Any, where: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty when it conforms)."""
    schema = resolve(doc, schema)
    if not isinstance(schema, dict) or not schema:
        return []
    errors: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is_type(value, k) for k in kinds):
            return [f"{where}: {value!r} is not of type {kinds}"]
    if value is None:
        return []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    fmt = schema.get("format")
    if fmt == "date-time" and isinstance(value, str) and not _rfc3339(value):
        errors.append(f"{where}: {value!r} is not an RFC 3339 date-time")
    if fmt in _INT_RANGE and isinstance(value, int):
        low, high = _INT_RANGE[fmt]
        if not low <= value <= high:
            errors.append(f"{where}: {value} out of {fmt} range")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        errors.extend(f"{where}: missing required {name!r}" for name in schema.get("required", []) if name not in value)
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                errors.extend(check(doc, properties[name], item, f"{where}.{name}"))
            elif extra is False:
                errors.append(f"{where}: unexpected property {name!r}")
            elif isinstance(extra, dict):
                errors.extend(check(doc, extra, item, f"{where}.{name}"))
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors.extend(check(doc, schema["items"], item, f"{where}[{index}]"))
    return errors


def response_schema(doc: dict[str, Any], path: str, method: str, status: str | None = None) -> Any:
    """The JSON schema of an operation's success response (its first non-default one, or ``status``)."""
    responses = doc["paths"][path][method.lower()]["responses"]
    code = status or next(c for c in responses if c != "default")
    content = responses[code].get("content", {})
    return content.get("application/json", {}).get("schema")
