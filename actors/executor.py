"""ExecutorActor: one per executor connection. Owns the socket, correlates responses by request_id.

Liveness: it pings every `ping_interval_s`; an executor that answers no ping (pong) within `pong_timeout_s`
is treated like a dropped socket (closed; the disconnect path records it). Pings are not events.

When the event store fails (unreachable, locked, full): a Disconnected that cannot be recorded is tried again
with backoff, the actor living on (socketless) until it is recorded or superseded; a Connected that cannot be
recorded closes the socket with 1013 (try again later), and the executor's own reconnect tries again.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import pykka

from actors import metrics, protocol
from actors.application import LiveExecutor
from actors.context import ActorContext
from actors.directory import Directory
from actors.scheduler import Cancellable
from events.errors import DomainError
from events.executor import ExecutorInfo

log = logging.getLogger("relay.actors.executor")

_KNOWN_TYPES = frozenset(t.value for t in protocol.MessageType)
# A bad frame is logged (without its content) up to this many times per connection; after that only every
# BAD_FRAME_LOG_EVERY-th is, with the count: a flooding executor cannot flood the log.
BAD_FRAME_LOG_LIMIT = 100
BAD_FRAME_LOG_EVERY = 1000
# Backoff of a Disconnected the store refused: 0.5 s, 1 s, 2 s, ... at most 30 s between attempts.
RECORD_RETRY_FIRST_S = 0.5
RECORD_RETRY_MAX_S = 30.0
_REQUEST_ID = re.compile(r'"request_id"\s*:\s*"([0-9A-Za-z_-]{1,200})"')


class FrameSocket(Protocol):
    """The socket as the actor sees it; web/ adapts gevent-websocket to this."""

    def send_text(self, text: str) -> None: ...

    def close(self, code: int, reason: str) -> None: ...

    def ping(self) -> None:
        """Send a WebSocket ping frame (liveness; the executor's pong is not a message)."""
        ...

    def last_pong(self) -> float:
        """When the last pong arrived (the connection's start before any), on the scheduler's clock."""
        ...


class ExecutorGoneError(Exception):
    """The executor's socket closed before it answered."""


class MalformedAnswerError(Exception):
    """The executor answered a request (its request_id is in the frame) with a frame that breaks the protocol.
    The message is the decoder's reason, which never quotes the frame."""


class InFlightLimitError(Exception):
    """The executor already has RELAY_MAX_INFLIGHT_PER_EXECUTOR requests unanswered: this one was not sent."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"{limit} requests already in flight")
        self.limit = limit


def _fail(future: pykka.ThreadingFuture[Any], message: str, kind: type[Exception] = ExecutorGoneError) -> None:
    """Fail a future (pykka wants an exc_info triple, not an exception)."""
    error = kind(message)
    future.set_exception((kind, error, None))


@dataclass
class Pending:
    type: str
    future: pykka.ThreadingFuture[Any]
    on_reply: Callable[[Any], None] | None = None
    on_gone: Callable[[Any], None] | None = None


@dataclass
class Connection:
    org: str
    app: str
    key_name: str
    peer: str


class ExecutorActor(pykka.ThreadingActor):
    """Lives as long as the socket. Its first act is to ask the executor who it is (executor_info)."""

    def __init__(self, ctx: ActorContext, directory: Directory, socket: FrameSocket, conn: Connection) -> None:
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
        # Liveness: the next ping, and the oldest ping not yet followed by a pong (with its deadline).
        self._ping_timer: Cancellable | None = None
        self._unanswered_since: float | None = None
        self._pong_deadline: Cancellable | None = None
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
        self._send(protocol.ExecutorInfoRequest(), on_reply=self._identified)
        self._handshake_timer = self._later(self.ctx.limits.handshake_timeout_s, {"handshake_expired": True})
        self._ping_timer = self._later(self.ctx.limits.ping_interval_s, {"ping": True})

    def on_stop(self) -> None:
        self.directory.remove_connection(self.conn.org, self.conn.key_name, self.actor_ref)
        for timer in (self._handshake_timer, self._ping_timer, self._pong_deadline):
            if timer is not None:
                timer.cancel()

    def _later(self, delay: float, message: dict[str, Any]) -> Cancellable:
        """Tell ourselves `message` after `delay` seconds (dropped if this actor has stopped by then)."""

        def post() -> None:
            with contextlib.suppress(pykka.ActorDeadError):
                self.actor_ref.tell(message)

        return self.ctx.scheduler.call_later(delay, post)

    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, dict):
            return None
        if "handshake_expired" in message and self.executor_id is None:
            log.warning("executor %s did not answer executor_info in time; closing", self.who)
            self._close(1008, "executor_info not answered")
        elif "ping" in message:
            self._ping()
        elif "pong_deadline" in message:
            self._check_pong(message["pong_deadline"])
        elif "close" in message:
            self._close(1000, str(message["close"]))
        elif "record_disconnect" in message and self._record_disconnect(first=False):
            self.stop()
        return None

    # -- liveness ---------------------------------------------------------------------------------
    def _ping(self) -> None:
        if self.closed:
            return
        now = self.ctx.scheduler.now()
        if self._unanswered_since is not None and self.socket.last_pong() >= self._unanswered_since:
            self._unanswered_since = None  # answered: the deadline (if still armed) will find it so
        try:
            self.socket.ping()
        except Exception:
            self.close_reason = "ping failed"
            self._close(1011, "ping failed")
            return
        if self._unanswered_since is None:
            self._unanswered_since = now
            if self._pong_deadline is not None:
                self._pong_deadline.cancel()
            self._pong_deadline = self._later(self.ctx.limits.pong_timeout_s, {"pong_deadline": now})
        self._ping_timer = self._later(self.ctx.limits.ping_interval_s, {"ping": True})

    def _check_pong(self, pinged_at: float) -> None:
        """The deadline of the ping sent at `pinged_at`: a pong since then (to any ping) keeps us open."""
        if self.closed or self._unanswered_since != pinged_at:
            return
        if self.socket.last_pong() >= pinged_at:
            self._unanswered_since = None
            return
        log.warning("executor %s answered no ping for %g s; closing", self.who, self.ctx.limits.pong_timeout_s)
        self.close_reason = "pong timeout"
        self._close(1001, "pong timeout")

    # -- requests ---------------------------------------------------------------------------------
    def _send(self, request: Any, on_reply: Callable[[Any], None] | None = None) -> pykka.ThreadingFuture[Any]:
        """Send a request. Its answer resolves the returned future, or is handed to `on_reply`
        inside this actor (used for the actor's own requests, like executor_info)."""
        future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
        if self.closed:
            _fail(future, "executor disconnected")
            return future
        text = protocol.encode_request(request)
        self.pending[request.request_id] = Pending(str(request.type), future, on_reply)
        try:
            self.socket.send_text(text)
        except Exception:
            self.pending.pop(request.request_id, None)
            _fail(future, "executor socket failed while sending")
        return future

    def request(self, request: Any) -> pykka.ThreadingFuture[Any]:
        """Send a request; the returned future gets the decoded response (or ExecutorGoneError,
        MalformedAnswerError; InFlightLimitError, unsent, when RELAY_MAX_INFLIGHT_PER_EXECUTOR are pending)."""
        limit = self.ctx.limits.max_inflight_per_executor
        if len(self.pending) >= limit:
            future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
            future.set_exception((InFlightLimitError, InFlightLimitError(limit), None))
            return future
        return self._send(request)

    def request_then(self, request: Any, on_answer: Callable[[Any], None]) -> None:
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
            response = protocol.decode_response(frame, max_bytes=self.ctx.limits.max_frame_bytes)
        except protocol.ProtocolError as error:
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
        reason = self.close_reason or reason
        for entry in self.pending.values():
            _fail(entry.future, "executor disconnected before answering")
            if entry.on_gone is not None:
                entry.on_gone(ExecutorGoneError("executor disconnected before answering"))
        self.pending.clear()
        if self.executor_id is not None:
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
            app = self.directory.application(self.conn.org, self.conn.app).proxy()
            if first:
                if not app.release(self.executor_id, self.actor_ref).get():
                    return True
            elif any(e.executor_id == self.executor_id for e in app.live_executors().get()):
                log.info("disconnect of %s not recorded: it connected again meanwhile", self.who)
                return True
            try:
                self.ctx.log.update_executor(
                    self.conn.org, self.conn.app, self.executor_id, lambda e: e.disconnect(reason, at)
                )
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
    def _identified(self, response: Any) -> None:
        if self.closed:
            return
        if response.error_message or not isinstance(response, protocol.ExecutorInfoResponse):
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
            app = self.directory.application(self.conn.org, self.conn.app).proxy()
            live = LiveExecutor(
                executor_id=executor_id,
                ref=self.actor_ref,
                application_version=info.application_version,
                language=info.language,
                dbos_version=info.dbos_version,
                connected_at=time.monotonic(),
            )
            replaced = app.claim(live).get()
            try:
                self.ctx.log.executor_connected(
                    self.conn.org, self.conn.app, executor_id, info, self.ctx.instance_id, self.ctx.clock()
                )
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

    def _close(self, code: int, reason: str) -> None:
        try:
            self.socket.close(code, reason)
        except Exception:
            log.debug("close of %s failed", self.who)
