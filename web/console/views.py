"""Console pages served from Relay's own store: applications, executors, settings, keys, recoveries,
audit log, cluster. Reads go to the views; actions to the services (actors/services/configuration_changes.py), whose
domain errors are shown as the API would answer them (web/problems.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from flask import abort, flash, redirect, render_template, request, url_for
from werkzeug.exceptions import Forbidden
from werkzeug.wrappers import Response

from relay.actors.autoscale import POLICY_SETTING, RECOMMENDATIONS
from relay.actors.services.configuration_changes import ConfigurationChanges
from relay.events.application import DEFAULT_SETTINGS, MAX_EXECUTOR_TIMEOUT_SECS
from relay.events.data_plane import DEFAULTS as DATA_PLANE_DEFAULTS
from relay.events.data_plane import check_data_plane
from relay.events.errors import InvalidValueError
from relay.events.names import APP_NAME, TOKEN_NAME
from relay.events.organization import PERMISSIONS
from relay.projections.identity import Principal, hash_key, new_api_key
from relay.web import audit_trail
from relay.web.console import bp, charts, overview, remote
from relay.web.console.auth import confirm_page, confirmed, current, require
from relay.web.console.changes import change
from relay.web.console.executors import EXECUTOR_STATES, executor_history, requested_table
from relay.web.console.helpers import PAGE_SIZE, check_app, check_org, page_number
from relay.web.console.series_cache import SERIES
from relay.web.context import refuse_beyond_scope, runtime
from relay.wire.json_types import JSONObject

# What a new key gets when the form ticks nothing: what an executor needs (as the API's default).
DEFAULT_KEY_PERMISSIONS = ("application.read", "application.write", "metric.read", "websocket.connect")
RETENTION_SETTINGS = ("gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs")


def _organizations() -> list[str]:
    """Organizations the logged-in principal may look at (the admin: every one)."""
    who = current()
    if not who.admin:
        return [who.org] if who.org else []
    rows = runtime().views.audit.entries(event="Organization.Created", limit=1000)
    return sorted({str(r["subject"]) for r in rows if r["subject"]})


@bp.app_context_processor
def _nav() -> dict[str, object]:
    # A callable: the layout calls it only once someone is logged in.
    return {"organizations": _organizations}


@bp.get("/")
def home() -> Response:
    """The first page the principal may see: applications, else API keys, else the audit log."""
    who = current()
    org = who.org or runtime().settings.default_org
    for permission, endpoint in (("application.read", "console.apps"), ("token.read", "console.keys"),
                                 ("organization.read", "console.audit")):
        if who.allows(permission, org):
            return redirect(url_for(endpoint, org=org))
    raise Forbidden(f"{'your role' if who.person else 'this key'} has none of the permissions the console shows "
                    "(application.read, token.read, organization.read)")


# -- applications ---------------------------------------------------------------------------------
def _app_summary(org: str, row: dict[str, Any]) -> dict[str, Any]:
    registry = runtime().views.registry
    counts = registry.counts_by_status(org, row["name"])
    return {
        "name": row["name"],
        "settings": row["settings"],
        "created_at": row["created_at"],
        "counts": {state: counts.get(state, 0) for state in EXECUTOR_STATES},
        "versions": list(registry.running_versions(org, row["name"])),
        "languages": registry.languages(org, row["name"]),
    }


@bp.get("/orgs/<org>/apps")
def apps(org: str) -> str:
    check_org(org)
    who = current()
    if not who.allows("application.read", org):
        abort(403, "your key lacks 'application.read' in this organization")
    rows = [r for r in runtime().views.applications.apps(org) if who.allows("application.read", org, r["name"])]
    return render_template("console/apps.html", org=org, apps=[_app_summary(org, r) for r in rows])


@bp.post("/orgs/<org>/apps")
def register_app(org: str) -> Response:
    check_org(org)
    name = (request.form.get("name") or "").strip()
    if not APP_NAME.match(name):
        flash("An application name is 3-30 characters of a-z, 0-9, '-' and '_'.", "error")
        return redirect(url_for("console.apps", org=org))
    who = require("application.write", org, name)
    if runtime().views.applications.app(org, name) is not None:
        flash(f"Application '{name}' is already registered.", "info")
    else:
        change("registerApp", [name], lambda: ConfigurationChanges(runtime()).register_app(org, name, who.display),
               done=f"Application '{name}' registered. Executors can now connect with a key for it.",
               failed=f"Could not register '{name}'", app=name)
    return redirect(url_for("console.apps", org=org))


@bp.get("/orgs/<org>/apps/<app>")
def app_overview(org: str, app: str) -> str:
    row = check_app(org, app)
    table = requested_table(org, app)
    range_key = overview.pick_range(request.args.get("range"))

    def link(**filters: str) -> str:
        arguments: dict[str, Any] = {"org": org, "app": app, **filters}
        return url_for("console.workflows", **arguments)

    figures: overview.Overview | None = None
    recent: list[JSONObject] = []
    now = datetime.now(UTC)
    asked = overview.questions(now, range_key)
    kept = SERIES.get(org, app, range_key)
    if kept is not None:  # a long range's chart answered less than a minute ago (series_cache.py)
        del asked["series"]
    recent_body: JSONObject = {"limit": overview.RECENT_SHOWN, "sortDesc": True, "loadInput": False,
                               "loadOutput": False}
    try:
        answers, recent = remote.overview_answers(org, app, asked, recent_body)
        if kept is None:
            SERIES.put(org, app, range_key, answers["series"])
        else:
            answers["series"] = kept.rows
        figures = overview.figures(answers, link, now, range_key, bar_link=link)
        figures.series_age_s = None if kept is None else round(kept.age_s(time.monotonic()))
        problem = None
    except remote.ExecutorProblem as failed:
        problem = failed
    # Step latency: step aggregates come from executors only (the system database's client has none).
    steps = charts.step_chart(org, app) if table["counts"]["HEALTHY"] else None
    return render_template(
        "console/app.html", org=org, app=app, summary=row, table=table,
        history=executor_history(org, app), overview=figures, recent=recent, problem=problem, steps=steps,
        tab="overview", autoscaling=_autoscaling(org, app, row),
    )


def _autoscaling(org: str, app: str, row: dict[str, Any]) -> dict[str, Any] | None:
    """The application's autoscaling policy and the latest recommendation this instance computed (actors/autoscale.py):
    read from memory, so the page never waits on an executor. None without a policy."""
    policy = row["settings"].get(POLICY_SETTING)
    if policy is None:
        return None
    latest = RECOMMENDATIONS.get(org, app)
    return {"policy": policy, "entries": latest.entries if latest is not None else None,
            "interval_s": runtime().settings.autoscale_interval_s}


# -- settings: grace period and retention -----------------------------------------------------------
def _parse_settings(form: Any, current_settings: Mapping[str, object]) -> JSONObject:
    changes: JSONObject = {}
    private = form.get("privateMode") == "on"  # a checkbox: absent when unticked
    if bool(current_settings.get("privateMode")) != private:
        changes["privateMode"] = private
    for key in ("executorTimeoutSecs", *RETENTION_SETTINGS):
        raw = (form.get(key) or "").strip()
        if raw == "":
            if key == "executorTimeoutSecs":
                raise ValueError("the grace period is required")
            value = None
        else:
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{key} must be a whole number") from None
            if value < 1:
                raise ValueError(f"{key} must be at least 1")
            if key == "executorTimeoutSecs" and value > MAX_EXECUTOR_TIMEOUT_SECS:
                raise ValueError(f"the grace period must be at most {MAX_EXECUTOR_TIMEOUT_SECS} s (a day)")
        if current_settings.get(key) != value:
            changes[key] = value
    return changes


@bp.route("/orgs/<org>/apps/<app>/settings", methods=["GET", "POST"])
def app_settings(org: str, app: str) -> Any:
    row = check_app(org, app)
    if request.method == "GET":
        plane = row["settings"].get("dataPlane")
        return render_template("console/settings.html", org=org, app=app, settings=row["settings"],
                               defaults=DEFAULT_SETTINGS, tab="settings", data_plane=plane,
                               data_plane_state=_data_plane_state(org, app, plane),
                               data_plane_defaults=DATA_PLANE_DEFAULTS, max_grace=MAX_EXECUTOR_TIMEOUT_SECS,
                               policy=row["settings"].get(POLICY_SETTING))
    who = require("application.write", org, app)
    try:
        changes = _parse_settings(request.form, row["settings"])
    except ValueError as error:
        flash(str(error), "error")
        return redirect(url_for("console.app_settings", org=org, app=app))
    if not changes:
        flash("Nothing changed.", "info")
        return redirect(url_for("console.app_settings", org=org, app=app))
    if not confirmed():
        described = ", ".join(f"{k} → {'unset' if v is None else v}" for k, v in changes.items())
        return confirm_page(f"Change the settings of {app}?", described, "Save settings",
                            back=url_for("console.app_settings", org=org, app=app), keep="Don't change")
    change("updateApp", [app], lambda: ConfigurationChanges(runtime()).change_settings(org, app, changes, who.display),
           done="Settings saved.", failed="Settings not saved")
    return redirect(url_for("console.app_settings", org=org, app=app))


@bp.post("/orgs/<org>/apps/<app>/delete")
def delete_app(org: str, app: str) -> Any:
    """As DELETE /v2/.../apps/<app>: the application is deleted and its executors are closed."""
    check_app(org, app)
    who = require("application.write", org, app)
    if not confirmed():
        return confirm_page(f"Delete the application {app}?", "Its connected executors are closed; registering it "
                            "again brings it back.",
                            f"Delete {app}", danger=True, back=url_for("console.app_settings", org=org, app=app),
                            keep="Keep the application")
    deleted, _ = change("deleteApp", [app], lambda: ConfigurationChanges(runtime()).delete_app(org, app, who.display),
                        done=f"Application '{app}' deleted.", failed="Application not deleted")
    if not deleted:
        return redirect(url_for("console.app_settings", org=org, app=app))
    return redirect(url_for("console.apps", org=org))


# -- data plane (issue 15): the system database by reference, its mode and limits ------------------------------------
def _data_plane_state(org: str, app: str, config: Mapping[str, object] | None) -> JSONObject | None:
    plane = runtime().data_planes.get(org, app, config)
    return plane.state().to_json() if plane is not None else None


@bp.post("/orgs/<org>/apps/<app>/data-plane")
def app_data_plane(org: str, app: str) -> Any:
    row = check_app(org, app)
    who = require("application.write", org, app)
    back = url_for("console.app_settings", org=org, app=app)
    if who.app_scoped:  # as PUT .../data-plane: not an application's own key (issue 34)
        flash("Data plane not saved: a key limited to some applications cannot configure a data plane", "error")
        return redirect(back)
    removing = request.form.get("remove") == "1"
    config: JSONObject | None = None
    if not removing:
        try:
            config = check_data_plane({
                "systemDatabaseUrlFrom": (request.form.get("systemDatabaseUrlFrom") or "").strip(),
                "mode": request.form.get("mode") or "read",
                "statementTimeoutMs": int(request.form.get("statementTimeoutMs") or 10_000),
                "poolSize": int(request.form.get("poolSize") or 2),
                "schema": (request.form.get("schema") or "").strip() or str(DATA_PLANE_DEFAULTS["schema"]),
            })
            ConfigurationChanges(runtime()).check_data_plane_reference(org, app, str(config["systemDatabaseUrlFrom"]))
        except (InvalidValueError, ValueError) as error:
            flash(f"Data plane not saved: {error}", "error")
            return redirect(back)
    current = row["settings"].get("dataPlane")
    if (config or None) == (current or None):
        flash("Nothing changed.", "info")
        return redirect(back)
    if not confirmed():
        if config is None:
            return confirm_page(f"Remove the data plane of {app}?", "With no executor connected, its pages will "
                                "be empty again.", "Remove data plane", back=back, keep="Keep it", danger=True)
        described = (f"system database from {config['systemDatabaseUrlFrom']}, mode {config['mode']}, statement "
                     f"timeout {config['statementTimeoutMs']} ms, pool {config['poolSize']}, schema {config['schema']}")
        return confirm_page(f"Set the data plane of {app}?", described, "Save data plane", back=back,
                            keep="Don't change")
    operation = "deleteDataPlane" if config is None else "putDataPlane"
    changes = ConfigurationChanges(runtime())
    change(operation, [app], lambda: changes.configure_data_plane(org, app, config, who.display),
           done="Data plane removed." if config is None else "Data plane saved.", failed="Data plane not saved")
    return redirect(back)


# -- recoveries (alerts: web/console/alerts.py) ------------------------------------------------------------------------
@bp.get("/orgs/<org>/apps/<app>/recoveries")
def recoveries(org: str, app: str) -> str:
    check_app(org, app)
    page = page_number(request.args.get("page"))
    rows = runtime().views.registry.recoveries(org, app, limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE)
    return render_template("console/recoveries.html", org=org, app=app, rows=rows[:PAGE_SIZE], page=page,
                           more=len(rows) > PAGE_SIZE, tab="recoveries")


# -- API keys -------------------------------------------------------------------------------------
@bp.get("/orgs/<org>/keys")
def keys(org: str) -> str:
    check_org(org)
    return _keys_page(org, require("token.read", org))


def _keys_page(org: str, who: Principal, created: dict[str, str] | None = None) -> str:
    rows = [
        {"name": r["name"], "apps": r["apps"], "permissions": r["permissions"],
         "issued_at": r["issued_at"], "revoked_at": r["revoked_at"]}
        for r in runtime().views.applications.keys(org) if who.covers(r["apps"])  # as GET .../tokens (issue 34)
    ]  # the hash stays in the view: pages show names, scopes and dates only
    app_names = [a["name"] for a in runtime().views.applications.apps(org) if who.sees_app(a["name"])]
    return render_template("console/keys.html", org=org, keys=rows, app_names=app_names,
                           permissions=PERMISSIONS, defaults=DEFAULT_KEY_PERMISSIONS, created=created)


@bp.post("/orgs/<org>/keys")
def create_key(org: str) -> Any:
    check_org(org)
    who = require("token.write", org)
    name = (request.form.get("name") or "").strip()
    apps_ = sorted(set(request.form.getlist("apps")))
    permissions = sorted(set(request.form.getlist("permissions"))) or list(DEFAULT_KEY_PERMISSIONS)
    problem = None
    if not TOKEN_NAME.match(name):
        problem = "A key name is 1-64 characters of A-Z, a-z, 0-9, '_', '.' and '-'."
    elif any(runtime().views.applications.app(org, a) is None for a in apps_ if APP_NAME.match(a)) or not all(
        APP_NAME.match(a) for a in apps_
    ):
        problem = "Unknown application in the key's scope."
    elif not set(permissions) <= set(PERMISSIONS):
        problem = "Unknown permission."
    elif not who.admin and (set(permissions) - who.permissions or not who.covers(apps_)):
        problem = "A key cannot grant more than its own permissions and applications."
    if problem:
        audit_trail.note("createToken", [name], failed=problem)
        flash(problem, "error")
        return redirect(url_for("console.keys", org=org))
    key = new_api_key()
    if runtime().instance is None:
        abort(503, "this instance is not started")
    issued, _ = change("createToken", [name], lambda: ConfigurationChanges(runtime()).issue_key(
        org, name, hash_key(key), apps_, permissions, who.display), failed="Key not created")
    if not issued:
        return redirect(url_for("console.keys", org=org))
    # Rendered in this response only (no redirect, no flash, no-store): the key is shown exactly once.
    return _keys_page(org, who, created={"name": name, "key": key})


@bp.post("/orgs/<org>/keys/<name>/revoke")
def revoke_key(org: str, name: str) -> Any:
    check_org(org)
    who = require("token.write", org)
    if not confirmed():
        return confirm_page(
            f"Revoke the API key '{name}'?",
            "Every executor and client using it is refused from now on; its open executor sockets are closed.",
            "Revoke key", danger=True, back=url_for("console.keys", org=org), keep="Keep the key",
        )
    if runtime().instance is None:
        abort(503, "this instance is not started")
    def revoke() -> int:
        refuse_beyond_scope(who, org, name)  # a key beyond the caller's scope: its 404
        return ConfigurationChanges(runtime()).revoke_key(org, name, who.display)

    change("deleteToken", [name], revoke, failed="Key not revoked",
           done=lambda closed: f"Key '{name}' revoked ({closed} executor socket(s) closed).")
    return redirect(url_for("console.keys", org=org))


# -- audit log ------------------------------------------------------------------------------------
@bp.get("/orgs/<org>/audit")
def audit(org: str) -> str:
    check_org(org)
    who = require("organization.read", org)
    app = (request.args.get("app") or "").strip() or None
    kind = (request.args.get("type") or "").strip() or None
    page = page_number(request.args.get("page"))
    rows = runtime().views.audit.entries(
        org=org, app=app if app and APP_NAME.match(app) else None, event=kind, newest_first=True,
        apps=who.apps if who.app_scoped else None,  # as GET .../audit-logs (issue 34)
        limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE,
    )
    return render_template("console/audit.html", org=org, rows=rows[:PAGE_SIZE], page=page,
                           more=len(rows) > PAGE_SIZE, app_filter=app or "", type_filter=kind or "")


# -- cluster: instances and leases ----------------------------------------------------------------
LEASES_PER_PAGE = 100


@bp.get("/orgs/<org>/cluster")
def cluster(org: str) -> str:
    check_org(org)
    who = require("organization.read", org)
    if who.app_scoped:  # as GET /relay/v1/instances (issue 34)
        abort(403, "a key limited to some applications cannot see Relay's instances")
    shown_org = None if who.admin else org
    queries = runtime().views.instances
    counts = queries.lease_counts(shown_org)
    # One page of leases per instance (`instance` and `page` page through one of them): the page's cost and size
    # do not grow with the fleet.
    paged, page = request.args.get("instance"), max(1, request.args.get("page", 1, type=int) or 1)
    instances = []
    for state in queries.describe((), 0.0, org=shown_org, with_leases=False):
        held = sum(counts.get(state.instance, {}).values())
        at = page if state.instance == paged else 1
        leases = queries.lease_page(state.instance, LEASES_PER_PAGE, (at - 1) * LEASES_PER_PAGE, org=shown_org)
        instances.append({"state": state, "counts": counts.get(state.instance, {}), "held": held, "page": at,
                          "pages": max(1, -(-held // LEASES_PER_PAGE)), "leases": leases})
    return render_template("console/cluster.html", org=org, instances=instances,
                           this_instance=runtime().settings.instance_id, per_page=LEASES_PER_PAGE)

