"""Timers for actors, behind a small interface so tests can drive time by hand.

Actors never sleep: they ask a Scheduler to call them back later, and the callback only posts a message to
the actor (state is touched inside the actor). `ThreadingScheduler` is the real one: under
`gevent.monkey.patch_all()` its threads are greenlets. `ManualScheduler` runs nothing until a test
calls `advance()`, and gives the wall clock that goes with its time (`wall`), so one object drives both.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """`now()` is monotonic seconds (liveness compares it with the socket's pong times);
    `call_later` runs `callback` once, `delay` seconds from now, unless cancelled first."""

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable: ...


class ThreadingScheduler:
    """One daemon timer thread per call (a greenlet under gevent)."""

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        timer = threading.Timer(max(0.0, delay), callback)
        timer.daemon = True
        timer.start()
        return timer


class _ManualTimer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """Time stands still until `advance(seconds)`, which runs every callback that falls due, in order
    (callbacks may schedule more; those due within the same advance run too). For tests."""

    def __init__(self, start: float = 1000.0, wall_start: datetime | None = None) -> None:
        self._now = start
        self._start = start
        self._wall_start = wall_start or datetime(2025, 1, 1, tzinfo=UTC)
        self._queue: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def wall(self) -> datetime:
        """The wall clock that goes with `now()` (an actor Clock)."""
        return self._wall_start + timedelta(seconds=self._now - self._start)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        timer = _ManualTimer(self._now + max(0.0, delay), callback)
        with self._lock:
            heapq.heappush(self._queue, (timer.when, next(self._seq), timer))
        return timer

    def pending(self) -> list[float]:
        """Delays (from now) of the timers not yet run nor cancelled, soonest first."""
        with self._lock:
            return sorted(t.when - self._now for _, _, t in self._queue if not t.cancelled)

    def advance(self, seconds: float) -> int:
        """Move time forward, running what falls due; return how many callbacks ran."""
        target = self._now + seconds
        ran = 0
        while True:
            with self._lock:
                if not self._queue or self._queue[0][0] > target:
                    break
                when, _, timer = heapq.heappop(self._queue)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
            ran += 1
        self._now = target
        return ran
