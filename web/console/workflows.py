"""Console pages served by an application's executors: workflows and their steps, queues, schedules and
versions, with their actions (cancel, resume, delete, fork, bulk, schedule actions, latest version)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from flask import abort, flash, get_template_attribute, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from relay.events.data_plane import READ_WRITE
from relay.web import audit_trail
from relay.web.console import bp, remote
from relay.web.console import graph_parts as _graph_parts  # noqa: F401 - registers the graph's fetched parts
from relay.web.console.auth import confirm_page, confirmed, require, safe_path
from relay.web.console.graph import MAX_STEPS, workflow_graph
from relay.web.console.helpers import PAGE_SIZE, check_app, format_time, millis_between, page_number
from relay.web.context import runtime
from relay.wire.json_types import JSONObject

STATUSES = ("PENDING", "ENQUEUED", "DELAYED", "SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
# The workflows page's query parameters are the WorkflowSearchBody's own filter names (a list of one value
# each; startTime/endTime as times), so a console URL and an API search read the same.
TEXT_FILTERS = ("workflowName", "workflowIdPrefix", "queueName", "appVersion", "executorId", "forkedFrom",
                "parentWorkflowId")
TIME_FILTERS = ("startTime", "endTime")
# Bulk actions and the API operation each one is (fork: from each workflow's last failure).
BULK_OPERATIONS = {"cancel": "bulkCancelWorkflows", "resume": "bulkResumeWorkflows", "delete": "bulkDeleteWorkflows",
                   "fork": "bulkForkWorkflowsFromFailure"}
BULK_ACTIONS = tuple(BULK_OPERATIONS)
WORKFLOW_ACTIONS = ("cancel", "resume", "delete", "fork")
SCHEDULE_ACTIONS = ("pause", "resume", "trigger", "backfill")
MAX_BULK = 200
MAX_SEARCH_CHARS = 200  # a substring search's text (`q`)
FORKS_SHOWN = 25
STEPS_SHOWN = 10  # a page of the step table shows this many steps; the rest of the page behind "show all"
STEPS_PAGE = 100  # the step table pages (?stepsPage=N): the graph draws every step, its inspector fetches one
REFRESH_S = 3  # the workflow list re-reads its page this often (console.js), unless paused
FOLLOW_S = 1.5  # a running workflow's page asks what changed this often (console.js), while visible
FOLLOW_STEPS = 100  # new steps one answer carries at most (the next answer carries the rest)
ENDED = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})
# The confirmation page's way out, per action: it says what staying put means.
BULK_KEEP = {"cancel": "Keep them running", "resume": "Leave them as they are", "delete": "Keep them",
             "fork": "Don't fork"}
WORKFLOW_KEEP = {"cancel": "Keep it running", "resume": "Leave it cancelled", "delete": "Keep it",
                 "fork": "Don't fork"}
SCHEDULE_KEEP = {"pause": "Keep it active", "resume": "Keep it paused", "trigger": "Don't trigger",
                 "backfill": "Don't backfill"}


@bp.app_template_global()
def read_only(org: str, app: str) -> str | None:
    """Why the application's workflows, schedules and versions cannot be changed from here now, or None: with
    no executor of it HEALTHY (on any instance) its data plane answers, and in read mode it refuses every change
    (issue 36, point 5). Pages leave their write actions out and say this instead."""
    views = runtime().views
    if views.registry.any_healthy(org, app):
        return None
    config = views.applications.app_setting(org, app, "dataPlane")
    if isinstance(config, dict) and config.get("mode") != READ_WRITE:
        return (f"Read only: no executor of {app} is connected, and its data plane reads the system database in "
                "read mode (changes need a connected executor, or the data plane in read-write mode).")
    return None


def _refuse_if_read_only(org: str, app: str, back: str) -> None:
    """A change asked for while the application is read only: said (back on the page it came from), and
    nothing sent: the redirect ends the request (an HTTPException without a code is answered as it is)."""
    reason = read_only(org, app)
    if reason is not None:
        flash(reason, "error")
        abort(redirect(back))


def _utc(raw: str) -> str | None:
    """A `datetime-local` value (read as UTC) or an RFC 3339 time, as RFC 3339; None when empty or bad."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _filters(args: Any) -> tuple[JSONObject, dict[str, str]]:
    """The WorkflowSearchBody filters of the query string, and the form's values to show again."""
    shown = {k: (args.get(k) or "").strip() for k in ("q", "status", *TIME_FILTERS, *TEXT_FILTERS)}
    shown["q"] = shown["q"][:MAX_SEARCH_CHARS]
    filters: JSONObject = {}
    if shown["status"] in STATUSES:
        filters["status"] = [shown["status"]]
    for name in TEXT_FILTERS:
        if shown[name]:
            filters[name] = [shown[name]]
    for name in TIME_FILTERS:
        value = _utc(shown[name])
        if value:
            filters[name] = value
            # The form's datetime-local field shows UTC without a zone (a linked "…Z" time would show empty,
            # and the next Filter would drop it).
            shown[name] = value.removesuffix("Z")[:19]
        elif shown[name]:
            flash(f"Ignored the {name} '{shown[name]}': not a date and time.", "error")
    return filters, shown


def _search(org: str, app: str, filters: JSONObject, *, limit: int, offset: int) -> list[JSONObject]:
    body = {**filters, "limit": limit, "offset": offset, "sortDesc": True, "loadInput": False,
            "loadOutput": False}
    return remote.search_workflows(org, app, body)


def _attempt(work: Callable[[], object]) -> tuple[Any, remote.ExecutorProblem | None]:
    try:
        return work(), None
    except remote.ExecutorProblem as problem:
        return None, problem


def _act(operation: str, targets: list[str], work: Callable[[], object]) -> tuple[Any, remote.ExecutorProblem | None]:
    """An action of the console, run and recorded in the audit trail under the API's operation name."""
    result, problem = _attempt(work)
    if problem:
        audit_trail.note(operation, targets, failed=problem.detail, status=problem.status)
    else:
        audit_trail.note(operation, targets)
    return result, problem


# -- workflows ------------------------------------------------------------------------------------
@bp.get("/orgs/<org>/apps/<app>/workflows")
def workflows(org: str, app: str) -> str:
    check_app(org, app)
    filters, shown = _filters(request.args)
    page = page_number(request.args.get("page"))
    scanned: int | None = None
    if shown["q"]:
        body = {**filters, "limit": PAGE_SIZE + 1, "offset": (page - 1) * PAGE_SIZE, "sortDesc": True}
        found, problem = _attempt(lambda: remote.search_text(org, app, shown["q"], body))
        rows, scanned = found or ([], None)
    else:
        rows, problem = _attempt(lambda: _search(org, app, filters, limit=PAGE_SIZE + 1,
                                                 offset=(page - 1) * PAGE_SIZE))
    rows = rows or []
    return render_template(
        "console/workflows.html", org=org, app=app, tab="workflows", rows=rows[:PAGE_SIZE], page=page,
        more=len(rows) > PAGE_SIZE, problem=problem, shown=shown, statuses=STATUSES, refresh_s=REFRESH_S,
        scanned=scanned,
    )


@bp.post("/orgs/<org>/apps/<app>/workflows-bulk")
def bulk(org: str, app: str) -> Any:
    check_app(org, app)
    require("application.write", org, app)
    action = request.form.get("action", "")
    ids = [i for i in dict.fromkeys(request.form.getlist("ids")) if i][:MAX_BULK]
    back = request.form.get("back") or url_for("console.workflows", org=org, app=app)
    back = safe_path(back)
    if action not in BULK_ACTIONS or not ids:
        flash("Select workflows and an action first.", "error")
        return redirect(back)
    _refuse_if_read_only(org, app, back)
    verb = "Fork from the last failure" if action == "fork" else action.capitalize()
    if not confirmed():
        return confirm_page(f"{verb}: {len(ids)} workflow(s)?", ", ".join(ids), f"{verb}: {len(ids)} workflow(s)",
                            danger=action in ("cancel", "delete"), back=back, keep=BULK_KEEP[action])
    work = {"cancel": remote.cancel, "resume": remote.resume, "delete": remote.delete_many,
            "fork": remote.fork_from_failure}[action]
    result, problem = _act(BULK_OPERATIONS[action], ids, lambda: work(org, app, ids))
    if problem:
        flash(f"Bulk {action} failed: {problem.detail}", "error")
    elif action == "fork":
        flash(f"Forked {len(result or [])} workflow(s) from their last failure: {', '.join(result or [])}.", "ok")
    else:
        flash(f"Asked the executor to {action} {len(ids)} workflow(s).", "ok")
    return redirect(back)


@bp.get("/orgs/<org>/apps/<app>/workflows/<path:workflow_id>")
def workflow(org: str, app: str, workflow_id: str) -> Any:
    check_app(org, app)
    found, problem = _attempt(lambda: remote.get_workflow(org, app, workflow_id))
    if problem:
        return render_template("console/workflow.html", org=org, app=app, tab="workflows", wf=None,
                               workflow_id=workflow_id, problem=problem), 200
    if found is None:
        abort(404, f"the executors of '{app}' know no workflow '{workflow_id}'")
    sections: dict[str, Any] = {}
    problems: dict[str, remote.ExecutorProblem] = {}
    calls: dict[str, Callable[[], object]] = {
        # Every step (the graph draws them all), outputs included: without them the executor leaves errors out too.
        "steps": lambda: remote.steps_after(org, app, workflow_id, 0, MAX_STEPS),
        "children": lambda: _search(org, app, {"parentWorkflowId": [workflow_id]}, limit=100, offset=0),
        # Its forks: the search's forkedFrom filter (what GET .../workflows?forkedFrom= runs).
        "forks": lambda: _search(org, app, {"forkedFrom": [workflow_id]}, limit=FORKS_SHOWN + 1, offset=0),
        "events": lambda: remote.workflow_events(org, app, workflow_id),
        "notifications": lambda: remote.workflow_notifications(org, app, workflow_id),
        "streams": lambda: remote.workflow_streams(org, app, workflow_id),
    }
    for name, work in calls.items():
        value, failed = _attempt(work)
        sections[name] = value or []
        if failed:
            problems[name] = failed
    versions = list(runtime().views.registry.running_versions(org, app))
    timeline = _timeline(found, sections["steps"])
    graph = workflow_graph(
        found, timeline, lambda child: url_for("console.workflow", org=org, app=app, workflow_id=child),
        {str(c["workflowId"]): str(c.get("status") or "") for c in sections["children"]},
    )
    forks = sections.pop("forks")
    pages = max(1, -(-len(timeline) // STEPS_PAGE))
    steps_page = min(page_number(request.args.get("stepsPage")), pages)
    return render_template(
        "console/workflow.html", org=org, app=app, tab="workflows", wf=found, workflow_id=workflow_id,
        problem=None, timeline=timeline, steps_shown=STEPS_SHOWN, graph=graph, problems=problems, versions=versions,
        steps_page=steps_page, steps_pages=pages, steps_per_page=STEPS_PAGE,
        forks=forks[:FORKS_SHOWN], more_forks=len(forks) > FORKS_SHOWN, follow_s=FOLLOW_S,
        ended=str(found.get("status")) in ENDED, **sections,
    )


@bp.get("/orgs/<org>/apps/<app>/workflow-changes/<path:workflow_id>")
def workflow_changes(org: str, app: str, workflow_id: str) -> Response:
    """What changed on a workflow's page since the page's last answer (issue 36, point 3): the workflow's status
    row (no input; its output and error only once it has ended) and the steps past the `steps` it already shows,
    rendered as the page renders them. Two small reads per answer whatever the workflow's size, on either path;
    console.js asks every FOLLOW_S s while the tab is visible and stops when `ended` is true."""
    check_app(org, app)
    try:
        known = max(0, min(int(request.args.get("steps") or 0), 1_000_000))
    except ValueError:
        abort(400, "steps is the number of steps the page shows")
    try:
        found = remote.workflow_status(org, app, workflow_id, with_output=False)
        if found is None:
            abort(404, f"no workflow '{workflow_id}' in '{app}'")
        ended = str(found.get("status")) in ENDED
        if ended:  # its output and error, once
            found = remote.workflow_status(org, app, workflow_id, with_output=True) or found
        steps = remote.steps_after(org, app, workflow_id, known, FOLLOW_STEPS)
    except remote.ExecutorProblem as problem:
        return jsonify({"problem": problem.detail, "ended": False})
    timeline = _timeline(found, steps)
    step_items = get_template_attribute("console/_steps.html", "step_items")
    badge = get_template_attribute("console/_macros.html", "badge")
    answer: JSONObject = {
        "status": found.get("status"),
        "badge": str(badge(found.get("status"))),
        "updatedAt": format_time(found.get("updatedAt")),
        "ended": ended,
        "steps": str(step_items(timeline, org, app)) if timeline else "",
        "stepCount": known + len(steps),
        "more": len(steps) >= FOLLOW_STEPS,
    }
    if ended:
        answer["io"] = render_template("console/_workflow_io.html", wf=found)
    return jsonify(answer)


def _timeline(wf: Mapping[str, object], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps placed on the workflow's time axis: offset and width in percent, duration in ms."""
    starts = [started for s in steps if (started := s.get("startedAt"))]
    origin = wf.get("createdAt") or (min(starts) if starts else None)
    ends = [s.get("completedAt") or s.get("startedAt") for s in steps] + [wf.get("updatedAt")]
    total = max((millis_between(origin, e) or 0 for e in ends if e), default=0) or 1
    out = []
    for step in steps:
        offset = millis_between(origin, step.get("startedAt")) or 0
        duration = millis_between(step.get("startedAt"), step.get("completedAt"))
        out.append({
            **step,
            "durationMs": duration,
            "left": min(100.0, 100 * offset / total),
            "width": max(0.8, min(100.0, 100 * (duration or 0) / total)),
        })
    return out


@bp.post("/orgs/<org>/apps/<app>/workflow-actions/<action>")
def workflow_action(org: str, app: str, action: str) -> Any:
    check_app(org, app)
    require("application.write", org, app)
    workflow_id = (request.form.get("workflow_id") or "").strip()
    if action not in WORKFLOW_ACTIONS or not workflow_id:
        abort(404)
    page = url_for("console.workflow", org=org, app=app, workflow_id=workflow_id)
    _refuse_if_read_only(org, app, page)
    start_step = 1
    if action == "fork":
        try:
            start_step = int(request.form.get("start_step") or 1)
        except ValueError:
            start_step = -1
        if start_step < 0:
            flash("The step to fork from must be a step number.", "error")
            return redirect(page)
    version = (request.form.get("app_version") or "").strip() or None
    if not confirmed():
        messages = {
            "cancel": "The workflow stops at its next step; it can be resumed later.",
            "resume": "The workflow runs again from its last completed step.",
            "delete": "The workflow and its steps are removed from the application's database.",
            "fork": f"A new workflow starts from step {start_step} of this one"
                    + (f", on version {version}." if version else ", on the latest version."),
        }
        return confirm_page(f"{action.capitalize()} workflow {workflow_id}?", messages[action],
                            f"{action.capitalize()} workflow", danger=action in ("cancel", "delete"), back=page,
                            keep=WORKFLOW_KEEP[action])
    if action == "fork":
        new_id, problem = _act("forkWorkflow", [workflow_id],
                               lambda: remote.fork(org, app, workflow_id, start_step, version))
        if problem:
            flash(f"Fork failed: {problem.detail}", "error")
            return redirect(page)
        flash(f"Forked {workflow_id} from step {start_step}: new workflow {new_id}.", "ok")
        return redirect(url_for("console.workflow", org=org, app=app, workflow_id=new_id) if new_id else page)
    work: dict[str, Callable[[], object]] = {
        "cancel": lambda: remote.cancel(org, app, [workflow_id]),
        "resume": lambda: remote.resume(org, app, [workflow_id]),
        "delete": lambda: remote.delete(org, app, workflow_id),
    }
    _, problem = _act(f"{action}Workflow", [workflow_id], work[action])
    if problem:
        flash(f"{action.capitalize()} failed: {problem.detail}", "error")
        return redirect(page)
    flash(f"Asked the executor to {action} {workflow_id}.", "ok")
    return redirect(url_for("console.workflows", org=org, app=app) if action == "delete" else page)


# -- queues ---------------------------------------------------------------------------------------
@bp.get("/orgs/<org>/apps/<app>/queues")
def queues(org: str, app: str) -> str:
    check_app(org, app)
    rows, problem = _attempt(lambda: remote.list_queues(org, app))
    depth: dict[str, dict[str, int]] = {}
    if not problem:
        counts, depth_problem = _attempt(lambda: remote.workflow_aggregates(org, app, {
            "groupByQueueName": True, "groupByStatus": True, "selectCount": True,
            "status": ["ENQUEUED", "PENDING"],
        }))
        for row in counts or []:
            group = row.get("group") or {}
            name = group.get("queueName")
            status = str(group.get("status"))
            if name:
                depth.setdefault(str(name), {})[status] = int(row.get("count") or 0)
        if depth_problem:
            flash(f"Queue depths unavailable: {depth_problem.detail}", "error")
    return render_template("console/queues.html", org=org, app=app, tab="queues", rows=rows or [],
                           depth=depth, problem=problem)


# -- schedules ------------------------------------------------------------------------------------
@bp.get("/orgs/<org>/apps/<app>/schedules")
def schedules(org: str, app: str) -> str:
    check_app(org, app)
    rows, problem = _attempt(lambda: remote.list_schedules(org, app))
    return render_template("console/schedules.html", org=org, app=app, tab="schedules", rows=rows or [],
                           problem=problem)


@bp.post("/orgs/<org>/apps/<app>/schedule-actions/<action>")
def schedule_action(org: str, app: str, action: str) -> Response | str:
    check_app(org, app)
    require("application.write", org, app)
    name = (request.form.get("schedule_name") or "").strip()
    if action not in SCHEDULE_ACTIONS or not name:
        abort(404)
    back = url_for("console.schedules", org=org, app=app)
    _refuse_if_read_only(org, app, back)
    start = end = None
    if action == "backfill":
        start, end = _utc(request.form.get("start") or ""), _utc(request.form.get("end") or "")
        if not start or not end or start >= end:
            flash("A backfill needs a start and a later end.", "error")
            return redirect(back)
    if not confirmed():
        messages = {
            "pause": "It fires no more workflows until resumed.",
            "resume": "It fires on its cron expression again.",
            "trigger": "One workflow of the schedule starts now.",
            "backfill": f"A workflow starts for every time the schedule would have fired from {start} to {end}.",
        }
        return confirm_page(f"{action.capitalize()} schedule {name}?", messages[action],
                            f"{action.capitalize()} schedule", back=back, keep=SCHEDULE_KEEP[action])
    work: dict[str, Callable[[], object]] = {
        "pause": lambda: remote.pause_schedule(org, app, name),
        "resume": lambda: remote.resume_schedule(org, app, name),
        "trigger": lambda: remote.trigger_schedule(org, app, name),
        "backfill": lambda: remote.backfill_schedule(org, app, name, str(start), str(end)),
    }
    result, problem = _act(f"{action}Schedule", [name], work[action])
    if problem:
        flash(f"{action.capitalize()} of {name} failed: {problem.detail}", "error")
    elif action == "trigger":
        flash(f"Triggered {name}: workflow {result}.", "ok")
    elif action == "backfill":
        flash(f"Backfilled {name}: {len(result)} workflow(s) started.", "ok")
    else:
        flash(f"Schedule {name}: {action}d.", "ok")
    return redirect(back)


# -- versions -------------------------------------------------------------------------------------
@bp.get("/orgs/<org>/apps/<app>/versions")
def versions(org: str, app: str) -> str:
    check_app(org, app)
    rows, problem = _attempt(lambda: remote.list_versions(org, app))
    running = runtime().views.registry.running_versions(org, app)
    return render_template("console/versions.html", org=org, app=app, tab="versions", rows=rows or [],
                           running=running, problem=problem)


@bp.post("/orgs/<org>/apps/<app>/versions/latest")
def set_latest(org: str, app: str) -> Response | str:
    check_app(org, app)
    require("application.write", org, app)
    name = (request.form.get("version_name") or "").strip()
    back = url_for("console.versions", org=org, app=app)
    if not name:
        abort(404)
    _refuse_if_read_only(org, app, back)
    if not confirmed():
        return confirm_page(f"Make {name} the latest version of {app}?",
                            "New workflows and recovery prefer executors of the latest version.",
                            f"Make {name} latest", back=back, keep="Keep the current latest")
    _, problem = _act("setLatestAppVersion", [name], lambda: remote.set_latest_version(org, app, name))
    if problem:
        flash(f"Could not set the latest version: {problem.detail}", "error")
    else:
        flash(f"{name} is now the latest version.", "ok")
    return redirect(back)
