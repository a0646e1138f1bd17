"""The composition root: the event log, the views and their runner, the actors, and what they are wired to
(alerting and its webhook, the append-time metric, the forwarder to peer instances). Built once by
`relay serve`; the web front end (web/wsgi.py) only reads it. The command line assembles nothing itself: its
offline commands and the worker supervisor open the store through `OfflineStore` below."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import gevent
import gevent.monkey
import pykka

from relay.actors import alerting, metrics, pykka_gevent, retention
from relay.actors.adapters.dataplane.client import DataPlanes
from relay.actors.adapters.forwarder import Forwarder
from relay.actors.adapters.oidc.verifier import TokenVerifier
from relay.actors.adapters.sinks import PAGERDUTY, SLACK
from relay.actors.application import ApplicationActor
from relay.actors.cluster import Cluster
from relay.actors.configuration.alerting import AlertingConfig, SinkConfig, WebhookConfig
from relay.actors.configuration.jobs import JobsConfig
from relay.actors.configuration.settings import Settings
from relay.actors.context import ActorContext
from relay.actors.directory import Directory
from relay.actors.edge_state import EdgeState
from relay.actors.heartbeats import InstanceTable
from relay.actors.instance import InstanceActor
from relay.actors.recovery import ADOPTED_REASON, RESTART_REASON
from relay.events.instance import RUNNING
from relay.events.refs import instance_ref
from relay.events.releases import RELEASE
from relay.projections import eventsourcing_recorders, pool_reconnect
from relay.projections.identity import Authenticator
from relay.projections.store.log import RelayLog
from relay.projections.views import ProjectionRunner, Views
from relay.wire.json_types import JSONObject

log = logging.getLogger("relay.runtime")

VERSION = RELEASE  # recorded in RelayInstance.Started: peers read it to gate new events (events/releases.py)
STOP_TIMEOUT_S = 30.0  # how long `relay serve` waits for the instance actor, then for all actors, to stop
ASK_TIMEOUT_S = 15.0  # how long alerting waits for an application actor's list of its executors


def install_third_party() -> None:
    """What Relay takes from its libraries beyond their public API, checked (and patched) once at start-up:
    capped PostgreSQL reconnect backoff, the eventsourcing recorder internals, pykka's actor loop under gevent."""
    pool_reconnect.install()
    eventsourcing_recorders.install()
    pykka_gevent.install()


def store_offload(postgres: bool) -> Callable[[Callable[[], object]], Any] | None:
    """Where the event log's append transactions run. SQLite: in gevent's threadpool (sqlite3 releases the
    GIL; on the hub, each commit would stop every greenlet). PostgreSQL: where they are called (psycopg waits
    cooperatively under gevent's monkey-patching; its pool and wait functions are the hub's). Without gevent
    (tests): where they are called."""
    if postgres or not gevent.monkey.is_module_patched("threading"):
        return None
    pool = gevent.get_hub().threadpool

    def caught(fn: Callable[[], object]) -> tuple[bool, Any]:
        try:
            return True, fn()
        except Exception as error:  # raised again in the caller (the threadpool would print each one)
            return False, error

    def offload(fn: Callable[[], object]) -> object:
        ok, value = pool.apply(caught, (fn,))
        if not ok:
            raise value
        return value

    return offload


class Runtime:
    def __init__(self, settings: Settings) -> None:
        install_third_party()
        self.settings = settings
        admin_token, _ = settings.ensure_admin_token()
        self.log = RelayLog(env=settings.store.event_store_env(), offload=store_offload(settings.store.is_postgres))
        self.views = Views(settings.store, self.log)
        self.runner = ProjectionRunner(self.views)
        self.ctx = ActorContext(
            log=self.log,
            views=self.views,
            runner=self.runner,
            instance_id=settings.instance_id,
            limits=settings.limits,
        )
        # Every append is timed (relay_event_append_seconds).
        self.log.save_observers.append(metrics.observe_append)
        self.directory = Directory(self._start_application)
        self.auth = Authenticator(admin_token, self.views.applications)
        # A person's token checked against the identity provider (RELAY_OIDC_ISSUER); None when OAuth is off.
        self.tokens: TokenVerifier | None = TokenVerifier.from_settings(settings)
        # Each application's client on its system database, when its data plane is configured (issue 15).
        self.data_planes = DataPlanes(private=(settings.data_dir,), allowed=settings.data_plane_references)
        self.instance: pykka.ActorRef[InstanceActor] | None = None
        self.stopping = False  # set by `relay serve` on SIGTERM: /readyz says so (web/transport/draining.py)
        # HA (always on: a single instance just sees itself): heartbeats, adoption of silent peers, and
        # (with RELAY_FORWARD_SECRET) calls to executors on other instances.
        self.table = InstanceTable(settings.store)
        # Ended console sessions and used forward nonces, shared by the cluster (actors/edge_state.py).
        self.edge_state = EdgeState(settings.store)
        # Routing reads the instances table at most every half of the slack between a beat and the timeout (a
        # second at most): per forwarded request, that read was a tenth of a worker's CPU (bench/FINDINGS.md).
        peers_ttl_s = min(1.0, (settings.instance_timeout_s - settings.heartbeat_interval_s) / 2)
        self.cluster = Cluster(self.ctx, self.table, settings.advertise_address, settings.advertise_port,
                               settings.instance_timeout_s, peers_ttl_s=peers_ttl_s)
        self.cluster.handlers.append(self._adopted)
        self.log.release_floor = self.cluster.release_floor
        self.cluster.rejoin_handlers.append(self._rejoined)
        self.forwarder: Forwarder | None = None
        if settings.forward_secret:
            self.forwarder = Forwarder(
                self.cluster, self.views.applications, settings.forward_secret,
                poll_s=settings.heartbeat_interval_s, max_bytes=2 * settings.limits.max_frame_bytes,
                scheme="https" if settings.tls_cert else "http",
                # Peers of a cluster commonly share a certificate or its private CA: trust both.
                cafiles=[f for f in (settings.ca_file, settings.tls_cert) if f is not None],
                inflight_limit=settings.limits.max_inflight_per_executor,
            )
        self.ctx.jobs = JobsConfig.from_settings(settings)
        self.ctx.alerting = self._alerting_config()

    def _alerting_config(self) -> AlertingConfig:
        settings = self.settings
        webhook = None
        if settings.alert_webhook_url:
            webhook = WebhookConfig(
                url=settings.alert_webhook_url, secret=settings.alert_webhook_secret,
                timeout_s=settings.alert_webhook_timeout_s, attempts=settings.alert_webhook_attempts,
            )
        sinks = []
        timeout_s, attempts = settings.alert_webhook_timeout_s, settings.alert_webhook_attempts
        if settings.alert_slack_webhook_url:
            sinks.append(SinkConfig(SLACK, settings.alert_slack_webhook_url, timeout_s=timeout_s, attempts=attempts))
        if settings.alert_pagerduty_routing_key:
            sinks.append(SinkConfig(PAGERDUTY, settings.alert_pagerduty_url,
                                    routing_key=settings.alert_pagerduty_routing_key, timeout_s=timeout_s,
                                    attempts=attempts))
        return AlertingConfig(
            webhook=webhook, peers=self._local_executors, remote=self.forwarder, sinks=tuple(sinks),
            data_plane=self._data_plane,
        )

    def _data_plane(self, org: str, app: str) -> object:
        """The application's data plane on this instance (StrandedVersion reads it), None without one."""
        return self.data_planes.get(org, app, self.views.applications.app_setting(org, app, "dataPlane"))

    def _local_executors(self, org: str, app: str) -> list[object]:
        """The live executors of an application connected to this instance (where an alert is delivered)."""
        if self.views.applications.app(org, app) is None:
            return []
        try:
            return self.directory.application_proxy(org, app).live_executors().get(timeout=ASK_TIMEOUT_S)
        except (pykka.ActorDeadError, pykka.Timeout):
            return []

    def _watch_applications(self) -> None:
        """Alerting and retention run in the application actors: start those of every application with
        rules or retention settings, so they are watched before any executor connects."""
        refs = list(self.directory.applications())
        refs += [self.directory.application(org, app) for org, app in self.views.watched_apps()]
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell({alerting.MESSAGE_KEY: "start"})
                ref.tell({retention.MESSAGE_KEY: "start"})

    def _start_application(self, org: str, app: str) -> pykka.ActorRef[ApplicationActor]:
        return ApplicationActor.start(self.ctx, org, app, remote=self.forwarder)

    def start(self) -> None:
        # Catch the views up before serving, so the first reads see the whole log.
        self.views.catch_up()
        self.runner.start()
        down_at = self._previous_run_end()  # before the instance beats and records its (re)start
        self.instance = InstanceActor.start(
            self.ctx, self.directory, self.settings.advertise_address, self.settings.advertise_port, VERSION,
            self.settings.default_org, cluster=self.cluster, heartbeat_interval_s=self.settings.heartbeat_interval_s,
        )
        # pykka runs on_start (the instance's start and the default organization recorded) in the actor's
        # thread, after start() returns; an ask is answered only after it, so the views wait for those events.
        self.instance.proxy().ensure_organization(self.settings.default_org).get(timeout=60)
        self.wait_for_views()
        self.resume_lifecycles(down_at=down_at)
        self._watch_applications()

    def _previous_run_end(self) -> datetime | None:
        """When this instance's previous run stopped accepting executors: its Stopped (a clean stop), else its
        last heartbeat (killed); None on a first start, or when neither is known."""
        me = self.ctx.instance_id
        try:
            aggregate = self.log.get(instance_ref(me))
            if aggregate is None:
                return None
            if aggregate.status != RUNNING and getattr(aggregate, "stopped_at", None) is not None:
                return aggregate.stopped_at
            row = next((r for r in self.table.rows() if r["instance"] == me), None)
        except Exception:
            log.warning("could not read when this instance last ran; grace periods count from disconnections")
            return None
        if row is None or float(row["heartbeat_at"]) <= 0:
            return None
        return datetime.fromtimestamp(float(row["heartbeat_at"]), UTC)

    def resume_lifecycles(self, timeout: float = 120.0, down_at: datetime | None = None) -> int:
        """Restart safety: rebuild grace timers and recoveries from the registry view, before any executor
        can connect. HEALTHY and DISCONNECTED records that do not come back are declared DEAD after their
        grace period (HEALTHY ones: a full one from now; DISCONNECTED ones: what was left of theirs at
        `down_at`, the previous run's end, from now: the downtime does not count); DEAD ones get their
        recovery (again). Returns how many records were taken over."""
        started_at = self.ctx.clock()
        by_app: dict[tuple[str, str], list[JSONObject]] = defaultdict(list)
        resumable: dict[str | None, bool] = {}
        for row in self.views.registry.unfinished():
            owner = row.get("instance")
            if owner not in resumable:
                resumable[owner] = self._resumable(owner)
            if resumable[owner]:
                by_app[(row["org"], row["app"])].append(row)
        for (org, app), rows in by_app.items():
            self.directory.application(org, app).proxy().adopt(rows, started_at, RESTART_REASON,
                                                               down_at).get(timeout=timeout)
        count = sum(len(rows) for rows in by_app.values())
        if count:
            log.info("resumed the lifecycle of %d executor record(s) in %d application(s)", count, len(by_app))
        return count

    def _resumable(self, owner: str | None) -> bool:
        """Records of this instance (or of none). Records of any other instance are the cluster's: a peer
        in the instances table is adopted by one survivor when it goes silent (or stops), one without a row
        by the beat's sweep (actors/cluster.py), so a restart never takes what an adoption takes."""
        if owner is None or owner == self.ctx.instance_id:
            return True
        if owner in {str(r["instance"]) for r in self.table.rows()}:
            return False
        return self.log.get(instance_ref(owner)) is None  # no such instance: nobody else will take them

    # -- HA -----------------------------------------------------------------------------------------
    def _adopted(self, org: str, app: str, executor_ids: list[str], peer: str) -> None:
        """The cluster adopted these executors from a silent peer: their records now say this instance
        (once our views include the LeaseAdopted); the application actor takes over their grace timers
        and recoveries as after a restart."""
        self.wait_for_views(timeout=10)
        wanted = set(executor_ids)
        rows = [r for r in self.views.registry.executors(org, app)
                if r["executor_id"] in wanted and r.get("instance") == self.ctx.instance_id]
        if not rows:
            return
        app_actor = self.directory.application(org, app).proxy()
        app_actor.adopt(rows, self.ctx.clock(), ADOPTED_REASON).get(timeout=120)
        log.info("took over the lifecycle of %d executor(s) of %s/%s from %s", len(rows), org, app, peer)

    def _rejoined(self) -> None:
        """We were declared gone while alive: our records went to the adopter. Drop what we watched and
        close our sockets: the executors reconnect (through the balancer) and their records follow them."""
        for ref in self.directory.applications():
            app_actor = ref.proxy()
            app_actor.forget_lifecycle().get(timeout=10)
            for executor in app_actor.live_executors().get(timeout=10):
                executor.ref.tell({"close": "relay instance rejoining its cluster: reconnect"})

    def wait_for_views(self, timeout: float = 5.0) -> bool:
        """Read-your-writes: wait until the views include everything this process appended."""
        return self.runner.wait_for(self.log.position, timeout)

    def ready(self) -> tuple[bool, str]:
        if self.stopping:
            return False, "stopping"
        try:
            self.log.recorder.max_notification_id()
        except Exception as error:
            return False, f"event store unreachable ({type(error).__name__})"
        if self.runner.last_error:
            return False, self.runner.last_error
        return True, "ok"

    def close_executors(self, timeout: float = 3.0) -> int:
        """Going away: send every executor socket of this instance a close frame (1001) and wait, at most
        `timeout` s, for them to be closed. Their records stay HEALTHY (no Disconnected per executor: see
        ExecutorActor.on_closed): the next start, or the peer that adopts this instance, watches them from then.
        Returns how many were still open."""
        refs = self.directory.connections()
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell({"going_away": "Relay is shutting down"})
        if refs:
            log.info("closing %d executor socket(s) (1001); their records stay HEALTHY for the next start",
                     len(refs))
        deadline = time.monotonic() + timeout
        while self.directory.connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.directory.connections())

    def stop(self) -> None:
        # A stop under thousands of executors keeps the hub busy closing their sockets for a while: wait for
        # the instance's Stopped, and for the actors, but never let a slow one stop the rest of the shutdown.
        self.stopping = True
        self.directory.close()  # from now on no application actor starts (one would outlive the stop)
        if self.instance is not None:
            try:
                self.instance.stop(timeout=STOP_TIMEOUT_S)
            except pykka.Timeout:
                log.warning("this instance's stop was not recorded within %g s", STOP_TIMEOUT_S)
        try:
            pykka.ActorRegistry.stop_all(timeout=STOP_TIMEOUT_S)
        except pykka.Timeout:
            log.warning("some actors did not stop within %g s", STOP_TIMEOUT_S)
        self.runner.stop()
        self.close()

    def close(self) -> None:
        """Let go of the stores. Alone (without start and stop): a start refused before anything was recorded."""
        self.data_planes.close()
        self.table.close()
        self.edge_state.close()
        self.views.close()
        self.log.close()


class OfflineStore:
    """The store as the composition root opens it, without actors, server or the views' runner: for the commands
    that read or rebuild it while no `relay serve` runs (`relay replay`, `relay events`) and for the worker
    supervisor, which creates its tables before the workers start. The event log is opened as `Runtime` opens
    it, except that appends run where they are called (nothing here appends on a gevent hub)."""

    def __init__(self, settings: Settings) -> None:
        install_third_party()
        self.settings = settings
        self.log = RelayLog(env=settings.store.event_store_env())
        self._views: Views | None = None

    @staticmethod
    def has_event_log(settings: Settings) -> bool:
        """Whether the store holds a Relay event log (asked before opening one, which would create it)."""
        return settings.store.log_exists(f"{RelayLog.name}_events")

    @staticmethod
    def live_instances(settings: Settings) -> list[str]:
        """Instances whose heartbeat is fresh (within RELAY_INSTANCE_TIMEOUT_S): a `relay serve` on this store.
        A clean stop zeroes its beat, so only a running (or just killed) server counts."""
        table = InstanceTable(settings.store)
        try:
            rows = table.rows()
        finally:
            table.close()
        now = time.time()
        return [str(r["instance"]) for r in rows if now - float(r["heartbeat_at"]) <= settings.instance_timeout_s]

    def views(self) -> Views:
        """The views over this log (made once; closed with the store)."""
        if self._views is None:
            self._views = Views(self.settings.store, self.log)
        return self._views

    def create_tables(self) -> None:
        """Create every table `relay serve` uses (the log's, the views', the instance table, the edge state's), and
        nothing else: two workers creating one at once on a new database collide in PostgreSQL's catalog."""
        self.views()
        InstanceTable(self.settings.store).close()
        EdgeState(self.settings.store).close()

    def close(self) -> None:
        views, self._views = self._views, None
        try:
            if views is not None:
                views.close()
        finally:
            self.log.close()

    def __enter__(self) -> OfflineStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
