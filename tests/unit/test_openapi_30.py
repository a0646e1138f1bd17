"""GET /openapi-3.0.json: the 3.0 rendering of Relay's 3.1 document (web/api/openapi_30.py), checked by a real
validator (openapi-spec-validator), on a real (not started) Relay app; and the conversion of each 3.1 construct."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from openapi_spec_validator import OpenAPIV30SpecValidator, OpenAPIV31SpecValidator

from relay.web.api.openapi_30 import schema, to_openapi_30


@pytest.fixture(scope="module")
def client() -> Iterator[FlaskClient]:
    from relay.actors.configuration.settings import Settings
    from relay.actors.runtime import Runtime
    from relay.web.wsgi import create_app

    with tempfile.TemporaryDirectory(prefix="relay-openapi30-") as data_dir:
        rt = Runtime(Settings(data_dir=Path(data_dir), admin_token="openapi30-test-admin-token"))
        try:
            yield create_app(rt).test_client()
        finally:
            rt.stop()


def _get(client: FlaskClient, path: str) -> dict[str, Any]:
    response = client.get(path)  # public: no Authorization header
    assert response.status_code == 200, response.data
    assert response.mimetype == "application/json"
    return response.get_json()


def _errors(validator: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors()]


def test_the_3_0_document_is_valid_openapi_3_0(client: FlaskClient) -> None:
    doc = _get(client, "/openapi-3.0.json")
    assert doc["openapi"] == "3.0.3"
    assert _errors(OpenAPIV30SpecValidator(doc)) == []


def test_the_3_1_document_is_not_3_0_as_it_is(client: FlaskClient) -> None:
    """Why the 3.0 rendering exists: relabelled 3.0, the 3.1 document is refused (type arrays, null types), and
    the 3.1 one is itself valid 3.1."""
    doc = _get(client, "/openapi.json")
    assert _errors(OpenAPIV31SpecValidator(doc)) == []
    assert _errors(OpenAPIV30SpecValidator({**doc, "openapi": "3.0.3"})) != []


def test_the_3_0_document_has_every_operation_of_the_3_1_one(client: FlaskClient) -> None:
    original, rendered = _get(client, "/openapi.json"), _get(client, "/openapi-3.0.json")

    def operations(doc: dict[str, Any]) -> dict[tuple[str, str], tuple[str, list[str]]]:
        return {(path, method): (op["operationId"], op["tags"]) for path, ops in doc["paths"].items()
                for method, op in ops.items()}

    assert operations(rendered) == operations(original)
    assert "/openapi-3.0.json" in original["paths"]
    assert rendered["components"]["schemas"].keys() == original["components"]["schemas"].keys()
    text = json.dumps(rendered)
    assert '"null"' not in text and '"const"' not in text and '"examples"' not in text
    workflow = rendered["components"]["schemas"]["Workflow"]["properties"]
    assert workflow["workflowName"] == {"type": "string", "nullable": True}


def test_type_arrays_become_nullable() -> None:
    assert schema({"type": ["string", "null"], "format": "date-time"}) == {
        "type": "string", "format": "date-time", "nullable": True}
    assert schema({"type": ["integer", "string"]}) == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert schema({"type": ["integer", "string", "null"]}) == {
        "nullable": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert schema({"type": "null"}) == {"nullable": True, "enum": [None]}


def test_a_null_alternative_becomes_nullable() -> None:
    ref = {"$ref": "#/components/schemas/Webhook"}
    assert schema({"oneOf": [ref, {"type": "null"}]}) == {"oneOf": [ref], "nullable": True}
    assert schema({"anyOf": [{"type": "string"}, {"type": "integer"}]}) == {
        "anyOf": [{"type": "string"}, {"type": "integer"}]}


def test_values_bounds_and_keywords_3_0_lacks() -> None:
    assert schema({"const": "x"}) == {"enum": ["x"]}
    assert schema({"type": "string", "examples": ["a", "b"]}) == {"type": "string", "example": "a"}
    assert schema({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}) == {
        "type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": True}
    assert schema({"type": "integer", "minimum": 5, "exclusiveMinimum": 0}) == {"type": "integer", "minimum": 5}
    assert schema({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "type": "object",
                   "unevaluatedProperties": False, "prefixItems": [{}]}) == {"type": "object"}
    assert schema({"type": "string", "contentEncoding": "base64"}) == {"type": "string", "format": "byte"}


def test_a_ref_with_siblings_is_kept_under_all_of() -> None:
    ref = {"$ref": "#/components/schemas/Step"}
    assert schema(ref) == ref
    assert schema({**ref, "description": "the last step"}) == {"description": "the last step", "allOf": [ref]}


def test_nested_schemas_are_converted_and_property_names_are_not_keywords() -> None:
    converted = schema({"type": "object", "properties": {
        "type": {"type": ["string", "null"]},  # a property named "type", not the keyword
        "const": {"type": "array", "items": {"const": 1}},
        "map": {"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
    }})
    assert converted["properties"] == {
        "type": {"type": "string", "nullable": True},
        "const": {"type": "array", "items": {"enum": [1]}},
        "map": {"type": "object", "additionalProperties": {"type": "integer", "nullable": True}},
    }


def test_the_document_outside_schemas() -> None:
    original = {
        "openapi": "3.1.0", "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema", "webhooks": {},
        "info": {"title": "t", "version": "1", "summary": "s", "license": {"name": "MIT", "identifier": "MIT"}},
        "paths": {"/a/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": ["string", "null"]}}],
            "post": {
                "requestBody": {"content": {"application/json": {"schema": {"const": 1}}}},
                "responses": {"200": {
                    "description": "OK",
                    "headers": {"X-N": {"schema": {"type": ["integer", "null"]}}},
                    "content": {"application/json": {"schema": {"type": ["array", "null"], "items": {}}}},
                }},
            },
        }},
        "components": {"schemas": {"S": {"type": ["object", "null"]}}, "pathItems": {}},
    }
    before = json.dumps(original)
    doc = to_openapi_30(original)
    assert json.dumps(original) == before  # pure: the 3.1 document is left as it was
    assert doc["openapi"] == "3.0.3"
    assert {"jsonSchemaDialect", "webhooks"} & doc.keys() == set() and "pathItems" not in doc["components"]
    assert doc["info"] == {"title": "t", "version": "1", "license": {"name": "MIT"}}
    item = doc["paths"]["/a/{id}"]
    assert item["parameters"][0]["schema"] == {"type": "string", "nullable": True}
    assert item["post"]["requestBody"]["content"]["application/json"]["schema"] == {"enum": [1]}
    ok = item["post"]["responses"]["200"]
    assert ok["headers"]["X-N"]["schema"] == {"type": "integer", "nullable": True}
    assert ok["content"]["application/json"]["schema"] == {"type": "array", "items": {}, "nullable": True}
    assert doc["components"]["schemas"]["S"] == {"type": "object", "nullable": True}
    assert _errors(OpenAPIV30SpecValidator(doc)) == []
