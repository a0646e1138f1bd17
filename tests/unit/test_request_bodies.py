"""JSON request bodies are parsed strictly: what is not JSON (NaN, Infinity, 1e999) is a 400 naming the body."""

from __future__ import annotations

import pytest
from flask import Flask, jsonify

from relay.web.http_inputs import json_body
from relay.web.problems import ApiError, problem_response


@pytest.fixture
def client():  # type: ignore[no-untyped-def]
    app = Flask(__name__)
    app.register_error_handler(ApiError, problem_response)

    @app.post("/echo")
    def echo():  # type: ignore[no-untyped-def]
        return jsonify(json_body())

    return app.test_client()


@pytest.mark.parametrize("body", ['{"n": NaN}', '{"n": Infinity}', '{"n": -Infinity}', '{"n": 1e999}',
                                  '{"n": [1, {"m": -1e400}]}', '{"n": 1', "\xff"])
def test_what_is_not_json_is_refused(client, body: str) -> None:  # type: ignore[no-untyped-def]
    response = client.post("/echo", data=body.encode("latin-1"), content_type="application/json")
    assert response.status_code == 400, response.get_data(as_text=True)
    problem = response.get_json()
    assert problem["status"] == 400 and "not valid JSON" in problem["detail"]


def test_json_numbers_pass_unchanged(client) -> None:  # type: ignore[no-untyped-def]
    body = '{"a": 1.5, "b": -2e10, "c": 12345678901234567890, "d": [0.0, null, true, "NaN"]}'
    response = client.post("/echo", data=body, content_type="application/json")
    assert response.status_code == 200
    assert response.get_json() == {"a": 1.5, "b": -2e10, "c": 12345678901234567890, "d": [0.0, None, True, "NaN"]}


def test_each_request_body_is_documented_from_the_declaration_that_checks_it() -> None:
    from relay.web.api.openapi_schemas import COMPONENTS
    from relay.web.shapes import api_to_wire

    pairs = {
        "WorkflowSearchBody": api_to_wire.SEARCH_BODY, "WorkflowAggregatesBody": api_to_wire.WORKFLOW_AGGREGATES_BODY,
        "StepAggregatesBody": api_to_wire.STEP_AGGREGATES_BODY, "ForkWorkflowInputBody": api_to_wire.FORK_BODY,
        "BulkForkFromFailureBody": api_to_wire.BULK_FORK_BODY, "CancelWorkflowInputBody": api_to_wire.CANCEL_BODY,
        "BulkCancelInputBody": api_to_wire.BULK_CANCEL_BODY, "BackfillInputBody": api_to_wire.BACKFILL_BODY,
    }
    for name, spec in pairs.items():
        documented = COMPONENTS[name]["properties"]
        assert list(documented) == list(spec), name
        assert all(documented[key] is declared.schema for key, declared in spec.items()), name
        assert COMPONENTS[name]["additionalProperties"] is False  # unknown properties are refused (422)
