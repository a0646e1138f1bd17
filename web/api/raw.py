"""Relay-only: send any message type to one executor and return its raw response.

For types a newer SDK added that Relay does not model yet (``rewind_workflow`` and whatever comes next):
``POST /relay/v1/orgs/{org}/apps/{app}/executors/{executorId}/requests`` with ``{"type": T, ...fields}``.
The answer is the executor's frame as a JSON object, ``error_message`` included (200 even when it reports
a failure: the caller asked for the raw answer); 502 when the executor disconnects first, 504 on timeout.
An executor connected to another instance is reached through it (forwarding, actors/adapters/forwarder.py).
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from relay.web.context import authorize_app, executor_calls
from relay.web.http_inputs import json_body
from relay.web.operations import operation
from relay.web.shapes import api_to_wire

bp = Blueprint("relay_raw", __name__)


@bp.post("/relay/v1/orgs/<org>/apps/<app>/executors/<executor_id>/requests")
@operation("sendRawExecutorRequest", summary="Send any message type to one executor; its raw response",
           tag="Relay", returns="RawResponse", body="RawRequestBody", body_required=True)
def raw_request(org: str, app: str, executor_id: str) -> Response:
    authorize_app("application.write", org, app)
    request = api_to_wire.raw_request(json_body(required=True))
    return jsonify(api_to_wire.raw_response(executor_calls().call_executor(org, app, executor_id, request)))
