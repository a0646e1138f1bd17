"""All of Relay's views over one store, their projectors, and the loop that keeps them current."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from eventsourcing.persistence import ApplicationRecorder

from relay.projections.alerting import AlertingProjection, AlertingQueries, AlertingSchema
from relay.projections.applications import ApplicationsProjection, ApplicationsQueries, ApplicationsSchema
from relay.projections.audit import AuditProjection, AuditQueries, AuditSchema
from relay.projections.backend import StoreConfig, ViewStore
from relay.projections.change_feed import ChangeFeed
from relay.projections.instances import InstancesProjection, InstancesQueries, InstancesSchema
from relay.projections.operations import OperationsProjection, OperationsQueries, OperationsSchema
from relay.projections.people import PeopleProjection, PeopleQueries, PeopleSchema
from relay.projections.projector import Projector, catch_up
from relay.projections.registry import RegistryProjection, RegistryQueries, RegistrySchema
from relay.projections.store.log import RelayLog

log = logging.getLogger("relay.projections")


# Events per batch: what the runner applies (and publishes) at a time, and what `relay replay` reads at a time
# (bigger: fewer transactions and round trips; a replay has no reader waiting for each batch).
BATCH_SIZE = 500
REPLAY_BATCH_SIZE = 5000
# The runner's: a pass costs a few round trips per view whatever its size (each a turn of the gevent hub, long
# in a storm), so behind the log it takes big bites.
RUNNER_BATCH_SIZE = 2000
# How often the runner reads every view's position at the start of a pass (see ProjectionRunner._run).
OBSERVE_EVERY_S = 1.0
# The runner's views skip batches holding no event they fold, until they would trail by this many positions
# (see `projections.projector.catch_up`): a restart re-reads at most that much of the log.
SKIP_IDLE = 5000


# Every view, in the order its store, projector and queries are built below.
SCHEMAS = (RegistrySchema, ApplicationsSchema, AuditSchema, AlertingSchema, OperationsSchema, InstancesSchema,
           PeopleSchema)


class Views:
    """Every view of SCHEMAS, each with its own store, projector and tracking position; `location` builds
    them elsewhere (for replay)."""

    COUNT = len(SCHEMAS)  # how many views a replay rebuilds

    def __init__(self, config: StoreConfig, relay_log: RelayLog, *, location: str | None = None) -> None:
        self.log = relay_log
        self.stores = tuple(ViewStore(config, schema(), location=location) for schema in SCHEMAS)
        registry, applications, audit, alerting, operations, instances, people = self.stores
        self.applications = ApplicationsQueries(applications)
        self.projectors = (
            Projector(relay_log, RegistryProjection(registry)),
            Projector(relay_log, ApplicationsProjection(applications, self.applications.cache)),
            Projector(relay_log, AuditProjection(audit)),
            Projector(relay_log, AlertingProjection(alerting)),
            Projector(relay_log, OperationsProjection(operations)),
            Projector(relay_log, InstancesProjection(instances)),
            Projector(relay_log, PeopleProjection(people)),
        )
        self.registry = RegistryQueries(registry)
        self.audit = AuditQueries(audit)
        self.alerting = AlertingQueries(alerting)  # alerting rules and the alerts they fired
        self.operations = OperationsQueries(operations)  # retention runs, Relay's own counts
        self.instances = InstancesQueries(instances)  # the cluster: status, address and leases of each instance
        self.people = PeopleQueries(people)  # persons, memberships, roles, join secrets, domain claims
        assert [p.name for p in self.projectors] == [schema.name for schema in SCHEMAS]

    def watched_apps(self) -> list[tuple[str, str]]:
        """Applications with a live alerting rule or a retention setting: their actors must run."""
        apps = self.operations.apps()
        live = {(a["org"], a["app"]) for a in apps}
        retained = {(a["org"], a["app"]) for a in apps if any(v is not None for v in a["retention"].values())}
        return sorted((self.alerting.ruled_apps() & live) | retained)

    def position(self) -> int:
        """The position every view has reached (skipped ranges included: `Projector.reached`)."""
        return min(p.reached() for p in self.projectors)

    def catch_up(
        self,
        stop: int | None = None,
        progress: Callable[[int], None] | None = None,
        *,
        stops: Sequence[int | None] | None = None,
        batch_size: int = BATCH_SIZE,
        reached: Callable[[int], None] | None = None,
        skip_idle: int = 0,
        reader: ApplicationRecorder | None = None,
        observe: bool = True,
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
            skip_idle=skip_idle,
            reader=reader,
            observe=observe,
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
        self._observed_at = 0.0
        # What each committed batch touched, for the console's open pages (web/console/live.py, docs/adr/0052).
        self.feed = ChangeFeed()
        self.feed.position = self.reached
        self._thread = threading.Thread(target=self._run, name="projections", daemon=True)
        views.log.listeners.append(self.notify)
        # The log read through a connection pool of the runner's own: in a storm the handshakes' loads and saves
        # hold every connection of the log's pool, and the runner (and the lists waiting for it) queued behind
        # them for seconds (issue 32, PostgreSQL).
        self._reads = type(views.log.factory)(views.log.env)
        self.reader = self._reads.application_recorder()

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
                # Published batch by batch, and where it ends: a reader waiting for a position (`wait_for`)
                # need not wait for the end of a long catch-up (a peer's storm, a restart behind the log).
                # Back-to-back passes (a storm) trust where the views were left: reading each one's position
                # costs a turn of the hub per view, long in a storm; a view moved meanwhile refuses its batch.
                now = time.monotonic()
                observe = now - self._observed_at >= OBSERVE_EVERY_S
                self._observed_at = now if observe else self._observed_at
                self.views.catch_up(reached=self._publish, skip_idle=SKIP_IDLE, reader=self.reader,
                                    batch_size=RUNNER_BATCH_SIZE, observe=observe)
            except Exception as error:
                self.last_error = f"{type(error).__name__}: projections cannot read or write the store"
                log.warning("projections failed (%s); retrying", type(error).__name__)
                backoff = min(backoff * 2, 5.0)
                continue
            self.last_error = None
            backoff = self.poll_interval

    def _publish(self, reached: int) -> None:
        with self._changed:
            self.reached = reached
            self._changed.notify_all()
        try:
            self.feed.advance(reached, self.views.audit.touched)
        except Exception as error:  # a page not told of a change must not stop the views
            log.warning("the change feed could not read the audit view (%s)", type(error).__name__)

    def wait_for(self, position: int, timeout: float = 5.0) -> bool:
        """Block until every view has applied `position`; False on timeout."""
        deadline = time.monotonic() + timeout
        if self.reached >= position:
            return True
        if not self._thread.is_alive():  # not started (a command without a server) or stopped: nobody applies it
            return False
        self.notify()
        with self._changed:
            while self.reached < position:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def wait_for_log(self, timeout: float) -> bool:
        """Block until every view has applied what the event log holds now: appends of this process, of
        other workers and of other instances alike (docs/adr/0051); False on timeout."""
        if not self._thread.is_alive():  # not started (a command without a server): nobody would apply it
            return False
        return self.wait_for(int(self.reader.max_notification_id() or 0), timeout)

    def stop(self) -> None:
        self.feed.close()
        self.views.applications.cache.enabled = False
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._reads.close()
