"""Live console pages: a server-sent-events stream of what changed in Relay's own records (docs/adr/0052).

A page opens `GET /orgs/<org>/live?areas=...&app=...` (web/static/live.js); the stream says which of its areas
changed (`event: change`, data `{"areas": [...]}`), and the page re-reads its own fragment, under the same
permission checks as the page. An event names areas only, never a record's content, so no secret can travel in
one. Topics come from the projection runner's change feed (projections/change_feed.py), fed as its batches commit,
so changes recorded by HA peers and other workers arrive too. A stream ends when the client goes (the next
heartbeat's write fails) and when the instance stops (the feed is closed as the drain begins).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from flask import Response, abort, request

from relay.projections.change_feed import FeedClosedError, FeedFullError, Pattern
from relay.web.console import bp
from relay.web.console.auth import current
from relay.web.console.helpers import check_app, check_org
from relay.web.context import runtime

HEARTBEAT_S = 15.0  # a comment line this often: proxies keep the stream, and a gone client is noticed
RETRY_MS = 1000  # how soon the browser's EventSource reconnects after the stream ends
APP_AREAS = ("executors", "recoveries", "alerts", "incidents", "app")  # what an application's pages show
ORG_AREAS = ("audit", "instances", "attention")
# Needs attention (web/console/attention.py): what Relay owns of the applications it shows, across them.
ATTENTION_AREAS = ("executors", "recoveries", "incidents")


def _patterns(org: str, app: str | None, areas: list[str]) -> list[Pattern]:
    """What the stream may say, checked as the pages showing these areas check: 403/404 otherwise."""
    who = current()
    patterns: list[Pattern] = []
    for area in areas:
        if area in APP_AREAS:
            if app is None:
                abort(400, f"the area '{area}' needs an application (app=...)")
            check_app(org, app)
            patterns.append((area, org, app))
        elif area == "audit":  # as the audit page: organization.read, an app-scoped key its apps' entries only
            if not who.allows("organization.read", org):
                abort(403, "your key lacks 'organization.read' in this organization")
            if who.app_scoped:
                patterns += [("audit", org, a) for a in who.apps if app in (None, a)]
            else:
                patterns.append(("audit", org, app))
        elif area == "instances":  # as the cluster page
            if not who.allows("organization.read", org):
                abort(403, "your key lacks 'organization.read' in this organization")
            if who.app_scoped:
                abort(403, "a key limited to some applications cannot see Relay's instances")
            patterns += [("instances", None, None), ("executors", None if who.admin else org, None)]
        else:
            patterns += _attention_patterns(org, area)
    return patterns


def _attention_patterns(org: str, area: str) -> list[Pattern]:
    """As the Needs attention page: application.read in the organization; an app-scoped key its apps only."""
    if area != "attention":
        abort(400, f"unknown area '{area}' (one of {', '.join(APP_AREAS + ORG_AREAS)})")
    who = current()
    if not who.allows("application.read", org):
        abort(403, "your key lacks 'application.read' in this organization")
    apps: list[str | None] = list(who.apps) if who.app_scoped else [None]
    return [(one, org, a) for a in apps for one in ATTENTION_AREAS]


def _event(name: str, data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@bp.get("/orgs/<org>/live")
def live(org: str) -> Response:
    check_org(org)
    areas = sorted({a for a in (request.args.get("areas") or "").split(",") if a})
    if not areas:
        abort(400, "name the areas to follow (areas=executors,recoveries,...)")
    app = (request.args.get("app") or "").strip() or None
    patterns = _patterns(org, app, areas)
    rt = runtime()
    if rt.stopping:
        abort(503, "this Relay instance is stopping")
    try:
        subscription = rt.runner.feed.subscribe(patterns)
    except FeedFullError as full:
        response = Response(f"{full}; the page falls back to reloading by hand", status=503, mimetype="text/plain")
        response.headers["Retry-After"] = "30"
        return response
    except FeedClosedError as closed:
        abort(503, str(closed))
    feed = rt.runner.feed

    def stream() -> Iterator[bytes]:
        try:
            yield f"retry: {RETRY_MS}\n".encode() + _event("ready", {"areas": areas})
            while True:
                changed = subscription.wait(HEARTBEAT_S)
                if changed is None:  # the instance is stopping: the browser reconnects elsewhere
                    return
                yield _event("change", {"areas": sorted(changed)}) if changed else b": keep-alive\n\n"
        finally:
            feed.unsubscribe(subscription)

    response = Response(stream(), mimetype="text/event-stream")
    response.call_on_close(lambda: feed.unsubscribe(subscription))  # also when the stream never started
    response.headers["X-Accel-Buffering"] = "no"  # a buffering proxy would hold the events back
    return response
