"""One connection's liveness: the socket as an actor sees it, and the pings that watch it (no thread, no
greenlet per connection: one timer at a time on the scheduler)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from relay.actors.scheduler import Cancellable, Scheduler

_EPSILON_S = 1e-6  # timers may fire a hair early on the clock they are compared with


class FrameSocket(Protocol):
    """The socket as the actor sees it; web/ adapts gevent-websocket to this."""

    def send_text(self, text: str) -> None: ...

    def close(self, code: int, reason: str) -> None: ...

    def ping(self) -> bool | None:
        """Send a WebSocket ping frame (liveness; the executor's pong is not a message) without blocking:
        called from the scheduler's thread. False when the socket cannot take it right now (busy sending);
        raises when the socket is broken."""
        ...

    def last_pong(self) -> float:
        """When the last pong arrived (the connection's start before any), on the scheduler's clock."""
        ...


class Liveness:
    """The pings of one connection, run in the scheduler's thread: one timer armed at a time, due at the next
    ping or at the pong deadline of the oldest unanswered ping, whichever comes first. A ping is sent without
    blocking (a socket that cannot take it now is pinged at the next interval); a missed deadline or a failed
    ping calls `failed(reason)` once, and nothing runs after that, nor after `stop()`."""

    __slots__ = (
        "failed",
        "interval",
        "next_ping",
        "scheduler",
        "socket",
        "stopped",
        "timeout",
        "timer",
        "unanswered_since",
    )

    def __init__(self, scheduler: Scheduler, socket: FrameSocket, interval: float, timeout: float,
                 failed: Callable[[str], None]) -> None:
        self.scheduler = scheduler
        self.socket = socket
        self.interval = interval
        self.timeout = timeout
        self.failed = failed
        self.next_ping = scheduler.now() + interval
        self.unanswered_since: float | None = None
        self.timer: Cancellable | None = None
        self.stopped = False

    def start(self) -> None:
        self._arm(self.scheduler.now())

    def stop(self) -> None:
        self.stopped = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _arm(self, now: float) -> None:
        when = self.next_ping
        if self.unanswered_since is not None:
            when = min(when, self.unanswered_since + self.timeout)
        self.timer = self.scheduler.call_later(max(0.0, when - now), self._tick)

    def _tick(self) -> None:
        if self.stopped:
            return
        now = self.scheduler.now()
        if self.unanswered_since is not None and self.socket.last_pong() >= self.unanswered_since:
            self.unanswered_since = None  # a pong since then (to any ping) keeps the connection open
        if self.unanswered_since is not None and now + _EPSILON_S >= self.unanswered_since + self.timeout:
            self._fail("pong timeout")
            return
        if now + _EPSILON_S >= self.next_ping:
            try:
                sent = self.socket.ping()
            except Exception:
                self._fail("ping failed")
                return
            if sent is not False and self.unanswered_since is None:
                self.unanswered_since = now
            self.next_ping = now + self.interval
        self._arm(now)

    def _fail(self, reason: str) -> None:
        self.stopped = True
        self.timer = None
        self.failed(reason)
