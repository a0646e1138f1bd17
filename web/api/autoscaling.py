"""Conductor API v2: queue-based autoscaling (issue 17), as the reference defines it.

- ``GET|PUT|DELETE .../autoscaling-policy``: the policy is application state, stored as App events
  (AutoscalingPolicySet / AutoscalingPolicyCleared) and read from the applications view. PUT checks the body
  (actors/services/autoscaling_policies.py, as the console's editor does: 422 naming the field) and then the
  named queue against a healthy executor (`get_queue`):
  a queue that does not exist, is partitioned or has no worker_concurrency is a 422 on ``body.queue`` (the body names
  something the application cannot scale on: the request is wrong, not in conflict with Relay's state); with no
  executor to ask, 503. DELETE of an absent policy succeeds (204).
- ``GET .../autoscale``: the recommendation asked afresh of the executors (actors/autoscale.py ``gather``); 404 when
  no policy is stored, 503 when no executor is connected. It is also published for ``GET /metrics``.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from relay.actors.autoscale import POLICY_SETTING, RECOMMENDATIONS, gather
from relay.actors.services.autoscaling_policies import AutoscalingPolicies
from relay.web.context import authorize, executor_calls, require_app, runtime
from relay.web.http_inputs import json_body
from relay.web.operations import operation
from relay.web.problems import not_found
from relay.wire.json_types import JSONObject

bp = Blueprint("v2_autoscaling", __name__)

APP = "/v2/orgs/<org>/apps/<app>"
READ, WRITE = "application.read", "application.write"


def stored_policy(org: str, app: str) -> JSONObject:
    """The application's policy; 404 (after the application's own 404) when none is stored."""
    policy = require_app(org, app)["settings"].get(POLICY_SETTING)
    if policy is None:
        raise not_found(f"application '{app}' has no autoscaling policy")
    return policy


@bp.get(APP + "/autoscaling-policy")
@operation("getAutoscalingPolicy", summary="Get autoscaling policy", tag="Queues", returns="PolicyOutputBody")
def get_policy(org: str, app: str) -> Response:
    authorize(READ, org, app)
    return jsonify({"policy": stored_policy(org, app)})


@bp.put(APP + "/autoscaling-policy")
@operation("setAutoscalingPolicy", summary="Set autoscaling policy", tag="Queues", body="AutoscalePolicy",
           body_required=True, returns="PolicyOutputBody")
def set_policy(org: str, app: str) -> Response:
    who = authorize(WRITE, org, app)
    require_app(org, app)
    AutoscalingPolicies(runtime(), executor_calls()).set(org, app, json_body(required=True), who.display)
    return jsonify({"policy": stored_policy(org, app)})


@bp.delete(APP + "/autoscaling-policy")
@operation("deleteAutoscalingPolicy", summary="Delete autoscaling policy", tag="Queues", status=204)
def delete_policy(org: str, app: str) -> Response:
    who = authorize(WRITE, org, app)
    require_app(org, app)
    AutoscalingPolicies(runtime(), executor_calls()).clear(org, app, who.display)
    return Response(status=204)


@bp.get(APP + "/autoscale")
@operation("getAutoscale", summary="Get autoscaling recommendation", tag="Queues", returns={
    "type": ["array", "null"], "items": {"$ref": "#/components/schemas/QueueAutoscale"}})
def get_autoscale(org: str, app: str) -> Response:
    authorize(READ, org, app)
    policy = stored_policy(org, app)
    calls = executor_calls()
    entries = gather(policy, lambda request: calls.call(org, app, request), runtime().ctx.clock)
    RECOMMENDATIONS.publish(org, app, str(policy["queue"]), entries)
    return jsonify(entries)
