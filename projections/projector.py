"""Projector: folds the event log into one view, batch by batch, tracking its position.

eventsourcing's SQLite recorder has no subscriptions, so the projector pulls notifications from the
log's recorder; it is woken after local appends and polls for appends made by other processes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import IntegrityError, Tracking
from eventsourcing.projection import Projection

from events.log import RelayLog
from projections.backend import Sql, ViewSchema, ViewStore

log = logging.getLogger("relay.projections")

Handler = Callable[[Sql, Any, int], None]


def event_name(domain_event: object) -> str:
    """`Executor.Connected`, `App.Registered`, ...: the aggregate and the event, as an auditor reads it."""
    return type(domain_event).__qualname__


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class ViewProjection(Projection[Any]):
    """A projection whose handlers are looked up by event name; unknown events are skipped."""

    schema: ViewSchema

    def __init__(self, view: ViewStore) -> None:
        super().__init__(view)
        self.handlers: dict[str, Handler] = self.build_handlers()

    def build_handlers(self) -> dict[str, Handler]:
        raise NotImplementedError

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:  # type: ignore[override]
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
        with view.transaction(commit=True) as sql:
            self.check_position(sql, tracking, after)
            for domain_event, position in batch:
                handler = self.handlers.get(event_name(domain_event))
                if handler is not None:
                    handler(sql, domain_event, position)
            view.record_tracking(sql, tracking)


class Projector:
    """Catches one view up with the log. Safe to run twice at once: tracking refuses a repeat."""

    def __init__(self, relay_log: RelayLog, projection: ViewProjection, batch_size: int = 500) -> None:
        self.log = relay_log
        self.projection = projection
        self.view: ViewStore = projection.view
        self.batch_size = batch_size

    @property
    def name(self) -> str:
        return self.projection.schema.name

    def position(self) -> int:
        return self.view.position(self.log.name)

    def catch_up(self, stop: int | None = None, progress: Callable[[int], None] | None = None) -> int:
        """Apply every event after the view's position (up to `stop`); return how many were read."""
        done = 0
        position = self.position()
        while stop is None or position < stop:
            notifications = self.log.recorder.select_notifications(
                start=position, limit=self.batch_size, stop=stop, inclusive_of_start=False
            )
            if not notifications:
                break
            batch: list[tuple[DomainEventProtocol[Any], int]] = [
                (self.log.mapper.to_domain_event(n), n.id) for n in notifications
            ]
            last = notifications[-1].id
            try:
                self.projection.process_batch(batch, Tracking(self.log.name, last), after=position)
            except Exception as error:
                # Another projector (a replay, an HA peer) may have applied this batch first: its
                # transaction rolled ours back (tracking or a row conflict). Then resume after it.
                advanced = self.position()
                if advanced == position:  # moved neither ahead (a peer) nor back (a reset): a real error
                    raise
                if not isinstance(error, IntegrityError):
                    log.info("view %s advanced elsewhere (%s); resuming", self.name, type(error).__name__)
                position = advanced
                continue
            position = last
            done += len(notifications)
            if progress is not None:
                progress(len(notifications))
        return done
