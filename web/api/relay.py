"""Relay-only endpoints: health, readiness, the event log, and an application's recoveries."""

from __future__ import annotations

from collections.abc import Mapping

import gevent
from flask import Blueprint, Response, jsonify, request

from relay.web.api import views_to_api
from relay.web.context import authorize, principal, require_app, runtime
from relay.web.http_inputs import check_path_names, int_arg, page_args, page_limit_arg
from relay.web.operations import operation, query
from relay.web.problems import ApiError
from relay.web.shapes.values import api_record, page_description

bp = Blueprint("relay", __name__)


@bp.get("/healthz")
@operation("getHealth", summary="Process up", tag="Relay", returns="Health", public=True)
def healthz() -> Response:
    return jsonify({"status": "ok"})


# A store that does not answer (PostgreSQL down: each call waits for the pool and retries for tens of seconds)
# is not ready either: /readyz answers within this many seconds, like a probe expects.
READY_TIMEOUT_S = 3.0


@bp.get("/readyz")
@operation("getReadiness", summary="Store reachable (503 when not)", tag="Relay", returns="Readiness", public=True)
def readyz() -> Response:
    try:
        with gevent.Timeout(READY_TIMEOUT_S):
            ok, detail = runtime().ready()
    except gevent.Timeout:
        ok, detail = False, f"event store not answering within {READY_TIMEOUT_S:g} s"
    response = jsonify({"status": "ready" if ok else "not ready", "detail": detail})
    response.status_code = 200 if ok else 503
    return response


@bp.get("/relay/v1/events")
@operation("listRelayEvents", summary="Relay's event log, oldest first, with positions", tag="Relay",
           returns="RelayEventList",
           query=(query("org", "string"), query("app", "string"), query("type", "string"),
                  query("since", "integer", "int64"),
                  query("limit", "integer", "int64", description=page_description(100, 10_000))))
def events() -> Response:
    """The event log, oldest first, with positions. The admin sees every organization; a key with
    organization.read sees its own, and a key limited to some applications their events only."""
    who = principal()
    org = request.args.get("org")
    if not who.admin:
        if "organization.read" not in who.permissions:
            raise ApiError(403, "this token lacks 'organization.read'")
        if org not in (None, who.org):
            raise ApiError(403, "this token cannot read another organization's events")
        org = who.org
    app = request.args.get("app") or None
    if org is not None:
        check_path_names(org, app)
    if who.app_scoped and app is not None and not who.sees_app(app):
        raise ApiError(403, "this token cannot read another application's events")
    rows = runtime().views.audit.entries(
        org=org,
        app=app,
        apps=who.apps if who.app_scoped and app is None else None,
        event=request.args.get("type") or None,
        since=int_arg("since", 0, maximum=2**62),
        limit=page_limit_arg(100, 10_000),
    )
    return jsonify({"events": [views_to_api.event_entry(r) for r in rows]})


@bp.get("/relay/v1/orgs/<org>/apps/<app>/recoveries")
@operation("listRecoveries", summary="Recovery dispatches of the app's dead executors, newest first", tag="Relay",
           returns="RelayRecoveryList",
           query=(query("limit", "integer", "int64", description=page_description(100, 1000)),
                  query("offset", "integer", "int64")))
def recoveries(org: str, app: str) -> Response:
    """Every recovery dispatch of the app's dead executors, newest first: to which peer, from which
    instance, and its outcome (pending, failed with a reason, acknowledged)."""
    authorize("application.read", org, app)
    require_app(org, app)
    rows = runtime().views.registry.recoveries(org, app, **page_args())
    return jsonify({"recoveries": [_recovery(r) for r in rows]})


_RECOVERY_COLUMNS = (
    "executor_id", "attempt", "peer", "instance", "dispatched_at", "outcome", "reason", "finished_at",
)


def _recovery(row: Mapping[str, object]) -> dict[str, object]:
    return api_record(row, _RECOVERY_COLUMNS, times=("dispatched_at", "finished_at"))
