"""All of Relay's views over one store, their projectors, and the loop that keeps them current."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from relay.events.log import RelayLog
from relay.projections.alerts import AlertsProjection, AlertsQueries, AlertsSchema
from relay.projections.applications import ApplicationsProjection, ApplicationsQueries, ApplicationsSchema
from relay.projections.audit import AuditProjection, AuditQueries, AuditSchema
from relay.projections.backend import StoreConfig, ViewStore
from relay.projections.projector import Projector, catch_up
from relay.projections.registry import RegistryProjection, RegistryQueries, RegistrySchema

log = logging.getLogger("relay.projections")


# Events per batch: what the runner applies (and publishes) at a time, and what `relay replay` reads at a time
# (bigger: fewer transactions and round trips; a replay has no reader waiting for each batch).
BATCH_SIZE = 500
REPLAY_BATCH_SIZE = 5000


class Views:
    """The registry, applications, audit and alerts views; `location` builds them elsewhere (for replay)."""

    COUNT = 4  # how many views a replay rebuilds (its progress counts events per view)

    def __init__(self, config: StoreConfig, relay_log: RelayLog, *, location: str | None = None) -> None:
        self.log = relay_log
        registry = ViewStore(config, RegistrySchema(), location=location)
        applications = ViewStore(config, ApplicationsSchema(), location=location)
        audit = ViewStore(config, AuditSchema(), location=location)
        alerts = ViewStore(config, AlertsSchema(), location=location)
        self.stores = (registry, applications, audit, alerts)
        self.applications = ApplicationsQueries(applications)
        self.projectors = (
            Projector(relay_log, RegistryProjection(registry)),
            Projector(relay_log, ApplicationsProjection(applications, self.applications.cache)),
            Projector(relay_log, AuditProjection(audit)),
            Projector(relay_log, AlertsProjection(alerts)),
        )
        self.registry = RegistryQueries(registry)
        self.audit = AuditQueries(audit)
        self.alerts = AlertsQueries(alerts)  # alerting rules, alerts, retention runs, Relay's own counts

    def position(self) -> int:
        """The position every view has reached."""
        return min(p.position() for p in self.projectors)

    def catch_up(
        self,
        stop: int | None = None,
        progress: Callable[[int], None] | None = None,
        *,
        stops: Sequence[int | None] | None = None,
        batch_size: int = BATCH_SIZE,
        reached: Callable[[int], None] | None = None,
    ) -> int:
        """Apply the log to every view (up to `stop`, or each view up to its own of `stops`), reading and
        decoding each batch once for all of them; see `projections.projector.catch_up`. Returns how many
        events were applied, summed over the views."""
        return catch_up(
            self.log,
            self.projectors,
            stops if stops is not None else [stop] * len(self.projectors),
            batch_size=batch_size,
            progress=progress,
            reached=reached,
        )

    def close(self) -> None:
        for store in self.stores:
            store.close()


class ProjectionRunner:
    """Runs the projectors in a background thread (a greenlet under gevent): woken by local appends,
    polling for appends by other processes. Readers wait for a position with `wait_for`."""

    def __init__(self, views: Views, poll_interval: float = 0.5) -> None:
        self.views = views
        self.poll_interval = poll_interval
        self._wake = threading.Event()
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self.reached = views.position()
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="projections", daemon=True)
        views.log.listeners.append(self.notify)

    def start(self) -> None:
        # The views' caches in memory (keys and applications) are kept current by this runner's catch-ups.
        self.views.applications.cache.enabled = True
        self._thread.start()

    def notify(self, _position: int = 0) -> None:
        self._wake.set()

    def _run(self) -> None:
        backoff = self.poll_interval
        while not self._stopping.is_set():
            self._wake.wait(backoff)
            self._wake.clear()
            try:
                # Published batch by batch: a reader waiting for a position (`wait_for`) need not wait for
                # the end of a long catch-up (a peer's storm, a restart behind the log).
                self.views.catch_up(reached=self._publish)
                reached = self.views.position()
            except Exception as error:
                self.last_error = f"{type(error).__name__}: projections cannot read or write the store"
                log.warning("projections failed (%s); retrying", type(error).__name__)
                backoff = min(backoff * 2, 5.0)
                continue
            self.last_error = None
            backoff = self.poll_interval
            with self._changed:
                self.reached = reached
                self._changed.notify_all()

    def _publish(self, reached: int) -> None:
        with self._changed:
            self.reached = reached
            self._changed.notify_all()

    def wait_for(self, position: int, timeout: float = 5.0) -> bool:
        """Block until every view has applied `position`; False on timeout."""
        deadline = time.monotonic() + timeout
        self.notify()
        with self._changed:
            while self.reached < position:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def stop(self) -> None:
        self.views.applications.cache.enabled = False
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
