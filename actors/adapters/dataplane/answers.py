"""The requests a system database answers (issue 15), each with the public ``DBOSClient`` call that answers it
and the response an executor would have sent, so that everything after (translation, not-found answers, audit)
is the same whichever path answered. A workflow's events, notifications and streams, which the public client does
not list, and every setting of a queue, which its ``Queue`` does not carry, are read-only reads of the SDK's tables
(actors/adapters/dataplane/system_tables.py, docs/adr/0046). What the database cannot do (export, import, metrics,
fork-from-failure, recovery, retention, alerts to handlers) is not here: it needs a connected executor, and
actors/services/executor_calls.py says so."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol, TypeVar

from relay.actors.adapters.dataplane import sql as dataplane_sql
from relay.actors.adapters.dataplane import system_tables
from relay.actors.adapters.dataplane.client import DataPlane
from relay.actors.adapters.dataplane.values import as_text
from relay.actors.adapters.off_hub import off_hub
from relay.actors.errors import DataPlaneError, DataPlaneRefusedError, DataPlaneUnavailableError
from relay.actors.policies.dataplane_aggregates import AggregateRequestError, aggregate
from relay.events.errors import NotFoundError
from relay.wire import client_records as records
from relay.wire.catalog_requests import (
    BackfillScheduleRequest,
    GetQueueRequest,
    GetScheduleRequest,
    ListQueuesRequest,
    ListSchedulesRequest,
    PauseScheduleRequest,
    ResumeScheduleRequest,
    SetLatestApplicationVersionRequest,
    TriggerScheduleRequest,
)
from relay.wire.client_records import StepInfo, VersionInfo, WorkflowSchedule
from relay.wire.json_types import JSONObject
from relay.wire.messages import MessageType
from relay.wire.requests import CancelRequest, DeleteRequest, Request, ResumeRequest
from relay.wire.responses import Response
from relay.wire.workflow_requests import (
    ForkWorkflowRequest,
    GetWorkflowAggregatesBody,
    GetWorkflowAggregatesRequest,
    GetWorkflowEventsRequest,
    GetWorkflowNotificationsRequest,
    GetWorkflowRequest,
    GetWorkflowStreamsRequest,
    ListQueuedWorkflowsRequest,
    ListStepsRequest,
    ListWorkflowsBody,
    ListWorkflowsRequest,
)


class _Handle(Protocol):
    def get_workflow_id(self) -> str: ...


class SystemDatabaseClient(Protocol):
    """What these answers call of the SDK's public ``DBOSClient`` (the optional ``dataplane`` extra: dbos is not
    imported here). Records come back as the SDK's own objects and go through wire/client_records.py."""

    def list_workflows(self, **filters: object) -> list[object]: ...
    def list_queued_workflows(self, **filters: object) -> list[object]: ...
    def list_workflow_steps(self, workflow_id: str, **options: object) -> list[StepInfo]: ...
    def cancel_workflows(self, workflow_ids: list[str], *, cancel_children: bool) -> None: ...
    def resume_workflow(self, workflow_id: str, *, queue_name: str | None) -> object: ...
    def delete_workflows(self, workflow_ids: list[str], *, delete_children: bool) -> None: ...
    def fork_workflow(self, workflow_id: str, start_step: int, **options: object) -> _Handle: ...
    def list_schedules(self, **filters: object) -> list[WorkflowSchedule]: ...
    def get_schedule(self, name: str) -> WorkflowSchedule | None: ...
    def pause_schedule(self, name: str) -> None: ...
    def resume_schedule(self, name: str) -> None: ...
    def trigger_schedule(self, name: str) -> _Handle: ...
    def backfill_schedule(self, name: str, start: datetime, end: datetime) -> list[_Handle]: ...
    def list_queues(self, *, application_name: str | list[str] | None) -> list[object]: ...
    def retrieve_queue(self, name: str) -> object | None: ...
    def list_application_versions(self) -> list[VersionInfo]: ...
    def set_latest_application_version(self, version_name: str) -> None: ...


M = MessageType
T = TypeVar("T")
Answer = Callable[..., JSONObject]  # (client, request), or (plane, client, request): _NEEDS_PLANE


def _body_filters(body: ListWorkflowsBody) -> JSONObject:
    return {
        "workflow_ids": body.workflow_uuids, "status": body.status, "start_time": body.start_time,
        "end_time": body.end_time, "completed_after": body.completed_after,
        "completed_before": body.completed_before, "dequeued_after": body.dequeued_after,
        "dequeued_before": body.dequeued_before, "name": body.workflow_name, "app_version": body.application_version,
        "forked_from": body.forked_from, "parent_workflow_id": body.parent_workflow_id,
        "user": body.authenticated_user, "queue_name": body.queue_name, "limit": body.limit, "offset": body.offset,
        "sort_desc": bool(body.sort_desc), "workflow_id_prefix": body.workflow_id_prefix,
        "load_input": bool(body.load_input), "load_output": bool(body.load_output), "executor_id": body.executor_id,
    }


def _list_workflows(client: SystemDatabaseClient, request: ListWorkflowsRequest) -> JSONObject:
    body = request.body
    filters = _body_filters(body)
    extra = {"was_forked_from": body.was_forked_from, "has_parent": body.has_parent,
             "attributes": body.attributes, "schedule_name": body.schedule_name,
             "application_name": body.application_name, "queues_only": bool(body.queues_only)}
    filters.update({k: v for k, v in extra.items() if v not in (None, False)})
    return {"output": [records.workflow(s, as_text) for s in client.list_workflows(**filters)]}


# The fallback on a schema version the GROUP BY is not tested on (actors/adapters/dataplane/sql.py): the client's list,
# page by page without inputs or outputs, folded as it comes (memory: the groups, not the workflows). Past this
# many the request is refused (narrow the time window) rather than holding the database for long.
AGGREGATE_PAGE = 5_000
MAX_AGGREGATED_WORKFLOWS = 10_000_000


def _aggregate_filters(body: GetWorkflowAggregatesBody) -> JSONObject:
    filters = {
        "status": body.status, "name": body.name, "app_version": body.app_version, "executor_id": body.executor_id,
        "queue_name": body.queue_name, "workflow_id_prefix": body.workflow_id_prefix, "workflow_ids": body.workflow_ids,
        "forked_from": body.forked_from, "parent_workflow_id": body.parent_workflow_id, "user": body.user,
        "schedule_name": body.schedule_name, "application_name": body.application_name,
        "start_time": body.start_time, "end_time": body.end_time, "completed_after": body.completed_after,
        "completed_before": body.completed_before, "dequeued_after": body.dequeued_after,
        "dequeued_before": body.dequeued_before, "was_forked_from": body.was_forked_from,
        "has_parent": body.has_parent, "attributes": body.attributes,
    }
    return {k: v for k, v in filters.items() if v is not None}


def _workflow_aggregates(plane: DataPlane, client: SystemDatabaseClient, request: GetWorkflowAggregatesRequest,
                         ) -> JSONObject:
    body = request.body
    filters = _aggregate_filters(body)
    try:
        if dataplane_sql.supports(plane.state().schema_version):  # the client is open: its checked version
            return {"output": dataplane_sql.workflow_aggregates(client, filters, body)}
        return {"output": aggregate(_every_status(client, filters), body)}
    except AggregateRequestError as error:
        raise DataPlaneRefusedError(str(error)) from None


def _every_status(client: SystemDatabaseClient, filters: JSONObject) -> Iterator[object]:
    seen = 0
    while True:
        page = client.list_workflows(**filters, load_input=False, load_output=False, limit=AGGREGATE_PAGE,
                                     offset=seen)
        seen += len(page)
        if seen > MAX_AGGREGATED_WORKFLOWS:
            raise DataPlaneRefusedError(f"more than {MAX_AGGREGATED_WORKFLOWS} workflows match: narrow the time "
                                        "window (startTime, endTime) to aggregate them from the system database")
        yield from page
        if len(page) < AGGREGATE_PAGE:
            return


def search_text(plane: DataPlane, text: str, request: ListWorkflowsRequest) -> tuple[list[JSONObject], int | None]:
    """The workflows whose ID or name contains `text`, newest first, with the request's other filters and page:
    read-only SELECTs of ids (actors/adapters/dataplane/sql.py), their records through the client; and how many
    of the newest were searched (None: all). None of this changes the database, so read mode allows it.
    DataPlaneRefusedError on a schema the query is not tested on (the caller then searches another way)."""
    if not dataplane_sql.supports(plane.state().schema_version):
        raise DataPlaneRefusedError(f"the system database of application '{plane.app}' is at a schema version the "
                                    "substring search is not tested on")
    client = plane.client()
    body = request.body
    filters = {k: v for k, v in _body_filters(body).items()
               if v is not None and k not in ("limit", "offset", "sort_desc", "load_input", "load_output")}

    def run() -> tuple[list[JSONObject], int | None]:
        ids, scanned = dataplane_sql.search_workflow_ids(client, text, filters, int(body.limit or 100),
                                                         int(body.offset or 0))
        if not ids:
            return [], scanned
        found = {s.workflow_id: s for s in client.list_workflows(workflow_ids=ids, load_input=False,
                                                                 load_output=False)}
        return [records.workflow(found[i], as_text) for i in ids if i in found], scanned

    return _off_hub(plane, request, run)


def _list_queued(client: SystemDatabaseClient, request: ListQueuedWorkflowsRequest) -> JSONObject:
    filters = _body_filters(request.body)
    return {"output": [records.workflow(s, as_text) for s in client.list_queued_workflows(**filters)]}


def _get_workflow(client: SystemDatabaseClient, request: GetWorkflowRequest) -> JSONObject:
    found = client.list_workflows(workflow_ids=[request.workflow_id], load_input=bool(request.load_input),
                                  load_output=bool(request.load_output))
    return {"output": records.workflow(found[0], as_text) if found else None}


def _list_steps(client: SystemDatabaseClient, request: ListStepsRequest) -> JSONObject:
    steps = client.list_workflow_steps(request.workflow_id, load_output=bool(request.load_output),
                                       limit=request.limit, offset=request.offset)
    return {"output": [records.step(s, as_text) for s in steps]}


def _cancel(client: SystemDatabaseClient, request: CancelRequest) -> JSONObject:
    client.cancel_workflows(request.ids, cancel_children=bool(request.cancel_children))
    return {"success": True}


def _resume(client: SystemDatabaseClient, request: ResumeRequest) -> JSONObject:
    for workflow_id in request.ids:
        client.resume_workflow(workflow_id, queue_name=request.queue_name)
    return {"success": True}


def _delete(client: SystemDatabaseClient, request: DeleteRequest) -> JSONObject:
    client.delete_workflows(request.ids, delete_children=bool(request.delete_children))
    return {"success": True}


def _fork(client: SystemDatabaseClient, request: ForkWorkflowRequest) -> JSONObject:
    from dbos import SetWorkflowID  # noqa: PLC0415 (the optional extra)

    body = request.body
    options = {"application_version": body.application_version, "queue_name": body.queue_name,
               "queue_partition_key": body.queue_partition_key}
    if body.new_workflow_id:
        with SetWorkflowID(body.new_workflow_id):
            handle = client.fork_workflow(body.workflow_id, body.start_step, **options)
    else:
        handle = client.fork_workflow(body.workflow_id, body.start_step, **options)
    return {"new_workflow_id": handle.get_workflow_id()}


def _list_schedules(client: SystemDatabaseClient, request: ListSchedulesRequest) -> JSONObject:
    body = request.body
    found = client.list_schedules(status=body.status, workflow_name=body.workflow_name,
                                  schedule_name_prefix=body.schedule_name_prefix,
                                  application_name=body.application_name)
    return {"output": [records.schedule(s, as_text) for s in found]}


def _get_schedule(client: SystemDatabaseClient, request: GetScheduleRequest) -> JSONObject:
    found = client.get_schedule(request.schedule_name)
    return {"output": records.schedule(found, as_text) if found else None}


def _existing_schedule(client: SystemDatabaseClient, name: str) -> None:
    if client.get_schedule(name) is None:
        raise NotFoundError(f"schedule '{name}' not found")


def _pause(client: SystemDatabaseClient, request: PauseScheduleRequest) -> JSONObject:
    _existing_schedule(client, request.schedule_name)
    client.pause_schedule(request.schedule_name)
    return {"success": True}


def _resume_schedule(client: SystemDatabaseClient, request: ResumeScheduleRequest) -> JSONObject:
    _existing_schedule(client, request.schedule_name)
    client.resume_schedule(request.schedule_name)
    return {"success": True}


def _trigger(client: SystemDatabaseClient, request: TriggerScheduleRequest) -> JSONObject:
    _existing_schedule(client, request.schedule_name)
    return {"workflow_id": client.trigger_schedule(request.schedule_name).get_workflow_id()}


def _backfill(client: SystemDatabaseClient, request: BackfillScheduleRequest) -> JSONObject:
    _existing_schedule(client, request.schedule_name)
    start, end = _instant(request.start), _instant(request.end)
    handles = client.backfill_schedule(request.schedule_name, start, end)
    return {"workflow_ids": [h.get_workflow_id() for h in handles]}


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _list_queues(plane: DataPlane, client: SystemDatabaseClient, request: ListQueuesRequest) -> JSONObject:
    """The queues the client lists (its application filter), each with every setting its row records: one read
    of their rows (dbos 3.4.0's ``Queue`` has no priority_enabled, and reads its row again per property)."""
    found = client.list_queues(application_name=request.body.application_name)
    if not system_tables.supports(plane.state().schema_version):
        return {"output": [records.queue(q) for q in found]}
    rows = system_tables.queue_rows(plane.engine, plane.config["schema"], [str(_name(q)) for q in found])
    return {"output": [records.queue_row(rows[_name(q)]) for q in found if _name(q) in rows]}  # else just deleted


def _get_queue(plane: DataPlane, client: SystemDatabaseClient, request: GetQueueRequest) -> JSONObject:
    if not system_tables.supports(plane.state().schema_version):
        found = client.retrieve_queue(request.name)
        return {"output": records.queue(found) if found is not None else None}
    row = system_tables.queue_rows(plane.engine, plane.config["schema"], [request.name]).get(request.name)
    return {"output": records.queue_row(row) if row is not None else None}


def _name(found: object) -> str:
    return str(getattr(found, "name", ""))


def _communications(plane: DataPlane) -> None:
    """A workflow's events, notifications and streams are read from the SDK's tables on the schema versions
    those reads are tested on; on any other an executor answers them."""
    if not system_tables.supports(plane.state().schema_version):
        raise DataPlaneUnavailableError(f"the system database of application '{plane.app}' is at a schema version "
                                        "Relay does not read events, notifications and streams from: that needs a "
                                        "connected executor")


def _events(plane: DataPlane, client: SystemDatabaseClient, request: GetWorkflowEventsRequest) -> JSONObject:
    _communications(plane)
    return {"events": system_tables.events(plane.engine, plane.config["schema"], request.workflow_id)}


def _notifications(plane: DataPlane, client: SystemDatabaseClient, request: GetWorkflowNotificationsRequest,
                   ) -> JSONObject:
    _communications(plane)
    return {"notifications": system_tables.notifications(plane.engine, plane.config["schema"],
                                                         request.workflow_id)}


def _streams(plane: DataPlane, client: SystemDatabaseClient, request: GetWorkflowStreamsRequest) -> JSONObject:
    _communications(plane)
    return {"streams": system_tables.streams(plane.engine, plane.config["schema"], request.workflow_id)}


def _list_versions(client: SystemDatabaseClient, _: Request) -> JSONObject:
    return {"output": [records.version(v) for v in client.list_application_versions()]}


def _set_latest(client: SystemDatabaseClient, request: SetLatestApplicationVersionRequest) -> JSONObject:
    if not any(v.get("version_name") == request.version_name for v in client.list_application_versions()):
        raise NotFoundError(f"application version '{request.version_name}' not found")
    client.set_latest_application_version(request.version_name)
    return {"success": True}


# Per message type: its answer, and whether it changes the database (refused in "read" mode).
ANSWERS: dict[MessageType, tuple[Answer, bool]] = {
    M.GET_WORKFLOW_AGGREGATES: (_workflow_aggregates, False),
    M.LIST_WORKFLOWS: (_list_workflows, False),
    M.LIST_QUEUED_WORKFLOWS: (_list_queued, False),
    M.GET_WORKFLOW: (_get_workflow, False),
    M.LIST_STEPS: (_list_steps, False),
    M.GET_WORKFLOW_EVENTS: (_events, False),
    M.GET_WORKFLOW_NOTIFICATIONS: (_notifications, False),
    M.GET_WORKFLOW_STREAMS: (_streams, False),
    M.CANCEL: (_cancel, True),
    M.RESUME: (_resume, True),
    M.DELETE: (_delete, True),
    M.FORK_WORKFLOW: (_fork, True),
    M.LIST_SCHEDULES: (_list_schedules, False),
    M.GET_SCHEDULE: (_get_schedule, False),
    M.PAUSE_SCHEDULE: (_pause, True),
    M.RESUME_SCHEDULE: (_resume_schedule, True),
    M.TRIGGER_SCHEDULE: (_trigger, True),
    M.BACKFILL_SCHEDULE: (_backfill, True),
    M.LIST_QUEUES: (_list_queues, False),
    M.GET_QUEUE: (_get_queue, False),
    M.LIST_APPLICATION_VERSIONS: (_list_versions, False),
    M.SET_LATEST_APPLICATION_VERSION: (_set_latest, True),
}


# The answers that depend on the database opened (its schema version), not only on the client.
_NEEDS_PLANE = frozenset({_workflow_aggregates, _list_queues, _get_queue, _events, _notifications, _streams})


# Heavy reads the database answers even when an executor is connected: aggregating every workflow of a window
# would hold up the application's own executor (the routing rule, README "Data plane").
PREFER_DATABASE = frozenset({M.GET_WORKFLOW_AGGREGATES.value})


def prefers_database(message_type: str) -> bool:
    return message_type in PREFER_DATABASE


_SERVED = frozenset(kind.value for kind in ANSWERS)


def serves(message_type: str) -> bool:
    return message_type in _SERVED


def answer(plane: DataPlane, request: Request) -> Response:
    """The response an executor would send, answered from the system database; otherwise a DataPlaneError
    (actors/errors.py), or NotFoundError for a workflow, schedule or version it does not have."""
    found = ANSWERS.get(request.type)
    if found is None:
        raise DataPlaneUnavailableError(f"'{request.type.value}' needs a connected executor of application "
                                        f"'{plane.app}' (the system database client cannot do it)")
    handler, changes = found
    if changes and not plane.writable:
        raise DataPlaneUnavailableError(f"no executor of application '{plane.app}' is connected and its data "
                                        f"plane is read-only (mode read): '{request.type.value}' changes the "
                                        "system database")
    client = plane.client()
    # Any: each answer class types its own fields; a handler returns the fields of its request's answer
    fields: dict[str, Any] = _off_hub(plane, request, lambda: handler(plane, client, request)
                                      if handler in _NEEDS_PLANE else handler(client, request))
    return request.answer(type=request.type.value, request_id=request.request_id, **fields)


def _off_hub(plane: DataPlane, request: Request, work: Callable[[], T]) -> T:
    """`work` (client calls, Relay's own queries) in gevent's threadpool; what it raises as a domain error."""
    try:
        return off_hub(work)
    except (DataPlaneError, NotFoundError):
        raise
    except Exception as error:
        raise _client_error(plane, request, error) from None


def _client_error(plane: DataPlane, request: Request, error: Exception) -> DataPlaneError | NotFoundError:
    name = type(error).__name__
    if name == "DBOSNonExistentWorkflowError":
        return NotFoundError(f"workflow not found in application '{plane.app}': {error}")
    if name in ("DBOSException", "DBOSConflictingWorkflowError") and "not exist" in str(error).lower():
        return NotFoundError(f"{request.type.value}: {error}")
    return plane.failure(error)
