"""Conductor API v2: queues, schedules (and their actions), application versions and metrics, served by
the application's executors (the use cases: actors/services/workflows.py).

Listing versions tells the ApplicationActor which version is the latest, and so does setting it: routing
prefers executors of that version.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from relay.actors.errors import NoExecutorError
from relay.web.api.metrics import recovery_metrics
from relay.web.context import authorize_app, executor_calls, require_app, workflow_actions
from relay.web.http_inputs import json_body
from relay.web.operations import operation, query
from relay.web.shapes import api_to_wire, wire_to_api

bp = Blueprint("v2_catalog", __name__)

APP = "/v2/orgs/<org>/apps/<app>"
SCHEDULE = APP + "/schedules/<schedule_name>"
READ, WRITE = "application.read", "application.write"


def _no_content() -> Response:
    return Response(status=204)


# -- queues


@bp.get(APP + "/queues")
@operation("listQueues", summary="List queues", tag="Queues", returns="Queue[]")
def list_queues(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    return jsonify([wire_to_api.of_app(wire_to_api.queue(r), app) for r in workflow_actions().queues(org, app)])


@bp.get(APP + "/queues/<queue_name>")
@operation("getQueue", summary="Get queue", tag="Queues", returns="Queue")
def get_queue(org: str, app: str, queue_name: str) -> Response:
    authorize_app(READ, org, app)
    queue = workflow_actions().queue(org, app, api_to_wire.queue_name(queue_name))
    return jsonify(wire_to_api.of_app(wire_to_api.queue(queue), app))


# -- schedules


@bp.get(APP + "/schedules")
@operation("listSchedules", summary="List schedules", tag="Schedules", returns="Schedule[]", query=(
    query("status", "string", description="Filter by schedule status as defined by DBOS Transact. Known "
          "values: ACTIVE, PAUSED. Not an enforced enum; unrecognized values simply match nothing."),
    query("workflowName", "string"), query("scheduleNamePrefix", "string"), query("loadContext", "boolean"),
))
def list_schedules(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    schedules = workflow_actions().records(org, app, api_to_wire.list_schedules_request(request.args))
    return jsonify([wire_to_api.of_app(wire_to_api.schedule(r), app) for r in schedules])


@bp.get(SCHEDULE)
@operation("getSchedule", summary="Get schedule", tag="Schedules", returns="Schedule")
def get_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(READ, org, app)
    schedule = workflow_actions().schedule(org, app, api_to_wire.schedule_name(schedule_name))
    return jsonify(wire_to_api.of_app(wire_to_api.schedule(schedule), app))


@bp.post(SCHEDULE + "/pause")
@operation("pauseSchedule", summary="Pause schedule", tag="Schedules", status=204)
def pause_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_actions().pause_schedule(org, app, api_to_wire.schedule_name(schedule_name))
    return _no_content()


@bp.post(SCHEDULE + "/resume")
@operation("resumeSchedule", summary="Resume schedule", tag="Schedules", status=204)
def resume_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_actions().resume_schedule(org, app, api_to_wire.schedule_name(schedule_name))
    return _no_content()


@bp.post(SCHEDULE + "/trigger")
@operation("triggerSchedule", summary="Trigger schedule", tag="Schedules", status=201,
           returns="TriggerOutputBody")
def trigger_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_id = workflow_actions().trigger_schedule(org, app, api_to_wire.schedule_name(schedule_name))
    answer = jsonify({"workflowId": workflow_id})
    answer.status_code = 201
    return answer


@bp.post(SCHEDULE + "/backfill")
@operation("backfillSchedule", summary="Backfill schedule", tag="Schedules", returns="BackfillOutputBody",
           body="BackfillInputBody", body_required=True)
def backfill_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    backfill = api_to_wire.backfill_request(schedule_name, json_body(required=True))
    return jsonify({"workflowIds": workflow_actions().backfill_schedule(org, app, backfill)})


# -- versions


@bp.get(APP + "/versions")
@operation("listAppVersions", summary="List application versions (the latest first)", tag="Applications",
           returns="ApplicationVersion[]")
def list_versions(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    return jsonify(wire_to_api.application_versions(workflow_actions().versions(org, app)))


@bp.patch(APP + "/versions/latest")
@operation("setLatestAppVersion", summary="Set the latest application version", tag="Applications",
           status=204, body="PatchLatestVersionInputBody", body_required=True)
def set_latest_version(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_actions().set_latest_version(org, app, api_to_wire.latest_version_name(json_body(required=True)))
    return _no_content()


# -- metrics


@bp.get(APP + "/metrics")
@operation("listMetrics", summary="List metrics (workflow and step counts in a time window)", tag="Metrics",
           returns="Metric[]", query=(query("startTime", "string", "date-time", required=True),
                                      query("endTime", "string", "date-time", required=True)))
def list_metrics(org: str, app: str) -> Response:
    authorize_app("metric.read", org, app)
    row = require_app(org, app)
    window = api_to_wire.metrics_window(request.args)
    relay_rows = recovery_metrics(org, app, row["id"], window)  # Relay's own: recovery_count by outcome
    try:
        response = executor_calls().call(org, app, api_to_wire.metrics_request(window))
    except NoExecutorError:
        if not relay_rows:
            raise
        return jsonify(relay_rows)
    return jsonify([wire_to_api.metric(m, row["id"], window) for m in response.metrics or []] + relay_rows)
