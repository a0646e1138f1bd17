"""Relay's OpenAPI 3.1 document rendered as OpenAPI 3.0 (GET /openapi-3.0.json), for client generators that
lack 3.1. Pure: a new document from the given one, nothing else read or changed.

3.1 schemas are JSON Schema 2020-12; 3.0 schemas are an older dialect. What differs, and how it is rendered:

- ``type: [T, "null"]`` → ``type: T, nullable: true``; ``{"type": "null"}`` in an anyOf/oneOf → ``nullable``
  on the schema holding it; several non-null types → an ``anyOf`` of one type each.
- ``const: v`` → ``enum: [v]``; ``examples: [...]`` → ``example`` (the first).
- numeric ``exclusiveMinimum``/``exclusiveMaximum`` → ``minimum``/``maximum`` with the boolean flag.
- ``contentEncoding: base64`` → ``format: byte``; ``contentMediaType: application/octet-stream`` → ``binary``.
- a ``$ref`` with siblings (3.0 ignores them) → ``allOf: [{$ref}]`` beside the siblings.
- keywords 3.0 does not have (``$schema``, ``$id``, ``$comment``, ``prefixItems``, ``unevaluatedProperties``,
  ...) are dropped: the 3.0 rendering may accept a little more than the 3.1 document, never less.

Outside schemas: ``openapi`` becomes 3.0.3, and 3.1-only fields (``webhooks``, ``jsonSchemaDialect``,
``info.summary``, ``info.license.identifier``, ``components.pathItems``) are dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

OPENAPI_30_VERSION = "3.0.3"

Json = dict[str, Any]

_HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# JSON Schema keywords without a 3.0 equivalent.
_DROPPED = frozenset({
    "$schema", "$id", "$anchor", "$dynamicAnchor", "$dynamicRef", "$comment", "$defs", "$vocabulary",
    "prefixItems", "unevaluatedItems", "unevaluatedProperties", "contains", "minContains", "maxContains",
    "propertyNames", "dependentRequired", "dependentSchemas", "if", "then", "else",
    "contentSchema",
})
_SCHEMA_MAPS = ("properties", "patternProperties")  # name → schema
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_VALUES = ("not", "additionalProperties", "items")


def to_openapi_30(document: Json) -> Json:
    """The 3.0.3 rendering of a 3.1 ``document``."""
    doc = copy.deepcopy(document)
    doc["openapi"] = OPENAPI_30_VERSION
    for key in ("webhooks", "jsonSchemaDialect"):
        doc.pop(key, None)
    info = doc.get("info", {})
    info.pop("summary", None)
    info.get("license", {}).pop("identifier", None)
    for path_item in doc.get("paths", {}).values():
        _path_item(path_item)
    components = doc.get("components", {})
    components.pop("pathItems", None)
    _each(components.get("schemas"), schema)
    _each(components.get("parameters"), _parameter)
    _each(components.get("requestBodies"), _content_holder)
    _each(components.get("responses"), _response)
    _each(components.get("headers"), _parameter)
    return doc


def _each(mapping: Json | None, convert: Callable[[Json], Any]) -> None:
    for name, value in (mapping or {}).items():
        result = convert(value)
        if result is not None:
            mapping[name] = result  # type: ignore[index]


def _path_item(item: Json) -> None:
    for param in item.get("parameters", []):
        _parameter(param)
    for method in _HTTP_METHODS:
        op = item.get(method)
        if op is None:
            continue
        for param in op.get("parameters", []):
            _parameter(param)
        if "requestBody" in op:
            _content_holder(op["requestBody"])
        for response in op.get("responses", {}).values():
            _response(response)


def _parameter(param: Json) -> None:
    if "schema" in param:
        param["schema"] = schema(param["schema"])
    _content_holder(param)


def _response(response: Json) -> None:
    _content_holder(response)
    _each(response.get("headers"), _parameter)


def _content_holder(holder: Json) -> None:
    for media in holder.get("content", {}).values():
        if "schema" in media:
            media["schema"] = schema(media["schema"])


def schema(node: object) -> object:
    """One JSON Schema 2020-12 schema as an OpenAPI 3.0 Schema Object (a new object)."""
    if not isinstance(node, dict):
        return node  # a boolean schema: 3.0 has none, and Relay's document uses none
    out: Json = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key in _SCHEMA_MAPS:
            out[key] = {name: schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS:
            out[key] = [schema(sub) for sub in value]
        elif key in _SCHEMA_VALUES and isinstance(value, dict):
            out[key] = schema(value)
        elif key == "items" and isinstance(value, list):
            out[key] = {}  # a tuple (draft 2019 spelling): 3.0 has no positional items
        else:
            out[key] = value
    _nullable_types(out)
    _nullable_alternatives(out)
    _values(out)
    _exclusive_bounds(out)
    _content_keywords(out)
    return _ref_with_siblings(out)


def _nullable_types(out: Json) -> None:
    kind = out.get("type")
    if not isinstance(kind, list) and kind != "null":
        return
    kinds = [kind] if isinstance(kind, str) else list(kind)
    if "null" in kinds:
        out["nullable"] = True
        kinds = [k for k in kinds if k != "null"]
    del out["type"]
    if len(kinds) == 1:
        out["type"] = kinds[0]
    elif kinds:
        out["anyOf"] = [*out.get("anyOf", []), *({"type": k} for k in kinds)]
    elif "enum" not in out:
        out["enum"] = [None]  # only null


def _nullable_alternatives(out: Json) -> None:
    for key in ("anyOf", "oneOf"):
        alternatives = out.get(key)
        if not alternatives:
            continue
        rest = [a for a in alternatives if not _is_null_only(a)]
        if len(rest) < len(alternatives):
            out["nullable"] = True
            out[key] = rest


def _is_null_only(node: object) -> bool:
    return isinstance(node, dict) and node.get("enum") == [None] and node.get("nullable") is True and \
        not set(node) - {"enum", "nullable", "description", "title"}


def _values(out: Json) -> None:
    if "const" in out:
        out["enum"] = [out.pop("const")]
    examples = out.pop("examples", None)
    if isinstance(examples, list) and examples and "example" not in out:
        out["example"] = examples[0]


def _exclusive_bounds(out: Json) -> None:
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = out.get(exclusive)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        current = out.get(bound)
        if current is not None and (current > value if bound == "minimum" else current < value):
            del out[exclusive]  # the inclusive bound is the stricter one
            continue
        out[bound] = value
        out[exclusive] = True


def _content_keywords(out: Json) -> None:
    encoding = out.pop("contentEncoding", None)
    media = out.pop("contentMediaType", None)
    if "format" not in out:
        if encoding == "base64":
            out["format"] = "byte"
        elif media == "application/octet-stream":
            out["format"] = "binary"


def _ref_with_siblings(out: Json) -> Json:
    if "$ref" not in out or len(out) == 1:
        return out
    ref = out.pop("$ref")
    out["allOf"] = [{"$ref": ref}, *out.get("allOf", [])]
    return out
