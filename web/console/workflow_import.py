"""Importing a workflow from the console (as POST .../workflows/import): the text an export gave
(``serializedWorkflow``, base64 of gzip, from an application of the same SDK language) pasted into the
workflow list's import form, confirmed, sent through the same shapes and service as the API's import,
and recorded under the API's operation name."""

from __future__ import annotations

from flask import flash, redirect, request, url_for
from werkzeug.wrappers import Response

from relay.web import audit_trail
from relay.web.console import bp, remote
from relay.web.console.auth import confirm_page, confirmed, require
from relay.web.console.helpers import check_app
from relay.web.problems import ApiError
from relay.web.shapes import api_to_wire

MAX_IMPORT_CHARS = 4_000_000  # a pasted export; the HTTP body limit (web/transport/body_limits.py) applies too


@bp.post("/orgs/<org>/apps/<app>/workflows-import")
def import_workflow(org: str, app: str) -> Response | str:
    check_app(org, app)
    require("application.write", org, app)
    back = url_for("console.workflows", org=org, app=app)
    text = (request.form.get("serializedWorkflow") or "").strip()
    try:
        if not text or len(text) > MAX_IMPORT_CHARS:
            raise ApiError(422, "paste the serializedWorkflow text of an export")
        wire = api_to_wire.import_request({"serializedWorkflow": text})
    except ApiError as error:
        audit_trail.note("importWorkflow", [], failed=error.detail, status=error.status)
        flash(f"Not imported: {error.detail}", "error")
        return redirect(back)
    if not confirmed():
        return confirm_page(f"Import a workflow into {app}?", f"An export of {len(text):,} characters; the "
                            "executor recreates the workflow and its steps as exported.", "Import workflow",
                            back=back, keep="Don't import")
    try:
        remote.import_workflow(org, app, wire)
    except remote.ExecutorProblem as problem:
        audit_trail.note("importWorkflow", [], failed=problem.detail, status=problem.status)
        flash(f"Not imported: {problem.detail}", "error")
    else:
        audit_trail.note("importWorkflow", [])
        flash("Workflow imported.", "ok")
    return redirect(back)
