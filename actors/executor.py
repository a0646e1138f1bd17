"""ExecutorActor: one per executor connection. Owns the socket, correlates responses by request_id.

Liveness: it pings every `ping_interval_s`; an executor that answers no ping (pong) within `pong_timeout_s`
is treated like a dropped socket (closed; the disconnect path records it). Pings are not events. The pings and
the pong deadline are run by the scheduler itself (`Liveness`: one timer armed per connection at a time, a
non-blocking ping, a look at the socket's last pong), not by actor messages; the actor hears of liveness only
when it fails.

Others talk to the actor without a pykka proxy (actors/executor_messages.py); the receive loop sends {"frame"}
and {"closed"}.

The handshake: `claim` by the application actor is waited for at most `handshake_timeout_s`; past that the
socket is closed with 1013 (try again later) and the late claim is undone when it lands.

When the event store fails (unreachable, locked, full): a Disconnected that cannot be recorded is tried again
with backoff, the actor living on (socketless) until it is recorded or superseded; a Connected that cannot be
recorded closes the socket with 1013 (try again later), and the executor's own reconnect tries again.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import pykka

from relay.actors import metrics
from relay.actors.context import ActorContext
from relay.actors.liveness import FrameSocket, Liveness
from relay.actors.pykka_gevent import DrainedActor
from relay.actors.scheduler import Cancellable
from relay.events.errors import DomainError
from relay.events.executor import Executor, ExecutorInfo
from relay.events.refs import executor_ref
from relay.wire.codec import decode_response
from relay.wire.errors import ExecutorGoneError, InFlightLimitError, MalformedAnswerError, ProtocolError
from relay.wire.json_types import JSONObject
from relay.wire.messages import MessageType
from relay.wire.requests import ExecutorInfoRequest, encode_request
from relay.wire.responses import ExecutorInfoResponse

log = logging.getLogger("relay.actors.executor")

_KNOWN_TYPES = frozenset(t.value for t in MessageType)
# A bad frame is logged (without its content) up to this many times per connection; after that only every
# BAD_FRAME_LOG_EVERY-th is, with the count: a flooding executor cannot flood the log.
BAD_FRAME_LOG_LIMIT = 100
BAD_FRAME_LOG_EVERY = 1000
# How long a claim given up on (handshake_timeout_s) is still waited for, to be undone when it lands.
LATE_CLAIM_WAIT_S = 300.0
# How long an executor actor's greenlet waits for another message before it ends (under gevent, _DrainedInbox).
# Backoff of a Disconnected the store refused: 0.5 s, 1 s, 2 s, ... at most 30 s between attempts.
RECORD_RETRY_FIRST_S = 0.5
RECORD_RETRY_MAX_S = 30.0
# The close reason of the sockets Relay closes because it stops (1001).
RELAY_STOPPING = "relay stopping"
_REQUEST_ID = re.compile(r'"request_id"\s*:\s*"([0-9A-Za-z_-]{1,200})"')


def _fail(future: pykka.Future[object], message: str, kind: type[Exception] = ExecutorGoneError) -> None:
    """Fail a future (pykka wants an exc_info triple, not an exception)."""
    error = kind(message)
    future.set_exception((kind, error, None))


@dataclass
class Pending:
    type: str
    future: pykka.Future[object]
    on_reply: Callable[[object], None] | None = None
    on_gone: Callable[[object], None] | None = None


@dataclass
class LiveExecutor:
    """An executor connected to this instance, as routing sees it."""

    executor_id: str
    ref: pykka.ActorRef[ExecutorActor]
    application_version: str
    language: str | None
    dbos_version: str | None
    connected_at: float
    unsupported: set[str] = field(default_factory=set)


@dataclass
class Connection:
    org: str
    app: str
    key_name: str
    peer: str


class ApplicationProxy(Protocol):
    """What an executor actor asks of its application's actor (actors/application.py ApplicationActor) through
    that actor's pykka proxy, each call a future. A Protocol rather than the class: the application actor holds
    executor actors, so this module naming it would make the two import each other."""

    def claim(self, executor: LiveExecutor) -> pykka.Future[pykka.ActorRef[ExecutorActor] | None]: ...
    def release(self, executor_id: str, ref: pykka.ActorRef[ExecutorActor]) -> pykka.Future[bool]: ...
    def live_executors(self) -> pykka.Future[list[LiveExecutor]]: ...
    def executor_connected(self, executor_id: str) -> pykka.Future[None]: ...
    def executor_disconnected(self, executor_id: str, at: datetime) -> pykka.Future[None]: ...
    def rewatch(self, executor_id: str) -> pykka.Future[None]: ...


class Connections(Protocol):
    """What an executor actor needs of the process's Directory (actors/directory.py)."""

    def add_connection(self, org: str, key_name: str, ref: pykka.ActorRef[ExecutorActor]) -> None: ...
    def remove_connection(self, org: str, key_name: str, ref: pykka.ActorRef[ExecutorActor]) -> None: ...
    def application_proxy(self, org: str, app: str) -> ApplicationProxy: ...


class ExecutorActor(DrainedActor):
    """Lives as long as the socket. Its first act is to ask the executor who it is (executor_info).

    Under gevent (`relay serve`) it has no thread of its own (actors/pykka_gevent.py): its messages are handled by
    a greenlet spawned when one arrives at an empty inbox, which ends once the inbox is empty: the same
    one-at-a-time handling, several KiB less per idle connection. Elsewhere (unit tests) it is an ordinary
    ThreadingActor."""

    def __init__(self, ctx: ActorContext, directory: Connections, socket: FrameSocket, conn: Connection,
                 admitted: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.directory = directory
        self.socket = socket
        self.conn = conn
        self.executor_id: str | None = None
        self.info: ExecutorInfo | None = None
        self.pending: dict[str, Pending] = {}
        self.closed = False
        self.bad_frames = 0
        self._handshake_timer: Cancellable | None = None
        # Called once when the handshake is over, whatever its outcome (web/transport/websocket.py bounds those in
        # flight).
        self._admitted = admitted
        self._liveness = Liveness(ctx.scheduler, socket, ctx.limits.ping_interval_s, ctx.limits.pong_timeout_s,
                                  self._liveness_failed)
        # Why this actor closed its socket itself (recorded as the disconnect reason).
        self.close_reason: str | None = None
        # A Disconnected the store refused (reason, time): tried again until recorded; then the actor stops.
        self._unrecorded_disconnect: tuple[str, datetime] | None = None
        self._record_attempts = 0

    @property
    def who(self) -> str:
        """How logs name this connection (never with its key)."""
        return f"{self.conn.org}/{self.conn.app}/{self.executor_id or '?'} from {self.conn.peer}"

    def on_start(self) -> None:
        self.directory.add_connection(self.conn.org, self.conn.key_name, self.actor_ref)
        self._send(ExecutorInfoRequest(), on_reply=self._identified)
        self._handshake_timer = self._later(self.ctx.limits.handshake_timeout_s, {"handshake_expired": True})
        self._liveness.start()

    def on_stop(self) -> None:
        self.directory.remove_connection(self.conn.org, self.conn.key_name, self.actor_ref)
        self._liveness.stop()
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self._handshake_over()

    def _handshake_over(self) -> None:
        admitted, self._admitted = self._admitted, None
        if admitted is not None:
            try:
                admitted()
            except Exception:
                log.exception("handshake bookkeeping of %s failed", self.who)

    def _later(self, delay: float, message: JSONObject) -> Cancellable:
        """Tell ourselves `message` after `delay` seconds (dropped if this actor has stopped by then)."""

        def post() -> None:
            with contextlib.suppress(pykka.ActorDeadError):
                self.actor_ref.tell(message)

        return self.ctx.scheduler.call_later(delay, post)

    def on_receive(self, message: object) -> object:
        if not isinstance(message, dict):
            return None
        # Frames from the receive loop first (requests come as pykka ProxyCall messages: ask_request).
        if "frame" in message:
            try:
                self.on_frame(message["frame"])
            finally:
                done = message.get("done")
                if done is not None:
                    done()  # the receive loop's flow control (web/transport/websocket.py)
        else:
            self._on_control(message)
        return None

    def _on_control(self, message: dict[str, Any]) -> None:
        if "closed" in message:
            self.on_closed(message["closed"])
        elif "handshake_expired" in message:
            if self.executor_id is None and not self.closed:
                log.warning("executor %s did not answer executor_info in time; closing", self.who)
                self._close(1008, "executor_info not answered")
        elif "liveness_failed" in message:
            self._close_for_liveness(message["liveness_failed"])
        elif "close" in message:
            self._close(1000, str(message["close"]))
        elif "going_away" in message:  # Relay stops: 1001 tells the SDK to reconnect (here or to a peer)
            self.close_reason = self.close_reason or RELAY_STOPPING
            self._close(1001, str(message["going_away"]))
        elif "record_disconnect" in message and self._record_disconnect(first=False):
            self.stop()

    # -- liveness (the pings themselves run in the scheduler: see Liveness) -------------------------
    def _liveness_failed(self, reason: str) -> None:
        """From the scheduler's thread: hand it to the actor (the close and its reason are the actor's)."""
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell({"liveness_failed": reason})

    def _close_for_liveness(self, reason: str) -> None:
        if self.closed:
            return
        if reason == "pong timeout":
            log.warning("executor %s answered no ping for %g s; closing", self.who, self.ctx.limits.pong_timeout_s)
            self.close_reason = self.close_reason or reason
            self._close(1001, "pong timeout")
        else:
            self.close_reason = self.close_reason or reason
            self._close(1011, reason)

    # -- requests ---------------------------------------------------------------------------------
    def _send(self, request: Any, on_reply: Callable[[object], None] | None = None) -> pykka.Future[object]:
        """Send a request. Its answer resolves the returned future, or is handed to `on_reply`
        inside this actor (used for the actor's own requests, like executor_info)."""
        future: pykka.Future[object] = self._create_future()
        if self.closed:
            _fail(future, "executor disconnected")
            return future
        text = encode_request(request)
        self.pending[request.request_id] = Pending(str(request.type), future, on_reply)
        try:
            self.socket.send_text(text)
        except Exception:
            self.pending.pop(request.request_id, None)
            _fail(future, "executor socket failed while sending")
        return future

    def request(self, request: object) -> pykka.Future[object]:
        """Send a request; the returned future gets the decoded response (or ExecutorGoneError,
        MalformedAnswerError; InFlightLimitError, unsent, when RELAY_MAX_INFLIGHT_PER_EXECUTOR are pending)."""
        limit = self.ctx.limits.max_inflight_per_executor
        if len(self.pending) >= limit:
            future: pykka.Future[object] = self._create_future()
            future.set_exception((InFlightLimitError, InFlightLimitError(limit), None))
            return future
        return self._send(request)

    def request_then(self, request: Any, on_answer: Callable[[object], None]) -> None:
        """Send a request without anyone waiting: `on_answer` gets the decoded response, or an
        ExecutorGoneError if the socket closes first. It runs inside this actor: keep it to a `tell`."""
        self._send(request, on_reply=on_answer)
        pending = self.pending.get(request.request_id)
        if pending is None:  # not sent: closed, or the send failed
            on_answer(ExecutorGoneError("executor disconnected"))
        else:
            pending.on_gone = on_answer

    def forget(self, request_id: str) -> None:
        """The caller gave up waiting (timeout): drop the pending entry."""
        self.pending.pop(request_id, None)

    # -- frames from the socket (in order, from the receive loop) ---------------------------------
    def on_frame(self, frame: str | bytes) -> None:
        try:
            response = decode_response(frame, max_bytes=self.ctx.limits.max_frame_bytes)
        except ProtocolError as error:
            self.bad_frames += 1
            if self._log_bad_frame():
                log.warning("executor %s sent a bad frame: %s", self.who, error)
            self._answered_badly(frame, error.reason)
            return
        entry = self.pending.pop(response.request_id, None)
        if entry is None:
            self.bad_frames += 1
            if self._log_bad_frame():
                # Only a known type is named: the frame's own text never reaches the log.
                kind = response.type if response.type in _KNOWN_TYPES else "not a known type"
                log.warning("executor %s answered an unknown request id (type %s)", self.who, kind)
            return
        if entry.on_reply is not None:
            entry.on_reply(response)
        entry.future.set(response)

    def _log_bad_frame(self) -> bool:
        """Whether this bad frame (already counted) is logged; past the limit, every so often with the count."""
        if self.bad_frames <= BAD_FRAME_LOG_LIMIT:
            if self.bad_frames == BAD_FRAME_LOG_LIMIT:
                log.warning("executor %s sent %d bad frames: further ones are counted, and logged once every %d",
                            self.who, BAD_FRAME_LOG_LIMIT, BAD_FRAME_LOG_EVERY)
            return True
        if self.bad_frames % BAD_FRAME_LOG_EVERY == 0:
            log.warning("executor %s has sent %d bad frames", self.who, self.bad_frames)
        return False

    def _answered_badly(self, frame: str | bytes, reason: str) -> None:
        """A bad frame naming a pending request's id fails that request now (rather than at its timeout)."""
        if not self.pending or not isinstance(frame, str | bytes):
            return
        text = frame if isinstance(frame, str) else frame.decode("utf-8", "replace")
        for match in _REQUEST_ID.finditer(text):
            entry = self.pending.pop(match.group(1), None)
            if entry is None:
                continue
            _fail(entry.future, reason, MalformedAnswerError)
            if entry.on_gone is not None:
                entry.on_gone(MalformedAnswerError(reason))
            elif entry.on_reply is not None:  # our own request: executor_info
                log.warning("executor from %s answered executor_info with a bad frame; closing", self.conn.peer)
                self._close(1002, "executor_info failed")
            return

    def on_closed(self, reason: str) -> None:
        """The socket is gone: fail what waits, record the disconnect if this was the current connection."""
        self.closed = True
        self._liveness.stop()
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        self._handshake_over()
        reason = self.close_reason or reason
        for entry in self.pending.values():
            _fail(entry.future, "executor disconnected before answering")
            if entry.on_gone is not None:
                entry.on_gone(ExecutorGoneError("executor disconnected before answering"))
        self.pending.clear()
        # Relay stops (we closed it, 1001): no Disconnected, the record stays HEALTHY on this instance. The next
        # start (or the peer that adopts this instance) gives it a full grace period from then, which a
        # Disconnected recorded now would not (its grace would count the downtime), and a stop with thousands of
        # executors appends nothing (it used to append one event per executor, one transaction each, before it
        # could exit). RelayInstance.Stopped records the stop. Nor is the claim released: the application actor
        # stops next, and thousands of messages to it would only slow the stop.
        if self.executor_id is not None and reason != RELAY_STOPPING:
            self._unrecorded_disconnect = (reason, self.ctx.clock())
            if not self._record_disconnect(first=True):
                return  # the store failed: tried again later, and this actor stops once it is recorded
        self.stop()

    def _record_disconnect(self, first: bool) -> bool:
        """Record the Disconnected of this connection under the executor's lock. The first time, only if this
        connection is still the current one; later (retries), only if no other connection took over meanwhile.
        False when the store failed: a retry is scheduled (with backoff)."""
        assert self.executor_id is not None and self._unrecorded_disconnect is not None
        reason, at = self._unrecorded_disconnect
        key = (self.conn.org, self.conn.app, self.executor_id)
        with self.ctx.lock_for(key):
            app = self.directory.application_proxy(self.conn.org, self.conn.app)
            if first:
                if not app.release(self.executor_id, self.actor_ref).get():
                    return True
            elif any(e.executor_id == self.executor_id for e in app.live_executors().get()):
                log.info("disconnect of %s not recorded: it connected again meanwhile", self.who)
                return True
            try:
                self.ctx.log.change(executor_ref(self.conn.org, self.conn.app, self.executor_id),
                                    lambda e: e.disconnect(reason, at))
            except DomainError as error:
                log.warning("disconnect of %s not recorded: %s", self.who, error)
                return True
            except Exception as error:
                self._record_attempts += 1
                delay = min(RECORD_RETRY_MAX_S, RECORD_RETRY_FIRST_S * 2 ** (self._record_attempts - 1))
                log.warning("recording the disconnect of %s failed (%s); trying again in %g s",
                            self.who, type(error).__name__, delay)
                self._later(delay, {"record_disconnect": True})
                return False
            log.info("executor %s disconnected (%s)", self.who, reason)
            metrics.EXECUTOR_DISCONNECTS.labels(self.conn.org, self.conn.app).inc()
            # Not waited for; sent under the lock, so it reaches the application actor before the claim of
            # any reconnection of this executor.
            app.executor_disconnected(self.executor_id, at)
        return True

    # -- the handshake ----------------------------------------------------------------------------
    def _identified(self, response: object) -> None:
        try:
            self._identify(response)
        finally:
            self._handshake_over()

    def _identify(self, response: Any) -> None:
        if self.closed:
            return
        if response.error_message or not isinstance(response, ExecutorInfoResponse):
            log.warning("executor from %s refused executor_info; closing", self.conn.peer)
            self._close(1002, "executor_info failed")
            return
        info = ExecutorInfo(
            application_version=response.application_version,
            hostname=response.hostname,
            language=response.language,
            dbos_version=response.dbos_version,
            metadata=response.executor_metadata,
        )
        executor_id = response.executor_id
        if not executor_id:
            self._close(1002, "executor_info without executor_id")
            return
        key = (self.conn.org, self.conn.app, executor_id)
        with self.ctx.lock_for(key):
            app = self.directory.application_proxy(self.conn.org, self.conn.app)
            live = LiveExecutor(
                executor_id=executor_id,
                ref=self.actor_ref,
                application_version=info.application_version,
                language=info.language,
                dbos_version=info.dbos_version,
                connected_at=time.monotonic(),
            )
            claim = app.claim(live)
            try:
                replaced = claim.get(timeout=self.ctx.limits.handshake_timeout_s)
            except pykka.Timeout:
                # The application actor is too busy: refuse this connection now (the executor reconnects by
                # itself), and undo the claim once it lands (its mailbox is in order, so it will).
                log.warning("executor %s/%s/%s from %s not admitted: its application did not take it within %g s;"
                            " closing", self.conn.org, self.conn.app, executor_id, self.conn.peer,
                            self.ctx.limits.handshake_timeout_s)
                self._undo_claim_when_landed(claim, executor_id)
                self._close(1013, "relay busy, reconnect later")
                return
            try:
                conn, at = self.conn, self.ctx.clock()
                self.ctx.log.run(executor_ref(conn.org, conn.app, executor_id), lambda found: Executor.connect_again(
                    found, conn.org, conn.app, executor_id, info, self.ctx.instance_id, at))
            except DomainError as error:
                app.release(executor_id, self.actor_ref).get()
                app.rewatch(executor_id)  # the claim stopped its timers: its record is as it was
                log.warning("executor from %s refused: %s", self.conn.peer, error)
                self._close(1008, "executor info refused")
                return
            except Exception as error:
                # The store failed (unreachable, locked, full): nothing was recorded. Close with "try again
                # later"; the executor reconnects by itself and its next handshake records it.
                app.release(executor_id, self.actor_ref).get()
                app.rewatch(executor_id)
                log.warning("executor from %s not admitted: recording its connection failed (%s); closing",
                            self.conn.peer, type(error).__name__)
                self._close(1013, "relay store unavailable, reconnect later")
                return
            self.executor_id = executor_id
            self.info = info
            app.executor_connected(executor_id)  # a dead peer waiting for a candidate may have one
        if replaced is not None:
            replaced.tell({"close": "replaced by a new connection of the same executor"})
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        log.info(
            "executor %s connected (%s %s, version %s)",
            self.who, info.language, info.dbos_version, info.application_version,
        )
        metrics.EXECUTOR_CONNECTS.labels(self.conn.org, self.conn.app).inc()

    def _undo_claim_when_landed(self, claim: pykka.Future[Any], executor_id: str) -> None:
        """Wait for the claim in a thread of its own (a greenlet under gevent; only on this rare path), then
        undo it: release it (this actor may have stopped by then: the release compares refs), have the
        application watch the record as it stands, and close the connection the claim displaced, if any."""
        ctx, directory, conn, ref = self.ctx, self.directory, self.conn, self.actor_ref

        def undo() -> None:
            try:
                replaced = claim.get(timeout=LATE_CLAIM_WAIT_S)
            except Exception:
                replaced = None
            try:
                with ctx.lock_for((conn.org, conn.app, executor_id)):
                    app = directory.application_proxy(conn.org, conn.app)
                    app.release(executor_id, ref)
                    app.rewatch(executor_id)
            except pykka.ActorDeadError:
                return
            if replaced is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    replaced.tell({"close": "replaced by a connection that was then refused"})

        threading.Thread(target=undo, name=f"late-claim-{executor_id}", daemon=True).start()

    def _close(self, code: int, reason: str) -> None:
        try:
            self.socket.close(code, reason)
        except Exception:
            log.debug("close of %s failed", self.who)
