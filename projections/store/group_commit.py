"""Group commit: the appends of concurrent callers written in ONE store transaction.

Part of the event log's I/O edge (like projections/store/log.py), not of the domain. A connect storm makes thousands of
Connected events, one per executor and each from its own greenlet; written one transaction each, the store's
commits set the pace (SQLite: a commit per event with the gevent hub blocked; PostgreSQL: the event table's
EXCLUSIVE lock, insert and commit round trips per event). Here callers queue their events and whoever finds
no batch in flight leads: it writes what is queued in one transaction, hands each caller its own result, and
passes the lead to the oldest caller still queued. Meanwhile the others wait (their greenlets only).

What is kept:
- Per-aggregate order: a request touching an aggregate that an earlier request in the queue touches waits for
  a later batch (never two changes of one aggregate in one batch, never reordered).
- Optimistic concurrency: a batch refused with IntegrityError (an aggregate changed meanwhile: an HA peer, a
  stale cache) is written again request by request, so only the conflicting caller gets the IntegrityError
  (it reloads and retries, as before) and the others' appends go through.
- Errors: any other error of a batch (store unreachable, locked, full) is raised to every caller in it.

`write` does the store I/O; `offload` runs it (projections/store/log.py: in gevent's threadpool for SQLite, so the hub
keeps serving while the transaction runs; directly for PostgreSQL, whose driver already yields to the hub).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from eventsourcing.persistence import IntegrityError

T = TypeVar("T")  # what a request writes (e.g. a list of stored events)
R = TypeVar("R")  # what a request gets back (e.g. its notification ids)

# Requests per transaction at most: one transaction of a few hundred small inserts takes milliseconds.
MAX_BATCH = 500


class _Request(Generic[T, R]):
    __slots__ = ("error", "finished", "items", "keys", "lead", "result", "wake")

    def __init__(self, keys: frozenset[Hashable], items: T) -> None:
        self.keys = keys
        self.items = items
        self.wake = threading.Event()  # set when finished, or when given the lead
        self.finished = False
        self.lead = False
        self.result: R | None = None
        self.error: BaseException | None = None


def run_here(fn: Callable[[], object]) -> object:
    """Run `fn` on the calling thread: the offload of a committer whose writes need no thread of their own."""
    return fn()


class GroupCommitter(Generic[T, R]):
    """``write(list of items) -> list of results`` (one per item, in order) in one transaction; ``commit``
    queues one caller's items and returns its result."""

    def __init__(self, write: Callable[[list[T]], list[R]], offload: Callable[[Callable[[], object]], Any] = run_here,
                 max_batch: int = MAX_BATCH, observe: Callable[[float, int], None] | None = None) -> None:
        self._write = write
        self._offload = offload
        self.max_batch = max_batch
        self._observe = observe  # (seconds of a transaction, requests in it): metrics
        self._lock = threading.Lock()
        self._queue: deque[_Request[T, R]] = deque()
        self._leading = False
        self.batches = 0  # transactions written (batches, and requests written apart after a conflict)

    def commit(self, keys: Sequence[Hashable], items: T) -> R:
        """Write ``items`` (changing the aggregates ``keys``) with whatever else is queued; return their result
        or raise their error."""
        request: _Request[T, R] = _Request(frozenset(keys), items)
        with self._lock:
            self._queue.append(request)
            lead = not self._leading
            if lead:
                self._leading = True
        if lead:
            self._lead()
        while not request.finished:
            request.wake.wait()
            request.wake.clear()
            if request.lead:
                request.lead = False
                self._lead()
        if request.error is not None:
            raise request.error
        return request.result  # type: ignore[return-value]

    def _take(self) -> list[_Request[T, R]]:
        """The next batch, oldest first; a request touching an aggregate of an earlier one (taken or left)
        stays queued, in its place."""
        batch: list[_Request[T, R]] = []
        left: deque[_Request[T, R]] = deque()
        seen: set[Hashable] = set()
        while self._queue:
            request = self._queue.popleft()
            if len(batch) >= self.max_batch or not request.keys.isdisjoint(seen):
                left.append(request)
            else:
                batch.append(request)
            seen |= request.keys
        self._queue = left
        return batch

    def _lead(self) -> None:
        """Write one batch, then pass the lead to the oldest request still queued (or give it up)."""
        with self._lock:
            batch = self._take()
        try:
            if batch:
                self._run(batch)
        finally:
            with self._lock:
                if self._queue:
                    heir = self._queue[0]
                    heir.lead = True
                    heir.wake.set()
                else:
                    self._leading = False

    def _run(self, batch: list[_Request[T, R]]) -> None:
        try:
            results = self._timed(lambda: self._write([r.items for r in batch]), len(batch))
        except IntegrityError as conflict:
            if len(batch) == 1:
                self._finish(batch[0], error=conflict)
                return
            for request in batch:  # one transaction each: only the conflicting ones fail
                try:
                    (result,) = self._timed(lambda r=request: self._write([r.items]), 1)  # type: ignore[misc]
                except BaseException as error:
                    self._finish(request, error=error)
                else:
                    self._finish(request, result=result)
            return
        except BaseException as error:
            for request in batch:
                self._finish(request, error=error)
            return
        for request, result in zip(batch, results, strict=True):
            self._finish(request, result=result)

    def _timed(self, fn: Callable[[], list[R]], size: int) -> list[R]:
        started = time.perf_counter()
        try:
            return self._offload(fn)  # type: ignore[no-any-return]
        finally:
            self.batches += 1
            if self._observe is not None:
                self._observe(time.perf_counter() - started, size)

    @staticmethod
    def _finish(request: _Request[T, R], *, result: R | None = None, error: BaseException | None = None) -> None:
        request.result, request.error = result, error
        request.finished = True
        request.wake.set()
