"""Timers for actors, behind a small interface so tests can drive time by hand.

Actors never sleep: they ask a Scheduler to call them back later, and the callback only posts a message to
the actor (state is touched inside the actor) or does something as small and non-blocking (the liveness
pings of actors/executor.py). `ThreadingScheduler` is the real one: one daemon thread (a greenlet under
`gevent.monkey.patch_all()`) over a heap of timers, however many there are; a timer is a small object in
that heap, not a thread of its own. `ManualScheduler` runs nothing until a test calls `advance()`, and gives
the wall clock that goes with its time (`wall`), so one object drives both.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

log = logging.getLogger("relay.actors.scheduler")


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """`now()` is monotonic seconds (liveness compares it with the socket's pong times);
    `call_later` runs `callback` once, `delay` seconds from now, unless cancelled first."""

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable: ...


class _Timer:
    """One entry of a scheduler's heap; `cancel` drops the callback (and what it holds) at once."""

    __slots__ = ("callback", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback: Callable[[], None] | None = callback

    def cancel(self) -> None:
        self.callback = None


class ThreadingScheduler:
    """One daemon thread (a greenlet under gevent) runs every timer, soonest first, from a heap. Callbacks run
    in that thread one after the other: they must be short and must not block (post a message, send a ping
    without waiting). A callback that raises is logged; the others still run."""

    def __init__(self) -> None:
        self._queue: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        # When the thread will wake up by itself (inf while it waits with nothing queued): a timer due sooner
        # wakes it early; later ones do not.
        self._wakes_at = math.inf

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        timer = _Timer(time.monotonic() + max(0.0, delay), callback)
        with self._cond:
            heapq.heappush(self._queue, (timer.when, next(self._seq), timer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="relay-scheduler", daemon=True)
                self._thread.start()
            elif timer.when < self._wakes_at:
                self._cond.notify()
        return timer

    def pending(self) -> int:
        """How many timers are queued (cancelled ones included until their time comes)."""
        with self._cond:
            return len(self._queue)

    def _run(self) -> None:
        due: list[_Timer] = []
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._queue and self._queue[0][0] <= now:
                        break
                    self._wakes_at = self._queue[0][0] if self._queue else math.inf
                    self._cond.wait(None if not self._queue else self._wakes_at - now)
                self._wakes_at = -math.inf  # running: no need to be woken
                while self._queue and self._queue[0][0] <= now:
                    due.append(heapq.heappop(self._queue)[2])
            for timer in due:
                callback, timer.callback = timer.callback, None
                if callback is None:
                    continue
                try:
                    callback()
                except Exception:
                    log.exception("a timer callback failed")
            due.clear()


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
