"""Projector: folds the event log into one view, batch by batch, tracking its position.

eventsourcing's SQLite recorder has no subscriptions, so the projector pulls notifications from the
log's recorder; it is woken after local appends and polls for appends made by other processes.
"""

from __future__ import annotations

import inspect
import json
import logging
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import ApplicationRecorder, IntegrityError, Tracking
from eventsourcing.projection import Projection

from relay.projections.backend import Sql, ViewSchema, ViewStore
from relay.projections.store.log import RelayLog

log = logging.getLogger("relay.projections")

Handler = Callable[[Sql, Any, int], None]  # (the view's transaction, a domain event, its log position)


# What the views read of the domain events (events/*.py; eventsourcing makes their classes, which the type
# checker cannot see): one shape per kind of event a handler takes.
class AggregateEvent(Protocol):
    originator_id: UUID
    at: datetime


class ExecutorConnection(AggregateEvent, Protocol):
    """Executor.Connected and Executor.Reconnected."""

    org: str
    app: str
    executor: str
    instance: str
    info: Mapping[str, object]


class LeaseAdoption(Protocol):
    """RelayInstance.LeaseAdopted: ``lease`` is org/app/executor_id."""

    lease: str
    from_instance: str
    to_instance: str


def event_name(domain_event: object) -> str:
    """`Executor.Connected`, `App.Registered`, ...: the aggregate and the event, as an auditor reads it."""
    return type(domain_event).__qualname__


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def recovery_row_id(sql: Sql, table: str, originator: str, attempt: int, *, dispatched: bool = False) -> str:
    """The row id of an executor's recovery attempt in ``table`` (keyed by id and attempt). An executor that
    connects again starts its attempts at 1, so each later death of the same executor (one that reports a fixed
    executor_id, DBOS__VMID...) gets rows of its own: ``<originator>``, then ``<originator>#2``, ``#3``...
    ``dispatched``: the attempt is being recorded now (attempt 1 then opens a new death's rows)."""
    firsts = sql.all(
        f"SELECT id FROM {{s}}{table} WHERE attempt = 1 AND (id = ? OR (id > ? AND id < ?))",  # noqa: S608
        (originator, f"{originator}#", f"{originator}$"),  # '$' follows '#': the range holds '<originator>#...'
    )
    deaths = len(firsts) + (1 if dispatched and attempt == 1 else 0)
    return originator if deaths <= 1 else f"{originator}#{deaths}"


def to_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def decoded(row: Mapping[str, Any], json_columns: Sequence[str] = (), flags: Sequence[str] = ()) -> dict[str, Any]:
    """A view row as its queries return it: the ``json_columns`` (to_json text) parsed, the ``flags`` (0/1) as
    booleans."""
    out = dict(row)
    for name in json_columns:
        out[name] = json.loads(out[name])
    for name in flags:
        out[name] = bool(out[name])
    return out


_HandlerMethod = TypeVar("_HandlerMethod", bound=Callable[..., None])
_HANDLED: dict[Callable[..., None], tuple[str, ...]] = {}  # a projection method -> the events it handles


def handles(*events: str) -> Callable[[_HandlerMethod], _HandlerMethod]:
    """Marks a ViewProjection method ``(self, sql, event, position)`` as the handler of ``events`` (by
    `event_name`), so the event and the code that folds it are written in one place."""

    def mark(method: _HandlerMethod) -> _HandlerMethod:
        _HANDLED[method] = _HANDLED.get(method, ()) + events
        return method

    return mark


class ViewProjection(Projection[Any]):
    """A projection whose handlers (methods marked with `handles`) are looked up by event name; unknown events
    are skipped."""

    schema: ViewSchema

    def __init__(self, view: ViewStore) -> None:
        super().__init__(view)
        self.handlers: dict[str, Handler] = self.build_handlers()

    def build_handlers(self) -> dict[str, Handler]:
        handlers: dict[str, Handler] = {}
        for klass in reversed(type(self).__mro__):
            for name, member in vars(klass).items():
                if inspect.isfunction(member):
                    for event in _HANDLED.get(member, ()):
                        handlers[event] = getattr(self, name)
        return handlers

    def folds(self, batch: list[tuple[Any, int]]) -> bool:
        """Whether applying `batch` would change the view (beyond its position): an event has a handler."""
        handlers = self.handlers
        return any(event_name(event) in handlers for event, _ in batch)

    def process_event(self, domain_event: object, tracking: Tracking) -> None:
        self.process_batch([(domain_event, tracking.notification_id)], tracking)

    def check_position(self, sql: Sql, tracking: Tracking, after: int | None) -> None:
        """First in a batch's transaction: lock the view and refuse the batch unless the view is still at
        `after`, the position the batch was read from. Tracking alone refuses only a batch ending at or
        before the view's position; a longer batch overlapping one another projector has just committed
        (or a batch read before a reset emptied the view) would otherwise be applied on top of it."""
        if after is None:
            return
        current = self.view.lock_position(sql, tracking.application_name)
        if current != after:
            raise IntegrityError(f"view {self.schema.name} is at {current}, batch was read after {after}")

    def process_batch(self, batch: list[tuple[Any, int]], tracking: Tracking, after: int | None = None) -> None:
        """Apply a batch and record its last position in the same transaction: all or nothing."""
        view: ViewStore = self.view
        with view.batch_transaction() as sql:
            self.check_position(sql, tracking, after)
            self.apply(sql, batch)
            view.record_tracking(sql, tracking)
        self.committed(batch)

    def apply(self, sql: Sql, batch: list[tuple[Any, int]]) -> None:
        """Fold a batch's events into the view, inside the batch's transaction."""
        handlers = self.handlers
        for domain_event, position in batch:
            handler = handlers.get(event_name(domain_event))
            if handler is not None:
                handler(sql, domain_event, position)

    def committed(self, batch: list[tuple[Any, int]]) -> None:
        """Called once a batch's transaction has committed (a view with a cache in memory refreshes it)."""

    def moved_elsewhere(self) -> None:
        """Called when the view is found at a position this process did not leave it at: another process
        (an HA peer, `relay replay`) applied or reset it."""


class Projector:
    """Catches one view up with the log. Safe to run twice at once: tracking refuses a repeat."""

    def __init__(self, relay_log: RelayLog, projection: ViewProjection, batch_size: int = 500) -> None:
        self.log = relay_log
        self.projection = projection
        self.view: ViewStore = projection.view
        self.batch_size = batch_size
        self._left_at: int | None = None  # where this object last saw or left the view
        # (a, b): the log holds no event this view handles in (a, b], so from a view at any position in [a, b]
        # nothing is left to apply up to b. A fact about the log, so it survives a peer moving the view.
        self._idle: tuple[int, int] = (0, 0)

    @property
    def name(self) -> str:
        return self.projection.schema.name

    def position(self) -> int:
        return self.view.position(self.log.name)

    def observe(self) -> int:
        """The view's position, read from its store; tells the projection when it moved elsewhere."""
        position = self.position()
        if position != self._left_at:
            self.projection.moved_elsewhere()
            self._left_at = position
        return position

    def last_seen(self) -> int:
        """Where this object last saw or left the view, without reading its store (observe() the first time)."""
        return self._left_at if self._left_at is not None else self.observe()

    def scanned(self, position: int) -> int:
        """How far the log has nothing left for this view, from the view at `position`."""
        low, high = self._idle
        return high if low <= position <= high else position

    def reached(self) -> int:
        """The log position up to which this view has applied every event it handles."""
        return self.scanned(self.position())

    def note_idle(self, position: int, through: int) -> None:
        self._idle = (position, through)

    def apply(self, batch: list[tuple[Any, int]], after: int) -> tuple[int, int]:
        """Apply decoded events (positions after `after`, ascending) in one transaction with their tracking.
        Returns (the view's position now, how many events were applied: len(batch) or 0)."""
        last = batch[-1][1]
        try:
            self.projection.process_batch(batch, Tracking(self.log.name, last), after=after)
        except Exception as error:
            # Another projector (a replay, an HA peer) may have applied this batch first: its
            # transaction rolled ours back (tracking or a row conflict). Then resume after it.
            advanced = self.observe()
            if advanced == after:  # moved neither ahead (a peer) nor back (a reset): a real error
                raise
            if not isinstance(error, IntegrityError):
                log.info("view %s advanced elsewhere (%s); resuming", self.name, type(error).__name__)
            return advanced, 0
        self._left_at = last
        return last, len(batch)

    def catch_up(self, stop: int | None = None, progress: Callable[[int], None] | None = None) -> int:
        """Apply every event after the view's position (up to `stop`); return how many were read."""
        return catch_up(self.log, [self], [stop], batch_size=self.batch_size, progress=progress)


def catch_up(
    relay_log: RelayLog,
    projectors: Sequence[Projector],
    stops: Sequence[int | None] | None = None,
    *,
    batch_size: int = 500,
    progress: Callable[[int], None] | None = None,
    reached: Callable[[int], None] | None = None,
    skip_idle: int = 0,
    reader: ApplicationRecorder | None = None,
    observe: bool = True,
) -> int:
    """Bring several views up to the log (each up to its own stop, None: the end) in one pass: each batch
    of notifications is read and decoded once and handed to every view that has not applied it, each view
    in its own transaction with its tracking position (one writer per view: see `check_position`).
    `progress` gets how many events each committed batch applied; `reached` gets, after each batch, the
    position up to which every view has applied the log. Returns how many events were applied in all.
    `skip_idle` (the projection runner's): a view that handles no event of a batch writes no transaction for
    it, until it would trail by that many positions (its tracking then moves on); the range it skipped is kept
    in memory (`Projector.scanned`). A storm of one kind of event then costs only the views that fold it (each
    transaction is a few round trips, and on the gevent hub each waits its turn behind every handshake).
    `reader`: the recorder the notifications are read through (default: the log's own). `observe=False` starts
    each view where this process last saw it, without reading its position: a view moved meanwhile (an HA
    peer, a reset) refuses the batch (`check_position`) and is observed then."""
    stops = list(stops) if stops is not None else [None] * len(projectors)
    # at[i]: view i's tracking position (what its next batch must find, see `check_position`); scanned[i]:
    # the log position up to which view i has nothing left to apply (at[i], or beyond it up to its stop
    # where the log has no notification for it).
    at = [p.observe() if observe else p.last_seen() for p in projectors]
    scanned = [p.scanned(a) if skip_idle else a for p, a in zip(projectors, at, strict=True)]
    done = 0
    published: int | None = None
    while True:
        pending = [i for i, stop in enumerate(stops) if stop is None or scanned[i] < stop]
        if not pending:
            break
        low = min(scanned[i] for i in pending)
        limits = [stops[i] for i in pending]
        read_stop = None if None in limits else max(s for s in limits if s is not None)
        notifications = (reader or relay_log.recorder).select_notifications(
            start=low, limit=batch_size, stop=read_stop, inclusive_of_start=False
        )
        if not notifications:
            break
        ids = [n.id for n in notifications]
        to_domain_event = relay_log.mapper.to_domain_event
        batch: list[tuple[DomainEventProtocol[Any], int]] = [(to_domain_event(n), n.id) for n in notifications]
        for i in pending:
            stop = stops[i]
            start = bisect_right(ids, scanned[i])
            end = len(ids) if stop is None else bisect_right(ids, stop)
            through = ids[-1] if stop is None else min(ids[-1], stop)
            if start >= end or (skip_idle and through - at[i] < skip_idle
                                and not projectors[i].projection.folds(batch[start:end])):  # nothing in it for view i
                scanned[i] = max(scanned[i], through)
                projectors[i].note_idle(at[i], scanned[i])
                continue
            position, applied = projectors[i].apply(batch[start:end], after=at[i])
            if applied:
                at[i], scanned[i] = position, max(position, through)
                projectors[i].note_idle(position, scanned[i])
                done += applied
                if progress is not None:
                    progress(applied)
            else:  # the view moved elsewhere: carry on from where it is now
                at[i] = scanned[i] = position
        if reached is not None:
            published = _reached(scanned, stops)
            reached(published)
    if reached is not None and published != _reached(scanned, stops):  # e.g. nothing new: the views' position
        reached(_reached(scanned, stops))
    return done


def _reached(scanned: Sequence[int], stops: Sequence[int | None]) -> int:
    """Up to where every view has applied the log: the lowest of the views still short of their stop; when all
    are at theirs (`replay --verify` stops each where the live one is, which may be far behind the log's end when
    it folded nothing since), the furthest of them."""
    moving = [at for at, stop in zip(scanned, stops, strict=True) if stop is None or at < stop]
    return min(moving) if moving else max(scanned, default=0)
