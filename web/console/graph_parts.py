"""What the workflow page's graph (web/static/graph.js) fetches on demand: one step's details for its inspector
(so the page need not inline every step's input and output), and a child workflow's steps to draw nested under
the child's node."""

from __future__ import annotations

from typing import Any

from flask import abort, jsonify, render_template, request, url_for
from werkzeug.wrappers import Response

from relay.web.console import bp, remote
from relay.web.console.graph import MAX_STEPS, child_chain
from relay.web.console.helpers import check_app, millis_between


def with_durations(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**s, "durationMs": millis_between(s.get("startedAt"), s.get("completedAt"))} for s in steps]


@bp.get("/orgs/<org>/apps/<app>/workflow-step/<path:workflow_id>")
def workflow_step(org: str, app: str, workflow_id: str) -> str | tuple[str, int]:
    """The inspector of the workflow itself (`i=root`: its input, output and error) or of its step at index `i`
    (0-based, in the executor's order: one step read, with its output)."""
    check_app(org, app)
    which = request.args.get("i") or "root"
    try:
        if which == "root":
            found = remote.get_workflow(org, app, workflow_id)
            if found is None:
                abort(404, f"no workflow '{workflow_id}' in '{app}'")
            duration = millis_between(found.get("createdAt"), found.get("completedAt") or found.get("updatedAt"))
            return render_template("console/_step_inspector.html", org=org, app=app, wf=found, step=None,
                                   workflow_id=workflow_id, duration=duration)
        try:
            index = int(which)
        except ValueError:
            abort(400, "i is a step's index, or root")
        if not 0 <= index < MAX_STEPS:
            abort(400, "i is a step's index, or root")
        steps = remote.steps_after(org, app, workflow_id, index, 1)
    except remote.ExecutorProblem as problem:
        return render_template("console/_step_inspector.html", problem=problem, step=None, wf=None,
                               workflow_id=workflow_id), 200
    if not steps:
        abort(404, f"workflow '{workflow_id}' has no step at index {index}")
    step = with_durations(steps)[0]
    return render_template("console/_step_inspector.html", org=org, app=app, wf=None, step=step,
                           workflow_id=workflow_id, duration=step["durationMs"])


@bp.get("/orgs/<org>/apps/<app>/workflow-graph/<path:workflow_id>")
def workflow_graph_part(org: str, app: str, workflow_id: str) -> Response:
    """A child workflow's steps as an SVG chain (`chain`, its `height`) for graph.js to nest in place."""
    check_app(org, app)
    try:
        steps = with_durations(remote.steps_after(org, app, workflow_id, 0, MAX_STEPS))
    except remote.ExecutorProblem as problem:
        return jsonify({"problem": problem.detail})
    chain, height = child_chain(
        workflow_id, steps, lambda child: url_for("console.workflow", org=org, app=app, workflow_id=child))
    return jsonify({"chain": str(chain), "height": height, "steps": len(steps)})
