"""Conductor API v2: applications, their executors, and API tokens (served from Relay's own store)."""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, Response, jsonify

from relay.actors.services.configuration_changes import ConfigurationChanges
from relay.events.application import DEFAULT_SETTINGS, MAX_EXECUTOR_TIMEOUT_SECS
from relay.events.names import APP_NAME, TOKEN_NAME
from relay.events.organization import DEFAULT_KEY_PERMISSIONS as _DEFAULT_PERMISSIONS
from relay.events.organization import PERMISSIONS
from relay.projections.identity import hash_key, new_api_key
from relay.web.api import views_to_api
from relay.web.context import authorize, refuse_beyond_scope, require_app, runtime
from relay.web.http_inputs import json_body
from relay.web.operations import operation
from relay.web.problems import ApiError, invalid, not_found
from relay.web.shapes.values import format_time

bp = Blueprint("v2_apps", __name__)

# What a token gets when the caller names no permissions: everything an application needs.
DEFAULT_KEY_PERMISSIONS = list(_DEFAULT_PERMISSIONS)

# Settings a PATCH may clear with a JSON null: those the reference's Application shows as nullable (null = no
# limit). Its PatchAppInputBody declares no null, so this is an extension: there is no other way to clear one.
CLEARABLE_SETTINGS = ("gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs")
# How long the executors list waits for the views to reach the log's end (issue 32: the view lags a connect
# storm by well under this).
LIST_WAITS_FOR_VIEWS_S = 2.0


def _app_view(org: str, row: dict) -> dict:
    rt = runtime()
    counts = rt.views.registry.counts_by_status(org, row["name"])
    executors = rt.views.registry.executors(org, row["name"])
    languages = sorted({e["language"] for e in executors if e["language"]})
    return views_to_api.application(row, counts, languages[0] if len(languages) == 1 else None)


@bp.get("/v2/orgs/<org>")
@operation("getOrg", summary="Get org", tag="Orgs", returns="Organization")
def get_org(org: str) -> Response:
    authorize("organization.read", org)
    created = runtime().views.audit.entries(org=org, event="Organization.Created", limit=1)
    if not created:  # every organization has one: the event that made it exist
        raise not_found(f"organization '{org}' not found")
    created_at = format_time(datetime.fromisoformat(str(created[0]["at"])))
    return jsonify(views_to_api.organization(org, created_at, runtime().views.people.retention_days(org)))


@bp.get("/v2/orgs/<org>/apps")
@operation("listApps", summary="List applications", tag="Applications", returns="Application[]")
def list_apps(org: str) -> Response:
    who = authorize("application.read", org)
    rows = runtime().views.applications.apps(org)
    visible = [r for r in rows if who.allows("application.read", org, r["name"])]
    return jsonify([_app_view(org, r) for r in visible])


@bp.get("/v2/orgs/<org>/apps/<app>")
@operation("getApp", summary="Get application", tag="Applications", returns="Application")
def get_app(org: str, app: str) -> Response:
    authorize("application.read", org, app)
    return jsonify(_app_view(org, require_app(org, app)))


@bp.put("/v2/orgs/<org>/apps/<app>")
@operation("registerApp", summary="Register application", tag="Applications", status=204, body="PutAppInputBody")
def register_app(org: str, app: str) -> Response:
    """Register an application (idempotent: an existing one keeps its settings)."""
    who = authorize("application.write", org, app, admin_creates_org=True)
    body = json_body(allowed={"privateMode"})
    if "privateMode" in body and not isinstance(body["privateMode"], bool):
        raise invalid("body.privateMode", "must be a boolean", body["privateMode"])
    changes = ConfigurationChanges(runtime())
    if runtime().views.applications.app(org, app) is None:
        changes.register_app(org, app, who.display)
    if "privateMode" in body:
        changes.change_settings(org, app, {"privateMode": body["privateMode"]}, who.display)
    return Response(status=204)


INT64_MAX = 2**63 - 1  # the reference's format for every numeric setting


@bp.patch("/v2/orgs/<org>/apps/<app>")
@operation("updateApp", summary="Update application", tag="Applications", status=204, body="PatchAppInputBody",
           body_required=True)
def update_app(org: str, app: str) -> Response:
    who = authorize("application.write", org, app)
    body = json_body(required=True, allowed=set(DEFAULT_SETTINGS))
    for key, value in body.items():
        if key == "privateMode":
            if not isinstance(value, bool):
                raise invalid(f"body.{key}", "must be a boolean", value)
        elif value is None and key in CLEARABLE_SETTINGS:
            continue  # null clears the setting (no limit), as the console's empty field does
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT64_MAX:
            what = "a positive integer (int64)" + (" or null (no limit)" if key in CLEARABLE_SETTINGS else "")
            raise invalid(f"body.{key}", f"must be {what}", value)
        elif key == "executorTimeoutSecs" and value > MAX_EXECUTOR_TIMEOUT_SECS:
            raise invalid(f"body.{key}", f"must be at most {MAX_EXECUTOR_TIMEOUT_SECS} (a day)", value)
    require_app(org, app)
    ConfigurationChanges(runtime()).change_settings(org, app, body, who.display)
    return Response(status=204)


@bp.delete("/v2/orgs/<org>/apps/<app>")
@operation("deleteApp", summary="Delete application", tag="Applications", status=204)
def delete_app(org: str, app: str) -> Response:
    who = authorize("application.write", org, app)
    require_app(org, app)
    ConfigurationChanges(runtime()).delete_app(org, app, who.display)
    return Response(status=204)


@bp.get("/v2/orgs/<org>/apps/<app>/executors")
@operation("listExecutors", summary="List executors", tag="Executors", returns="Executor[]")
def list_executors(org: str, app: str) -> Response:
    authorize("application.read", org, app)
    row = require_app(org, app)
    # Lists every executor whose handshake was recorded before this request, on any instance (docs/adr/0051);
    # views trailing by more than the wait (a store in trouble) answer as they are.
    runtime().runner.wait_for_log(LIST_WAITS_FOR_VIEWS_S)
    executors = runtime().views.registry.executors(org, app)
    return jsonify([views_to_api.executor(e, row["id"]) for e in executors])


# -- tokens -------------------------------------------------------------------------------------
@bp.post("/v2/orgs/<org>/tokens/<name>")
@operation("createToken", summary="Create token", tag="Tokens", status=201, returns="TokenCreated",
           body="CreateTokenInputBody", path_names={"name": "tokenName"})
def create_token(org: str, name: str) -> Response:
    who = authorize("token.write", org)
    if not TOKEN_NAME.fullmatch(name):
        raise invalid("path.tokenName", "must be 1-64 characters of [A-Za-z0-9_.-]", name)
    body = json_body(allowed={"appNames", "permissions"})
    apps = body.get("appNames") or []
    permissions = body.get("permissions") or DEFAULT_KEY_PERMISSIONS
    if not isinstance(apps, list) or not all(isinstance(a, str) for a in apps):
        raise invalid("body.appNames", "must be a list of application names", apps)
    if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
        raise invalid("body.permissions", "must be a list of permission names", permissions)
    for index, app in enumerate(apps):
        if not APP_NAME.fullmatch(app) or runtime().views.applications.app(org, app) is None:
            raise invalid(f"body.appNames[{index}]", "no such application", app)
    for index, permission in enumerate(permissions):
        if permission not in PERMISSIONS:
            raise invalid(f"body.permissions[{index}]", "unknown permission", permission)
    if not who.admin:
        # A key cannot mint a key with more than it has itself: permissions, or applications (none named: all).
        beyond = sorted(set(permissions) - who.permissions)
        if beyond or not who.covers(apps):
            if who.person is not None:  # a person (issue 31): their role's permissions bound the key
                raise ApiError(403, f"your role ('{who.role}') does not hold {', '.join(beyond)}: a key cannot "
                                    "grant more than its creator's permissions")
            raise ApiError(403, "a token cannot grant more than its own permissions and applications")
    key = new_api_key()
    ConfigurationChanges(runtime()).issue_key(org, name, hash_key(key), apps, permissions, who.display)
    response = jsonify({"token": key, "tokenName": name})
    response.status_code = 201
    return response


@bp.get("/v2/orgs/<org>/tokens")
@operation("listTokens", summary="List tokens", tag="Tokens", returns="Token[]")
def list_tokens(org: str) -> Response:
    who = authorize("token.read", org)
    # A key limited to some applications lists the keys within its applications only (issue 34).
    rows = [r for r in runtime().views.applications.keys(org) if r["revoked_at"] is None and who.covers(r["apps"])]
    return jsonify([views_to_api.token(r) for r in rows])


@bp.get("/v2/orgs/<org>/permissions")
@operation("listPermissions", summary="List permissions", tag="Roles",
           returns={"type": "array", "items": {"type": "string"}})
def list_permissions(org: str) -> Response:
    """Every permission a token of the organization can be granted (what ``dbosctl permission list`` shows);
    readable by whoever may read the organization's tokens."""
    authorize("token.read", org)
    return jsonify(list(PERMISSIONS))


@bp.delete("/v2/orgs/<org>/tokens/<name>")
@operation("deleteToken", summary="Delete token", tag="Tokens", status=204, path_names={"name": "tokenName"})
def delete_token(org: str, name: str) -> Response:
    who = authorize("token.write", org)
    refuse_beyond_scope(who, org, name)
    ConfigurationChanges(runtime()).revoke_key(org, name, who.display)
    return Response(status=204)
