"""Cluster membership: heartbeats in the instances table, and adopting a silent peer's executors.

Exactly one survivor adopts a peer: adoption records RelayInstance.Expired on the peer's own aggregate
together with a LeaseAdopted per executor the registry shows on the peer, in one transaction
(`adopt_instance`); the event store's version check on the peer's aggregate lets only one writer
append them. A peer beats before it records its (re)start, and the adopter checks its silence again after
loading the aggregates, so a peer that restarts meanwhile is never expired: a record is taken over either by
its own restarted instance or by one adopter, never both.

What else a beat does:
- an instance that finds itself EXPIRED (it was silent too long, yet lives: a stalled process, a store outage)
  rejoins: it records its restart and the rejoin handlers drop what it watched and close its sockets, so its
  executors reconnect and the adopter's timers see them come back;
- leftovers: registry rows still on an instance that has no heartbeat row. A legacy instance (one that never
  beat) is expired and adopted like a silent one; rows left on an EXPIRED instance (its adopter's view missed
  them) go to the instance responsible for it: its expirer, or, if that one was expired itself later, its
  expirer's expirer, and so on (`responsible`), so exactly one instance takes them whoever died meanwhile.

Also here: which HEALTHY executors of an application sit on other live instances (for forwarding and for
recovery across instances).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, ClassVar

from eventsourcing.persistence import IntegrityError

from relay.actors.context import ActorContext
from relay.actors.heartbeats import InstanceTable
from relay.events.errors import DomainError, NotFoundError
from relay.events.executor import HEALTHY
from relay.events.instance import EXPIRED, RUNNING, RelayInstance, lease_key
from relay.events.refs import instance_ref
from relay.events.releases import RELEASE, oldest
from relay.projections.store.log import RelayLog
from relay.wire.json_types import JSONObject

log = logging.getLogger("relay.cluster")

# Called with (org, app, executor ids, the instance they were on) after an adoption.
AdoptionHandler = Callable[[str, str, list[str], str], None]
# Called (in order) when this instance found itself expired by a peer, before it carries on.
RejoinHandler = Callable[[], None]

_STATUS_TTL_S = 1.0  # how long an instance's status read from its last event is reused by remote lookups
_VIEWS_WAIT_S = 10.0


def stale_instances(rows: list[dict[str, Any]], me: str, now: float, timeout_s: float) -> list[str]:
    """Peers whose last heartbeat is older than the timeout."""
    return [str(r["instance"]) for r in rows if r["instance"] != me and now - float(r["heartbeat_at"]) > timeout_s]


def responsible(expiries: list[dict[str, Any]], owner: str) -> str | None:
    """Who is responsible for what an EXPIRED instance still holds: the instance that expired it, unless that
    one was expired itself afterwards (then whoever expired it, from then on), and so on. `expiries`: every
    RelayInstance.Expired (instance, position, expired_by) of the instances view, oldest first. Positions
    only grow along the chain, so every instance reading the same log finds the same answer."""
    by_subject: dict[str, list[tuple[int, str]]] = {}
    for entry in expiries:
        by_subject.setdefault(str(entry["instance"]), []).append((int(entry["position"]), str(entry["expired_by"])))
    if not by_subject.get(owner):
        return None
    position, holder = by_subject[owner][-1]
    while True:
        later = [(p, by) for p, by in by_subject.get(holder, []) if p > position]
        if not later:
            return holder
        position, holder = later[0]


@dataclass
class RemoteExecutor:
    """A HEALTHY executor connected to another live instance, as routing and recovery see it."""

    remote: ClassVar[bool] = True
    executor_id: str
    application_version: str
    language: str
    dbos_version: str
    connected_at: float  # epoch seconds (a local executor's is monotonic: they are never compared)
    instance: str
    address: str
    port: int
    unsupported: set[str] = field(default_factory=set)


def adopt_instance(relay_log: RelayLog, peer: str, by: str, leases: list[str], at: datetime,
                   still_silent: Callable[[], bool]) -> bool:
    """`by` declares `peer` gone and adopts `leases` from it: RelayInstance.Expired on the peer and one
    LeaseAdopted per lease on `by`, appended in ONE transaction (both or neither). The peer's aggregate
    version makes it exclusive: of several survivors, one appends, the others conflict, reload, and the
    domain refuses them (already EXPIRED). `still_silent` is asked after each load: a peer that beat
    again (it restarted: it beats before recording Restarted) is not expired. Returns whether we did."""
    def adopt() -> list[RelayInstance]:
        gone, adopter = relay_log.get(instance_ref(peer)), relay_log.get(instance_ref(by))
        if gone is None or adopter is None:
            raise NotFoundError(instance_ref(peer if gone is None else by).missing)
        if not still_silent():
            return []
        gone.expire(by, at)
        for lease in leases:
            adopter.adopt_lease(lease, peer, at)
        return [gone, adopter]

    return bool(relay_log.run_together(adopt))


def _adopt_leases(instance: RelayInstance, *, rows: list[dict[str, Any]], owner: str, at: datetime) -> None:
    """Move the leases of `rows` (executors recorded on `owner`) to `instance`."""
    for r in rows:
        instance.adopt_lease(lease_key(r["org"], r["app"], r["executor_id"]), owner, at)


def _epoch(value: object) -> float:
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return 0.0
    return 0.0


class Cluster:
    def __init__(
        self,
        ctx: ActorContext,
        table: InstanceTable,
        address: str,
        port: int,
        timeout_s: float,
        wall: Callable[[], float] = time.time,
        peers_ttl_s: float = 0.0,
    ) -> None:
        """`peers_ttl_s`: how long the instances table read for routing may be reused (routing asks per request;
        a reused row only makes a peer's beat look older, and the runtime keeps the TTL under the slack between
        RELAY_HEARTBEAT_INTERVAL_S and RELAY_INSTANCE_TIMEOUT_S, so a live peer still looks live)."""
        self.ctx = ctx
        self.table = table
        self.address = address
        self.port = port
        self.timeout_s = timeout_s
        self.wall = wall
        self.handlers: list[AdoptionHandler] = []
        self.rejoin_handlers: list[RejoinHandler] = []
        self._statuses: dict[str, tuple[float, str | None]] = {}
        self._unknown_owners: set[str] = set()
        self.peers_ttl_s = peers_ttl_s
        self._peer_rows: tuple[float, list[dict[str, Any]]] = (float("-inf"), [])

    @property
    def me(self) -> str:
        return self.ctx.instance_id

    def join(self) -> None:
        """Beat as a (re)started instance. Comes before the start is recorded (see the module doc)."""
        self.table.beat(self.me, self.address, self.port, self.wall(), started=True)

    def leave(self) -> None:
        """A clean stop: mark the heartbeat as stale at once so a peer adopts our executors now."""
        self.table.beat(self.me, self.address, self.port, 0.0)

    def beat(self) -> list[str]:
        """Refresh our heartbeat, rejoin if we were expired, adopt whichever silent peers we win, and take
        over leftovers we are responsible for; return the peers adopted."""
        now = self.wall()
        self.table.beat(self.me, self.address, self.port, now)
        if self.status_of(self.me, cached=False) == EXPIRED:
            self._rejoin()
        rows = self.table.rows()
        adopted = [peer for peer in stale_instances(rows, self.me, now, self.timeout_s) if self.adopt(peer)]
        self._sweep({str(r["instance"]) for r in self.table.rows()})
        return adopted

    # -- adoption ---------------------------------------------------------------------------------
    def adopt(self, peer: str) -> bool:
        aggregate = self.ctx.log.get(instance_ref(peer))
        if aggregate is None or aggregate.status == EXPIRED:
            self.table.remove(peer)
            return False
        # Make sure our views include everything the peer recorded before we read its executors.
        self._wait_for_views()
        rows = self.ctx.views.registry.held_by(peer)
        leases = [lease_key(r["org"], r["app"], r["executor_id"]) for r in rows]
        try:
            won = adopt_instance(self.ctx.log, peer, self.me, leases, self.ctx.clock(), lambda: self.silent(peer))
        except (DomainError, IntegrityError):
            return False  # another survivor won
        if not won:
            return False  # it beat again meanwhile: it lives (restarted)
        log.info("instance %s stopped heartbeating; %s adopts its %d executor(s)", peer, self.me, len(rows))
        self.table.remove(peer)
        self._statuses.pop(peer, None)
        self._hand_over(rows, peer)
        return True

    def silent(self, peer: str) -> bool:
        """Whether the peer has no heartbeat row, or one older than the timeout, right now."""
        now = self.wall()
        row = next((r for r in self.table.rows() if r["instance"] == peer), None)
        return row is None or now - float(row["heartbeat_at"]) > self.timeout_s

    def _hand_over(self, rows: list[dict[str, Any]], peer: str) -> None:
        by_app: dict[tuple[str, str], list[str]] = {}
        for row in rows:
            by_app.setdefault((row["org"], row["app"]), []).append(row["executor_id"])
        for (org, app), executor_ids in by_app.items():
            for handler in self.handlers:
                try:
                    handler(org, app, executor_ids, peer)
                except Exception:
                    log.exception("taking over the executors of %s/%s from %s failed", org, app, peer)

    def _rejoin(self) -> None:
        log.warning("instance %s was declared gone by a peer while it still ran; rejoining", self.me)
        self._statuses.pop(self.me, None)
        for handler in self.rejoin_handlers:
            try:
                handler()
            except Exception:
                log.exception("rejoining the cluster failed in a handler")

    def _sweep(self, listed: set[str]) -> None:
        """Registry rows on instances without a heartbeat row (see the module doc)."""
        owners = [o for o in self.ctx.views.registry.holders() if o and o != self.me and o not in listed]
        if not owners:
            return
        self._wait_for_views()
        expiries: list[JSONObject] | None = None
        for owner in owners:
            status = self.status_of(owner, cached=False)
            if status is None:
                if owner not in self._unknown_owners:
                    self._unknown_owners.add(owner)
                    log.warning("executors are recorded on instance %s, which never started", owner)
                continue
            if status != EXPIRED:
                self.adopt(owner)  # it never beat (an older Relay), or its row went: adopt it like a silent one
                continue
            if expiries is None:
                expiries = self.ctx.views.instances.expiries()
            if responsible(expiries, owner) == self.me:
                self._take_leftovers(owner)

    def _take_leftovers(self, owner: str) -> None:
        rows = self.ctx.views.registry.held_by(owner)
        if not rows:
            return
        at = self.ctx.clock()
        try:
            self.ctx.log.change(instance_ref(self.me), partial(_adopt_leases, rows=rows, owner=owner, at=at))
        except DomainError as error:
            log.warning("could not take over what %s left: %s", owner, error)
            return
        log.info("%s takes over %d executor(s) left on expired instance %s", self.me, len(rows), owner)
        self._hand_over(rows, owner)

    def _wait_for_views(self) -> None:
        self.ctx.runner.wait_for(self.ctx.log.recorder.max_notification_id() or 0, timeout=_VIEWS_WAIT_S)

    # -- who is where -----------------------------------------------------------------------------
    def status_of(self, instance: str, *, cached: bool = True) -> str | None:
        """RUNNING, STOPPED or EXPIRED, from the instances view; None for an instance that never started.
        `cached`: an answer up to a second old will do (routing asks it per request); otherwise the view is
        first brought up to the log's end, so the answer includes every event appended before the call."""
        now = time.monotonic()
        if cached:
            hit = self._statuses.get(instance)
            if hit is not None and now - hit[0] < _STATUS_TTL_S:
                return hit[1]
        else:
            self._wait_for_views()
        status = self.ctx.views.instances.status_of(instance)
        self._statuses[instance] = (now, status)
        return status

    def live_peers(self) -> dict[str, JSONObject]:
        """Other instances with a fresh heartbeat, by id (their instances-table rows)."""
        now = self.wall()
        read_at, rows = self._peer_rows
        if time.monotonic() - read_at >= self.peers_ttl_s:
            rows = self.table.rows()
            self._peer_rows = (time.monotonic(), rows)
        return {
            str(r["instance"]): r for r in rows
            if r["instance"] != self.me and now - float(r["heartbeat_at"]) <= self.timeout_s
        }

    def release_floor(self) -> str:
        """The oldest release among this instance and the live peers (events/releases.py: what may be written).
        A peer that beats but has not recorded its start yet counts as the first release: the cautious guess."""
        peers = self.live_peers()
        found = self.ctx.views.instances.releases_of(sorted(peers)) if peers else {}
        return oldest([RELEASE, *found.values()])

    def remote_executors(self, org: str, app: str) -> list[RemoteExecutor]:
        """HEALTHY executors of the application on other RUNNING instances whose heartbeat is fresh."""
        peers = self.live_peers()
        if not peers:
            return []
        rows = (self._remote(row, peers) for row in self.ctx.views.registry.executors(org, app))
        return [r for r in rows if r is not None]

    def remote_executor(self, org: str, app: str, executor_id: str) -> RemoteExecutor | None:
        """One executor, if it is HEALTHY on another live instance: a call for a named executor reads its one row,
        not the application's every executor (thousands, per forwarded request)."""
        peers = self.live_peers()
        row = self.ctx.views.registry.executor(org, app, executor_id) if peers else None
        return self._remote(row, peers) if row is not None else None

    def _remote(self, row: Mapping[str, object], peers: dict[str, dict[str, Any]]) -> RemoteExecutor | None:
        owner = row.get("instance")
        if row["status"] != HEALTHY or owner not in peers or self.status_of(str(owner)) != RUNNING:
            return None
        peer = peers[str(owner)]
        return RemoteExecutor(
            executor_id=str(row["executor_id"]),
            application_version=str(row.get("app_version") or ""),
            language=str(row.get("language") or ""),
            dbos_version=str(row.get("dbos_version") or ""),
            connected_at=_epoch(row.get("connected_at")),
            instance=str(owner),
            address=str(peer["address"]),
            port=int(peer["port"]),
        )
