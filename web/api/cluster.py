"""HA endpoints: the instances of the cluster, and the forward endpoint instances call on one another.

``GET /relay/v1/instances`` (admin token or ``organization.read``): every instance the log knows, with its
heartbeat age, its status (RUNNING, STOPPED, EXPIRED) and the leases it holds, from the instances view
(projections/instances.py; a key sees the leases of its own organization only).

``POST /internal/v1/forward/{appID}`` (instance to instance; no bearer: an HMAC-SHA256 signature, see
wire/signing.py): ``{"org", "app", "executor_id"?, "frame": {"type", ...fields}}`` runs ``frame`` on an
executor of the application connected to THIS instance (never forwarded again) and answers the executor's raw
response (200, ``error_message`` included). A refusal (hop >= 1: 409; a signature more than 30 s off, signed for
another instance, a nonce seen already by any instance of the cluster, or a bad one: 401; forwarding not
configured: 401) comes before anything is parsed or run. Then:
404 the application (or its id) is unknown, 503 the executor is not (or no longer) connected here or
disconnected before answering, 429 it is busy, 502 it answered a malformed frame, 504 it did not answer in time.
"""

from __future__ import annotations

import json
import logging
import time

from flask import Blueprint, Response, jsonify, request

from relay.web.api.openapi_schemas import COMPONENTS
from relay.web.context import executor_calls, principal, runtime
from relay.web.http_inputs import check_path_names
from relay.web.operations import operation
from relay.web.problems import ApiError, invalid, not_found
from relay.web.shapes import api_to_wire
from relay.web.shapes.values import view_time
from relay.wire import signing as forwarding
from relay.wire.json_depth import nests_deeper
from relay.wire.json_types import JSONObject
from relay.wire.messages import MAX_DEPTH
from relay.wire.requests import RawRequest

log = logging.getLogger("relay.web.cluster")

bp = Blueprint("cluster", __name__)

_ENVELOPE = frozenset({"type", "request_id"})
_BODY_MARGIN = 64 * 1024  # the payload's envelope around a frame


# -- GET /relay/v1/instances ----------------------------------------------------------------------------
COMPONENTS["RelayLease"] = {
    "type": "object", "additionalProperties": False, "required": ["org", "app", "executorId", "status"],
    "properties": {"org": {"type": "string"}, "app": {"type": "string"}, "executorId": {"type": "string"},
                   "status": {"type": "string", "enum": ["HEALTHY", "DISCONNECTED", "DEAD"]}},
}
COMPONENTS["RelayInstance"] = {
    "type": "object", "additionalProperties": False,
    "required": ["instanceId", "address", "port", "startedAt", "heartbeatAgeSecs", "status", "leases"],
    "properties": {
        "instanceId": {"type": "string"},
        "address": {"type": ["string", "null"]},
        "port": {"type": ["integer", "null"], "format": "int32"},
        "startedAt": {"type": ["string", "null"], "format": "date-time"},
        "heartbeatAgeSecs": {"type": ["number", "null"], "format": "double",
                             "description": "null when the instance is not in the instances table (adopted)"},
        "status": {"type": "string", "enum": ["RUNNING", "STOPPED", "EXPIRED"]},
        "release": {"type": ["string", "null"], "description": "the Relay release it recorded at its latest start"},
        "leases": {"type": "array", "items": {"$ref": "#/components/schemas/RelayLease"}},
    },
}
COMPONENTS["RelayInstanceList"] = {
    "type": "object", "additionalProperties": False, "required": ["instances", "releaseFloor"],
    "properties": {
        "instances": {"type": "array", "items": {"$ref": "#/components/schemas/RelayInstance"}},
        "releaseFloor": {"type": "string", "description": "the oldest release among the live instances: events "
                                                          "newer releases add are written only once it reads them"},
    },
}


@bp.get("/relay/v1/instances")
@operation("listRelayInstances", summary="Relay instances: heartbeat age, status and the leases each holds",
           tag="Relay", returns="RelayInstanceList")
def instances() -> Response:
    who = principal()
    if not who.admin and "organization.read" not in who.permissions:
        raise ApiError(403, "this token lacks 'organization.read'")
    if who.app_scoped:  # Relay's instances and their leases are everyone's infrastructure (issue 34)
        raise ApiError(403, "a key limited to some applications cannot read Relay's instances")
    cluster = runtime().cluster
    states = runtime().views.instances.describe(cluster.table.rows(), cluster.wall(),
                                                org=None if who.admin else who.org)
    return jsonify({"instances": [
        {"instanceId": i.instance, "address": i.address, "port": i.port, "startedAt": view_time(i.started_at),
         "heartbeatAgeSecs": i.heartbeat_age_s, "status": i.status, "release": i.version,
         "leases": [{"org": r["org"], "app": r["app"], "executorId": r["executor_id"], "status": r["status"]}
                    for r in i.leases]}
        for i in states if i.status is not None  # executors recorded on an instance that never started
    ], "releaseFloor": cluster.release_floor()})


# -- POST /internal/v1/forward/{appID} ------------------------------------------------------------------
COMPONENTS["ForwardBody"] = {
    "type": "object", "additionalProperties": False, "required": ["org", "app", "frame"],
    "properties": {
        "org": {"type": "string"}, "app": {"type": "string"}, "executor_id": {"type": ["string", "null"]},
        "frame": {"type": "object", "required": ["type"], "additionalProperties": {},
                  "properties": {"type": {"type": "string"}}},
    },
}


@bp.post("/internal/v1/forward/<app_id>")
@operation("forwardToExecutor", summary="Instance to instance: run a frame on an executor connected here",
           tag="Relay", returns={"type": "object", "additionalProperties": {},
                                 "description": "the executor's raw response frame"},
           body="ForwardBody", body_required=True, public=True, path_names={"app_id": "appID"},
           description="Signed with HMAC-SHA256 over `timestamp.nonce.target.payload` (X-Relay-Timestamp, "
                       "X-Relay-Nonce, X-Relay-Target, X-Relay-Signature, X-Relay-Forward-Hop); hop >= 1: 409; "
                       "timestamp more than 30 s off, another target instance, a nonce used already or a bad "
                       "signature: 401.")
def forward(app_id: str) -> Response:
    rt = runtime()
    limit = rt.settings.limits.max_frame_bytes + _BODY_MARGIN
    if (request.content_length or 0) > limit:
        raise ApiError(413, "forwarded request too large")
    payload = request.get_data(cache=False)
    if len(payload) > limit:
        raise ApiError(413, "forwarded request too large")
    headers = {name: value for name in (forwarding.HOP_HEADER, forwarding.TIMESTAMP_HEADER,
                                         forwarding.NONCE_HEADER, forwarding.TARGET_HEADER,
                                         forwarding.SIGNATURE_HEADER)
               if (value := request.headers.get(name)) is not None}
    now = time.time()
    refusal = forwarding.check(rt.settings.forward_secret, headers, payload, now=now, target=rt.ctx.instance_id)
    # The nonce, once the signature holds: used already here, on another instance, or before a restart is a replay.
    if refusal is None and not rt.edge_state.first_use_of_nonce(
            headers[forwarding.NONCE_HEADER], now + forwarding.NONCE_WINDOW_S, now):
        refusal = forwarding.Refusal(401, "this signed request was received already (replay)")
    if refusal is not None:
        log.warning("forward from %s refused (%d: %s)", request.remote_addr, refusal.status, refusal.detail)
        raise ApiError(refusal.status, refusal.detail)
    org, app, executor_id, forwarded = _parse(payload)
    row = rt.views.applications.app(org, app)
    if row is None or str(row["id"]) != app_id:
        raise not_found(f"application '{app}' (id {app_id}) not found in organization '{org}'")
    response = executor_calls().serve_forwarded(org, app, executor_id, forwarded)
    return jsonify(api_to_wire.raw_response(response))


def _parse(payload: bytes) -> tuple[str, str, str | None, RawRequest]:
    if nests_deeper(payload, MAX_DEPTH + 2):  # a frame, in its envelope
        raise ApiError(400, f"body: nests deeper than {MAX_DEPTH + 2} levels")
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        raise ApiError(400, "body: not valid JSON") from None
    if not isinstance(body, dict):
        raise invalid("body", "must be a JSON object")
    org, app, executor_id, frame = body.get("org"), body.get("app"), body.get("executor_id"), body.get("frame")
    if not isinstance(org, str) or not isinstance(app, str):
        raise invalid("body", "org and app must be strings")
    check_path_names(org, app)
    if executor_id is not None and (not isinstance(executor_id, str) or not executor_id):
        raise invalid("body.executor_id", "must be a non-empty string", executor_id)
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str) or not frame["type"]:
        raise invalid("body.frame", "must be an object with a type")
    fields: JSONObject = {k: v for k, v in frame.items() if k not in _ENVELOPE}
    return org, app, executor_id, RawRequest(type=frame["type"], fields=fields)
