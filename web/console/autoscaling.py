"""The autoscaling policy's editor on an application's Settings tab: set or remove the policy through the same
service as PUT and DELETE .../autoscaling-policy (actors/services/autoscaling_policies.py), after a confirmation,
recorded in the audit trail under those operations' names."""

from __future__ import annotations

from typing import Any

from flask import flash, redirect, request, url_for
from werkzeug.wrappers import Response

from relay.actors.autoscale import POLICY_SETTING
from relay.actors.services.autoscaling_policies import AutoscalingPolicies
from relay.events.autoscaling import ROLLOUT_FIELDS
from relay.web.console import bp
from relay.web.console.auth import confirm_page, confirmed, require
from relay.web.console.changes import change
from relay.web.console.helpers import check_app
from relay.web.context import executor_calls, runtime
from relay.wire.json_types import JSONObject

# How the confirmation page says each rollout field.
ROLLOUT_WORDS = {"maxOldApplicationVersions": "old versions reported",
                 "maxExecutorsForOldApplicationVersions": "executors of old versions at most"}


def policy_body(form: Any) -> JSONObject:
    """The editor's form as an ``AutoscalePolicy`` body: empty rollout fields left out; ValueError for a field
    that is not a whole number (the service checks the rest, as it does the API's body)."""
    body: JSONObject = {"queue": (form.get("queue") or "").strip()}
    rollout: JSONObject = {}
    for name in ROLLOUT_FIELDS:
        raw = (form.get(name) or "").strip()
        if raw:
            try:
                rollout[name] = int(raw)
            except ValueError:
                raise ValueError(f"{name} must be a whole number") from None
    if rollout:
        body["rollout"] = rollout
    return body


def described(policy: JSONObject) -> str:
    rollout = policy.get("rollout")
    parts = [f"queue {policy['queue']}"]
    parts += [f"{ROLLOUT_WORDS[k]}: {v}" for k, v in (rollout.items() if isinstance(rollout, dict) else ())]
    return ", ".join(parts)


@bp.post("/orgs/<org>/apps/<app>/autoscaling-policy")
def autoscaling_policy(org: str, app: str) -> Response | str:
    row = check_app(org, app)
    who = require("application.write", org, app)
    back = url_for("console.app_settings", org=org, app=app) + "#autoscaling"
    current = row["settings"].get(POLICY_SETTING)
    removing = request.form.get("remove") == "1"
    try:
        body = None if removing else policy_body(request.form)
    except ValueError as error:
        flash(f"Autoscaling policy not saved: {error}", "error")
        return redirect(back)
    if (body or None) == (current or None):
        flash("Nothing changed.", "info")
        return redirect(back)
    if not confirmed():
        if body is None:
            return confirm_page(f"Remove the autoscaling policy of {app}?", "No recommendation is computed or "
                                "published (GET .../autoscale, relay_autoscale_* metrics) until a policy is set "
                                "again.", "Remove policy", danger=True, back=back, keep="Keep the policy")
        return confirm_page(f"Set the autoscaling policy of {app}?", described(body), "Save policy", back=back,
                            keep="Don't change")
    operation = "deleteAutoscalingPolicy" if body is None else "setAutoscalingPolicy"
    policies = AutoscalingPolicies(runtime(), executor_calls())
    work = (lambda: policies.clear(org, app, who.display)) if body is None else (
        lambda: policies.set(org, app, body, who.display))
    change(operation, [app], work, failed="Autoscaling policy not saved",
           done="Autoscaling policy removed." if body is None else "Autoscaling policy saved.")
    return redirect(back)
