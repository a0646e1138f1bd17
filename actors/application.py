"""ApplicationActor: one per application; knows its live executors and runs its lifecycle commands.

It also owns the application's executor lifecycle on this instance (actors/recovery.py): grace timers
of disconnected executors and recovery dispatches of dead ones, to its own live executors only; and its
alerting (actors/alerting.py: rules evaluated every interval) and managed retention (actors/retention.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol

import pykka

from relay.actors import alerting, autoscale, retention
from relay.actors.context import ActorContext
from relay.actors.executor import ExecutorActor, LiveExecutor
from relay.actors.executor_messages import tell_request_then
from relay.actors.recovery import RESTART_REASON, AppLifecycle
from relay.actors.recovery_dispatch import MESSAGE_KEY
from relay.actors.routing import Publication
from relay.events.alerting import AlertingRule
from relay.events.application import DEFAULT_EXECUTOR_TIMEOUT_SECS, MAX_EXECUTOR_TIMEOUT_SECS, App
from relay.events.incidents import Incident
from relay.events.names import check_app_name
from relay.events.organization import Organization
from relay.events.refs import app_ref, incident_ref, org_ref, rule_ref
from relay.projections.store.log import RelayLog
from relay.wire.errors import PeerUnreachableError
from relay.wire.json_types import JSONObject
from relay.wire.requests import Request

log = logging.getLogger("relay.actors.application")


def create_organization_if_missing(relay_log: RelayLog, org: str, at: datetime) -> Organization:
    """The organization's record, created at ``at`` when it has none (the default organization at a start, an
    organization named by an API call or by a registration)."""
    return relay_log.ensure(org_ref(org), lambda: Organization.create(org, at))


def register_app(relay_log: RelayLog, org: str, name: str, at: datetime, by: str = "relay") -> App:
    """Register an application, its organization first when that has no record; AlreadyExistsError if the
    application is registered and not deleted (a deleted one is registered again)."""
    check_app_name(name)  # before the organization: a refused registration records nothing
    create_organization_if_missing(relay_log, org, at)
    return relay_log.run(app_ref(org, name), lambda found: App.register_on(found, org, name, at, by))


class RoutingBoard:
    """An ApplicationActor's live executors as routing reads them, without a message to the actor per HTTP
    request. The actor is the only writer: it publishes after each change of its executors, their marks or
    the latest version, swapping in a new Publication whole; readers take the current one. A reader sees what
    the actor had done when it read, as an answer to an ask would have shown."""

    _by_actor: ClassVar[weakref.WeakValueDictionary[str, RoutingBoard]] = weakref.WeakValueDictionary()

    def __init__(self, actor_urn: str, stopped: threading.Event) -> None:
        self.stopped = stopped
        self._current = Publication((), None)
        self._live: Iterable[LiveExecutor] = ()
        self._latest: str | None = None
        self._stale = False
        RoutingBoard._by_actor[actor_urn] = self

    def publish(self, live: Iterable[LiveExecutor], latest_version: str | None) -> None:
        """Mark the publication out of date; the next reader builds it. Building it here made a connect storm of
        N executors cost N tuples of up to N executors (quadratic, and garbage for the collector), while routing
        reads it only when a request comes. ``live`` is a view the actor keeps current (its dict's values)."""
        self._live, self._latest = live, latest_version
        self._stale = True

    @property
    def current(self) -> Publication:
        if self._stale:
            self._stale = False  # before building: a publish meanwhile marks it stale again
            self._current = Publication(tuple(self._live), self._latest)
        return self._current

    @staticmethod
    def of(ref: pykka.ActorRef[ApplicationActor]) -> RoutingBoard | None:
        """The board of a running ApplicationActor (None for another actor, or one that stopped)."""
        board = RoutingBoard._by_actor.get(ref.actor_urn)
        return board if board is not None and not board.stopped.is_set() else None


class RemotePeers(Protocol):
    """Executors of the application on other instances (HA), and a way to send them a request: Runtime
    passes actors/adapters/forwarder.py's Forwarder. `send` blocks until the peer instance answers; it raises
    PeerUnreachableError (or anything else) when the answer does not come back."""

    poll_s: float

    def executors(self, org: str, app: str) -> list[object]: ...

    def send(self, executor: object, org: str, app: str, request: object, timeout: float) -> object: ...


class ApplicationActor(pykka.ThreadingActor):
    def __init__(self, ctx: ActorContext, org: str, app: str, remote: RemotePeers | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.org = org
        self.app = app
        self.remote = remote
        self.live: dict[str, LiveExecutor] = {}
        # The application version executors reported as latest (list_application_versions);
        # routing prefers executors running it. None until an executor has told us.
        self.latest_version: str | None = None
        self.board = RoutingBoard(self.actor_urn, self.actor_stopped)
        self.lifecycle = AppLifecycle(
            org,
            app,
            log=ctx.log,
            instance_id=ctx.instance_id,
            clock=ctx.clock,
            scheduler=ctx.scheduler,
            grace_secs=self._grace_secs,
            recovery_timeout_s=ctx.limits.recovery_timeout_s,
            peers=lambda: list(self.live.values()),
            is_live=self.live.__contains__,
            latest_version=lambda: self.latest_version,
            send=self._send_recovery,
            forget=self._forget_request,
            post=self._post,
            remote_peers=(lambda: remote.executors(org, app)) if remote is not None else None,
            remote_poll_s=remote.poll_s if remote is not None else 2.0,
            max_per_peer=ctx.limits.recovery_max_per_peer,
        )
        self.alerting = alerting.AppAlerting(org, app, ctx=ctx, snapshot=self.routing_snapshot, post=self._post,
                                             mark_unsupported=self._tell_unsupported)
        self.retention = retention.AppRetention(org, app, ctx=ctx, snapshot=self.routing_snapshot,
                                                post=self._post, mark_unsupported=self._tell_unsupported)
        self.autoscale = autoscale.AppAutoscale(org, app, ctx=ctx, snapshot=self.routing_snapshot, post=self._post,
                                                mark_unsupported=self._tell_unsupported)
        self.jobs = {alerting.MESSAGE_KEY: self.alerting, retention.MESSAGE_KEY: self.retention,
                     autoscale.MESSAGE_KEY: self.autoscale}

    def on_start(self) -> None:
        for job in self.jobs.values():
            job.start()

    def on_receive(self, message: object) -> object:
        if isinstance(message, dict) and MESSAGE_KEY in message:
            try:
                self.lifecycle.handle(message)
            except Exception:
                # A told message has no caller to fail: an escaping error would stop this actor.
                log.exception("lifecycle of %s/%s failed handling %s", self.org, self.app, message[MESSAGE_KEY])
        elif isinstance(message, dict) and (key := next((k for k in self.jobs if k in message), None)):
            try:
                self.jobs[key].handle(message)
            except Exception:
                log.exception("the %s job of %s/%s failed handling %s", key, self.org, self.app, message)
        return None

    def on_stop(self) -> None:
        self.lifecycle.stop()
        for job in self.jobs.values():
            job.stop()

    # -- lifecycle commands (from the HTTP API) ---------------------------------------------------
    def register(self, by: str = "relay") -> App:
        return register_app(self.ctx.log, self.org, self.app, self.ctx.clock(), by)

    def change_settings(self, changes: JSONObject, by: str = "relay") -> App:
        at = self.ctx.clock()
        changed = self.ctx.log.change(app_ref(self.org, self.app), lambda app: app.change_settings(changes, at, by))
        grace = changed.settings["executorTimeoutSecs"]
        if "executorTimeoutSecs" in changes and isinstance(grace, int):  # an int: check_settings refuses others
            self.grace_changed(grace)
        return changed

    def grace_changed(self, grace_secs: int) -> None:
        """Executors already waiting count the new grace period from when they went (issue 34, ADR 0013): one
        that disconnected under a long value is not left waiting it out after it was lowered."""
        self.lifecycle.grace_changed(float(min(grace_secs, MAX_EXECUTOR_TIMEOUT_SECS)))

    def configure_data_plane(self, config: JSONObject | None, by: str = "relay") -> App:
        """Set (``config``) or remove (None) the application's data plane."""
        at = self.ctx.clock()
        if config is None:
            return self.ctx.log.change(app_ref(self.org, self.app), lambda app: app.remove_data_plane(at, by))
        return self.ctx.log.change(app_ref(self.org, self.app), lambda app: app.configure_data_plane(config, at, by))

    def set_autoscaling_policy(self, policy: JSONObject | None, by: str = "relay") -> App:
        """Store (``policy``) or clear (None) the application's autoscaling policy."""
        at = self.ctx.clock()
        if policy is None:
            return self.ctx.log.change(app_ref(self.org, self.app), lambda app: app.clear_autoscaling_policy(at, by))
        return self.ctx.log.change(app_ref(self.org, self.app), lambda app: app.set_autoscaling_policy(policy, at, by))

    def create_alerting_rule(
        self, rule_type: str, metadata: object, receiving_app: str | None, min_interval_secs: object, by: str = "relay",
        *, renotify_interval_secs: object = None,
    ) -> AlertingRule:
        rule_id, at = str(uuid.uuid4()), self.ctx.clock()

        def make() -> AlertingRule:
            rule = AlertingRule.create(self.org, self.app, rule_id, rule_type, metadata, receiving_app,
                                       min_interval_secs, at, by)
            if renotify_interval_secs is not None:  # its own event, only when asked for (events/releases.py)
                rule.set_renotify(renotify_interval_secs, at, by)
            return rule

        return self.ctx.log.create(rule_ref(self.org, self.app, rule_id), make)

    # -- incidents (issue 32): people acknowledge and silence them; the alerting job opens and resolves them
    def acknowledge_incident(self, rule_id: str, number: int, by: str) -> Incident:
        at = self.ctx.clock()
        return self.ctx.log.change(incident_ref(self.org, self.app, rule_id, number), lambda i: i.acknowledge(by, at))

    def silence_incident(self, rule_id: str, number: int, seconds: int, by: str) -> Incident:
        at = self.ctx.clock()
        return self.ctx.log.change(incident_ref(self.org, self.app, rule_id, number),
                                   lambda i: i.silence(at + timedelta(seconds=seconds), by, at))

    def unsilence_incident(self, rule_id: str, number: int, by: str) -> Incident:
        at = self.ctx.clock()
        return self.ctx.log.change(incident_ref(self.org, self.app, rule_id, number), lambda i: i.unsilence(by, at))

    def delete_alerting_rule(self, rule_id: str, by: str = "relay") -> AlertingRule:
        at = self.ctx.clock()
        return self.ctx.log.change(rule_ref(self.org, self.app, rule_id), lambda rule: rule.delete(at, by))

    def delete(self, by: str = "relay") -> App:
        at = self.ctx.clock()
        deleted = self.ctx.log.change(app_ref(self.org, self.app), lambda app: app.delete(at, by))
        self.close_executors("application deleted")  # a deleted application keeps no executors
        return deleted

    def close_executors(self, reason: str) -> None:
        for executor in list(self.live.values()):
            executor.ref.tell({"close": reason})

    # -- live executors ---------------------------------------------------------------------------
    def claim(self, executor: LiveExecutor) -> pykka.ActorRef[ExecutorActor] | None:
        """Make `executor` the current connection for its id; return the one it replaces."""
        previous = self.live.get(executor.executor_id)
        self.live[executor.executor_id] = executor
        self._publish()
        self.lifecycle.returned(executor.executor_id)  # back within its grace period, or after it
        return previous.ref if previous is not None and previous.ref != executor.ref else None

    def release(self, executor_id: str, ref: pykka.ActorRef[ExecutorActor]) -> bool:
        """Forget a closed connection; True when it was the current one for that executor id."""
        current = self.live.get(executor_id)
        if current is None or current.ref != ref:
            return False
        del self.live[executor_id]
        self._publish()
        return True

    def mark_unsupported(self, executor_id: str, message_type: str) -> None:
        current = self.live.get(executor_id)
        if current is not None:
            current.unsupported.add(message_type)
            self._publish()

    def live_executors(self) -> list[LiveExecutor]:
        return list(self.live.values())

    def note_latest_version(self, version: str | None) -> None:
        if version != self.latest_version:
            self.latest_version = version
            self._publish()

    def _publish(self) -> None:
        self.board.publish(self.live.values(), self.latest_version)

    def routing_snapshot(self) -> tuple[list[LiveExecutor], str | None]:
        """What routing needs, read in one message: the live executors and the latest version."""
        return list(self.live.values()), self.latest_version

    # -- the executor lifecycle (actors/recovery.py) ----------------------------------------------
    def executor_connected(self, executor_id: str) -> None:
        """Its Connected/Reconnected is recorded: a dead executor waiting for a peer may have one now."""
        if executor_id in self.live:
            self.lifecycle.peer_connected()

    def executor_disconnected(self, executor_id: str, at: datetime) -> None:
        """Its Disconnected is recorded (at `at`): its grace period starts."""
        if executor_id not in self.live:
            self.lifecycle.disconnected(executor_id, at)

    def rewatch(self, executor_id: str) -> None:
        """A connection of this executor was refused after its claim: watch its record as it stands."""
        self.lifecycle.rewatch(executor_id)

    def adopt(self, rows: list[JSONObject], started_at: datetime, reason: str = RESTART_REASON,
              down_at: datetime | None = None) -> None:
        """Take over registry rows (HEALTHY, DISCONNECTED, DEAD) after a restart or an adoption from a silent
        instance: see AppLifecycle.adopt."""
        self.lifecycle.adopt(rows, started_at, reason, down_at)

    def forget_lifecycle(self) -> None:
        """Drop every grace timer and dispatch (this instance was declared gone: its adopter runs them)."""
        self.lifecycle.stop()

    def lifecycle_snapshot(self) -> JSONObject:
        return self.lifecycle.snapshot()

    def _grace_secs(self) -> float:
        row = self.ctx.views.applications.app(self.org, self.app)
        value = row["settings"].get("executorTimeoutSecs") if row else None
        # An older log may hold a longer value than the bound set since: it waits the bound at most.
        return float(min(value or DEFAULT_EXECUTOR_TIMEOUT_SECS, MAX_EXECUTOR_TIMEOUT_SECS))

    def _post(self, message: JSONObject) -> None:
        try:
            self.actor_ref.tell(message)
        except pykka.ActorDeadError:
            log.debug("application actor %s/%s stopped; timer message dropped", self.org, self.app)

    def _send_recovery(
        self, peer: LiveExecutor, request: Request, on_answer: Callable[[object], None]
    ) -> None:
        # A recovery dispatch, or the exist_pending_workflows check that confirms its success.
        # Not waited for: the answer (or the peer's disconnect) comes back through `on_answer`.
        if getattr(peer, "remote", False) and self.remote is not None:
            self._send_remote(peer, request, on_answer)
            return
        try:
            tell_request_then(peer.ref, request, on_answer)
        except pykka.ActorDeadError as error:
            on_answer(error)

    def _tell_unsupported(self, executor_id: str, message_type: str) -> None:
        """From alerting/retention workers (not this actor's thread): mark it through a message."""
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.proxy().mark_unsupported(executor_id, message_type)

    def _send_remote(self, peer: Any, request: Request, on_answer: Callable[[object], None]) -> None:
        """Through the peer's instance (POST /internal/v1/forward/...), in a thread of its own (a greenlet
        under gevent): the actor goes on; the answer is told back like a local one."""
        remote = self.remote
        assert remote is not None
        timeout = self.ctx.limits.recovery_timeout_s

        def run() -> None:
            try:
                answer: object = remote.send(peer, self.org, self.app, request, timeout)
            except PeerUnreachableError as error:
                answer = error
            except Exception as error:
                answer = PeerUnreachableError(f"peer on instance {peer.instance} unreachable ({type(error).__name__})")
            on_answer(answer)

        threading.Thread(target=run, name=f"recovery-forward-{peer.executor_id}", daemon=True).start()

    def _forget_request(self, peer: LiveExecutor, request_id: str) -> None:
        if getattr(peer, "remote", False):
            return  # its instance forgets it when its own request timeout passes
        with contextlib.suppress(pykka.ActorDeadError):
            peer.ref.proxy().forget(request_id)
