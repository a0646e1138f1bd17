"""ExecutorActor: one per executor connection. Owns the socket, correlates responses by request_id."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pykka

from actors import protocol
from actors.application import LiveExecutor
from actors.context import ActorContext
from actors.directory import Directory
from events.errors import DomainError
from events.executor import ExecutorInfo

log = logging.getLogger("relay.actors.executor")


class FrameSocket(Protocol):
    """The socket as the actor sees it; web/ adapts gevent-websocket to this."""

    def send_text(self, text: str) -> None: ...

    def close(self, code: int, reason: str) -> None: ...


class ExecutorGoneError(Exception):
    """The executor's socket closed before it answered."""


def _fail(future: pykka.ThreadingFuture[Any], message: str) -> None:
    """Fail a future with ExecutorGoneError (pykka wants an exc_info triple, not an exception)."""
    error = ExecutorGoneError(message)
    future.set_exception((ExecutorGoneError, error, None))


@dataclass
class Pending:
    type: str
    future: pykka.ThreadingFuture[Any]
    on_reply: Callable[[Any], None] | None = None


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
        self._handshake_timer: threading.Timer | None = None

    @property
    def who(self) -> str:
        """How logs name this connection (never with its key)."""
        return f"{self.conn.org}/{self.conn.app}/{self.executor_id or '?'} from {self.conn.peer}"

    def on_start(self) -> None:
        self.directory.add_connection(self.conn.org, self.conn.key_name, self.actor_ref)
        self._send(protocol.ExecutorInfoRequest(), on_reply=self._identified)
        self._handshake_timer = threading.Timer(self.ctx.limits.handshake_timeout_s, self._handshake_expired)
        self._handshake_timer.daemon = True
        self._handshake_timer.start()

    def on_stop(self) -> None:
        self.directory.remove_connection(self.conn.org, self.conn.key_name, self.actor_ref)
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()

    def _handshake_expired(self) -> None:
        if self.actor_ref.is_alive():
            self.actor_ref.tell({"handshake_expired": True})

    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, dict):
            return None
        if "handshake_expired" in message and self.executor_id is None:
            log.warning("executor %s did not answer executor_info in time; closing", self.who)
            self._close(1008, "executor_info not answered")
        elif "close" in message:
            self._close(1000, str(message["close"]))
        return None

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
        """Send a request; the returned future gets the decoded response (or ExecutorGoneError)."""
        return self._send(request)

    def forget(self, request_id: str) -> None:
        """The caller gave up waiting (timeout): drop the pending entry."""
        self.pending.pop(request_id, None)

    # -- frames from the socket (in order, from the receive loop) ---------------------------------
    def on_frame(self, frame: str | bytes) -> None:
        try:
            response = protocol.decode_response(frame, max_bytes=self.ctx.limits.max_frame_bytes)
        except protocol.ProtocolError as error:
            self.bad_frames += 1
            log.warning("executor %s sent a bad frame: %s", self.who, error)
            return
        entry = self.pending.pop(response.request_id, None)
        if entry is None:
            self.bad_frames += 1
            log.warning("executor %s answered an unknown request id (type %s)", self.who, response.type)
            return
        if entry.on_reply is not None:
            entry.on_reply(response)
        entry.future.set(response)

    def on_closed(self, reason: str) -> None:
        """The socket is gone: fail what waits, record the disconnect if this was the current connection."""
        self.closed = True
        for entry in self.pending.values():
            _fail(entry.future, "executor disconnected before answering")
        self.pending.clear()
        if self.executor_id is not None:
            key = (self.conn.org, self.conn.app, self.executor_id)
            with self.ctx.lock_for(key):
                app = self.directory.application(self.conn.org, self.conn.app).proxy()
                if app.release(self.executor_id, self.actor_ref).get():
                    self._record_disconnect(reason)
        self.stop()

    def _record_disconnect(self, reason: str) -> None:
        assert self.executor_id is not None
        now = self.ctx.clock()
        try:
            self.ctx.log.update_executor(
                self.conn.org, self.conn.app, self.executor_id, lambda e: e.disconnect(reason, now)
            )
        except DomainError as error:
            log.warning("disconnect of %s not recorded: %s", self.who, error)
        log.info("executor %s disconnected (%s)", self.who, reason)

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
                log.warning("executor from %s refused: %s", self.conn.peer, error)
                self._close(1008, "executor info refused")
                return
            self.executor_id = executor_id
            self.info = info
        if replaced is not None:
            replaced.tell({"close": "replaced by a new connection of the same executor"})
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        log.info(
            "executor %s connected (%s %s, version %s)",
            self.who, info.language, info.dbos_version, info.application_version,
        )

    def _close(self, code: int, reason: str) -> None:
        try:
            self.socket.close(code, reason)
        except Exception:
            log.debug("close of %s failed", self.who)
