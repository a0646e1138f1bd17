"""Limits at the edge, counted in memory: failed executor handshakes per source address, and open executor
sockets. Both are decided before a WebSocket upgrade (web/transport/websocket.py ``check_handshake``).

- ``HandshakeFailures``: a counter of failed handshakes (401/403) per key string over the last ``window_s``
  seconds (RELAY_HANDSHAKE_FAILURES_PER_MIN). web/transport/websocket.py counts each failure twice: under the source
  address with the application and a fingerprint of the key it sent, and under the address alone. Past
  ``limit``, the same (address, app, key) is answered 429 before its key is even looked up, and other failing
  keys from the address get 429 instead of 401/403, but a valid key is never refused for other keys' failures:
  behind NAT or a proxy, one stale executor must not lock out a fleet. Refusals for being blocked do not count
  as failures, so a caller that stops failing gets in again after a minute. An episode (from the failure that
  reaches the limit until the window holds none) is announced once (`failed` returns True once). At most
  ``max_addresses`` keys are tracked; past that, those that failed least recently are forgotten first.
- ``ConnectionSlots``: at most ``limit`` executor sockets at once (RELAY_MAX_CONNECTIONS); a handshake that
  finds none free is answered 503. A slot is taken before the upgrade and given back when the request
  that holds it ends, whether or not it was upgraded.

Everything runs on greenlets and (pykka) threads; a lock keeps each structure consistent.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

import psycopg
from eventsourcing.persistence import PersistenceError

MAX_TRACKED_ADDRESSES = 10_000

# The store (event log, views) failing under a request: unreachable, locked, full. Not the caller's fault, and it
# passes: the edge answers 503 saying so (web/transport/server.py for the API, web/transport/websocket.py at the
# handshake).
STORE_ERRORS = (PersistenceError, psycopg.Error, sqlite3.Error)
STORE_UNAVAILABLE = "Relay's store is unavailable (unreachable, locked or full); try again later"


class HandshakeFailures:
    def __init__(
        self,
        limit: int,
        window_s: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = MAX_TRACKED_ADDRESSES,
    ) -> None:
        if limit < 1 or window_s <= 0 or max_addresses < 1:
            raise ValueError("limit, window_s and max_addresses must be positive")
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        self.max_addresses = max_addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._announced: set[str] = set()  # keys whose current episode was announced (logged)
        self._lock = threading.Lock()
        self.refused = 0  # handshakes answered 429, for the record

    def _recent(self, address: str, now: float) -> deque[float] | None:
        times = self._failures.get(address)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[address]
            self._announced.discard(address)
            return None
        return times

    def retry_after(self, address: str) -> float | None:
        """None when ``address`` may try a handshake; else the seconds until it may (and count a refusal)."""
        with self._lock:
            now = self.clock()
            times = self._recent(address, now)
            if times is None or len(times) < self.limit:
                return None
            self.refused += 1
            # The oldest failure that keeps the address at its limit leaves the window first.
            return max(0.0, times[-self.limit] + self.window_s - now)

    def failed(self, address: str) -> bool:
        """Count one failed handshake under ``address``; True when this one starts an episode at the limit
        (once per episode, so a caller retrying for an hour is announced once)."""
        with self._lock:
            now = self.clock()
            times = self._recent(address, now)
            if times is None:
                times = self._failures[address] = deque()
            else:
                self._failures.move_to_end(address)
            times.append(now)
            if len(times) > self.limit:  # more than enough to decide: keep the deque small
                times.popleft()
            while len(self._failures) > self.max_addresses:
                forgotten, _ = self._failures.popitem(last=False)
                self._announced.discard(forgotten)
            if len(times) < self.limit or address in self._announced:
                return False
            self._announced.add(address)
            return True

    def tracked(self) -> int:
        with self._lock:
            return len(self._failures)


def retry_after_header(seconds: float) -> str:
    """A Retry-After value (whole seconds, at least 1)."""
    return str(max(1, math.ceil(seconds)))


class Ticket:
    """A place held (an HTTP connection's, an executor handshake's); `release` (idempotent) gives it back."""

    __slots__ = ("_give_back",)

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back: Callable[[], None] | None = give_back

    def release(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()


class ConnectionSlots:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be positive")
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()
        self.refused = 0  # handshakes answered 503, for the record

    @property
    def open(self) -> int:
        return self._open

    def acquire(self) -> bool:
        with self._lock:
            if self._open >= self.limit:
                self.refused += 1
                return False
            self._open += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)


class EdgeLimits:
    """What `relay serve` keeps for the handshake checks (one per server)."""

    def __init__(self, handshake_failures_per_min: int, max_connections: int) -> None:
        self.failures = HandshakeFailures(handshake_failures_per_min)
        self.slots = ConnectionSlots(max_connections)
