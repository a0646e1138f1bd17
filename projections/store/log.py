"""RelayLog: the eventsourcing Application through which actors record every state change.

It is the only place that loads and saves aggregates. Which store it uses (SQLite or PostgreSQL)
comes from the environment it is given; the domain does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError, Notification, Recording, StoredEvent

from relay.events.errors import AlreadyExistsError, NotFoundError
from relay.events.refs import Ref
from relay.events.releases import ClusterUpgradingError, release_key, unreadable
from relay.events.topics import register_moved_topics
from relay.projections.store.group_commit import GroupCommitter, run_here

A = TypeVar("A", bound=Aggregate)

# Optimistic concurrency: another writer (an HA peer) may append between our load and save.
_SAVE_ATTEMPTS = 3


def _unchanged(_: Aggregate) -> None:
    """The command of `RelayLog.ensure`: nothing to change on an aggregate that exists."""


class RelayLog(Application[UUID]):
    """Loads, changes and saves aggregates: a command is a function given to `change`, `create`, `run` or
    `run_together` (load, apply, save, retried on a concurrent append). `position` is the highest notification id
    this object has appended, so a reader can wait until the views have caught up with it."""

    name = "relay"

    def __init__(self, env: dict[str, str] | None = None,
                 offload: Callable[[Callable[[], object]], Any] | None = None) -> None:
        """``offload`` runs each append transaction (a batch of concurrent saves, projections/store/group_commit.py):
        `relay serve` passes gevent's threadpool for SQLite, whose calls would otherwise block the hub."""
        register_moved_topics()  # before the first read: older logs name the pre-namespace modules
        super().__init__(env)
        self.position = 0
        self.listeners: list[Callable[[int], None]] = []
        # The oldest release among the live instances sharing this store (actors/cluster.py): saves of events it
        # could not read are refused (events/releases.py). None: no gate (tools, and tests of the domain alone).
        self.release_floor: Callable[[], str] | None = None
        # Called with how long each append transaction took, in seconds: metrics.
        self.save_observers: list[Callable[[float], None]] = []
        # Appends run off the hub get a connection pool of their own: its locks (gevent's, once monkey-patched)
        # are then taken by one thread at a time (one batch is written at a time), never contended across
        # threads with the hub's reads. On PostgreSQL too: in a connect storm every handshake's load holds or
        # waits for a connection of the log's pool, and each batch of appends queued behind them (issue 32).
        own_writer = offload is not None or self.env.get("PERSISTENCE_MODULE") == "eventsourcing.postgres"
        self._writer_factory = type(self.factory)(self.env) if own_writer else None
        self._writes = self._writer_factory.application_recorder() if self._writer_factory else self.recorder
        self.committer: GroupCommitter[list[StoredEvent], list[int]] = GroupCommitter(
            self._insert, offload if offload is not None else run_here, observe=self._observe_save)

    def close(self) -> None:
        if self._writer_factory is not None:
            self._writer_factory.close()
        super().close()

    def _observe_save(self, seconds: float, _requests: int) -> None:
        for observe in self.save_observers:
            observe(seconds)

    def _insert(self, batches: list[list[StoredEvent]]) -> list[list[int]]:
        """One transaction for the stored events of several saves; each save's notification ids."""
        ids = self._writes.insert_events([e for batch in batches for e in batch]) or []
        out, at = [], 0
        for batch in batches:
            out.append(list(ids[at:at + len(batch)]))
            at += len(batch)
        return out

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """Application.save, group-committed: appended in one transaction with the concurrent saves of other
        callers (IntegrityError still means one of `objs` changed meanwhile). No snapshots, no tracking."""
        if kwargs:
            raise TypeError(f"RelayLog.save takes no options ({', '.join(kwargs)})")
        processing: ProcessingEvent[UUID] = ProcessingEvent()
        processing.collect_events(*objs)
        events = processing.events
        if not events:
            return []
        self._check_readable(events)
        stored = [self.mapper.to_stored_event(e) for e in events]
        ids = self.committer.commit([e.originator_id for e in events], stored)
        if self.repository.cache and not self.repository.fastforward:
            for aggregate_id, aggregate in processing.aggregates.items():
                self.repository.cache.put(aggregate_id, aggregate)
        return [
            Recording(d, Notification(originator_id=s.originator_id, originator_version=s.originator_version,
                                      topic=s.topic, state=s.state, id=n))
            for d, s, n in zip(events, stored, ids, strict=True)
        ]

    def _check_readable(self, events: Sequence[Any]) -> None:
        """Refuse events the oldest live instance could not read (a rolling upgrade part way: events/releases.py)."""
        if self.release_floor is None:
            return
        kinds = [(cls.__qualname__.rpartition(".")[0], cls.__name__, int(getattr(cls, "class_version", None) or 1))
                 for cls in {type(e) for e in events}]
        if not unreadable(kinds, "0.0.0"):  # nothing here is gated: no need to ask the cluster
            return
        floor = self.release_floor()
        blocked = unreadable(kinds, floor)
        if blocked:
            raise ClusterUpgradingError(floor, blocked)

    def can_write(self, release: str) -> bool:
        """Whether every live instance reads what ``release`` introduced (events/releases.py)."""
        if self.release_floor is None:
            return True
        return release_key(self.release_floor()) >= release_key(release)

    # -- the one way to load, change and save aggregates, retried on a concurrent append ----------------------------
    def load(self, aggregate_id: UUID, kind: type[A]) -> A | None:
        """The aggregate as the log holds it now (None when it has no event)."""
        try:
            aggregate: Aggregate = self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None
        assert isinstance(aggregate, kind)
        return aggregate

    def get(self, ref: Ref[A]) -> A | None:
        return self.load(ref.id, ref.kind)

    def latest_numbered(self, ref_of: Callable[[int], Ref[A]], known: int = 0) -> A | None:
        """The last of a series of aggregates numbered 1, 2, ... (a rule's alerts, its incidents); None when there
        is none yet. ``known``: a number the caller has seen (a view's), where the walk starts; a hint
        ahead of the log walks from the first."""
        number, latest = max(known, 0), None
        if number:
            latest = self.get(ref_of(number))
            if latest is None:
                number = 0
        while (following := self.get(ref_of(number + 1))) is not None:
            latest, number = following, number + 1
        return latest

    def run_together(self, decide: Callable[[], Sequence[Aggregate]]) -> list[Aggregate]:
        """Save, in ONE transaction (all or none), the aggregates ``decide`` returns after loading and changing them
        (through `load`/`get`). Another writer appending to one of them between the load and the save (an HA
        peer) makes the save conflict: ``decide`` runs again on what the log holds then, up to _SAVE_ATTEMPTS
        times; then IntegrityError. Domain errors from ``decide`` pass through, nothing saved."""
        for attempt in range(_SAVE_ATTEMPTS):
            changed = list(decide())
            try:
                recordings = self.save(*changed)
            except IntegrityError:
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise
                continue
            self._appended([r.notification.id for r in recordings])
            return changed
        raise AssertionError("unreachable")  # pragma: no cover

    def run(self, ref: Ref[A], decide: Callable[[A | None], A]) -> A:
        """Load ``ref``'s aggregate (None when absent), let ``decide`` change or create it, save it."""
        def one() -> list[A]:
            return [decide(self.get(ref))]

        [aggregate] = self.run_together(one)
        return cast("A", aggregate)

    def change(self, ref: Ref[A], command: Callable[[A], object], *, create: Callable[[], A] | None = None) -> A:
        """Run ``command`` on ``ref``'s aggregate and save it. When there is none, ``create()`` makes it first if
        given; else (and when it is deleted) NotFoundError."""
        def decide(found: A | None) -> A:
            if found is None and create is not None:
                found = create()
            elif found is None or ref.absent(found):
                raise NotFoundError(ref.missing)
            command(found)
            return found

        return self.run(ref, decide)

    def ensure(self, ref: Ref[A], create: Callable[[], A]) -> A:
        """``ref``'s aggregate, made by ``create()`` and saved when there is none."""
        return self.change(ref, _unchanged, create=create)

    def create(self, ref: Ref[A], make: Callable[[], A]) -> A:
        """Save the new aggregate ``make()`` returns; AlreadyExistsError when ``ref``'s exists (another instance
        made it first)."""
        def decide(found: A | None) -> A:
            if found is not None:
                raise AlreadyExistsError(ref.exists)
            return make()

        return self.run(ref, decide)

    def record(self, aggregate: A) -> A:
        """Save a new aggregate whose id is drawn per use (an operation of the audit trail): nothing to load,
        nothing to contend on."""
        recordings = self.save(aggregate)
        self._appended([r.notification.id for r in recordings])
        return aggregate

    def _appended(self, positions: list[int]) -> None:
        if not positions:
            return
        self.position = max(self.position, *positions)
        for listener in self.listeners:
            listener(self.position)
