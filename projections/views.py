"""All of Relay's views over one store, their projectors, and the loop that keeps them current."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from events.log import RelayLog
from projections.alerts import AlertsProjection, AlertsQueries, AlertsSchema
from projections.applications import ApplicationsProjection, ApplicationsQueries, ApplicationsSchema
from projections.audit import AuditProjection, AuditQueries, AuditSchema
from projections.backend import StoreConfig, ViewStore
from projections.projector import Projector
from projections.registry import RegistryProjection, RegistryQueries, RegistrySchema

log = logging.getLogger("relay.projections")


class Views:
    """The registry, applications and audit views; `location` builds them elsewhere (for replay)."""

    def __init__(self, config: StoreConfig, relay_log: RelayLog, *, location: str | None = None) -> None:
        self.log = relay_log
        registry = ViewStore(config, RegistrySchema(), location=location)
        applications = ViewStore(config, ApplicationsSchema(), location=location)
        audit = ViewStore(config, AuditSchema(), location=location)
        alerts = ViewStore(config, AlertsSchema(), location=location)
        self.stores = (registry, applications, audit, alerts)
        self.projectors = (
            Projector(relay_log, RegistryProjection(registry)),
            Projector(relay_log, ApplicationsProjection(applications)),
            Projector(relay_log, AuditProjection(audit)),
            Projector(relay_log, AlertsProjection(alerts)),
        )
        self.registry = RegistryQueries(registry)
        self.applications = ApplicationsQueries(applications)
        self.audit = AuditQueries(audit)
        self.alerts = AlertsQueries(alerts)  # alerting rules, alerts, retention runs, Relay's own counts

    def position(self) -> int:
        """The position every view has reached."""
        return min(p.position() for p in self.projectors)

    def catch_up(self, stop: int | None = None, progress: Callable[[int], None] | None = None) -> int:
        return sum(p.catch_up(stop=stop, progress=progress) for p in self.projectors)

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
        self._thread.start()

    def notify(self, _position: int = 0) -> None:
        self._wake.set()

    def _run(self) -> None:
        backoff = self.poll_interval
        while not self._stopping.is_set():
            self._wake.wait(backoff)
            self._wake.clear()
            try:
                self.views.catch_up()
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
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
