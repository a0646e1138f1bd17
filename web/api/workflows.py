"""Conductor API v2: workflows and steps, served by the application's executors over their WebSockets.

Each view checks the caller and every input first (web/api/api_to_wire.py), then asks one executor
(web/executor_calls.py), then translates its answer. Operations on one workflow first make sure it exists
(404 otherwise): the SDKs answer an unknown id with empty lists or an error. The four bulk actions (cancel,
resume, delete, fork from failure) follow one rule (docs/adr/0002-bulk-actions-all-or-nothing.md): every id
is checked first; if any is unknown the whole request is a 404 naming the missing ids and nothing is done (the
SDKs disagree: some skip an unknown id, some fail).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, jsonify, request

from relay.web.api import api_to_wire, wire_to_api
from relay.web.api.json_lists import listed_json
from relay.web.api.openapi import operation, query
from relay.web.api.problems import ApiError, not_found
from relay.web.api.requests_ import json_body
from relay.web.api.values import PAGE_DESCRIPTION
from relay.web.executor_calls import authorize_app, call, require_workflow, require_workflows
from relay.wire.workflow_requests import (
    GetWorkflowEventsRequest,
    GetWorkflowNotificationsRequest,
    GetWorkflowStreamsRequest,
)

bp = Blueprint("v2_workflows", __name__)

APP = "/v2/orgs/<org>/apps/<app>"
ONE = APP + "/workflows/<workflow_id>"
READ, WRITE = "application.read", "application.write"
TAG = "Workflows"


def _no_content(status: int = 204) -> Response:
    return Response(status=status)


def _listed(org: str, app: str, req: object, shape: Callable[[Any], dict[str, Any]],
            field: str = "output") -> Response:
    """Ask an executor, and answer the records of its response's `field` in their v2 shape."""
    response = call(org, app, req)
    return listed_json(getattr(response, field) or [], shape)


def _workflow(app: str) -> Callable[[Any], dict[str, Any]]:
    """A workflow record in its v2 shape, its application named (Java 1.1 sends none)."""
    return lambda record: wire_to_api.of_app(wire_to_api.workflow(record), app)


def _succeeded(response: object, what: str) -> None:
    # An SDK that failed says so in error_message (a 502 already); success false without one is odd but real.
    if getattr(response, "success", True) is False:
        raise ApiError(502, f"the executor reported that {what} failed", title="Executor Error")


@bp.get(APP + "/workflows")
@operation("listWorkflows", summary="List workflows", tag=TAG, returns="Workflow[]", query=(
    query("status", "string"), query("workflowName", "string"),
    query("limit", "integer", "int64", description=PAGE_DESCRIPTION),
    query("offset", "integer", "int64"), query("sortDesc", "boolean"), query("loadInput", "boolean"),
    query("loadOutput", "boolean"),
))
def list_workflows(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    return _listed(org, app, api_to_wire.list_workflows_request(request.args), _workflow(app))


@bp.post(APP + "/workflows/search")
@operation("searchWorkflows", summary="Search workflows", tag=TAG, returns="Workflow[]",
           body="WorkflowSearchBody")
def search_workflows(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    return _listed(org, app, api_to_wire.search_workflows_request(json_body()), _workflow(app))


@bp.post(APP + "/workflows/aggregates")
@operation("getWorkflowAggregates", summary="Aggregate workflows", tag=TAG, returns="WorkflowAggregate[]",
           body="WorkflowAggregatesBody")
def workflow_aggregates(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    return _listed(org, app, api_to_wire.workflow_aggregates_request(json_body()), wire_to_api.workflow_aggregate)


@bp.post(APP + "/steps/aggregates")
@operation("getStepAggregates", summary="Aggregate steps", tag=TAG, returns="StepAggregate[]",
           body="StepAggregatesBody")
def step_aggregates(org: str, app: str) -> Response:
    authorize_app(READ, org, app)
    return _listed(org, app, api_to_wire.step_aggregates_request(json_body()), wire_to_api.step_aggregate)


@bp.get(ONE)
@operation("getWorkflow", summary="Get workflow", tag=TAG, returns="Workflow")
def get_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    response = call(org, app, api_to_wire.get_workflow_request(workflow_id))
    if response.output is None:
        raise not_found(f"workflow '{workflow_id}' not found in application '{app}'")
    return jsonify(_workflow(app)(response.output))


@bp.get(ONE + "/steps")
@operation("listWorkflowSteps", summary="List workflow steps", tag=TAG, returns="Step[]",
           query=(query("limit", "integer", "int64", description=PAGE_DESCRIPTION),
                  query("offset", "integer", "int64")))
def list_steps(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    steps = call(org, app, api_to_wire.list_steps_request(workflow_id, request.args)).output or []
    if not steps:  # one query when there are steps; only an empty page asks whether the workflow exists
        require_workflow(org, app, workflow_id)
    return listed_json(steps, wire_to_api.step)


@bp.get(ONE + "/events")
@operation("listWorkflowEvents", summary="List workflow events", tag=TAG, returns="Event[]")
def list_events(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    require_workflow(org, app, workflow_id)
    return _listed(org, app, GetWorkflowEventsRequest(workflow_id=workflow_id), wire_to_api.event, "events")


@bp.get(ONE + "/notifications")
@operation("listWorkflowNotifications", summary="List workflow notifications", tag=TAG,
           returns="Notification[]")
def list_notifications(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    require_workflow(org, app, workflow_id)
    notifications = GetWorkflowNotificationsRequest(workflow_id=workflow_id)
    return _listed(org, app, notifications, wire_to_api.notification, "notifications")


@bp.get(ONE + "/streams")
@operation("listWorkflowStreams", summary="List workflow streams", tag=TAG, returns="StreamEntry[]")
def list_streams(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    require_workflow(org, app, workflow_id)
    return _listed(
        org, app, GetWorkflowStreamsRequest(workflow_id=workflow_id), wire_to_api.stream_entry, "streams"
    )


@bp.get(ONE + "/export")
@operation("exportWorkflow", summary="Export workflow", tag=TAG, returns="ExportWorkflowOutputBody",
           query=(query("exportChildren", "boolean"),))
def export_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    export = api_to_wire.export_request(workflow_id, request.args)
    require_workflow(org, app, workflow_id)
    response = call(org, app, export)
    if not response.serialized_workflow:
        raise ApiError(502, f"the executor exported nothing for workflow '{workflow_id}'", title="Executor Error")
    return jsonify({"serializedWorkflow": response.serialized_workflow})


@bp.post(ONE + "/cancel")
@operation("cancelWorkflow", summary="Cancel workflow", tag=TAG, status=204, body="CancelWorkflowInputBody")
def cancel_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    cancel = api_to_wire.cancel_request(workflow_id, json_body())
    require_workflow(org, app, workflow_id)
    _succeeded(call(org, app, cancel), "the cancellation")
    return _no_content()


@bp.post(ONE + "/resume")
@operation("resumeWorkflow", summary="Resume workflow", tag=TAG, status=204, body="ResumeWorkflowInputBody")
def resume_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    resume = api_to_wire.resume_request(workflow_id, json_body())
    require_workflow(org, app, workflow_id)
    _succeeded(call(org, app, resume), "the resumption")
    return _no_content()


@bp.post(ONE + "/fork")
@operation("forkWorkflow", summary="Fork workflow", tag=TAG, status=201, returns="ForkWorkflowOutputBody",
           body="ForkWorkflowInputBody")
def fork_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    fork = api_to_wire.fork_request(workflow_id, json_body())
    require_workflow(org, app, workflow_id)
    response = call(org, app, fork)
    if not response.new_workflow_id:
        raise ApiError(502, f"the executor did not fork workflow '{workflow_id}'", title="Executor Error")
    answer = jsonify({"workflowId": response.new_workflow_id})
    answer.status_code = 201
    return answer


@bp.delete(ONE)
@operation("deleteWorkflow", summary="Delete workflow", tag=TAG, status=204,
           query=(query("deleteChildren", "boolean"),))
def delete_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    delete = api_to_wire.delete_request(workflow_id, request.args)
    require_workflow(org, app, workflow_id)
    _succeeded(call(org, app, delete), "the deletion")
    return _no_content()


@bp.post(APP + "/workflows/import")
@operation("importWorkflow", summary="Import workflow", tag=TAG, status=201, body="ImportWorkflowInputBody",
           body_required=True)
def import_workflow(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    _succeeded(call(org, app, api_to_wire.import_request(json_body(required=True))), "the import")
    return _no_content(201)


@bp.post(APP + "/workflows/bulk-cancel")
@operation("bulkCancelWorkflows", summary="Cancel workflows", tag=TAG, status=204, body="BulkCancelInputBody",
           body_required=True)
def bulk_cancel(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    cancel = api_to_wire.bulk_cancel_request(json_body(required=True))
    require_workflows(org, app, cancel.workflow_ids or [])
    _succeeded(call(org, app, cancel), "the cancellation")
    return _no_content()


@bp.post(APP + "/workflows/bulk-resume")
@operation("bulkResumeWorkflows", summary="Resume workflows", tag=TAG, status=204, body="BulkResumeInputBody",
           body_required=True)
def bulk_resume(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    resume = api_to_wire.bulk_resume_request(json_body(required=True))
    require_workflows(org, app, resume.workflow_ids)
    _succeeded(call(org, app, resume), "the resumption")
    return _no_content()


@bp.post(APP + "/workflows/bulk-delete")
@operation("bulkDeleteWorkflows", summary="Delete workflows", tag=TAG, status=204, body="BulkDeleteInputBody",
           body_required=True)
def bulk_delete(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    delete = api_to_wire.bulk_delete_request(json_body(required=True))
    require_workflows(org, app, delete.workflow_ids or [])
    _succeeded(call(org, app, delete), "the deletion")
    return _no_content()


@bp.post(APP + "/workflows/bulk-fork-from-failure")
@operation("bulkForkWorkflowsFromFailure", summary="Fork workflows from their failure", tag=TAG,
           returns="BulkForkFromFailureOutputBody", body="BulkForkFromFailureBody", body_required=True)
def bulk_fork_from_failure(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    fork = api_to_wire.bulk_fork_from_failure_request(json_body(required=True))
    require_workflows(org, app, fork.body.workflow_ids)
    response = call(org, app, fork)
    return jsonify({"workflowIds": list(response.forked_workflow_ids or [])})
