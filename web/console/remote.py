"""What the console asks an application's executors, through the HTTP API's own machinery.

Requests are built by web.translate from v2 bodies (the same checks as the API, before any frame is
sent), sent with web.executor_calls.call (the same routing, version-skew handling and error mapping),
and their answers translated back by web.translate: pages show exactly what the API returns. Every
ApiError (422 bad input, 503 no executor, 502 executor error, 501 unsupported, 504 timeout) becomes an
`ExecutorProblem`, which pages show as a clear state rather than a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from relay.web import executor_calls
from relay.web.api import api_to_wire, wire_to_api
from relay.web.api.problems import ApiError, not_found
from relay.web.context import runtime
from relay.wire.catalog_requests import (
    GetScheduleRequest,
    ListApplicationVersionsRequest,
    ListQueuesRequest,
    PauseScheduleRequest,
    ResumeScheduleRequest,
    SetLatestApplicationVersionRequest,
    TriggerScheduleRequest,
)
from relay.wire.workflow_requests import (
    GetWorkflowEventsRequest,
    GetWorkflowNotificationsRequest,
    GetWorkflowStreamsRequest,
)

P = ParamSpec("P")
T = TypeVar("T")

_KINDS = {503: "no-executor", 504: "timeout", 501: "unsupported", 422: "invalid", 400: "invalid",
          404: "not-found"}


class ExecutorProblem(Exception):
    """The executors could not answer: `kind` is no-executor, timeout, unsupported, invalid, not-found or
    error (an executor's error_message)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = _KINDS.get(status, "error")


def _problems(function: Callable[P, T]) -> Callable[P, T]:
    @wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return function(*args, **kwargs)
        except ApiError as error:
            raise ExecutorProblem(error.status, error.detail) from None

    return wrapper


def _call(org: str, app: str, request: Any) -> Any:
    return executor_calls.call(org, app, request)


def _act(org: str, app: str, request: Any, what: str) -> Any:
    """An action, checked as the API checks it: a success of false is an executor error too."""
    response = _call(org, app, request)
    if getattr(response, "success", True) is False:
        raise ApiError(502, f"the executor reported that {what} failed", title="Executor Error")
    return response


# -- workflows ------------------------------------------------------------------------------------
@_problems
def search_workflows(org: str, app: str, search: dict[str, Any]) -> list[dict[str, Any]]:
    """`search` is a v2 WorkflowSearchBody (status, workflowName, startTime, limit, ...)."""
    response = _call(org, app, api_to_wire.search_workflows_request(search))
    return [wire_to_api.of_app(wire_to_api.workflow(r), app) for r in response.output or []]


@_problems
def get_workflow(org: str, app: str, workflow_id: str) -> dict[str, Any] | None:
    response = _call(org, app, api_to_wire.get_workflow_request(workflow_id))
    return wire_to_api.of_app(wire_to_api.workflow(response.output), app) if response.output else None


@_problems
def list_steps(org: str, app: str, workflow_id: str) -> list[dict[str, Any]]:
    response = _call(org, app, api_to_wire.list_steps_request(workflow_id, {}))
    return [wire_to_api.step(r) for r in response.output or []]


@_problems
def workflow_events(org: str, app: str, workflow_id: str) -> list[dict[str, Any]]:
    response = _call(org, app, GetWorkflowEventsRequest(workflow_id=workflow_id))
    return [wire_to_api.event(r) for r in response.events or []]


@_problems
def workflow_notifications(org: str, app: str, workflow_id: str) -> list[dict[str, Any]]:
    response = _call(org, app, GetWorkflowNotificationsRequest(workflow_id=workflow_id))
    return [wire_to_api.notification(r) for r in response.notifications or []]


@_problems
def workflow_streams(org: str, app: str, workflow_id: str) -> list[dict[str, Any]]:
    response = _call(org, app, GetWorkflowStreamsRequest(workflow_id=workflow_id))
    return [wire_to_api.stream_entry(r) for r in response.streams or []]


@_problems
def cancel(org: str, app: str, workflow_ids: list[str]) -> None:
    if len(workflow_ids) == 1:
        request = api_to_wire.cancel_request(workflow_ids[0], {})
        executor_calls.require_workflow(org, app, workflow_ids[0])
    else:
        request = api_to_wire.bulk_cancel_request({"workflowIds": workflow_ids})
        executor_calls.require_workflows(org, app, workflow_ids)  # the API's rule: all or nothing
    _act(org, app, request, "the cancellation")


@_problems
def resume(org: str, app: str, workflow_ids: list[str]) -> None:
    if len(workflow_ids) == 1:
        request = api_to_wire.resume_request(workflow_ids[0], {})
        executor_calls.require_workflow(org, app, workflow_ids[0])
    else:
        request = api_to_wire.bulk_resume_request({"workflowIds": workflow_ids})
        executor_calls.require_workflows(org, app, workflow_ids)  # the API's rule: all or nothing
    _act(org, app, request, "the resumption")


@_problems
def delete(org: str, app: str, workflow_id: str) -> None:
    request = api_to_wire.delete_request(workflow_id, {})
    executor_calls.require_workflow(org, app, workflow_id)
    _act(org, app, request, "the deletion")


@_problems
def fork(org: str, app: str, workflow_id: str, start_step: int, app_version: str | None) -> str:
    body: dict[str, Any] = {"startStep": start_step}
    if app_version:
        body["appVersion"] = app_version
    request = api_to_wire.fork_request(workflow_id, body)
    executor_calls.require_workflow(org, app, workflow_id)
    new_id = _call(org, app, request).new_workflow_id
    if not new_id:
        raise ApiError(502, f"the executor did not fork workflow '{workflow_id}'", title="Executor Error")
    return str(new_id)


# -- aggregates -----------------------------------------------------------------------------------
@_problems
def workflow_aggregates(org: str, app: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """`body` is a v2 WorkflowAggregatesBody."""
    response = _call(org, app, api_to_wire.workflow_aggregates_request(body))
    return [wire_to_api.workflow_aggregate(r) for r in response.output or []]


@_problems
def step_aggregates(org: str, app: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """`body` is a v2 StepAggregatesBody."""
    response = _call(org, app, api_to_wire.step_aggregates_request(body))
    return [wire_to_api.step_aggregate(r) for r in response.output or []]


# -- queues, schedules, versions --------------------------------------------------------------------
@_problems
def list_queues(org: str, app: str) -> list[dict[str, Any]]:
    response = _call(org, app, ListQueuesRequest())
    return [wire_to_api.queue(r) for r in response.output or []]


@_problems
def list_schedules(org: str, app: str) -> list[dict[str, Any]]:
    response = _call(org, app, api_to_wire.list_schedules_request({}))
    return [wire_to_api.schedule(r) for r in response.output or []]


def _require_schedule(org: str, app: str, name: str) -> str:
    name = api_to_wire.schedule_name(name)
    response = _call(org, app, GetScheduleRequest(schedule_name=name, load_context=False))
    if response.output is None:
        raise not_found(f"schedule '{name}' not found in application '{app}'")
    return name


@_problems
def pause_schedule(org: str, app: str, name: str) -> None:
    request = PauseScheduleRequest(schedule_name=_require_schedule(org, app, name))
    _act(org, app, request, "pausing")


@_problems
def resume_schedule(org: str, app: str, name: str) -> None:
    request = ResumeScheduleRequest(schedule_name=_require_schedule(org, app, name))
    _act(org, app, request, "resuming")


@_problems
def trigger_schedule(org: str, app: str, name: str) -> str:
    request = TriggerScheduleRequest(schedule_name=_require_schedule(org, app, name))
    workflow_id = _call(org, app, request).workflow_id
    if not workflow_id:
        raise ApiError(502, f"the executor started no workflow for schedule '{name}'", title="Executor Error")
    return str(workflow_id)


@_problems
def backfill_schedule(org: str, app: str, name: str, start: str, end: str) -> list[str]:
    request = api_to_wire.backfill_request(name, {"startTime": start, "endTime": end})
    _require_schedule(org, app, name)
    return list(_call(org, app, request).workflow_ids or [])


def _versions(org: str, app: str) -> list[dict[str, Any]]:
    # As the API does: listing versions tells the application actor which one is the latest.
    response = _call(org, app, ListApplicationVersionsRequest())
    versions = wire_to_api.application_versions(response.output or [])
    runtime().directory.application(org, app).proxy().note_latest_version(
        versions[0]["versionName"] if versions else None)
    return versions


@_problems
def list_versions(org: str, app: str) -> list[dict[str, Any]]:
    """Latest first."""
    return _versions(org, app)


@_problems
def set_latest_version(org: str, app: str, version_name: str) -> None:
    name = api_to_wire.latest_version_name({"versionName": version_name})
    if name not in {v["versionName"] for v in _versions(org, app)}:
        raise not_found(f"application version '{name}' not found in application '{app}'")
    _act(org, app, SetLatestApplicationVersionRequest(version_name=name), "setting the latest version")
    runtime().directory.application(org, app).proxy().note_latest_version(name)
