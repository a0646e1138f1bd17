"""Conductor API v2: workflows and steps, served by the application's executors over their WebSockets.

Each view checks the caller and every input first (web/shapes/api_to_wire.py), then runs the use case
(actors/services/workflows.py: the existence checks, the bulk actions' all-or-nothing rule, the executor call),
then translates its answer (web/shapes/wire_to_api.py). Domain errors become problem details in web/problems.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flask import Blueprint, Response, jsonify, request

from relay.actors.services.workflows import WorkflowActions
from relay.web.api.json_lists import listed_json
from relay.web.context import authorize_app, workflow_actions
from relay.web.http_inputs import json_body
from relay.web.operations import operation, query
from relay.web.shapes import api_to_wire, wire_to_api
from relay.web.shapes.values import PAGE_DESCRIPTION
from relay.wire.json_types import JSONObject

bp = Blueprint("v2_workflows", __name__)

APP = "/v2/orgs/<org>/apps/<app>"
ONE = APP + "/workflows/<workflow_id>"
READ, WRITE = "application.read", "application.write"
TAG = "Workflows"
R = TypeVar("R")


def _no_content(status: int = 204) -> Response:
    return Response(status=status)


def _listed(org: str, app: str, req: Any, shape: Callable[[Any], JSONObject]) -> Response:
    """Ask an executor, and answer the records of its response in their v2 shape."""
    return listed_json(workflow_actions().records(org, app, req), shape)


def _workflow(app: str) -> Callable[[Any], JSONObject]:
    """A workflow record in its v2 shape, its application named (Java 1.1 sends none)."""
    return lambda record: wire_to_api.of_app(wire_to_api.workflow(record), app)


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
    record = workflow_actions().get(org, app, api_to_wire.get_workflow_request(workflow_id))
    return jsonify(_workflow(app)(record))


@bp.get(ONE + "/steps")
@operation("listWorkflowSteps", summary="List workflow steps", tag=TAG, returns="Step[]",
           query=(query("limit", "integer", "int64", description=PAGE_DESCRIPTION),
                  query("offset", "integer", "int64")))
def list_steps(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    # One query when there are steps; only an empty page asks whether the workflow exists.
    steps = workflow_actions().steps(org, app, api_to_wire.list_steps_request(workflow_id, request.args))
    return listed_json(steps, wire_to_api.step)


@bp.get(ONE + "/events")
@operation("listWorkflowEvents", summary="List workflow events", tag=TAG, returns="Event[]")
def list_events(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    return listed_json(workflow_actions().events(org, app, workflow_id), wire_to_api.event)


@bp.get(ONE + "/notifications")
@operation("listWorkflowNotifications", summary="List workflow notifications", tag=TAG,
           returns="Notification[]")
def list_notifications(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    return listed_json(workflow_actions().notifications(org, app, workflow_id), wire_to_api.notification)


@bp.get(ONE + "/streams")
@operation("listWorkflowStreams", summary="List workflow streams", tag=TAG, returns="StreamEntry[]")
def list_streams(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    return listed_json(workflow_actions().streams(org, app, workflow_id), wire_to_api.stream_entry)


@bp.get(ONE + "/export")
@operation("exportWorkflow", summary="Export workflow", tag=TAG, returns="ExportWorkflowOutputBody",
           query=(query("exportChildren", "boolean"),))
def export_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(READ, org, app)
    export = api_to_wire.export_request(workflow_id, request.args)
    return jsonify({"serializedWorkflow": workflow_actions().export(org, app, export)})


@bp.post(ONE + "/cancel")
@operation("cancelWorkflow", summary="Cancel workflow", tag=TAG, status=204, body="CancelWorkflowInputBody")
def cancel_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_actions().cancel(org, app, api_to_wire.cancel_request(workflow_id, json_body()))
    return _no_content()


@bp.post(ONE + "/resume")
@operation("resumeWorkflow", summary="Resume workflow", tag=TAG, status=204, body="ResumeWorkflowInputBody")
def resume_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_actions().resume(org, app, api_to_wire.resume_request(workflow_id, json_body()))
    return _no_content()


@bp.post(ONE + "/fork")
@operation("forkWorkflow", summary="Fork workflow", tag=TAG, status=201, returns="ForkWorkflowOutputBody",
           body="ForkWorkflowInputBody")
def fork_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    new_id = workflow_actions().fork(org, app, api_to_wire.fork_request(workflow_id, json_body()))
    answer = jsonify({"workflowId": new_id})
    answer.status_code = 201
    return answer


@bp.delete(ONE)
@operation("deleteWorkflow", summary="Delete workflow", tag=TAG, status=204,
           query=(query("deleteChildren", "boolean"),))
def delete_workflow(org: str, app: str, workflow_id: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_actions().delete(org, app, api_to_wire.delete_request(workflow_id, request.args))
    return _no_content()


@bp.post(APP + "/workflows/import")
@operation("importWorkflow", summary="Import workflow", tag=TAG, status=201, body="ImportWorkflowInputBody",
           body_required=True)
def import_workflow(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    workflow_actions().import_workflow(org, app, api_to_wire.import_request(json_body(required=True)))
    return _no_content(201)


def _bulk(
    org: str, app: str, act: Callable[[WorkflowActions, str, str, R], None], build: Callable[[JSONObject], R]
) -> Response:
    """A bulk action: the workflows named in the body, all or nothing; 204 when done."""
    authorize_app(WRITE, org, app)
    act(workflow_actions(), org, app, build(json_body(required=True)))
    return _no_content()


@bp.post(APP + "/workflows/bulk-cancel")
@operation("bulkCancelWorkflows", summary="Cancel workflows", tag=TAG, status=204, body="BulkCancelInputBody",
           body_required=True)
def bulk_cancel(org: str, app: str) -> Response:
    return _bulk(org, app, WorkflowActions.cancel, api_to_wire.bulk_cancel_request)


@bp.post(APP + "/workflows/bulk-resume")
@operation("bulkResumeWorkflows", summary="Resume workflows", tag=TAG, status=204, body="BulkResumeInputBody",
           body_required=True)
def bulk_resume(org: str, app: str) -> Response:
    return _bulk(org, app, WorkflowActions.resume, api_to_wire.bulk_resume_request)


@bp.post(APP + "/workflows/bulk-delete")
@operation("bulkDeleteWorkflows", summary="Delete workflows", tag=TAG, status=204, body="BulkDeleteInputBody",
           body_required=True)
def bulk_delete(org: str, app: str) -> Response:
    return _bulk(org, app, WorkflowActions.delete, api_to_wire.bulk_delete_request)


@bp.post(APP + "/workflows/bulk-fork-from-failure")
@operation("bulkForkWorkflowsFromFailure", summary="Fork workflows from their failure", tag=TAG,
           returns="BulkForkFromFailureOutputBody", body="BulkForkFromFailureBody", body_required=True)
def bulk_fork_from_failure(org: str, app: str) -> Response:
    authorize_app(WRITE, org, app)
    fork = api_to_wire.bulk_fork_from_failure_request(json_body(required=True))
    return jsonify({"workflowIds": workflow_actions().fork_from_failure(org, app, fork)})
