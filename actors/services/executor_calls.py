"""Calling an application's executors from an HTTP request, with the API's answers for every way it can fail.

- no executor of the application connected here: 503;
- candidates are tried in routing order (actors/routing.py); an "Unknown message type" answer marks that
  executor as not supporting the type and moves on; when no connected executor supports the type: 501,
  naming the SDK languages/releases that lack it;
- an executor that disconnects before answering: the next candidate; none left: 502;
- an executor's ``error_message``: the message (without the SDK's traceback) in ``detail``, with 404, 409 or 422
  when it says the request was wrong (web/api/executor_errors.py: an unknown workflow id, a filter its database
  cannot do, an import that is not an export), 502 otherwise;
- an executor that answers with a frame breaking the protocol: 502 at once, naming what is wrong;
- an executor with RELAY_MAX_INFLIGHT_PER_EXECUTOR requests unanswered: the next candidate; none left: 429;
- no answer within RELAY_REQUEST_TIMEOUT_S: the request is forgotten, 504.

The data plane (issue 15), when the application has one: with no executor of the application connected
anywhere, or none supporting the request's type, the system database answers instead
(actors/adapters/dataplane/client.py);
`g.relay_served_from` says which path answered (the `X-Relay-Served-From` header, the console's badge).

HA: when no executor connected to this instance can take the request, the HEALTHY executors of the
application on other live instances are the candidates (actors/cluster.py), reached through their instance
(actors/adapters/forwarder.py, when RELAY_FORWARD_SECRET is set); their answers are read exactly as local ones.

Each HTTP request runs in its own greenlet and only waits on its own future, so a slow executor or a
huge answer holds up nobody else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

import pykka
from flask import g

from relay.actors import routing
from relay.actors.adapters.dataplane import answers as dataplane_answers
from relay.actors.adapters.dataplane.client import DataPlane, DataPlaneError
from relay.actors.adapters.forwarder import ForwardError
from relay.actors.application import LiveExecutor, Publication, RoutingBoard
from relay.actors.cluster import RemoteExecutor
from relay.actors.executor import ask_request, tell_forget
from relay.web.api import executor_errors
from relay.web.api.metrics import timed_request
from relay.web.api.problems import ApiError, not_found
from relay.web.context import ASK_TIMEOUT_S, authorize, require_app, runtime
from relay.wire.codec import is_metadata_only_refusal, is_send_race, is_unknown_type_error
from relay.wire.errors import ExecutorGoneError, InFlightLimitError, MalformedAnswerError
from relay.wire.messages import MessageType, new_request_id
from relay.wire.requests import CancelRequest, DeleteRequest, Request, ResumeRequest
from relay.wire.support import supports_bulk_ids
from relay.wire.workflow_requests import GetWorkflowRequest, ListWorkflowsBody, ListWorkflowsRequest

log = logging.getLogger("relay.web.executor_calls")

SEND_RACE_RETRY_DELAYS_S = (0.05, 0.25)
"""Pauses before asking again when an executor failed only to send its answer (is_send_race): the Java
SDK's export clears in milliseconds, once the answer before it has gone out."""

SEND_RACE_RETRYABLE = frozenset({MessageType.EXPORT_WORKFLOW})
"""The types asked again after a send race: read-only, so a second ask changes nothing. A type that changes
state (import) is never asked twice; its error reaches the caller."""

MAX_DETAIL_CHARS = 2000
_TRACEBACK = "Traceback (most recent call last):"
# A traceback's exception line: unindented "module.Name: message" (PostgreSQL's "DETAIL: ..." is all capitals).
_EXCEPTION_LINE = re.compile(r"^(?=[\w.]*[a-z])[A-Za-z_][\w.]*: \S")
_BULK_CAPABLE = (CancelRequest, ResumeRequest, DeleteRequest)


class NoExecutorError(ApiError):
    def __init__(self, app: str) -> None:
        super().__init__(503, f"no executor of application '{app}' is connected")


def _who(executor: LiveExecutor) -> str:
    """An executor as errors name it: its SDK and release first, so the operator knows whose answer it was."""
    return f"{executor.language or 'unknown-language'} {executor.dbos_version or 'unknown-version'} " \
        f"executor '{executor.executor_id}'"


def _malformed(executor: LiveExecutor, message_type: str, error: MalformedAnswerError) -> ApiError:
    return ApiError(
        502, f"{_who(executor)} answered '{message_type}' with a malformed frame: {error}", title="Executor Error",
    )


def _failed(executor: LiveExecutor, message_type: str, error_message: str) -> ApiError:
    summary = summarize_error(error_message)
    detail = f"{_who(executor)} answered '{message_type}' with an error: {summary}"
    # Classified on the summary (context and the exception's last line), not on the traceback's other frames.
    client = executor_errors.classify(message_type, summary)
    if client is None:
        return ApiError(502, detail, title="Executor Error")
    if client.location is None:
        return ApiError(client.status, f"{client.explanation}: {detail}")
    return ApiError(client.status, f"{client.location}: {client.explanation}; {detail}",
                    errors=[{"location": client.location, "message": client.explanation}])


def _busy(app: str, limit: int) -> ApiError:
    return ApiError(
        429, f"the executors of application '{app}' already have {limit} requests each in flight "
        "(RELAY_MAX_INFLIGHT_PER_EXECUTOR); try again later", title="Too Many Requests",
    )


def summarize_error(message: str) -> str:
    """An executor's error_message for the API: the Python SDK appends a traceback to its context line;
    keep the context and the exception's line (API.md: never a stack trace)."""
    head, found, tail = message.partition(_TRACEBACK)
    if found:
        lines = [line.strip() for line in tail.strip().splitlines() if line.strip()]
        # The exception's own line, not the last one: SQLAlchemy's errors end with [SQL: ...] and a link.
        raised = [line for line in tail.splitlines() if _EXCEPTION_LINE.match(line)]
        last = raised[-1].strip() if raised else lines[-1] if lines else None
        message = f"{head.strip().rstrip(':')}: {last}" if last else head.strip().rstrip(":")
    message = message.strip()
    return message if len(message) <= MAX_DETAIL_CHARS else message[: MAX_DETAIL_CHARS - 1] + "…"


def snapshot(org: str, app: str) -> tuple[Sequence[LiveExecutor], str | None]:
    """The application's live executors and latest version, as its actor knows them."""
    publication = _published(org, app)
    if publication is not None:
        return publication.executors, publication.latest_version
    actor = runtime().directory.application_proxy(org, app)
    try:
        return actor.routing_snapshot().get(timeout=ASK_TIMEOUT_S)
    except pykka.Timeout:
        raise ApiError(504, f"application '{app}' did not answer Relay in time") from None


def _published(org: str, app: str) -> Publication | None:
    """What the application's actor (started on first use) last published for routing, read without asking it
    (actors/application.py RoutingBoard); None for an actor that publishes nothing (test stand-ins)."""
    board = RoutingBoard.of(runtime().directory.application(org, app))
    return board.current if board is not None else None


def data_plane(org: str, app: str) -> DataPlane | None:
    """The application's data plane on this instance, None when it has none configured."""
    config = runtime().views.applications.app_setting(org, app, "dataPlane")
    return runtime().data_planes.get(org, app, config)


def from_database(plane: DataPlane, request: Any) -> Any:
    """The system database's answer, with the API's errors for its failures (never the URL). Its refusals carry
    the header too: the database path is the one that answered."""
    g.relay_served_from = "database"
    try:
        response = dataplane_answers.answer(plane, request)
    except DataPlaneError as error:
        raise ApiError(error.status, error.detail, title="Data Plane Error" if error.status >= 500 else None) \
            from None
    return response


def call(org: str, app: str, request: Request) -> Any:
    """Send ``request`` to the best executor of the application and return its (successful) response; the
    system database answers when no executor can and the application has a data plane."""
    message_type = str(request.type.value)
    plane = data_plane(org, app)
    if plane is not None and dataplane_answers.prefers_database(message_type):
        answered = _database_first(plane, request)
        if answered is not None:
            return answered
    try:
        route = _route(org, app, message_type)
    except NoExecutorError:
        if plane is None:
            raise
        return from_database(plane, request)
    return _ask_executors(org, app, request, route, plane)


def _database_first(plane: DataPlane, request: Any) -> Any:
    """A heavy read from the database; None when the database cannot be reached or is refused (the executors then
    answer)."""
    try:
        return from_database(plane, request)
    except ApiError as error:
        if error.status not in (422, 503):
            raise
        return None


def _ask_executors(org: str, app: str, request: Request, route: routing.Route,
                   plane: DataPlane | None) -> Any:
    """The candidates in order; the database when none supports the type (and the application has one)."""
    message_type = str(request.type.value)
    lacking = list(route.lacking)
    gone = 0
    busy: InFlightLimitError | None = None
    refusal: ApiError | None = None
    for executor in route.candidates:
        try:
            response = _send_past_races(org, app, executor, request)
        except ExecutorGoneError:
            gone += 1
            continue
        except InFlightLimitError as error:
            busy = error
            continue
        except MalformedAnswerError as error:
            raise _malformed(executor, message_type, error) from None
        if response.error_message is None:
            g.relay_served_from = "executor"
            return response
        if is_unknown_type_error(response):
            _mark_unsupported(org, app, executor, message_type)
            lacking.append(executor)
            continue
        if is_metadata_only_refusal(response):
            refusal = _failed(executor, message_type, response.error_message)
            continue
        raise _failed(executor, message_type, response.error_message)
    if plane is not None and refusal is None and busy is None and not gone and dataplane_answers.serves(message_type):
        return from_database(plane, request)  # the connected executors lack the type; the database has it
    raise _unanswered(app, message_type, refusal, busy, gone, lacking)


def _send_past_races(org: str, app: str, executor: LiveExecutor, request: Request) -> Any:
    """_send_all, asked again (read-only types only) while the executor answers that it lost a send race."""
    response = _send_all(org, app, executor, request)
    if request.type not in SEND_RACE_RETRYABLE:
        return response
    for delay in SEND_RACE_RETRY_DELAYS_S:
        if not is_send_race(response):
            break
        log.info("executor %s/%s/%s lost a send race answering %s; asking again",
                 org, app, executor.executor_id, request.type.value)
        time.sleep(delay)  # gevent's, under relay serve: only this request waits
        response = _send_all(org, app, executor, request)
    return response


def _unanswered(app: str, message_type: str, refusal: ApiError | None, busy: InFlightLimitError | None, gone: int,
                lacking: list[LiveExecutor]) -> ApiError:
    """Why no candidate answered, most telling reason first."""
    if refusal is not None:
        return refusal
    if busy is not None:
        return _busy(app, busy.limit)
    if gone and not lacking:
        return ApiError(502, f"every executor of application '{app}' disconnected before answering")
    if gone:
        return ApiError(
            502,
            f"executors of application '{app}' disconnected before answering '{message_type}'; the others "
            f"lack it ({routing.describe_lacking(lacking)})",
        )
    return ApiError(
        501,
        f"no connected executor of application '{app}' supports '{message_type}': "
        f"{routing.describe_lacking(lacking)} lack it; upgrade the DBOS SDK",
        title="Not Implemented",
    )


def _route(org: str, app: str, message_type: str) -> routing.Route:
    """The candidates for a request: the executors connected here; when none of them can take it, those on
    other live instances (HA). 503 when the application has no executor anywhere."""
    publication = _published(org, app)
    if publication is not None:
        route, latest = routing.rank_cached(publication, message_type), publication.latest_version
    else:
        executors, latest = snapshot(org, app)
        route = routing.rank(executors, message_type, latest)
    if not route.candidates:
        remote = routing.rank(remote_executors(org, app), message_type, latest)  # type: ignore[arg-type]
        route = routing.Route(candidates=remote.candidates, lacking=[*route.lacking, *remote.lacking])
    if not route.candidates and not route.lacking:
        raise NoExecutorError(app)
    return route


def call_executor(org: str, app: str, executor: LiveExecutor, request: Any) -> Any:
    """Send one request to one executor and return its response, whatever it says (the raw endpoint).
    ExecutorGoneError → 502, timeout → 504."""
    try:
        response = _send_one(org, app, executor, request)
    except ExecutorGoneError:
        raise ApiError(502, f"executor '{executor.executor_id}' disconnected before answering") from None
    except InFlightLimitError as error:
        raise _busy(app, error.limit) from None
    except MalformedAnswerError as error:
        raise _malformed(executor, str(request.type), error) from None
    if is_unknown_type_error(response):
        _mark_unsupported(org, app, executor, str(request.type))
    return response


def _send_all(org: str, app: str, executor: LiveExecutor, request: Request) -> Any:
    """One logical request to one executor. Releases without ``workflow_ids`` support for this type act on
    the first id only (Go read it for delete before cancel/resume), so a request for several workflows goes to
    them as one request per workflow."""
    ids = getattr(request, "ids", None)
    if (
        isinstance(request, _BULK_CAPABLE)
        and ids is not None
        and len(ids) > 1
        and supports_bulk_ids(executor.language, executor.dbos_version, request.type) is False
    ):
        response = None
        for workflow_id in ids:
            single = dataclasses.replace(request, workflow_id=workflow_id, workflow_ids=None)
            response = _send_one(org, app, executor, single)
            if response.error_message is not None:
                return response
        return response
    return _send_one(org, app, executor, request)


@timed_request  # requests by type and outcome, with their latency (GET /metrics)
def _send_one(org: str, app: str, executor: LiveExecutor, request: Any) -> Any:
    """Send with a fresh request id (a retry must not reuse one) and wait up to the request timeout."""
    attempt = dataclasses.replace(request, request_id=new_request_id())
    timeout = runtime().settings.limits.request_timeout_s
    if isinstance(executor, RemoteExecutor):
        return _forward_one(org, app, executor, attempt, timeout)
    try:
        # Plain messages, not a proxy: building one introspects the whole actor, per call.
        future = ask_request(executor.ref, attempt).get(timeout=ASK_TIMEOUT_S)
        return future.get(timeout=timeout)
    except pykka.ActorDeadError:
        raise ExecutorGoneError("executor connection closed") from None
    except pykka.Timeout:
        with contextlib.suppress(pykka.ActorDeadError):
            tell_forget(executor.ref, attempt.request_id)
        log.warning(
            "executor %s/%s/%s did not answer %s within %g s",
            org, app, executor.executor_id, attempt.type, timeout,
        )
        raise ApiError(
            504,
            f"executor '{executor.executor_id}' did not answer '{attempt.type}' within {timeout:g} s",
            title="Gateway Timeout",
        ) from None


def send_local(org: str, app: str, executor: LiveExecutor, request: Any) -> Any:
    """One request to one executor of this instance, its response whatever it says (a forwarded request:
    web/api/cluster.py). Raises ExecutorGoneError, InFlightLimitError, MalformedAnswerError, ApiError 504."""
    response = _send_one(org, app, executor, request)
    if is_unknown_type_error(response):
        _mark_unsupported(org, app, executor, str(request.type))
    return response


def remote_executor(org: str, app: str, executor_id: str) -> RemoteExecutor | None:
    """The named executor if it is HEALTHY on another live instance (None when forwarding is disabled)."""
    forwarder = getattr(runtime(), "forwarder", None)
    return forwarder.cluster.remote_executor(org, app, executor_id) if forwarder is not None else None


def remote_executors(org: str, app: str) -> list[RemoteExecutor]:
    """HEALTHY executors of the application on other live instances ([] when forwarding is disabled)."""
    forwarder = getattr(runtime(), "forwarder", None)
    return forwarder.executors(org, app) if forwarder is not None else []


def _forward_one(org: str, app: str, executor: RemoteExecutor, request: Any, timeout: float) -> Any:
    """One request through the executor's instance, its failures mapped as a local executor's: gone (next
    candidate), 504, 429; a refused forward (secrets differ) or a malformed answer: 502."""
    try:
        return runtime().forwarder.call(executor, org, app, request, timeout)
    except ForwardError as error:
        if error.status in (None, 503):
            raise ExecutorGoneError(str(error)) from None
        if error.status == 504:
            raise ApiError(
                504,
                f"executor '{executor.executor_id}' (on instance {executor.instance}) did not answer "
                f"'{request.type}' within {timeout:g} s",
                title="Gateway Timeout",
            ) from None
        if error.status == 429:  # busy there: the next candidate, as for a local one
            raise InFlightLimitError(getattr(runtime().settings.limits, "max_inflight_per_executor", 0)) from None
        if error.status == 502:
            raise ApiError(502, error.detail, title="Executor Error") from None
        raise ApiError(502, f"instance {executor.instance} refused the forwarded request: {error.detail}") from None


def _mark_unsupported(org: str, app: str, executor: LiveExecutor, message_type: str) -> None:
    if isinstance(executor, RemoteExecutor):
        return  # its own instance marks it
    log.info(
        "executor %s/%s/%s (%s %s) does not support %s",
        org, app, executor.executor_id, executor.language, executor.dbos_version, message_type,
    )
    marked = runtime().directory.application_proxy(org, app).mark_unsupported(executor.executor_id, message_type)
    # Waited for: routing reads what the actor publishes (RoutingBoard), and the next request must see the mark.
    with contextlib.suppress(pykka.Timeout, pykka.ActorDeadError):
        marked.get(timeout=ASK_TIMEOUT_S)


def authorize_app(permission: str, org: str, app: str) -> None:
    """Authenticate, check the permission, and find the application (401/403/404/422), before any frame."""
    authorize(permission, org, app)
    if not runtime().views.applications.app_exists(org, app):
        require_app(org, app)  # its 404


def require_workflow(org: str, app: str, workflow_id: str) -> dict[str, Any]:
    """The workflow's status record (without input or output), or 404 when the executor has no such one."""
    response = call(org, app, GetWorkflowRequest(workflow_id=workflow_id, load_input=False,
                                                          load_output=False))
    if response.output is None:
        raise not_found(f"workflow '{workflow_id}' not found in application '{app}'")
    return response.output


def require_workflows(org: str, app: str, workflow_ids: list[str]) -> None:
    """404 naming the ids the executors have no workflow for, with one list request: the four bulk actions check
    every id first, all or nothing (docs/adr/0002-bulk-actions-all-or-nothing.md), since the SDKs disagree on an
    unknown id (some skip it, some fail)."""
    wanted = list(dict.fromkeys(workflow_ids))
    body = ListWorkflowsBody(workflow_uuids=wanted, limit=len(wanted))
    listed = {str(r.get("WorkflowUUID")) for r in call(org, app, ListWorkflowsRequest(body=body)).output or []}
    if not listed <= set(wanted):
        return  # an executor that ignored the filter: it cannot tell, the action will
    missing = [w for w in wanted if w not in listed]
    if missing:
        more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
        raise not_found(f"no workflow {', '.join(repr(w) for w in missing[:10])}{more} in application '{app}'")
