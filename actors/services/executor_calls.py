"""Calling an application's executors, with a domain error (actors/errors.py) for every way it fails.

- no executor of the application connected here: NoExecutorError;
- candidates are tried in routing order (actors/routing.py); an "Unknown message type" answer marks that
  executor as not supporting the type and moves on; when no connected executor supports the type:
  NotSupportedError, naming the SDK languages/releases that lack it;
- an executor that disconnects before answering: the next candidate; none left: ExecutorDisconnectedError;
- an executor's ``error_message``: the message (without the SDK's traceback) in ``detail``, a CallerMistakeError
  when it says the request was wrong (actors/services/executor_errors.py: an unknown workflow id, a filter its
  database cannot do, an import that is not an export), ExecutorFailedError otherwise;
- an executor that answers with a frame breaking the protocol: ExecutorFailedError at once, naming what is wrong;
- an executor with RELAY_MAX_INFLIGHT_PER_EXECUTOR requests unanswered: the next candidate; none left:
  ExecutorsBusyError;
- no answer within RELAY_REQUEST_TIMEOUT_S: the request is forgotten, TimedOutError.

The data plane (issue 15), when the application has one: with no executor of the application connected
anywhere, or none supporting the request's type, the system database answers instead
(actors/adapters/dataplane/client.py); `served_from` says which path answered (the `X-Relay-Served-From`
header, the console's badge).

HA: when no executor connected to this instance can take the request, the HEALTHY executors of the
application on other live instances are the candidates (actors/cluster.py), reached through their instance
(actors/adapters/forwarder.py, when RELAY_FORWARD_SECRET is set); their answers are read exactly as local ones.
`serve_forwarded` is the other end: a peer's request, answered by an executor connected here.

Each HTTP request runs in its own greenlet and only waits on its own future, so a slow executor or a
huge answer holds up nobody else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pykka

from relay.actors import metrics, routing
from relay.actors.adapters.dataplane import answers as dataplane_answers
from relay.actors.adapters.dataplane.client import DataPlane
from relay.actors.application import RoutingBoard
from relay.actors.cluster import RemoteExecutor
from relay.actors.errors import (
    DataPlaneRefusedError,
    DataPlaneUnavailableError,
    ExecutorDisconnectedError,
    ExecutorFailedError,
    ExecutorsBusyError,
    ExecutorUnavailableError,
    NoExecutorError,
    NotSupportedError,
    ServiceError,
    TimedOutError,
)
from relay.actors.executor import LiveExecutor
from relay.actors.executor_messages import ask_request, tell_forget
from relay.actors.services import executor_errors
from relay.actors.services.commands import COMMAND_TIMEOUT_S
from relay.events.errors import NotFoundError
from relay.events.executor import DISCONNECTED, HEALTHY
from relay.wire.codec import is_metadata_only_refusal, is_send_race, is_unknown_type_error
from relay.wire.errors import ExecutorGoneError, InFlightLimitError, MalformedAnswerError
from relay.wire.messages import MessageType, new_request_id
from relay.wire.requests import CancelRequest, DeleteRequest, Request, ResumeRequest
from relay.wire.responses import Response
from relay.wire.support import supports_bulk_ids

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

log = logging.getLogger("relay.web.executor_calls")  # the logger's name is what operators filter on: kept

"""How long a request waits for the application's actor (not for an executor: RELAY_REQUEST_TIMEOUT_S)."""

SEND_RACE_RETRY_DELAYS_S = (0.05, 0.25)
"""Pauses before asking again when an executor failed only to send its answer (is_send_race): the Java
SDK's export clears in milliseconds, once the answer before it has gone out."""

SEND_RACE_RETRYABLE = frozenset({MessageType.EXPORT_WORKFLOW})
# Types that only read: asked again when every executor asked disconnected before answering (nothing was changed).
READ_ONLY = frozenset({
    MessageType.EXECUTOR_INFO, MessageType.EXIST_PENDING_WORKFLOWS, MessageType.LIST_WORKFLOWS,
    MessageType.LIST_QUEUED_WORKFLOWS, MessageType.GET_WORKFLOW, MessageType.LIST_STEPS,
    MessageType.GET_WORKFLOW_EVENTS, MessageType.GET_WORKFLOW_NOTIFICATIONS, MessageType.GET_WORKFLOW_STREAMS,
    MessageType.GET_WORKFLOW_AGGREGATES, MessageType.GET_STEP_AGGREGATES, MessageType.EXPORT_WORKFLOW,
    MessageType.LIST_SCHEDULES, MessageType.GET_SCHEDULE, MessageType.LIST_QUEUES, MessageType.GET_QUEUE,
    MessageType.GET_METRICS, MessageType.LIST_APPLICATION_VERSIONS,
})
# While an application's executors are moving to another instance (one stopping in a rolling restart: it closes
# their sockets, they reconnect through the load balancer within a second or so), a request that finds none
# waits for one up to this long (never past the request timeout) rather than failing at once. Only when the
# registry expects them back: an application whose executors are all DEAD, or that never had one, is told at once.
RECONNECT_WAIT_S = 5.0
RECONNECT_POLL_S = 0.1
"""The types asked again after a send race: read-only, so a second ask changes nothing. A type that changes
state (import) is never asked twice; its error reaches the caller."""

MAX_DETAIL_CHARS = 2000
_TRACEBACK = "Traceback (most recent call last):"
# A traceback's exception line: unindented "module.Name: message" (PostgreSQL's "DETAIL: ..." is all capitals).
_EXCEPTION_LINE = re.compile(r"^(?=[\w.]*[a-z])[A-Za-z_][\w.]*: \S")
_BULK_CAPABLE = (CancelRequest, ResumeRequest, DeleteRequest)


def summarize_error(message: str) -> str:
    """An executor's error_message for the caller: the Python SDK appends a traceback to its context line;
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


def _who(executor: LiveExecutor | RemoteExecutor) -> str:
    """An executor as errors name it: its SDK and release first, so the operator knows whose answer it was."""
    language, release = executor.language or "unknown-language", executor.dbos_version or "unknown-version"
    return f"{language} {release} executor '{executor.executor_id}'"


def _malformed(executor: LiveExecutor | RemoteExecutor, message_type: str,
               error: MalformedAnswerError) -> ExecutorFailedError:
    return ExecutorFailedError(f"{_who(executor)} answered '{message_type}' with a malformed frame: {error}")


def _failed(executor: LiveExecutor | RemoteExecutor, message_type: str, error_message: str) -> ServiceError:
    """An executor's error answer: the caller's mistake when its text says so, the executor's fault otherwise."""
    summary = summarize_error(error_message)
    detail = f"{_who(executor)} answered '{message_type}' with an error: {summary}"
    # Classified on the summary (context and the exception's last line), not on the traceback's other frames.
    client = executor_errors.classify(message_type, summary)
    if client is None:
        return ExecutorFailedError(detail)
    if client.location is None:
        return client.kind(f"{client.explanation}: {detail}", explanation=client.explanation)
    return client.kind(f"{client.location}: {client.explanation}; {detail}", location=client.location,
                       explanation=client.explanation)


def _busy(app: str, limit: int) -> ExecutorsBusyError:
    return ExecutorsBusyError(
        f"the executors of application '{app}' already have {limit} requests each in flight "
        "(RELAY_MAX_INFLIGHT_PER_EXECUTOR); try again later",
    )


def timed_send(send: Callable[[], Response], org: str, app: str, message_type: str) -> Response:
    """``send()`` counted and timed by message type and outcome (GET /metrics)."""
    started = time.monotonic()
    outcome = metrics.ERROR
    try:
        response = send()
    except ExecutorGoneError:
        outcome = metrics.GONE
        raise
    except TimedOutError:
        outcome = metrics.TIMEOUT
        raise
    else:
        outcome = metrics.outcome_of(response)
        return response
    finally:
        metrics.observe_request(org, app, message_type, outcome, time.monotonic() - started)


class ExecutorCalls:
    """The calls of one request (or one console page) to the executors of applications. `served_from` says
    which path answered the last call: ``executor`` or ``database``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.served_from: str | None = None

    # -- what is connected

    def snapshot(self, org: str, app: str) -> tuple[Sequence[LiveExecutor], str | None]:
        """The application's live executors and latest version, as its actor knows them."""
        publication = self._published(org, app)
        if publication is not None:
            return publication.executors, publication.latest_version
        actor = self.rt.directory.application_proxy(org, app)
        try:
            executors: tuple[Sequence[LiveExecutor], str | None] = actor.routing_snapshot().get(
                timeout=COMMAND_TIMEOUT_S)
        except pykka.Timeout:
            raise TimedOutError(f"application '{app}' did not answer Relay in time") from None
        return executors

    def _published(self, org: str, app: str) -> routing.Publication | None:
        """What the application's actor (started on first use) last published for routing, read without asking
        it (actors/application.py RoutingBoard); None for an actor that publishes nothing (test stand-ins)."""
        board = RoutingBoard.of(self.rt.directory.application(org, app))
        return board.current if board is not None else None

    def remote_executor(self, org: str, app: str, executor_id: str) -> RemoteExecutor | None:
        """The named executor if it is HEALTHY on another live instance (None when forwarding is disabled)."""
        forwarder = getattr(self.rt, "forwarder", None)
        return forwarder.cluster.remote_executor(org, app, executor_id) if forwarder is not None else None

    def remote_executors(self, org: str, app: str) -> list[RemoteExecutor]:
        """HEALTHY executors of the application on other live instances ([] when forwarding is disabled)."""
        forwarder = getattr(self.rt, "forwarder", None)
        return forwarder.executors(org, app) if forwarder is not None else []

    # -- the data plane

    def data_plane(self, org: str, app: str) -> DataPlane | None:
        """The application's data plane on this instance, None when it has none configured."""
        config = self.rt.views.applications.app_setting(org, app, "dataPlane")
        return self.rt.data_planes.get(org, app, config)

    def from_database(self, plane: DataPlane, request: Request) -> Any:
        """The system database's answer; its failures are domain errors already (DataPlaneError's kinds,
        NotFoundError) that never name the URL. Its refusals count as the database's answer too: that is the
        path that answered."""
        self.served_from = "database"
        return dataplane_answers.answer(plane, request)

    def _database_first(self, plane: DataPlane, request: Request) -> Any:
        """A heavy read from the database; None when the database cannot be reached or is refused (the
        executors then answer)."""
        try:
            return self.from_database(plane, request)
        except (DataPlaneRefusedError, DataPlaneUnavailableError):
            return None

    # -- one request, to the best executor

    def call(self, org: str, app: str, request: Request) -> Any:
        """Send ``request`` to the best executor of the application and return its (successful) response; the
        system database answers when no executor can and the application has a data plane. While the executors
        are reconnecting (RECONNECT_WAIT_S), asked again until one answers."""
        deadline = time.monotonic() + min(RECONNECT_WAIT_S, self.rt.settings.limits.request_timeout_s)
        while True:
            try:
                return self._call_once(org, app, request)
            except (NoExecutorError, ExecutorDisconnectedError) as error:
                if time.monotonic() >= deadline or not self._expected_back(org, app, request, error):
                    raise
            time.sleep(RECONNECT_POLL_S)  # gevent's, under relay serve: only this request waits

    def _expected_back(self, org: str, app: str, request: Request, error: ServiceError) -> bool:
        """Whether waiting may help: nothing was sent (none connected), or a read-only request's executors all
        went away before answering; and the registry still holds an executor of the app that is not DEAD."""
        if isinstance(error, ExecutorDisconnectedError) and request.type not in READ_ONLY:
            return False
        counts = self.rt.views.registry.counts_by_status(org, app)  # a GROUP BY, not every executor's row
        return counts.get(HEALTHY, 0) + counts.get(DISCONNECTED, 0) > 0

    def _call_once(self, org: str, app: str, request: Request) -> Any:
        message_type = str(request.type.value)
        plane = self.data_plane(org, app)
        if plane is not None and dataplane_answers.prefers_database(message_type):
            answered = self._database_first(plane, request)
            if answered is not None:
                return answered
        try:
            route = self._route(org, app, message_type)
        except NoExecutorError:
            if plane is None:
                raise
            return self.from_database(plane, request)
        return self._ask_executors(org, app, request, route, plane)

    def _route(self, org: str, app: str, message_type: str) -> routing.Route:
        """The candidates for a request: the executors connected here; when none of them can take it, those on
        other live instances (HA). NoExecutorError when the application has no executor anywhere."""
        publication = self._published(org, app)
        if publication is not None:
            route, latest = routing.rank_cached(publication, message_type), publication.latest_version
        else:
            executors, latest = self.snapshot(org, app)
            route = routing.rank(executors, message_type, latest)
        if not route.candidates:
            remote = routing.rank(self.remote_executors(org, app), message_type, latest)  # type: ignore[arg-type]
            route = routing.Route(candidates=remote.candidates, lacking=[*route.lacking, *remote.lacking])
        if not route.candidates and not route.lacking:
            raise NoExecutorError(app)
        return route

    def _ask_executors(self, org: str, app: str, request: Request, route: routing.Route,
                       plane: DataPlane | None) -> Any:
        """The candidates in order; the database when none supports the type (and the application has one)."""
        message_type = str(request.type.value)
        lacking = list(route.lacking)
        gone = 0
        busy: InFlightLimitError | None = None
        refusal: ServiceError | None = None
        for executor in route.candidates:
            try:
                response = self._send_past_races(org, app, executor, request)
            except ExecutorGoneError:
                gone += 1
                continue
            except InFlightLimitError as error:
                busy = error
                continue
            except MalformedAnswerError as error:
                raise _malformed(executor, message_type, error) from None
            if response.error_message is None:
                self.served_from = "executor"
                return response
            if is_unknown_type_error(response):
                self._mark_unsupported(org, app, executor, message_type)
                lacking.append(executor)
                continue
            if is_metadata_only_refusal(response):
                refusal = _failed(executor, message_type, response.error_message)
                continue
            raise _failed(executor, message_type, response.error_message)
        if (plane is not None and refusal is None and busy is None and not gone
                and dataplane_answers.serves(message_type)):
            return self.from_database(plane, request)  # the connected executors lack the type; the database has it
        raise _unanswered(app, message_type, refusal, busy, gone, lacking)

    def _send_past_races(self, org: str, app: str, executor: LiveExecutor | RemoteExecutor, request: Request) -> Any:
        """_send_all, asked again (read-only types only) while the executor answers that it lost a send race."""
        response = self._send_all(org, app, executor, request)
        if request.type not in SEND_RACE_RETRYABLE:
            return response
        for delay in SEND_RACE_RETRY_DELAYS_S:
            if not is_send_race(response):
                break
            log.info("executor %s/%s/%s lost a send race answering %s; asking again",
                     org, app, executor.executor_id, request.type.value)
            time.sleep(delay)  # gevent's, under relay serve: only this request waits
            response = self._send_all(org, app, executor, request)
        return response

    def _send_all(self, org: str, app: str, executor: LiveExecutor | RemoteExecutor, request: Request) -> Any:
        """One logical request to one executor. Releases without ``workflow_ids`` support for this type act on
        the first id only (Go read it for delete before cancel/resume), so a request for several workflows goes
        to them as one request per workflow."""
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
                response = self._send_one(org, app, executor, single)
                if response.error_message is not None:
                    return response
            return response
        return self._send_one(org, app, executor, request)

    def _send_one(self, org: str, app: str, executor: LiveExecutor | RemoteExecutor, request: Any) -> Any:
        """Send with a fresh request id (a retry must not reuse one) and wait up to the request timeout;
        counted and timed by type and outcome."""
        attempt = dataclasses.replace(request, request_id=new_request_id())
        return timed_send(lambda: self._send_untimed(org, app, executor, attempt), org, app, str(request.type))

    def _send_untimed(self, org: str, app: str, executor: LiveExecutor | RemoteExecutor, attempt: Any) -> Any:
        timeout = self.rt.settings.limits.request_timeout_s
        if isinstance(executor, RemoteExecutor):
            return self._forward_one(org, app, executor, attempt, timeout)
        try:
            # Plain messages, not a proxy: building one introspects the whole actor, per call.
            future = ask_request(executor.ref, attempt).get(timeout=COMMAND_TIMEOUT_S)
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
            raise TimedOutError(
                f"executor '{executor.executor_id}' did not answer '{attempt.type}' within {timeout:g} s",
            ) from None

    def _forward_one(self, org: str, app: str, executor: RemoteExecutor, request: Any, timeout: float) -> Any:
        """One request through the executor's instance; the forwarder raises what a local executor's call would
        (gone: next candidate, busy, timed out, failed) or ForwardRefusedError (secrets differ)."""
        return self.rt.forwarder.call(executor, org, app, request, timeout)  # type: ignore[union-attr]

    def _mark_unsupported(self, org: str, app: str, executor: LiveExecutor | RemoteExecutor, message_type: str) -> None:
        if isinstance(executor, RemoteExecutor):
            return  # its own instance marks it
        log.info(
            "executor %s/%s/%s (%s %s) does not support %s",
            org, app, executor.executor_id, executor.language, executor.dbos_version, message_type,
        )
        marked = self.rt.directory.application_proxy(org, app).mark_unsupported(executor.executor_id, message_type)
        # Waited for: routing reads what the actor publishes (RoutingBoard), and the next request must see it.
        with contextlib.suppress(pykka.Timeout, pykka.ActorDeadError):
            marked.get(timeout=COMMAND_TIMEOUT_S)

    # -- one request, to one named executor

    def call_executor(self, org: str, app: str, executor_id: str, request: Any) -> Any:
        """Send one request to the named executor (here, or on another instance) and return its response,
        whatever it says (the raw endpoint)."""
        executor = self._named(org, app, executor_id)
        try:
            response = self._send_one(org, app, executor, request)
        except ExecutorGoneError:
            raise ExecutorDisconnectedError(f"executor '{executor.executor_id}' disconnected before answering") \
                from None
        except InFlightLimitError as error:
            raise _busy(app, error.limit) from None
        except MalformedAnswerError as error:
            raise _malformed(executor, str(request.type), error) from None
        if is_unknown_type_error(response):
            self._mark_unsupported(org, app, executor, str(request.type))
        return response

    def _named(self, org: str, app: str, executor_id: str) -> LiveExecutor | RemoteExecutor:
        """The named executor, here or on another instance. While the registry holds it HEALTHY or DISCONNECTED
        but no route to it is known yet (it is reconnecting, or another instance's record of it is a moment
        ahead of this one's routing), looked for again up to RECONNECT_WAIT_S, as `call` waits."""
        deadline = time.monotonic() + min(RECONNECT_WAIT_S, self.rt.settings.limits.request_timeout_s)
        while True:
            executors, _latest = self.snapshot(org, app)
            executor: LiveExecutor | RemoteExecutor | None = next(
                (e for e in executors if e.executor_id == executor_id), None)
            if executor is None:  # HA: connected to another instance, reached through it
                executor = self.remote_executor(org, app, executor_id)
            if executor is not None:
                return executor
            row = self.rt.views.registry.executor(org, app, executor_id)  # its one row, not the app's every row
            if row is None or row.get("status") == "DELETED":
                raise NotFoundError(f"executor '{executor_id}' not found in application '{app}'")
            if row.get("status") not in (HEALTHY, DISCONNECTED) or time.monotonic() >= deadline:
                raise ExecutorUnavailableError(f"executor '{executor_id}' is not connected to this Relay instance")
            time.sleep(RECONNECT_POLL_S)

    def serve_forwarded(self, org: str, app: str, executor_id: str | None, request: Any) -> Any:
        """A peer instance's forwarded request, answered by the named executor connected here (or, none named,
        by this instance's in routing order): its response whatever it says."""
        for executor in self._local_candidates(org, app, executor_id, str(request.type)):
            try:
                response = self._send_one(org, app, executor, request)
            except ExecutorGoneError:
                continue
            except InFlightLimitError as error:
                raise ExecutorsBusyError(
                    f"executor '{executor.executor_id}' has {error.limit} requests in flight") from None
            except MalformedAnswerError as error:
                raise ExecutorFailedError(f"executor '{executor.executor_id}' answered '{request.type}' with a "
                                          f"malformed frame: {error}") from None
            if is_unknown_type_error(response):
                self._mark_unsupported(org, app, executor, str(request.type))
            return response
        raise ExecutorUnavailableError(f"the executor(s) of application '{app}' on instance "
                                       f"{self.rt.ctx.instance_id} disconnected before answering")

    def _local_candidates(self, org: str, app: str, executor_id: str | None,
                          message_type: str) -> Sequence[LiveExecutor]:
        """The named executor if it is connected here, else (none named) this instance's in routing order."""
        here = self.rt.ctx.instance_id
        executors, latest = self.snapshot(org, app)
        if executor_id is not None:
            candidates = [e for e in executors if e.executor_id == executor_id]
            if not candidates:
                raise ExecutorUnavailableError(f"executor '{executor_id}' is not connected to instance {here}")
            return candidates
        ranked = routing.rank(executors, message_type, latest).candidates
        if not ranked:
            raise ExecutorUnavailableError(f"no executor of application '{app}' is connected to instance {here}")
        return ranked


def _unanswered(app: str, message_type: str, refusal: ServiceError | None, busy: InFlightLimitError | None,
                gone: int, lacking: list[LiveExecutor]) -> ServiceError:
    """Why no candidate answered, most telling reason first."""
    if refusal is not None:
        return refusal
    if busy is not None:
        return _busy(app, busy.limit)
    if gone and not lacking:
        return ExecutorDisconnectedError(f"every executor of application '{app}' disconnected before answering")
    if gone:
        return ExecutorDisconnectedError(
            f"executors of application '{app}' disconnected before answering '{message_type}'; the others "
            f"lack it ({routing.describe_lacking(lacking)})",
        )
    return NotSupportedError(
        f"no connected executor of application '{app}' supports '{message_type}': "
        f"{routing.describe_lacking(lacking)} lack it; upgrade the DBOS SDK",
    )
