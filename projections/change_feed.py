"""The change feed: which parts of the views a committed batch touched, pushed to the console's open pages.

The projection runner advances the feed to the position every view has reached (`ProjectionRunner._publish`);
the feed then asks the audit view which (kind, org, app) the new positions hold and hands the topics to each
subscription whose patterns match. Topics name an area and its organization and application, never an event's
content: a page told "executors of local/shop changed" re-reads its own fragment, under its own permissions
(docs/adr/0052). Each instance (and each worker) runs its own runner over the shared log, so changes recorded by
HA peers are published here too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping

log = logging.getLogger("relay.projections")

# (area, org, app): "" for an org or app the area has none of (a Relay instance has neither).
Topic = tuple[str, str, str]
# (area, org, app) to match: None matches any org or app.
Pattern = tuple[str, str | None, str | None]
# An audit row as the feed reads it: (kind, org, app).
Touched = tuple[str, str | None, str | None]

# The areas each aggregate's events touch (beside "audit": every event is an audit entry of its org and app).
AREAS_OF_KIND: Mapping[str, tuple[str, ...]] = {
    "Executor": ("executors", "recoveries"),
    "App": ("app", "executors"),  # the grace period changes when a disconnected executor is declared dead
    "AlertingRule": ("alerts",),
    "Alert": ("alerts",),
    "Incident": ("incidents",),
    "RetentionRun": ("alerts",),  # the alerts page lists the managed retention runs
    "RelayInstance": ("instances", "executors"),  # leases adopted: the executors' instance column
}
AREAS = frozenset({"audit", *(area for areas in AREAS_OF_KIND.values() for area in areas)})

# Positions one advance reads; a bigger gap (a restart far behind the log) is published as "everything".
MAX_GAP = 50_000
EVERYTHING: Topic = ("*", "", "")


def topics_of(rows: Iterable[Touched]) -> set[Topic]:
    """The topics of audit rows (kind, org, app)."""
    topics: set[Topic] = set()
    for kind, org, app in rows:
        org_, app_ = org or "", app or ""
        topics.add(("audit", org_, app_))
        for area in AREAS_OF_KIND.get(kind, ()):
            topics.add((area, org_, app_))
    return topics


def matches(pattern: Pattern, topic: Topic) -> bool:
    area, org, app = pattern
    if topic == EVERYTHING:
        return True
    return area == topic[0] and org in (None, topic[1]) and app in (None, topic[2])


class FeedFullError(Exception):
    """This instance serves as many streams as it may (`ChangeFeed.max_streams`)."""


class FeedClosedError(Exception):
    """The instance is stopping: no new stream."""


class Subscription:
    """One open stream's interest: the areas of its patterns that changed since it last asked."""

    def __init__(self, patterns: Iterable[Pattern]) -> None:
        self.patterns = tuple(patterns)
        self._changed: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.closed = False

    def offer(self, topics: Iterable[Topic]) -> None:
        hit = {p[0] for t in topics for p in self.patterns if matches(p, t)}
        if hit:
            with self._lock:
                self._changed |= hit
            self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    def wait(self, timeout: float) -> set[str] | None:
        """The areas changed since the last call (empty after `timeout` s without one); None once closed."""
        self._wake.wait(timeout)
        self._wake.clear()
        if self.closed:
            return None
        with self._lock:
            changed, self._changed = self._changed, set()
        return changed


class ChangeFeed:
    """The topics the views' committed batches touched, offered to at most `max_streams` subscriptions."""

    def __init__(self, max_streams: int = 200) -> None:
        self.max_streams = max_streams
        self.position: int | None = None  # where the feed has published up to (None: not yet started)
        self.closed = False
        self._subscriptions: set[Subscription] = set()
        self._lock = threading.Lock()

    @property
    def streams(self) -> int:
        return len(self._subscriptions)

    def subscribe(self, patterns: Iterable[Pattern]) -> Subscription:
        with self._lock:
            if self.closed:
                raise FeedClosedError("this Relay instance is stopping")
            if len(self._subscriptions) >= self.max_streams:
                raise FeedFullError(f"this Relay instance serves {self.max_streams} live streams already")
            subscription = Subscription(patterns)
            self._subscriptions.add(subscription)
            return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions.discard(subscription)

    def publish(self, topics: Iterable[Topic]) -> None:
        topics = set(topics)
        if not topics:
            return
        with self._lock:
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            subscription.offer(topics)

    def advance(self, reached: int, touched: Callable[[int, int], Iterable[Touched]]) -> None:
        """The views have applied the log up to `reached`: publish the topics of the positions since the last
        advance, read through `touched(after, through)` (audit rows: kind, org, app). Without a subscriber
        nothing is read."""
        start = self.position
        if start is None or reached <= start:
            self.position = reached if start is None else max(start, reached)
            return
        self.position = reached
        if not self._subscriptions:
            return
        if reached - start > MAX_GAP:
            self.publish([EVERYTHING])
            return
        self.publish(topics_of(touched(start, reached)))

    def close(self) -> None:
        """The instance is stopping: every stream ends now, and no new one starts."""
        with self._lock:
            self.closed = True
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            subscription.close()
