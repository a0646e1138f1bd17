"""Conductor API v2: queues, schedules (and their actions), application versions and metrics, served by
the application's executors.

Listing versions tells the ApplicationActor which version is the latest, and so does setting it: routing
prefers executors of that version.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from relay.web.api import api_to_wire, wire_to_api
from relay.web.api.metrics import recovery_metrics
from relay.web.api.openapi import operation, query
from relay.web.api.problems import ApiError, not_found
from relay.web.api.requests_ import json_body
from relay.web.context import require_app, runtime
from relay.web.executor_calls import NoExecutorError, authorize_app, call
from relay.wire.catalog_requests import (
    GetQueueRequest,
    GetScheduleRequest,
    ListApplicationVersionsRequest,
    ListQueuesRequest,
    PauseScheduleRequest,
    ResumeScheduleRequest,
    SetLatestApplicationVersionRequest,
    TriggerScheduleRequest,
)

bp = Blueprint("v2_catalog", __name__)

APP = "/v2/orgs/<org>/apps/<app>"
SCHEDULE = APP + "/schedules/<schedule_name>"
READ, WRITE = "application.read", "application.write"


def _no_content() -> Response:
    return Response(status=204)


def _require_schedule(org: str, app: str, name: str) -> dict:
    response = call(org, app, GetScheduleRequest(schedule_name=name, load_context=False))
    if response.output is None:
        raise not_found(f"schedule '{name}' not found in application '{app}'")
    return response.output


def _succeeded(response: object, what: str) -> None:
    if getattr(response, "success", True) is False:
        raise ApiError(502, f"the executor reported that {what} failed", title="Executor Error")


# -- queues


@bp.get(APP + "/queues")
@operation("listQueues", summary="List queues", tag="Queues", returns="Queue[]")
def list_queues(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    response = call(org, app, ListQueuesRequest())
    return jsonify([wire_to_api.of_app(wire_to_api.queue(r), app) for r in response.output or []])


@bp.get(APP + "/queues/<queue_name>")
@operation("getQueue", summary="Get queue", tag="Queues", returns="Queue")
def get_queue(org: str, app: str, queue_name: str) -> Response:
    authorize_app(READ, org, app)
    response = call(org, app, GetQueueRequest(name=api_to_wire.queue_name(queue_name)))
    if response.output is None:
        raise not_found(f"queue '{queue_name}' not found in application '{app}'")
    return jsonify(wire_to_api.of_app(wire_to_api.queue(response.output), app))


# -- schedules


@bp.get(APP + "/schedules")
@operation("listSchedules", summary="List schedules", tag="Schedules", returns="Schedule[]", query=(
    query("status", "string", description="Filter by schedule status as defined by DBOS Transact. Known "
          "values: ACTIVE, PAUSED. Not an enforced enum; unrecognized values simply match nothing."),
    query("workflowName", "string"), query("scheduleNamePrefix", "string"), query("loadContext", "boolean"),
))
def list_schedules(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    response = call(org, app, api_to_wire.list_schedules_request(request.args))
    return jsonify([wire_to_api.of_app(wire_to_api.schedule(r), app) for r in response.output or []])


@bp.get(SCHEDULE)
@operation("getSchedule", summary="Get schedule", tag="Schedules", returns="Schedule")
def get_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(READ, org, app)
    response = call(org, app, GetScheduleRequest(schedule_name=api_to_wire.schedule_name(schedule_name)))
    if response.output is None:
        raise not_found(f"schedule '{schedule_name}' not found in application '{app}'")
    return jsonify(wire_to_api.of_app(wire_to_api.schedule(response.output), app))


@bp.post(SCHEDULE + "/pause")
@operation("pauseSchedule", summary="Pause schedule", tag="Schedules", status=204)
def pause_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    _require_schedule(org, app, api_to_wire.schedule_name(schedule_name))
    _succeeded(call(org, app, PauseScheduleRequest(schedule_name=schedule_name)), "pausing")
    return _no_content()


@bp.post(SCHEDULE + "/resume")
@operation("resumeSchedule", summary="Resume schedule", tag="Schedules", status=204)
def resume_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    _require_schedule(org, app, api_to_wire.schedule_name(schedule_name))
    _succeeded(call(org, app, ResumeScheduleRequest(schedule_name=schedule_name)), "resuming")
    return _no_content()


@bp.post(SCHEDULE + "/trigger")
@operation("triggerSchedule", summary="Trigger schedule", tag="Schedules", status=201,
           returns="TriggerOutputBody")
def trigger_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    _require_schedule(org, app, api_to_wire.schedule_name(schedule_name))
    response = call(org, app, TriggerScheduleRequest(schedule_name=schedule_name))
    if not response.workflow_id:
        raise ApiError(502, f"the executor started no workflow for schedule '{schedule_name}'",
                       title="Executor Error")
    answer = jsonify({"workflowId": response.workflow_id})
    answer.status_code = 201
    return answer


@bp.post(SCHEDULE + "/backfill")
@operation("backfillSchedule", summary="Backfill schedule", tag="Schedules", returns="BackfillOutputBody",
           body="BackfillInputBody", body_required=True)
def backfill_schedule(org: str, app: str, schedule_name: str) -> Response:
    authorize_app(WRITE, org, app)
    backfill = api_to_wire.backfill_request(schedule_name, json_body(required=True))
    _require_schedule(org, app, schedule_name)
    response = call(org, app, backfill)
    return jsonify({"workflowIds": list(response.workflow_ids or [])})


# -- versions


def _versions(org: str, app: str) -> list[dict]:
    response = call(org, app, ListApplicationVersionsRequest())
    versions = wire_to_api.application_versions(response.output or [])
    latest = versions[0]["versionName"] if versions else None
    runtime().directory.application(org, app).proxy().note_latest_version(latest)
    return versions


@bp.get(APP + "/versions")
@operation("listAppVersions", summary="List application versions (the latest first)", tag="Applications",
           returns="ApplicationVersion[]")
def list_versions(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    return jsonify(_versions(org, app))


@bp.patch(APP + "/versions/latest")
@operation("setLatestAppVersion", summary="Set the latest application version", tag="Applications",
           status=204, body="PatchLatestVersionInputBody", body_required=True)
def set_latest_version(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    name = api_to_wire.latest_version_name(json_body(required=True))
    if name not in {v["versionName"] for v in _versions(org, app)}:
        raise not_found(f"application version '{name}' not found in application '{app}'")
    response = call(org, app, SetLatestApplicationVersionRequest(version_name=name))
    _succeeded(response, "setting the latest version")
    runtime().directory.application(org, app).proxy().note_latest_version(name)
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
        response = call(org, app, api_to_wire.metrics_request(window))
    except NoExecutorError:
        if not relay_rows:
            raise
        return jsonify(relay_rows)
    return jsonify([wire_to_api.metric(m, row["id"], window) for m in response.metrics or []] + relay_rows)
