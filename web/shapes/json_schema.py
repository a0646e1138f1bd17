"""JSON Schema building blocks of /openapi.json (web/api/openapi_schemas.py) and of the request bodies
web/shapes/api_to_wire.py declares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Schema = dict[str, Any]


def t(kind: str | list[str], fmt: str | None = None, **extra: object) -> Schema:
    out: Schema = {"type": kind}
    if fmt:
        out["format"] = fmt
    out.update(extra)
    return out


def null(kind: str, fmt: str | None = None) -> Schema:
    return t([kind, "null"], fmt)


STR = t("string")
NSTR = null("string")
BOOL = t("boolean")
INT32 = t("integer", "int32")
INT64 = t("integer", "int64")
TIME = t("string", "date-time")
NTIME = null("string", "date-time")
STRS = t("array", items=STR)
NSTRS = t(["array", "null"], items=STR)
ANY_OBJECT = t("object", additionalProperties={})


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def array_of(name: str) -> Schema:
    return {"type": "array", "items": ref(name)}


def obj(properties: dict[str, Schema], required: list[str] | None = None, *, closed: bool = True) -> Schema:
    out: Schema = {"type": "object", "properties": properties}
    if closed:
        out["additionalProperties"] = False
    if required:
        out["required"] = required
    return out


def all_required(properties: dict[str, Schema]) -> Schema:
    return obj(properties, list(properties))


def body_schema(spec: Mapping[str, Any], required: Sequence[str] = ()) -> Schema:
    """The schema of a request body declared as web/shapes/api_to_wire.py's Spec: each field's own schema, closed."""
    return obj({name: declared.schema for name, declared in spec.items()}, list(required) or None)
