"""The executor endpoint /websocket/{appName}/{conductorKey}: handshake checks, then the receive loop."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gevent
import pykka
from flask import Blueprint, Response, request

from relay.actors import metrics
from relay.actors.executor import BAD_FRAME_LOG_EVERY, BAD_FRAME_LOG_LIMIT, Connection, ExecutorActor
from relay.web.operations import operation
from relay.web.problems import ApiError, problem_response
from relay.web.transport.limits import (
    STORE_ERRORS,
    STORE_UNAVAILABLE,
    ConnectionSlots,
    EdgeLimits,
    Ticket,
    retry_after_header,
)
from relay.web.transport.sockets import FrameRefusedError, GeventFrameSocket, RelayWebSocket

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

log = logging.getLogger("relay.websocket")

bp = Blueprint("websocket", __name__)

WEBSOCKET_PATH = re.compile(r"^/websocket/([^/]+)/(.+)$")
REFUSED = "connection refused: check the application name and the conductor key"
TOO_MANY_FAILURES = "too many failed handshakes from this address; try again later"
# Frames handed to the executor's actor and not yet processed: the receive loop waits for the oldest past
# this many (or past RELAY_MAX_FRAME_BYTES of them), so a flooding executor is slowed down by TCP, not queued.
MAX_QUEUED_FRAMES = 64
# How long reading pauses while the actor works through a backlog. Pings are answered only while reading, and
# the shortest pong timeout of an SDK is Java's 15 s (Go's 30 s): a longer pause would make it reconnect.
BACKLOG_WAIT_S = 10.0
AT_CAPACITY = "Relay has as many executor connections open as it allows (RELAY_MAX_CONNECTIONS); try again later"
HANDSHAKES_BUSY = ("Relay is admitting as many executors at once as it allows (RELAY_MAX_HANDSHAKES_IN_FLIGHT); "
                   "try again shortly")


# How long an upgrade past the limit waits for a handshake in flight to end before it is refused: in a storm,
# admitted in turn as fast as Relay identifies executors, rather than refused into the client's backoff (1, 2,
# 4, 8 s... during which Relay idles). Below the shortest SDK's open timeout (Python: 5 s, for connect and
# upgrade together).
HANDSHAKE_QUEUE_WAIT_S = 2.0


class HandshakeGate:
    """Executor handshakes in flight, from the upgrade check until the executor's actor has identified it (or
    the socket is gone), at most ``limit`` (RELAY_MAX_HANDSHAKES_IN_FLIGHT): past it an upgrade waits up to
    ``wait_s`` for one to end (first come, first admitted), then is answered 503 with Retry-After, so a connect
    storm is admitted as fast as Relay identifies executors instead of timing out handshakes that then retry
    and feed the storm."""

    def __init__(self, limit: int, summary_every_s: float = 10.0, wait_s: float = HANDSHAKE_QUEUE_WAIT_S) -> None:
        if limit < 1:
            raise ValueError("limit must be positive")
        self.limit = limit
        self.wait_s = wait_s
        self.in_flight = 0
        self.waiting = 0
        self.refused = 0
        self._summary_every_s = summary_every_s
        self._summarised = 0  # `refused` when last logged
        self._summary_at = time.monotonic()
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)

    def enter(self) -> Ticket | None:
        with self._lock:
            if self.in_flight >= self.limit and self.wait_s > 0:
                deadline = time.monotonic() + self.wait_s
                self.waiting += 1
                try:
                    while self.in_flight >= self.limit and (left := deadline - time.monotonic()) > 0:
                        self._freed.wait(left)
                finally:
                    self.waiting -= 1
            if self.in_flight >= self.limit:
                self.refused += 1
                now = time.monotonic()
                if now - self._summary_at >= self._summary_every_s:
                    log.warning("%d executor handshakes refused in the last %.0f s: %d in flight "
                                "(RELAY_MAX_HANDSHAKES_IN_FLIGHT); they retry", self.refused - self._summarised,
                                now - self._summary_at, self.in_flight)
                    self._summarised, self._summary_at = self.refused, now
                return None
            self.in_flight += 1
        return Ticket(self.leave)

    def leave(self) -> None:
        with self._lock:
            self.in_flight = max(0, self.in_flight - 1)
            self._freed.notify()


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an upgrade is not made: the problem's status and detail, and its Retry-After (None: no header)."""

    status: int
    detail: str
    retry_after: str | None = None
    busy: bool = False  # past the handshake gate: answered by the handler itself, not logged one by one


@dataclass(frozen=True, slots=True)
class Admitted:
    """Who an admitted upgrade is: what the executor's actor is started with."""

    org: str
    app: str
    key_name: str
    peer: str


@dataclass(slots=True, eq=False)
class Handshake:
    """One executor upgrade, from the admission check (`check_handshake`) to the executor's start
    (`start_executor`): refused or admitted, and the places it holds until they are given back (a connection
    slot, a place in the handshake gate). The server keeps it in the request's environ under HANDSHAKE, the one
    key, because the refusal is answered by a Flask route."""

    refusal: Refusal | None = None
    admitted: Admitted | None = None
    slots: ConnectionSlots | None = None  # one slot of these taken: given back by `release`
    ticket: Ticket | None = None  # released by the executor's actor once identified, else by `release`

    @property
    def upgrades(self) -> bool:
        return self.refusal is None and self.admitted is not None

    def hand_off(self) -> Callable[[], None]:
        """The places held, moved into a function that gives them back (once called); the handshake holds
        nothing after, so the function may outlive the request (an ExecutorLink calls it once its socket
        closed)."""
        slots, ticket = self.slots, self.ticket
        self.slots = self.ticket = None

        def release() -> None:
            if slots is not None:
                slots.release()
            if ticket is not None:
                ticket.release()
        return release

    def release(self) -> None:
        """Give back whatever is still held (idempotent)."""
        self.hand_off()()


HANDSHAKE = "relay.handshake"
"""The environ key of a /websocket/ request's Handshake (none for other paths)."""


def handshake_of(environ: dict[str, Any]) -> Handshake | None:
    found = environ.get(HANDSHAKE)
    return found if isinstance(found, Handshake) else None


# Anything after /websocket/ in a text (a path, a request line however malformed, an absolute URI, doubled
# slashes, any case): what follows the application name may be a key.
_SOCKET_TAIL = re.compile(r"/websocket/+([^\s\"']*)", re.IGNORECASE)
_APP_SEGMENT = re.compile(r"[a-z0-9_-]{1,64}")


def _redact_tail(match: re.Match[str]) -> str:
    app, slash, _rest = match.group(1).partition("/")
    if _APP_SEGMENT.fullmatch(app) and (slash or not _rest):
        return f"/websocket/{app}/<redacted>" if slash else f"/websocket/{app}"
    return "/websocket/<redacted>"


def redact_path(path: str) -> str:
    """A request path, request line or log text safe to log: whatever follows /websocket/{appName}/ (the
    conductor key) is replaced, and all of it when the application segment is not a plain name."""
    return _SOCKET_TAIL.sub(_redact_tail, path)


def check_handshake(rt: Runtime, environ: dict[str, Any], edge: EdgeLimits | None = None,
                    gate: HandshakeGate | None = None) -> Handshake | None:
    """Decide an upgrade before it happens; None for a path that is not an executor's.
    401 for an unknown key, 403 for everything else; the body says the same in both cases.
    With ``edge`` (web/transport/limits.py): 429 for an address with too many recent failures, 503 when every
    connection slot is taken; a slot taken here (``Handshake.slots``) is the caller's to release.
    With ``gate``: 503 when too many handshakes are in flight; the ticket of an admitted one
    (``Handshake.ticket``) is released by the executor's actor once identified, else by the caller."""
    match = WEBSOCKET_PATH.match(environ.get("PATH_INFO", ""))
    if match is None:
        return None
    handshake = Handshake()
    address = str(environ.get("REMOTE_ADDR", "?"))
    if edge is not None:
        wait = edge.failures.retry_after(_attempt(address, match))
        if wait is not None:
            handshake.refusal = Refusal(429, TOO_MANY_FAILURES, retry_after_header(wait))
            metrics.count_refused_handshake(429, "too_many_failures")
            return handshake
    ticket: Ticket | None = None
    if gate is not None:
        ticket = gate.enter()
        if ticket is None:
            # answered by the handler itself (web/transport/handler.py), not logged one by one
            handshake.refusal = Refusal(503, HANDSHAKES_BUSY, "1", busy=True)
            metrics.count_refused_handshake(503, "busy")
            return handshake
    try:
        _check_admission(rt, handshake, edge, match, address)
    finally:
        if ticket is not None:
            if handshake.admitted is not None:
                handshake.ticket = ticket
            else:
                ticket.release()
    return handshake


def _attempt(address: str, match: re.Match[str]) -> str:
    """What a lockout counts under: the address, the application and a fingerprint of the key (the key itself
    is never kept), so one caller's failing key locks out that key only."""
    fingerprint = hashlib.sha256(b"relay-handshake:" + match.group(2).encode()).hexdigest()[:24]
    return f"{address} {match.group(1)} {fingerprint}"


def _count_failure(edge: EdgeLimits, refusal: Refusal, address: str, app: str, match: re.Match[str]) -> Refusal:
    """The refusal to answer after counting one failure: 429 once this address is past the limit."""
    limit, window = edge.failures.limit, edge.failures.window_s
    # An address already past the limit with failing keys is slowed down (429); a valid key was let in above.
    wait = edge.failures.retry_after(address)
    if wait is not None:
        refusal = Refusal(429, TOO_MANY_FAILURES, retry_after_header(wait))
    if edge.failures.failed(_attempt(address, match)):
        log.warning("executor handshakes for application '%s' from %s with the same wrong key refused for a while "
                    "(429): %d failed within %g s; other keys from this address still get in", app, address,
                    limit, window)
    if edge.failures.failed(address):
        log.warning("executor handshakes from %s failing with several keys: wrong keys answered 429 for a while "
                    "(%d failed within %g s); valid keys still get in", address, limit, window)
    return refusal


def _check_admission(rt: Runtime, handshake: Handshake, edge: EdgeLimits | None, match: re.Match[str],
                     address: str) -> None:
    app, key = match.group(1), match.group(2)
    try:
        principal = rt.auth.principal_for(key)
        org = (principal.org or rt.settings.default_org) if principal is not None else ""
        refused = principal is None or not principal.allows("websocket.connect", org, app) or (
            rt.views.applications.app(org, app) is None
        )
    except STORE_ERRORS as error:  # not the executor's fault, and not a failed handshake: it will retry
        log.warning("executor handshake from %s refused: store unavailable (%s)", address, type(error).__name__)
        handshake.refusal = Refusal(503, STORE_UNAVAILABLE, "5")
        metrics.count_refused_handshake(503, "store_unavailable")
        return
    if principal is None or refused:
        refusal = Refusal(401 if principal is None else 403, REFUSED)
        if edge is not None:
            refusal = _count_failure(edge, refusal, address, app, match)
        handshake.refusal = refusal  # 429 when the failures of this address reached the limit
        metrics.count_refused_handshake(refusal.status, "too_many_failures" if refusal.status == 429 else "refused")
        return
    if edge is not None:
        if not edge.slots.acquire():
            log.warning("executor handshake from %s refused: %d connections open (RELAY_MAX_CONNECTIONS)",
                        address, edge.slots.limit)
            handshake.refusal = Refusal(503, AT_CAPACITY, "1")
            metrics.count_refused_handshake(503, "at_capacity")
            return
        handshake.slots = edge.slots
    handshake.admitted = Admitted(org=org, app=app, key_name=principal.key_name or "admin", peer=address)


@bp.route("/websocket/<app>/<path:key>", websocket=True)
@operation("executorWebSocket", tag="Executors", status=101, public=True,
           summary="The executor WebSocket (the conductor key is the last path segment)",
           path_names={"key": "conductorKey"})
def executor_socket(app: str, key: str) -> Response:
    """Only upgrades that were not made reach Flask: an admitted one is started by the handler itself
    (web/transport/handler.py RelayHandler.run_websocket, start_executor below)."""
    del app, key  # checked before the upgrade; the key is never logged
    handshake = handshake_of(request.environ)
    refusal = handshake.refusal if handshake is not None else None
    if refusal is None:
        refusal = Refusal(400, "a WebSocket upgrade is required")
    response = problem_response(ApiError(refusal.status, refusal.detail))
    if refusal.retry_after is not None:
        response.headers["Retry-After"] = refusal.retry_after
    return response


class _Backlog:
    """Frames the receive loop handed to the actor and the actor has not processed yet, counted without a future
    per frame: the loop counts what it sends, the actor (through `done`) what it processed; each side writes only
    its own counters. The loop waits (on an Event made the first time it has to) while too much is queued."""

    __slots__ = ("_max_chars", "_ready", "done_chars", "done_frames", "sent_chars", "sent_frames", "sizes")

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self.sent_frames = self.done_frames = 0
        self.sent_chars = self.done_chars = 0
        self.sizes: deque[int] = deque()  # sizes of the frames sent and not yet processed, oldest first
        self._ready: threading.Event | None = None

    def sent(self, size: int) -> None:
        self.sent_frames += 1
        self.sent_chars += size
        self.sizes.append(size)

    def done(self) -> None:
        """From the actor, once per frame, in order."""
        self.done_frames += 1
        self.done_chars += self.sizes.popleft() if self.sizes else 0
        ready = self._ready
        if ready is not None and not self.over():
            ready.set()

    def over(self) -> bool:
        queued = self.sent_frames - self.done_frames
        return queued > MAX_QUEUED_FRAMES or self.sent_chars - self.done_chars > self._max_chars

    def wait(self, timeout: float) -> bool:
        """Wait until the actor has caught up under the bounds (False: it did not within `timeout`)."""
        if self._ready is None:
            self._ready = threading.Event()
        self._ready.clear()
        if not self.over():
            return True
        return self._ready.wait(timeout)


def start_executor(rt: Runtime, ws: RelayWebSocket, handshake: Handshake) -> ExecutorLink:
    """Start the executor's actor for an upgrade check_handshake admitted; the socket is then read by the
    ExecutorLink returned, for the handler to hand the socket over to once the HTTP request is over."""
    admitted = handshake.admitted
    if admitted is None:
        raise ValueError("start_executor needs an admitted handshake")
    conn = Connection(org=admitted.org, app=admitted.app, key_name=admitted.key_name, peer=admitted.peer)
    identified = handshake.ticket.release if handshake.ticket is not None else None
    try:
        actor = ExecutorActor.start(rt.ctx, rt.directory, GeventFrameSocket(ws), conn, identified)
    except BaseException:
        if identified is not None:
            identified()
        raise
    return ExecutorLink(ws, actor, conn, rt.settings.limits.max_frame_bytes)


class ExecutorLink:
    """One executor socket after its HTTP request: frames read and handed to the executor's actor until the
    socket closes, then the socket closed and its connection slot given back.

    It runs in a greenlet of its own, started by `take_over` from the request's handler once the request is over
    (web/transport/handler.py RelayHandler): the request's handler, environ, Flask context and buffered reader are gone
    by
    then, and the greenlet waits at a shallow stack (gevent saves a suspended greenlet's C stack)."""

    __slots__ = ("actor", "backlog", "conn", "release", "ws")

    def __init__(self, ws: RelayWebSocket, actor: pykka.ActorRef[Any], conn: Connection, max_frame_bytes: int) -> None:
        self.ws = ws
        self.actor = actor
        self.conn = conn
        self.backlog = _Backlog(max_frame_bytes)
        self.release: Callable[[], None] | None = None

    def take_over(self, release: Callable[[], None]) -> None:
        """Read the socket from now on (the caller closes nothing of it); `release` is called once it is closed."""
        self.release = release
        gevent.spawn_raw(self._run)

    def _run(self) -> None:
        ws, conn, actor, backlog = self.ws, self.conn, self.actor, self.backlog
        # Plain messages to the actor (no proxy: building one introspects the whole actor, for every connection).
        reason = "socket closed"
        binary = 0
        try:
            while True:
                try:
                    message = ws.receive()
                except FrameRefusedError as refused:  # from its header alone: nothing of its payload read
                    too_large = refused.code == 1009
                    log.warning("executor %s/%s sent %s; closing with %d (%s)", conn.org, conn.app,
                                "a message over the frame limit" if too_large else "a frame refused", refused.code,
                                refused)
                    reason = "frame too large" if too_large else "protocol error"
                    ws.hard_close(refused.code, refused.reason)
                    break
                if message is None:
                    break
                if not isinstance(message, str):
                    binary += 1
                    if binary <= BAD_FRAME_LOG_LIMIT or binary % BAD_FRAME_LOG_EVERY == 0:
                        log.warning("executor %s/%s sent a binary frame; ignored (%d so far)", conn.org, conn.app,
                                    binary)
                    continue
                backlog.sent(len(message))
                actor.tell({"frame": message, "done": backlog.done})
                if backlog.over() and not backlog.wait(timeout=BACKLOG_WAIT_S):
                    log.warning("executor %s/%s: its frames are not processed in time; reading on", conn.org,
                                conn.app)
        except Exception as error:
            reason = f"socket error ({type(error).__name__})"
        finally:
            self._closed(reason)

    def _closed(self, reason: str) -> None:
        try:
            self.actor.ask({"closed": reason}, block=False).get(timeout=30)
        except pykka.ActorDeadError:
            pass
        except pykka.Timeout:
            log.warning("executor %s/%s: close not processed in time", self.conn.org, self.conn.app)
        finally:
            ws, tcp = self.ws, self.ws.tcp
            if not ws.closed:
                with contextlib.suppress(Exception):
                    ws.close()
            _close_socket(tcp)
            release, self.release = self.release, None
            if release is not None:
                release()


def _close_socket(tcp: Any) -> None:
    """Close the socket as pywsgi closes a connection's: what the peer sent and nobody read is read first (up to
    16 KiB, without waiting), so that closing does not reset the connection under the peer's last frames."""
    raw = getattr(tcp, "_sock", None)
    try:
        if raw is not None:
            try:
                raw.recv(16384)
            finally:
                raw.close()
        tcp.close()
    except OSError:
        pass
