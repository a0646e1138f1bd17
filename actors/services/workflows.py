"""The use cases on what an application's executors serve: workflows (read, cancel, resume, fork, delete, export,
import), queues, schedules and versions. The HTTP API (web/api/workflows.py, catalog.py) and the console
(web/console/workflows.py) both call these, with requests they built from the caller's input; the answers are
the executors' records (the callers put them in their own shape).

Operations on one workflow first make sure it exists (NotFoundError otherwise): the SDKs answer an unknown id
with empty lists or an error. The bulk actions (several ids) follow one rule
(docs/adr/0002-bulk-actions-all-or-nothing.md): every id is checked first, with one list request; if any is
unknown, NotFoundError names the missing ids and nothing is done (the SDKs disagree: some skip an unknown id,
some fail). An executor that reports ``success: false`` without an error message: ExecutorFailedError.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from relay.actors.adapters.dataplane import answers as dataplane_answers
from relay.actors.errors import DataPlaneRefusedError, DataPlaneUnavailableError, ExecutorFailedError
from relay.actors.services.executor_calls import ExecutorCalls
from relay.events.errors import NotFoundError
from relay.wire.catalog_requests import (
    BackfillScheduleRequest,
    GetQueueRequest,
    GetScheduleRequest,
    ListApplicationVersionsRequest,
    ListQueuesRequest,
    PauseScheduleRequest,
    ResumeScheduleRequest,
    SetLatestApplicationVersionRequest,
    TriggerScheduleRequest,
)
from relay.wire.requests import CancelRequest, DeleteRequest, Request, ResumeRequest
from relay.wire.workflow_requests import (
    ExportWorkflowRequest,
    ForkFromFailureRequest,
    ForkWorkflowRequest,
    GetWorkflowEventsRequest,
    GetWorkflowNotificationsRequest,
    GetWorkflowRequest,
    GetWorkflowStreamsRequest,
    ImportWorkflowRequest,
    ListStepsRequest,
    ListWorkflowsBody,
    ListWorkflowsRequest,
)

Record = dict[str, Any]
"""One record as the executor sent it (snake_case wire fields)."""

MAX_MISSING_NAMED = 10
SEARCH_SCAN_LIMIT = 5_000  # without a system database, a substring search reads at most this many newest workflows
SEARCH_SCAN_PAGE = 500


@dataclasses.dataclass(frozen=True)
class TextSearch:
    """A substring search's page, and how far it looked: `scanned` None when the whole system database was
    searched, else how many of the newest workflows were (asked of the executors, or read in the database)."""

    records: list[Record]
    scanned: int | None


def _version_timestamp(record: Record) -> int:
    """A version's timestamp (a number or a numeric string, as the SDKs send it); 0 when it has none."""
    value = record.get("version_timestamp")
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return value
    try:
        return int(float(value)) if isinstance(value, float | str) else 0
    except (ValueError, OverflowError):
        return 0


class WorkflowActions:
    """What a caller may do with an application's workflows, queues, schedules and versions."""

    def __init__(self, calls: ExecutorCalls) -> None:
        self.calls = calls

    def _succeeded(self, org: str, app: str, request: Request, what: str) -> object:
        # An SDK that failed says so in error_message (an error already); success false without one is odd but real.
        response = self.calls.call(org, app, request)
        if getattr(response, "success", True) is False:
            raise ExecutorFailedError(f"the executor reported that {what} failed")
        return response

    # -- reading workflows

    def records(self, org: str, app: str, request: Request) -> list[Record]:
        """The records a list, search or aggregate request answers (its ``output``)."""
        return list(self.calls.call(org, app, request).output or [])

    def search_text(self, org: str, app: str, text: str, request: ListWorkflowsRequest) -> TextSearch:
        """Workflows whose ID or name contains `text` (case-insensitive), newest first, with the request's other
        filters and page (issue 36, point 6). The system database answers when the application has a usable
        data plane (one SELECT, whatever the count); otherwise the executors are asked for the newest
        workflows, page by page, up to SEARCH_SCAN_LIMIT, and those are matched here (their list matches
        prefixes and exact names only)."""
        plane = self.calls.data_plane(org, app)
        if plane is not None:
            try:
                found, scanned = dataplane_answers.search_text(plane, text, request)
                self.calls.served_from = "database"
                return TextSearch(found, scanned)
            except (DataPlaneRefusedError, DataPlaneUnavailableError):
                pass
        wanted = int(request.body.offset or 0) + int(request.body.limit or 100)
        needle = text.casefold()
        matched: list[Record] = []
        scanned = 0
        while scanned < SEARCH_SCAN_LIMIT and len(matched) < wanted:
            body = dataclasses.replace(request.body, limit=SEARCH_SCAN_PAGE, offset=scanned, sort_desc=True)
            page = self.records(org, app, ListWorkflowsRequest(body=body))
            scanned += len(page)
            matched += [r for r in page if needle in str(r.get("WorkflowUUID") or "").casefold()
                        or needle in str(r.get("WorkflowName") or "").casefold()]
            if len(page) < SEARCH_SCAN_PAGE:
                break
        start = int(request.body.offset or 0)
        return TextSearch(matched[start:wanted], scanned)

    def find(self, org: str, app: str, request: GetWorkflowRequest) -> Record | None:
        """The workflow's record, None when the executors have no such workflow."""
        output: Record | None = self.calls.call(org, app, request).output
        return output

    def get(self, org: str, app: str, request: GetWorkflowRequest) -> Record:
        """The workflow's record; NotFoundError when the executors have no such workflow."""
        found = self.find(org, app, request)
        if found is None:
            raise NotFoundError(f"workflow '{request.workflow_id}' not found in application '{app}'")
        return found

    def require(self, org: str, app: str, workflow_id: str) -> Record:
        """The workflow's status record (without input or output); NotFoundError when there is none."""
        return self.get(org, app, GetWorkflowRequest(workflow_id=workflow_id, load_input=False,
                                                              load_output=False))

    def require_all(self, org: str, app: str, workflow_ids: list[str]) -> None:
        """NotFoundError naming the ids the executors have no workflow for, with one list request."""
        wanted = list(dict.fromkeys(workflow_ids))
        body = ListWorkflowsBody(workflow_uuids=wanted, limit=len(wanted))
        listed = {str(r.get("WorkflowUUID")) for r in self.records(org, app, ListWorkflowsRequest(body=body))}
        if not listed <= set(wanted):
            return  # an executor that ignored the filter: it cannot tell, the action will
        missing = [w for w in wanted if w not in listed]
        if missing:
            shown = ", ".join(repr(w) for w in missing[:MAX_MISSING_NAMED])
            more = f" (and {len(missing) - MAX_MISSING_NAMED} more)" if len(missing) > MAX_MISSING_NAMED else ""
            raise NotFoundError(f"no workflow {shown}{more} in application '{app}'")

    def _require_targets(self, org: str, app: str, request: Any) -> None:
        """One workflow (its path) or several (a bulk body): every one must exist."""
        if request.workflow_id is not None:
            self.require(org, app, request.workflow_id)
        else:
            self.require_all(org, app, list(request.workflow_ids or []))

    def steps(self, org: str, app: str, request: ListStepsRequest, *, known: bool = False) -> list[Record]:
        """The workflow's steps; NotFoundError when it does not exist (asked only on an empty page, unless the
        caller `known` it exists)."""
        steps = list(self.calls.call(org, app, request).output or [])
        if not steps and not known:
            self.require(org, app, request.workflow_id)
        return steps

    def events(self, org: str, app: str, workflow_id: str, *, known: bool = False) -> list[Record]:
        if not known:
            self.require(org, app, workflow_id)
        request = GetWorkflowEventsRequest(workflow_id=workflow_id)
        return list(self.calls.call(org, app, request).events or [])

    def notifications(self, org: str, app: str, workflow_id: str, *, known: bool = False) -> list[Record]:
        if not known:
            self.require(org, app, workflow_id)
        request = GetWorkflowNotificationsRequest(workflow_id=workflow_id)
        return list(self.calls.call(org, app, request).notifications or [])

    def streams(self, org: str, app: str, workflow_id: str, *, known: bool = False) -> list[Record]:
        if not known:
            self.require(org, app, workflow_id)
        request = GetWorkflowStreamsRequest(workflow_id=workflow_id)
        return list(self.calls.call(org, app, request).streams or [])

    def export(self, org: str, app: str, request: ExportWorkflowRequest) -> str:
        """The workflow's export (serialized, as its SDK writes it)."""
        self.require(org, app, request.workflow_id)
        serialized = self.calls.call(org, app, request).serialized_workflow
        if not serialized:
            raise ExecutorFailedError(f"the executor exported nothing for workflow '{request.workflow_id}'")
        return str(serialized)

    # -- acting on workflows

    def cancel(self, org: str, app: str, request: CancelRequest) -> None:
        self._require_targets(org, app, request)
        self._succeeded(org, app, request, "the cancellation")

    def resume(self, org: str, app: str, request: ResumeRequest) -> None:
        self._require_targets(org, app, request)
        self._succeeded(org, app, request, "the resumption")

    def delete(self, org: str, app: str, request: DeleteRequest) -> None:
        self._require_targets(org, app, request)
        self._succeeded(org, app, request, "the deletion")

    def fork(self, org: str, app: str, request: ForkWorkflowRequest) -> str:
        """The new workflow's id."""
        workflow_id = request.body.workflow_id
        self.require(org, app, workflow_id)
        new_id = self.calls.call(org, app, request).new_workflow_id
        if not new_id:
            raise ExecutorFailedError(f"the executor did not fork workflow '{workflow_id}'")
        return str(new_id)

    def fork_from_failure(self, org: str, app: str, request: ForkFromFailureRequest) -> list[str]:
        """The new workflows' ids."""
        self.require_all(org, app, request.body.workflow_ids)
        return list(self.calls.call(org, app, request).forked_workflow_ids or [])

    def import_workflow(self, org: str, app: str, request: ImportWorkflowRequest) -> None:
        self._succeeded(org, app, request, "the import")

    # -- queues

    def queues(self, org: str, app: str) -> list[Record]:
        return self.records(org, app, ListQueuesRequest())

    def queue(self, org: str, app: str, name: str) -> Record:
        output: Record | None = self.calls.call(org, app, GetQueueRequest(name=name)).output
        if output is None:
            raise NotFoundError(f"queue '{name}' not found in application '{app}'")
        return output

    # -- schedules

    def schedule(self, org: str, app: str, name: str, *, load_context: bool = True) -> Record:
        """The schedule's record; NotFoundError when there is none."""
        request = GetScheduleRequest(schedule_name=name) if load_context else \
            GetScheduleRequest(schedule_name=name, load_context=False)
        output: Record | None = self.calls.call(org, app, request).output
        if output is None:
            raise NotFoundError(f"schedule '{name}' not found in application '{app}'")
        return output

    def pause_schedule(self, org: str, app: str, name: str) -> None:
        self.schedule(org, app, name, load_context=False)
        self._succeeded(org, app, PauseScheduleRequest(schedule_name=name), "pausing")

    def resume_schedule(self, org: str, app: str, name: str) -> None:
        self.schedule(org, app, name, load_context=False)
        self._succeeded(org, app, ResumeScheduleRequest(schedule_name=name), "resuming")

    def trigger_schedule(self, org: str, app: str, name: str) -> str:
        """The id of the workflow it started."""
        self.schedule(org, app, name, load_context=False)
        workflow_id = self.calls.call(org, app, TriggerScheduleRequest(schedule_name=name)).workflow_id
        if not workflow_id:
            raise ExecutorFailedError(f"the executor started no workflow for schedule '{name}'")
        return str(workflow_id)

    def backfill_schedule(self, org: str, app: str, request: BackfillScheduleRequest) -> list[str]:
        """The ids of the workflows it started."""
        self.schedule(org, app, request.schedule_name, load_context=False)
        return list(self.calls.call(org, app, request).workflow_ids or [])

    # -- versions

    def versions(self, org: str, app: str) -> list[Record]:
        """The application's versions, the latest (largest timestamp) first; listing them tells the application
        actor which is the latest (routing prefers its executors)."""
        records = self.records(org, app, ListApplicationVersionsRequest())
        ordered = sorted(records, key=_version_timestamp, reverse=True)
        latest = ordered[0].get("version_name") if ordered else None
        self._note_latest(org, app, None if latest is None else str(latest))
        return ordered

    def set_latest_version(self, org: str, app: str, name: str) -> None:
        # The plain listing: versions() would also note the current latest, about to change.
        if name not in {str(r.get("version_name")) for r in self.records(org, app, ListApplicationVersionsRequest())}:
            raise NotFoundError(f"application version '{name}' not found in application '{app}'")
        self._succeeded(org, app, SetLatestApplicationVersionRequest(version_name=name),
                        "setting the latest version")
        self._note_latest(org, app, name)

    def _note_latest(self, org: str, app: str, name: str | None) -> None:
        self.calls.rt.directory.application_proxy(org, app).note_latest_version(name)
