"""Relay-only: send any message type to one executor and return its raw response.

For types a newer SDK added that Relay does not model yet (``rewind_workflow`` and whatever comes next):
``POST /relay/v1/orgs/{org}/apps/{app}/executors/{executorId}/requests`` with ``{"type": T, ...fields}``.
The answer is the executor's frame as a JSON object, ``error_message`` included (200 even when it reports
a failure: the caller asked for the raw answer); 502 when the executor disconnects first, 504 on timeout.
An executor connected to another instance is reached through it (forwarding, actors/adapters/forwarder.py).
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from relay.web.api import api_to_wire
from relay.web.api.openapi import operation
from relay.web.api.problems import ApiError, not_found
from relay.web.api.requests_ import json_body
from relay.web.context import runtime
from relay.web.executor_calls import authorize_app, call_executor, remote_executor, snapshot

bp = Blueprint("relay_raw", __name__)


@bp.post("/relay/v1/orgs/<org>/apps/<app>/executors/<executor_id>/requests")
@operation("sendRawExecutorRequest", summary="Send any message type to one executor; its raw response",
           tag="Relay", returns="RawResponse", body="RawRequestBody", body_required=True)
def raw_request(org: str, app: str, executor_id: str) -> Response:
    authorize_app("application.write", org, app)
    request = api_to_wire.raw_request(json_body(required=True))
    executors, _latest = snapshot(org, app)
    executor = next((e for e in executors if e.executor_id == executor_id), None)
    if executor is None:  # HA: connected to another instance, reached through it
        executor = remote_executor(org, app, executor_id)
    if executor is None:
        known = {row["executor_id"] for row in runtime().views.registry.executors(org, app)}
        if executor_id in known:
            raise ApiError(503, f"executor '{executor_id}' is not connected to this Relay instance")
        raise not_found(f"executor '{executor_id}' not found in application '{app}'")
    return jsonify(api_to_wire.raw_response(call_executor(org, app, executor, request)))
