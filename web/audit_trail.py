"""The audit trail: every control-plane action, from the API or the console, becomes an `Operation` event.

An API call is an action when it changes something (any method but GET, save the searches and aggregates
that POST only to carry a body) or hands data out in bulk (export); a raw request is one unless its frame
type only reads. The console names its actions itself (`note`), because its answers are redirects whose
status says nothing of the outcome. Each is recorded after it ran, with its outcome, by the instance actor:
who (the API key's name, the admin, the console's user), what (the API's operation id), the targets (path
ids, or the ids a bulk body names), the answer's status and, on failure, the problem's detail, and the
caller's address.

A request nobody authenticated did nothing and is not recorded (strangers must not be able to fill the
log); the access log has it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import uuid4

from flask import Flask, Response, current_app, g, request

from relay.events.names import APP_NAME, ORG_NAME
from relay.web.context import runtime
from relay.web.http_inputs import body_for_audit
from relay.web.operations import operation_of
from relay.wire.json_types import JSONObject

log = logging.getLogger("relay.web.audit")

# POSTs that only read (the body carries a search) and the instance-to-instance forward (the instance the
# call came in on records it).
READ_ONLY = frozenset({"searchWorkflows", "getWorkflowAggregates", "getStepAggregates", "forwardToExecutor",
                       "planConfig"})
# GETs that hand out a workflow's whole data: an auditor wants to know who took it.
AUDITED_READS = frozenset({"exportWorkflow"})
RAW = "sendRawExecutorRequest"
# Path variables that name what an action targets (org and app are recorded on their own).
_TARGET_ARGS = ("workflow_id", "schedule_name", "queue_name", "executor_id", "rule_id", "name", "username",
                "role_name", "domain")
RECORD_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Note:
    """An action a view names itself: its operation, targets and, when the status will not tell, outcome."""

    operation: str
    targets: tuple[str, ...]
    status: int | None = None
    detail: str | None = None
    app: str | None = None


def note(operation: str, targets: Sequence[str], *, failed: str | None = None, status: int | None = None,
         app: str | None = None) -> None:
    """Name the console action this request performed (`failed`: why it did not succeed; `status`: the HTTP
    status the API would have answered, when known; `app`: when the path does not name it). A request that
    performed two operations (the console's rule edit: create the new rule, delete the old) notes each."""
    g.setdefault("audit_notes", []).append(
        Note(operation, tuple(targets), status or (422 if failed else 200), failed, app))


def is_read_frame(message_type: object) -> bool:
    return isinstance(message_type, str) and (
        message_type.startswith(("list_", "get_", "exist_")) or message_type == "executor_info"
    )


def _api_note() -> Note | None:
    view = current_app.view_functions.get(request.endpoint or "")
    described = operation_of(view) if view is not None else None
    if described is None:
        return None
    name = described.operation_id
    if name in READ_ONLY or (request.method == "GET" and name not in AUDITED_READS):
        return None
    # Never request.get_json: a hostile body (100,000 nested arrays) raised out of this hook, and the action
    # that had run was left without its entry.
    body = body_for_audit()
    if name == RAW and is_read_frame(body.get("type")):
        return None
    if g.get("audit_nothing_done"):  # a view that found nothing to do (an apply of what is there already)
        return None
    return Note(name, tuple(g.get("audit_targets") or _targets(body)))


def _targets(body: JSONObject) -> list[str]:
    args = request.view_args or {}
    found = [str(args[k]) for k in _TARGET_ARGS if k in args]
    ids = body.get("workflowIds", body.get("workflow_id"))
    if isinstance(ids, str):
        ids = [ids]
    if isinstance(ids, list):
        found += [i for i in ids if isinstance(i, str)]
    if not found and "app" in args:
        found.append(str(args["app"]))
    return found


def _detail(response: Response) -> str | None:
    if response.status_code < 400 or response.is_streamed:
        return None
    try:
        problem = json.loads(response.get_data())
    except ValueError:
        return None
    return str(problem.get("detail") or problem.get("title") or "") or None if isinstance(problem, dict) else None


def _record(response: Response) -> Response:
    console = "audit_notes" in g
    notes = g.pop("audit_notes") if console else [_api_note()]
    who = g.get("console_principal") if console else g.get("principal")
    for pending in notes:
        if pending is not None and who is not None:
            _record_one(pending, who.display, console, response)
    return response


def _record_one(pending: Note, by: str, console: bool, response: Response) -> None:
    args = request.view_args or {}
    # A view whose path names no organization may say which one the action belongs to (registerUser: the
    # organization the person landed in).
    org, app = str(args.get("org", g.get("audit_org", ""))), pending.app or args.get("app")
    if not ORG_NAME.fullmatch(org) or (app is not None and not APP_NAME.fullmatch(str(app))):
        return  # refused before anything ran: a name the API cannot even hold
    status = pending.status if pending.status is not None else response.status_code
    fields = {
        "org": org, "app": app, "operation": pending.operation, "via": "console" if console else "api",
        "targets": list(pending.targets), "status": status,
        "detail": pending.detail if pending.detail is not None else _detail(response),
        "by": by, "source": request.remote_addr or "",
    }
    try:
        instance = runtime().instance
        if instance is None:
            raise RuntimeError("the instance actor is not running")
        instance.proxy().record_operation(uuid4(), **fields).get(timeout=RECORD_TIMEOUT_S)
    except Exception:  # the action ran; a lost audit entry is logged loudly, the answer still goes out
        log.exception("could not record the audit entry of %s on %s/%s", pending.operation, org, app or "-")


def install(app: Flask) -> None:
    app.after_request(_record)
