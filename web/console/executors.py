"""The app page's executors table: paged and filtered by state (the URL holds both), counts per state, and the
history of executors recovered or deleted. Its fragment is what the live page re-reads on a pushed change
(web/console/live.py); `executors.json` answers the same page as data."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flask import jsonify, render_template, request
from werkzeug.wrappers import Response

from relay.events.application import DEFAULT_EXECUTOR_TIMEOUT_SECS, DEFAULT_SETTINGS
from relay.web.console import bp
from relay.web.console.helpers import check_app, page_number
from relay.web.console.recovery_state import recovery_wait
from relay.web.context import runtime
from relay.web.shapes.values import view_time
from relay.wire.json_types import JSONObject

EXECUTOR_STATES = ("HEALTHY", "DISCONNECTED", "DEAD")
EXECUTORS_PAGE = 50  # executors per page: 10,000 of them keep the app page well under 1 MB
HISTORY_SHOWN = 50  # recovered or deleted executors listed on the app page, newest first


def executor_row(row: JSONObject, wait: str = "") -> JSONObject:
    """An executor as pages and the live table show it: no instance-internal columns; `wait` says where its
    recovery stands (web/console/recovery_state.py)."""
    return {
        "executorId": row["executor_id"],
        "status": row["status"],
        "appVersion": row["app_version"] or "",
        "hostname": row["hostname"] or "",
        "language": row["language"] or "",
        "dbosVersion": row["dbos_version"] or "",
        "instance": row["instance"] or "",
        "connectedAt": view_time(row["connected_at"]),
        "disconnectedAt": view_time(row["disconnected_at"]),
        "deadAt": view_time(row["dead_at"]),
        "recoveryAttempts": row["recovery_attempts"],
        "recovery": wait,
    }


def _shown(org: str, app: str, rows: list[dict[str, Any]]) -> list[JSONObject]:
    """`rows` as shown, each with where its recovery stands."""
    registry = runtime().views.registry
    latest = registry.latest_recoveries(org, app, [r["executor_id"] for r in rows if r["status"] != "HEALTHY"])
    healthy = registry.healthy_versions(org, app) if any(r["status"] != "HEALTHY" for r in rows) else set()
    app_row = runtime().views.applications.app(org, app) or {"settings": DEFAULT_SETTINGS}
    grace = float(app_row["settings"].get("executorTimeoutSecs") or DEFAULT_EXECUTOR_TIMEOUT_SECS)
    now = datetime.now(UTC)
    shown = []
    for row in rows:
        wait = recovery_wait(row, latest.get(str(row["executor_id"])), healthy, grace, now)
        extra: JSONObject = {}
        if row["status"] == "DELETED":
            last = latest.get(str(row["executor_id"]))
            extra = {"deletedAt": row["updated_at"],
                     "recoveredBy": last["peer"] if last is not None and last["outcome"] == "acknowledged" else None}
        shown.append({**executor_row(row, wait), **extra})
    return shown


def executor_table(org: str, app: str, status: str | None, page: int) -> dict[str, Any]:
    """One page of the app's live executors (of `status`, or any but DELETED) with the counts per state."""
    status = status if status in EXECUTOR_STATES else None
    rows = runtime().views.registry.executors_page(org, app, status=status, limit=EXECUTORS_PAGE + 1,
                                                   offset=(page - 1) * EXECUTORS_PAGE)
    counts = runtime().views.registry.counts_by_status(org, app)
    return {"executors": _shown(org, app, rows[:EXECUTORS_PAGE]), "more": len(rows) > EXECUTORS_PAGE,
            "page": page, "status": status or "", "counts": {s: counts.get(s, 0) for s in EXECUTOR_STATES},
            "states": EXECUTOR_STATES}


def executor_history(org: str, app: str) -> list[JSONObject]:
    """The executors that went down and were recovered or deleted since, newest first, so a dead executor stays
    visible with its recovery."""
    return _shown(org, app, runtime().views.registry.deleted_executors(org, app, HISTORY_SHOWN))


def requested_table(org: str, app: str) -> dict[str, Any]:
    """The table the request's URL asks for (`executors=<state>`, `executorsPage=<n>`)."""
    page = page_number(request.args.get("executorsPage"))
    return executor_table(org, app, request.args.get("executors") or None, page)


@bp.get("/orgs/<org>/apps/<app>/executors")
def executors_fragment(org: str, app: str) -> str:
    """The executors table alone, as the app page shows it: what the live page swaps in on a pushed change."""
    check_app(org, app)
    return render_template("console/_executors.html", org=org, app=app, table=requested_table(org, app))


@bp.get("/orgs/<org>/apps/<app>/executors.json")
def executors_json(org: str, app: str) -> Response:
    """The same page of executors as data."""
    check_app(org, app)
    table = requested_table(org, app)
    return jsonify({k: table[k] for k in ("executors", "counts", "page", "more", "status")})
