"""The Alerts tab: an application's alerting rules (created and deleted here through the same service as
the API's alerting-rule endpoints, actors/services/alerting_rules.py), their incidents (web/console/incidents.py
acknowledges and silences them), the alerts release 0.1.0 fired and its managed retention runs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flask import abort, flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from relay.actors.errors import ServiceError
from relay.actors.services.alerting_rules import AlertingRules
from relay.actors.services.incidents import STATES as INCIDENT_STATES
from relay.actors.services.incidents import Incidents
from relay.events.alerting import RULE_TYPES, metadata_fields
from relay.events.errors import DomainError
from relay.projections.identity import Principal
from relay.web import audit_trail
from relay.web.console import bp
from relay.web.console.auth import confirm_page, confirmed, require
from relay.web.console.changes import change
from relay.web.console.helpers import PAGE_SIZE, check_app, page_number
from relay.web.console.incidents import SILENCES
from relay.web.context import runtime
from relay.web.problems import ApiError, api_error
from relay.wire.json_types import JSONObject

_CREDENTIALS_IN_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")
_SECRET_WORDS = ("secret", "token", "password", "passwd", "apikey", "api_key", "credential", "authorization")
RETENTION_RUNS_SHOWN = 10


def _scrub(value: object) -> str:
    """Text for a page: credentials inside URLs removed (``scheme://user:pass@host`` → ``scheme://host``)."""
    return _CREDENTIALS_IN_URL.sub(r"\1", "" if value is None else str(value))


def _shown(metadata: JSONObject | None) -> list[tuple[str, str]]:
    """(key, value) pairs of a rule's or an alert's metadata, as a page may show them: nothing that looks
    like a secret (by its key) and no credentials in URLs. Alerting metadata holds none today (its keys
    are checked by events/alerting.py); this keeps it so if that ever changes."""
    pairs = []
    for key, value in sorted((metadata or {}).items()):
        hidden = any(word in key.lower() for word in _SECRET_WORDS)
        pairs.append((key, "(hidden)" if hidden else ("*" if value is None else _scrub(value))))
    return pairs


def _rule_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "rule_id": row["rule_id"], "rule_type": row["rule_type"], "metadata": _shown(row["metadata"]),
        "receiving_app": row["receiving_app"], "min_interval_secs": row["min_interval_secs"],
        "renotify_interval_secs": row.get("renotify_interval_secs"),
        "created_at": row["created_at"], "last_fired_at": row["last_fired_at"], "alerts": row["alerts"],
    }


def delivery(delivered_to: list[str] | None, failed: list[dict[str, Any]] | None, webhook: Any,
             sinks: dict[str, Any] | None, recorded: bool) -> dict[str, Any]:
    """Where an alert or an incident's notification went, as the page shows it: its outcome ``pending`` until
    recorded, then ``delivered`` (every target took it), ``partial`` (some did) or ``failed`` (none did)."""
    delivered = list(delivered_to or [])
    refused = [{"executor": _scrub(f.get("executorId")), "reason": _scrub(f.get("reason"))} for f in failed or []]
    hook = _sink(webhook)
    shown_sinks = [(name, shown) for name, one in sorted((sinks or {}).items()) if (shown := _sink(one)) is not None]
    if not recorded:
        outcome = "pending"
    else:
        outcomes = [s["outcome"] for s in [hook, *(shown for _, shown in shown_sinks)] if s is not None]
        oks = len(delivered) + outcomes.count("delivered")
        kos = len(refused) + len(outcomes) - outcomes.count("delivered")
        outcome = "delivered" if oks and not kos else "partial" if oks else "failed"
    return {"delivered_to": delivered, "failed": refused, "webhook": hook, "sinks": shown_sinks, "outcome": outcome}


INCIDENTS_SHOWN = 20


def duration(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {rest // 60:02d}m" if hours else f"{rest // 60}m {rest % 60:02d}s"


def incident_rows(org: str, app: str, state: str = "all") -> list[dict[str, Any]]:
    """The newest incidents in `state` (open, resolved or all), as the page shows them, each with where its last
    notification went (one read per incident shown: at most INCIDENTS_SHOWN)."""
    alerting = runtime().views.alerting
    rows = []
    for row in Incidents(runtime()).list(org, app, state, limit=INCIDENTS_SHOWN):
        found: dict[str, Any] = dict(alerting.incident(org, app, row["id"]) or {})
        sent: list[dict[str, Any]] = found.get("notifications") or []
        last = None
        if sent:
            n = sent[-1]
            last = {"kind": n["kind"], "at": n["at"],
                    **delivery(n["delivered_to"], n["failed"], n["webhook"], n["sinks"], recorded=True)}
        rows.append({**row, "duration": duration(row["duration_secs"]), "last_sent": last})
    return rows


def _alert_row(row: dict[str, Any]) -> dict[str, Any]:
    """An alert (as release 0.1.0 fired them) with where it went."""
    return {
        "rule_id": row["rule_id"], "rule_type": row["rule_type"], "sequence": row["sequence"],
        "message": _scrub(row["message"]), "metadata": _shown(row["metadata"]),
        "receiving_app": row["receiving_app"], "instance": row["instance"] or "", "fired_at": row["fired_at"],
        "delivered_at": row["delivered_at"],
        **delivery(row["delivered_to"], row["failed"], row["webhook"], row.get("sinks"),
                   row["delivered_at"] is not None),
    }


def _sink(hook: Mapping[str, object] | None) -> dict[str, object] | None:
    """A sink's outcome as the page shows it: never its URL, secret or key (the event holds none of them)."""
    return None if hook is None else {
        "outcome": str(hook.get("outcome") or ""), "attempts": hook.get("attempts"), "status": hook.get("status"),
        "error": _scrub(hook.get("error")) if hook.get("error") else None,
    }


def _retention_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "started_at": row["started_at"], "finished_at": row["finished_at"], "executor": row["executor"],
        "instance": row["instance"] or "", "outcome": row["outcome"] or "running",
        "reason": _scrub(row["reason"]) if row["reason"] else "",
        "policy": [(k, v) for k, v in sorted(row["policy"].items()) if v is not None],
    }


@bp.get("/orgs/<org>/apps/<app>/alerts")
def alerts(org: str, app: str) -> str:
    """The app's alerting rules, the alerts they fired (newest first, with where each went) and its latest
    managed retention runs, from the alerting and operations views (what GET .../alerting-rules,
    /relay/v1/.../alerts and .../retention-runs return)."""
    check_app(org, app)
    view, operations = runtime().views.alerting, runtime().views.operations
    page = page_number(request.args.get("page"))
    # The incidents' filter is in the URL (?state=open), as GET .../incidents?state= takes it: a link keeps it.
    asked = request.args.get("state") or "all"
    state = asked if asked in INCIDENT_STATES else "all"
    fired = view.alerts(org, app, limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE)
    return render_template(
        "console/alerts.html", org=org, app=app, tab="alerts",
        rules=[_rule_row(r) for r in view.rules(org, app)],
        alerts=[_alert_row(r) for r in fired[:PAGE_SIZE]], page=page, more=len(fired) > PAGE_SIZE,
        incidents=[dict(i, message=_scrub(i["message"]), metadata=_shown(i["metadata"]))
                   for i in incident_rows(org, app, state)], silences=SILENCES, incident_state=state,
        incident_states=INCIDENT_STATES,
        runs=[_retention_row(r) for r in operations.retention_runs(org, app, limit=RETENTION_RUNS_SHOWN)],
        webhook=runtime().settings.alert_webhook_url is not None,
        sinks=[name for name, on in (("Slack", runtime().settings.alert_slack_webhook_url),
                                     ("PagerDuty", runtime().settings.alert_pagerduty_routing_key)) if on],
        interval_s=runtime().settings.alert_interval_s,
        rule_types=[(t, metadata_fields(t)) for t in RULE_TYPES],
        app_names=[a["name"] for a in runtime().views.applications.apps(org)],
    )


def _rule_body(form: Any) -> JSONObject:
    """The form of one rule type as a ``CreateAlertInputBody``: empty fields are left out (the rule type's
    defaults apply), numbers must be whole."""
    rule_type = (form.get("ruleType") or "").strip()
    metadata: JSONObject = {}
    for key, _default, kind in metadata_fields(rule_type) if rule_type in RULE_TYPES else ():
        raw = (form.get(key) or "").strip()
        if raw:
            metadata[key] = raw if kind == "name" else _whole(key, raw)
    body: JSONObject = {"ruleType": rule_type, "ruleMetadata": metadata}
    for name in ("minIntervalSecs", "renotifyIntervalSecs"):
        interval = (form.get(name) or "").strip()
        if interval:
            body[name] = _whole(name, interval)
    receiver = (form.get("receivingAppName") or "").strip()
    if receiver:
        body["receivingAppName"] = receiver
    return body


def _whole(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number") from None


@bp.post("/orgs/<org>/apps/<app>/alerting-rules")
def create_rule(org: str, app: str) -> Response:
    check_app(org, app)
    who = require("application.write", org, app)
    back = url_for("console.alerts", org=org, app=app)
    try:
        rules = AlertingRules(runtime())
        row = rules.create(org, app, rules.check_body(org, _rule_body(request.form)), who)
    except ValueError as error:
        audit_trail.note("createAlertingRule", [], failed=str(error))
        flash(f"Rule not created: {error}", "error")
    except (ServiceError, DomainError, ApiError) as error:
        problem = api_error(error)
        audit_trail.note("createAlertingRule", [], failed=problem.detail, status=problem.status)
        flash(f"Rule not created: {problem.detail}", "error")
    else:
        audit_trail.note("createAlertingRule", [str(row["rule_id"])])
        flash(f"{row['rule_type']} rule {row['rule_id']} created.", "ok")
    return redirect(back)


@bp.post("/orgs/<org>/apps/<app>/alerting-rules/<rule_id>/delete")
def delete_rule(org: str, app: str, rule_id: str) -> Response | str:
    check_app(org, app)
    who = require("application.write", org, app)
    back = url_for("console.alerts", org=org, app=app)
    if not confirmed():
        return confirm_page(f"Delete alerting rule {rule_id}?", "It fires no more alerts; the alerts it fired stay "
                            "listed.", "Delete rule", danger=True, back=back, keep="Keep the rule")
    change("deleteAlertingRule", [rule_id], lambda: AlertingRules(runtime()).delete(org, app, rule_id, who.display),
           done=f"Rule {rule_id} deleted.", failed="Rule not deleted")
    return redirect(back)


# -- editing a rule: Relay's API has no rule update, so an edit replaces the rule ---------------------------------
def _rule_or_404(org: str, app: str, rule_id: str) -> dict[str, Any]:
    row = runtime().views.alerting.rule(org, app, rule_id)
    if row is None:
        abort(404, f"no alerting rule '{rule_id}' in '{org}/{app}'")
    return dict(row)


@bp.get("/orgs/<org>/apps/<app>/alerting-rules/<rule_id>/edit")
def edit_rule(org: str, app: str, rule_id: str) -> str:
    """The rule's form, filled in (replace_rule saves it)."""
    check_app(org, app)
    row = _rule_or_404(org, app, rule_id)
    return render_template(
        "console/alert_rule.html", org=org, app=app, tab="alerts", rule=row,
        fields=metadata_fields(str(row["rule_type"])), metadata=row["metadata"] or {},
        app_names=[a["name"] for a in runtime().views.applications.apps(org)],
    )


@bp.post("/orgs/<org>/apps/<app>/alerting-rules/<rule_id>/edit")
def replace_rule(org: str, app: str, rule_id: str) -> Response | str:
    """The edited rule saved (after a confirmation) as the API would do it: created (createAlertingRule), then
    the old one deleted (deleteAlertingRule), each through the service and audited. The old rule's incidents and
    alerts stay listed under its id."""
    check_app(org, app)
    row = _rule_or_404(org, app, rule_id)
    who = require("application.write", org, app)
    rules = AlertingRules(runtime())
    try:
        body = rules.check_body(org, _rule_body({**request.form.to_dict(), "ruleType": row["rule_type"]}))
    except (ValueError, ServiceError, DomainError, ApiError) as error:
        flash(f"Rule not changed: {error if isinstance(error, ValueError) else api_error(error).detail}", "error")
        return redirect(url_for("console.edit_rule", org=org, app=app, rule_id=rule_id))
    if not confirmed():
        conditions = ", ".join(f"{k} {v}" for k, v in sorted(body["ruleMetadata"].items())) or "the type's defaults"
        return confirm_page(
            f"Replace alerting rule {rule_id}?",
            f"Relay's rules are not updated in place: a {row['rule_type']} rule with {conditions} is created (with "
            f"a new id) and rule {rule_id} is deleted; its incidents and alerts stay listed.",
            "Replace rule", back=url_for("console.alerts", org=org, app=app), keep="Keep the rule as it is")
    _replace(org, app, rule_id, body, who)
    return redirect(url_for("console.alerts", org=org, app=app))


def _replace(org: str, app: str, rule_id: str, body: JSONObject, who: Principal) -> None:
    rules = AlertingRules(runtime())
    try:
        created = rules.create(org, app, body, who)
    except (ServiceError, DomainError, ApiError) as error:
        problem = api_error(error)
        audit_trail.note("createAlertingRule", [], failed=problem.detail, status=problem.status)
        flash(f"Rule not changed: {problem.detail}", "error")
        return
    audit_trail.note("createAlertingRule", [str(created["rule_id"])])
    change("deleteAlertingRule", [rule_id], lambda: rules.delete(org, app, rule_id, who.display),
           done=f"Rule {rule_id} replaced by rule {created['rule_id']}.",
           failed=f"Rule {created['rule_id']} created, but rule {rule_id} was not deleted")
