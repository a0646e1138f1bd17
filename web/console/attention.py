"""Needs attention (issue 33, point 3): one page per organization, across the applications the principal may read:
failed workflows of the last hour, queues with stuck work, DEAD executors not yet recovered and why, stranded
versions, open incidents and data planes that cannot be used, each linking to where it can be fixed.

Relay's own views answer the executors, incidents and data-plane settings. The workflows are asked of each
application's executors or data plane, through the same use cases as the workflows list (actors/services), with
small limits and aggregates only, every question of every application at once (gevent), and a short deadline:
an application that does not answer in time, or cannot be asked, is listed as such and the page still answers.
What counts as needing attention is web/console/attention_rules.py (pure)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import gevent
from flask import abort, render_template, request

from relay.actors.adapters.dataplane.client import DataPlane
from relay.actors.adapters.off_hub import off_hub
from relay.actors.errors import ServiceError
from relay.actors.services.executor_calls import ExecutorCalls
from relay.actors.services.incidents import Incidents
from relay.actors.services.workflows import WorkflowActions
from relay.events.application import DEFAULT_EXECUTOR_TIMEOUT_SECS
from relay.events.errors import DomainError
from relay.projections.registry import HEALTHY
from relay.web.console import bp
from relay.web.console.attention_rules import (
    DEAD_SHOWN,
    STUCK_AFTER_S,
    Attention,
    data_plane_down,
    dead_executors,
    failed,
    failed_since,
    questions,
    stranded_versions,
    stuck_after,
    stuck_queues,
)
from relay.web.console.auth import current
from relay.web.console.helpers import check_org
from relay.web.context import runtime
from relay.web.problems import ApiError, api_error
from relay.web.shapes import api_to_wire, wire_to_api
from relay.wire.json_types import JSONObject

ASK_DEADLINE_S = 1.0  # every application is asked at once; one that has not answered by then is said to be slow
INCIDENTS_PER_APP = 20

log = logging.getLogger("relay.console")
K = TypeVar("K", bound=Hashable)


class NotInTime(Exception):
    """A question still unanswered at the deadline."""


def gather(jobs: Mapping[K, Callable[[], Any]], deadline_s: float) -> dict[K, Any]:
    """Run every job in its own greenlet, all at once, and wait at most `deadline_s`: each job's result, or the
    exception it raised, or NotInTime for one that had not finished. A late job is left to end by its own
    request timeout, which also drops its pending request at the executor (killing it would leave that behind)."""
    running = {key: gevent.spawn(_caught, job) for key, job in jobs.items()}
    gevent.joinall(list(running.values()), timeout=deadline_s)
    return {key: greenlet.value if greenlet.ready() else NotInTime(f"did not answer within {deadline_s:g} s")
            for key, greenlet in running.items()}


def _caught(job: Callable[[], Any]) -> Any:
    """The job's result, or the exception it raised as its result (a greenlet that dies of one has it printed
    to stderr by gevent's hub, and a failed question is an answer here)."""
    try:
        return job()
    except Exception as error:
        return error


def _why(error: BaseException) -> str:
    """A failed question in the page's words: the API's detail for a domain error, never a trace."""
    if isinstance(error, NotInTime):
        return str(error)
    if isinstance(error, ServiceError | DomainError | ApiError):
        return api_error(error).detail
    log.error("needs attention: an unexpected failure", exc_info=error)
    return "failed (Relay's log says why)"


def _aggregates(actions: WorkflowActions, org: str, app: str, body: JSONObject) -> list[JSONObject]:
    records = actions.records(org, app, api_to_wire.workflow_aggregates_request(body))
    return [wire_to_api.workflow_aggregate(r) for r in records]


def _search(actions: WorkflowActions, org: str, app: str, body: JSONObject) -> list[JSONObject]:
    records = actions.records(org, app, api_to_wire.search_workflows_request(body))
    return [wire_to_api.of_app(wire_to_api.workflow(r), app) for r in records]


@dataclass
class Registry:
    """What the registry view says of one application, read in a few small queries (never every executor:
    an application may have thousands)."""

    live: bool  # an executor HEALTHY or DISCONNECTED: its executors can be asked
    healthy: set[str]  # the versions HEALTHY executors run
    down: list[JSONObject]  # DEAD (up to DEAD_SHOWN) and DISCONNECTED (as many) executors


def _from_views(org: str, row: Mapping[str, Any], now: datetime, found: Attention) -> Registry:
    """What Relay's own views say of one application: its DEAD executors not recovered, its open incidents."""
    rt = runtime()
    registry = rt.views.registry
    app = str(row["name"])
    counts = registry.counts_by_status(org, app)
    healthy = registry.healthy_versions(org, app) if counts.get(HEALTHY) else set()
    dead = registry.executors_page(org, app, status="DEAD", limit=DEAD_SHOWN, offset=0) if counts.get("DEAD") else []
    if dead:
        latest = rt.views.registry.latest_recoveries(org, app, [str(e["executor_id"]) for e in dead])
        grace = float(row["settings"].get("executorTimeoutSecs") or DEFAULT_EXECUTOR_TIMEOUT_SECS)
        found.dead += dead_executors(app, dead, latest, healthy, grace, now)
        if counts["DEAD"] > len(dead):
            found.dead_unlisted[app] = counts["DEAD"] - len(dead)
    disconnected = counts.get("DISCONNECTED", 0)
    down = dead + (registry.executors_page(org, app, status="DISCONNECTED", limit=DEAD_SHOWN, offset=0)
                   if disconnected else [])
    found.incidents += [{**i, "app": app} for i in Incidents(rt).list(org, app, "open", limit=INCIDENTS_PER_APP)]
    return Registry(live=bool(counts.get(HEALTHY) or disconnected), healthy=healthy, down=down)


def _plane_state(plane: DataPlane) -> JSONObject:
    return off_hub(lambda: plane.state().to_json())  # it may open the database: off gevent's hub


def _fold(found: Attention, app: str, answers: Mapping[str, Any], calls: ExecutorCalls, registry: Registry,
          now: datetime, stuck_after_s: int) -> None:
    """One application's answers into the sections; a question that failed makes it a problem."""
    errors = [a for a in answers.values() if isinstance(a, BaseException)]
    if errors:
        found.problems.append((app, f"could not ask its workflows: {_why(errors[0])}"))
    if calls.served_from:
        found.sources[app] = calls.served_from
    count, newest, waiting = answers["failed_count"], answers["failed_newest"], answers["waiting"]
    if not isinstance(count, BaseException) and not isinstance(newest, BaseException):
        failures = failed(app, count, newest)
        if failures is not None:
            found.failed.append(failures)
    if not isinstance(waiting, BaseException):
        found.stuck += stuck_queues(app, waiting, now, stuck_after_s)
        found.stranded += stranded_versions(app, waiting, registry.healthy, registry.down)


def collect(org: str, apps: list[dict[str, Any]], now: datetime, stuck_after_s: int, *, ask: bool = True) -> Attention:
    """Every section for `apps` (rows of the applications view) at `now`; without `ask`, only what Relay's own
    views say (no executor or data plane asked)."""
    rt = runtime()
    found = Attention()
    jobs: dict[tuple[str, str], Callable[[], Any]] = {}
    asked: dict[str, tuple[ExecutorCalls, Registry]] = {}
    for row in apps:
        app = str(row["name"])
        registry = _from_views(org, row, now, found)
        if not ask:
            continue
        plane = rt.data_planes.get(org, app, row["settings"].get("dataPlane"))
        if plane is not None:
            jobs[(app, "plane")] = partial(_plane_state, plane)
        elif not registry.live:
            found.problems.append((app, "not asked: no executor connected and no data plane configured"))
            continue
        calls = ExecutorCalls(rt)  # one per application: which path answered is said per application
        actions = WorkflowActions(calls)
        asked[app] = (calls, registry)
        for name, body in questions(now).items():
            jobs[(app, name)] = partial(_search if name == "failed_newest" else _aggregates, actions, org, app, body)
    answers = gather(jobs, ASK_DEADLINE_S)

    for app, (calls, registry) in asked.items():
        mine = {name: answer for (of, name), answer in answers.items() if of == app and name != "plane"}
        _fold(found, app, mine, calls, registry, now, stuck_after_s)
    for (app, name), answer in answers.items():
        if name != "plane":
            continue
        if isinstance(answer, BaseException):
            found.problems.append((app, f"its data plane's state: {_why(answer)}"))
        elif (down := data_plane_down(app, answer)) is not None:
            found.data_planes.append(down)
    found.failed.sort(key=lambda f: (-f.count, f.app))
    found.stuck.sort(key=lambda q: (-q.waited_s, q.app, q.queue))
    found.incidents.sort(key=lambda i: str(i["opened_at"]), reverse=True)
    found.problems.sort()
    return found


def _readable(org: str) -> list[dict[str, Any]]:
    check_org(org)
    who = current()
    if not who.allows("application.read", org):
        abort(403, "your key lacks 'application.read' in this organization")
    return [r for r in runtime().views.applications.apps(org) if who.allows("application.read", org, r["name"])]


@bp.get("/orgs/<org>/attention")
def attention(org: str) -> str:
    apps = _readable(org)
    now = datetime.now(UTC)
    after_s = stuck_after(request.args.get("stuckAfterSecs"))
    found = collect(org, apps, now, after_s)
    return render_template("console/attention.html", org=org, found=found, apps=len(apps), now=now,
                           since=failed_since(now), stuck_after_s=after_s, default_stuck_after_s=STUCK_AFTER_S,
                           deadline_s=ASK_DEADLINE_S, served_from_many=True)


@bp.get("/orgs/<org>/attention/own")
def attention_own(org: str) -> str:
    """The page with only what Relay's own views say (dead executors, open incidents), no executor asked: what
    the open page swaps in when the change stream says executors, recoveries or incidents changed."""
    apps = _readable(org)
    now = datetime.now(UTC)
    found = collect(org, apps, now, STUCK_AFTER_S, ask=False)
    return render_template("console/attention.html", org=org, found=found, apps=len(apps), now=now,
                           since=failed_since(now), stuck_after_s=STUCK_AFTER_S,
                           default_stuck_after_s=STUCK_AFTER_S, deadline_s=ASK_DEADLINE_S, own_only=True)
