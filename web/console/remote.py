"""What the console asks an application's executors: the same use cases as the HTTP API
(actors/services/workflows.py), with requests built and answers shaped as the API builds and shapes them
(web/shapes/api_to_wire.py, wire_to_api.py), so pages show exactly what the API returns.

A use case that fails raises a domain error; here it becomes an `ExecutorProblem` (its kind, status and detail
from web/problems.py's one table), which pages show as a clear state rather than a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import wraps
from typing import ParamSpec, TypeVar

import gevent

from relay.actors.errors import ServiceError
from relay.actors.services.workflows import WorkflowActions
from relay.events.errors import DomainError
from relay.web.context import workflow_actions
from relay.web.problems import ApiError, api_error, mapping_of
from relay.web.shapes import api_to_wire, wire_to_api
from relay.wire.json_types import JSONObject
from relay.wire.workflow_requests import GetWorkflowRequest, ImportWorkflowRequest, ListStepsRequest

P = ParamSpec("P")
T = TypeVar("T")


class ExecutorProblem(Exception):
    """The executors could not answer: `kind` is no-executor, timeout, unsupported, invalid, not-found or
    error (an executor's error_message); `status` is what the API answers for the same failure."""

    def __init__(self, error: Exception) -> None:
        problem = api_error(error)
        super().__init__(problem.detail)
        self.detail = problem.detail
        self.status = problem.status
        self.kind = mapping_of(error).kind


def _problems(function: Callable[P, T]) -> Callable[P, T]:
    @wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return function(*args, **kwargs)
        except (ServiceError, DomainError, ApiError) as error:  # ApiError: input the request builders refused
            raise ExecutorProblem(error) from None

    return wrapper


def _actions() -> WorkflowActions:
    return workflow_actions()


# -- workflows ------------------------------------------------------------------------------------
@_problems
def search_workflows(org: str, app: str, search: JSONObject) -> list[JSONObject]:
    """`search` is a v2 WorkflowSearchBody (status, workflowName, startTime, limit, ...)."""
    records = _actions().records(org, app, api_to_wire.search_workflows_request(search))
    return [wire_to_api.of_app(wire_to_api.workflow(r), app) for r in records]


@_problems
def search_text(org: str, app: str, text: str, search: JSONObject) -> tuple[list[JSONObject], int | None]:
    """Workflows whose ID or name contains `text`, with `search`'s other filters and page; and how many of the
    newest workflows were looked at (None: the whole system database)."""
    found = _actions().search_text(org, app, text, api_to_wire.search_workflows_request(search))
    return [wire_to_api.of_app(wire_to_api.workflow(r), app) for r in found.records], found.scanned


@_problems
def get_workflow(org: str, app: str, workflow_id: str) -> JSONObject | None:
    found = _actions().find(org, app, api_to_wire.get_workflow_request(workflow_id))
    return wire_to_api.of_app(wire_to_api.workflow(found), app) if found else None


@_problems
def workflow_status(org: str, app: str, workflow_id: str, *, with_output: bool) -> JSONObject | None:
    """The workflow's record without its input (and without its output unless asked): what a page following a
    running workflow asks each time."""
    request = GetWorkflowRequest(workflow_id=workflow_id, load_input=False, load_output=with_output)
    found = _actions().find(org, app, request)
    return wire_to_api.of_app(wire_to_api.workflow(found), app) if found else None


@_problems
def steps_after(org: str, app: str, workflow_id: str, known: int, limit: int) -> list[JSONObject]:
    """The workflow's steps past the first `known` (the ones a following page has not shown yet)."""
    request = ListStepsRequest(workflow_id=workflow_id, load_output=True, limit=limit, offset=known)
    return [wire_to_api.step(r) for r in _actions().steps(org, app, request, known=True)]


@_problems
def list_steps(org: str, app: str, workflow_id: str) -> list[JSONObject]:
    steps = _actions().steps(org, app, api_to_wire.list_steps_request(workflow_id, {}), known=True)
    return [wire_to_api.step(r) for r in steps]


@_problems
def workflow_events(org: str, app: str, workflow_id: str) -> list[JSONObject]:
    return [wire_to_api.event(r) for r in _actions().events(org, app, workflow_id, known=True)]


@_problems
def workflow_notifications(org: str, app: str, workflow_id: str) -> list[JSONObject]:
    return [wire_to_api.notification(r) for r in _actions().notifications(org, app, workflow_id, known=True)]


@_problems
def workflow_streams(org: str, app: str, workflow_id: str) -> list[JSONObject]:
    return [wire_to_api.stream_entry(r) for r in _actions().streams(org, app, workflow_id, known=True)]


R = TypeVar("R")


def _one_or_bulk(
    workflow_ids: list[str],
    one: Callable[[str, Mapping[str, object]], R],
    bulk: Callable[[Mapping[str, object]], R],
) -> R:
    """One workflow as the API's single-workflow request, several as its bulk request (all or nothing)."""
    return one(workflow_ids[0], {}) if len(workflow_ids) == 1 else bulk({"workflowIds": workflow_ids})


@_problems
def cancel(org: str, app: str, workflow_ids: list[str]) -> None:
    _actions().cancel(org, app, _one_or_bulk(workflow_ids, api_to_wire.cancel_request, api_to_wire.bulk_cancel_request))


@_problems
def resume(org: str, app: str, workflow_ids: list[str]) -> None:
    _actions().resume(org, app, _one_or_bulk(workflow_ids, api_to_wire.resume_request, api_to_wire.bulk_resume_request))


@_problems
def delete(org: str, app: str, workflow_id: str) -> None:
    _actions().delete(org, app, api_to_wire.delete_request(workflow_id, {}))


@_problems
def import_workflow(org: str, app: str, request: ImportWorkflowRequest) -> None:
    _actions().import_workflow(org, app, request)


@_problems
def delete_many(org: str, app: str, workflow_ids: list[str]) -> None:
    """As POST .../workflows/bulk-delete: all or nothing."""
    _actions().delete(org, app, api_to_wire.bulk_delete_request({"workflowIds": workflow_ids}))


@_problems
def fork_from_failure(org: str, app: str, workflow_ids: list[str]) -> list[str]:
    """As POST .../workflows/bulk-fork-from-failure with fromLastFailure: the new workflows' ids."""
    body: JSONObject = {"workflowIds": list(workflow_ids), "fromLastFailure": True}
    return _actions().fork_from_failure(org, app, api_to_wire.bulk_fork_from_failure_request(body))


@_problems
def fork(org: str, app: str, workflow_id: str, start_step: int, app_version: str | None) -> str:
    body: JSONObject = {"startStep": start_step}
    if app_version:
        body["appVersion"] = app_version
    return _actions().fork(org, app, api_to_wire.fork_request(workflow_id, body))


# -- aggregates -----------------------------------------------------------------------------------
@_problems
def workflow_aggregates(org: str, app: str, body: JSONObject) -> list[JSONObject]:
    """`body` is a v2 WorkflowAggregatesBody."""
    records = _actions().records(org, app, api_to_wire.workflow_aggregates_request(body))
    return [wire_to_api.workflow_aggregate(r) for r in records]


@_problems
def overview_answers(org: str, app: str, bodies: Mapping[str, JSONObject],
                     recent: JSONObject) -> tuple[dict[str, list[JSONObject]], list[JSONObject]]:
    """Several workflow aggregates (v2 WorkflowAggregatesBody, by name) and a search (the recent workflows),
    asked side by side, each in its own greenlet: through the data plane they are queries in the threadpool
    (the data plane's pool bounds how many run at once), through executors requests in flight. The requests
    are built here, in the page's greenlet, over this request's executor calls (which path answered is
    recorded there)."""
    actions = _actions()
    asked = {name: api_to_wire.workflow_aggregates_request(body) for name, body in bodies.items()}
    jobs = {name: gevent.spawn(actions.records, org, app, request) for name, request in asked.items()}
    listed = gevent.spawn(actions.records, org, app, api_to_wire.search_workflows_request(recent))
    gevent.joinall([*jobs.values(), listed])
    answers = {name: [wire_to_api.workflow_aggregate(r) for r in job.get()] for name, job in jobs.items()}
    return answers, [wire_to_api.of_app(wire_to_api.workflow(r), app) for r in listed.get()]


@_problems
def step_aggregates(org: str, app: str, body: JSONObject) -> list[JSONObject]:
    """`body` is a v2 StepAggregatesBody."""
    records = _actions().records(org, app, api_to_wire.step_aggregates_request(body))
    return [wire_to_api.step_aggregate(r) for r in records]


# -- queues, schedules, versions --------------------------------------------------------------------
@_problems
def list_queues(org: str, app: str) -> list[JSONObject]:
    return [wire_to_api.queue(r) for r in _actions().queues(org, app)]


@_problems
def list_schedules(org: str, app: str) -> list[JSONObject]:
    records = _actions().records(org, app, api_to_wire.list_schedules_request({}))
    return [wire_to_api.schedule(r) for r in records]


@_problems
def pause_schedule(org: str, app: str, name: str) -> None:
    _actions().pause_schedule(org, app, api_to_wire.schedule_name(name))


@_problems
def resume_schedule(org: str, app: str, name: str) -> None:
    _actions().resume_schedule(org, app, api_to_wire.schedule_name(name))


@_problems
def trigger_schedule(org: str, app: str, name: str) -> str:
    return _actions().trigger_schedule(org, app, api_to_wire.schedule_name(name))


@_problems
def backfill_schedule(org: str, app: str, name: str, start: str, end: str) -> list[str]:
    request = api_to_wire.backfill_request(name, {"startTime": start, "endTime": end})
    return _actions().backfill_schedule(org, app, request)


@_problems
def list_versions(org: str, app: str) -> list[JSONObject]:
    """Latest first (listing them tells the application actor which is the latest, as the API's list does)."""
    return wire_to_api.application_versions(_actions().versions(org, app))


@_problems
def set_latest_version(org: str, app: str, version_name: str) -> None:
    name = api_to_wire.latest_version_name({"versionName": version_name})
    _actions().set_latest_version(org, app, name)
