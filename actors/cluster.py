"""Cluster membership: heartbeats in the instances table, and adopting a silent peer's executors.

Exactly one survivor adopts a peer: adoption starts by recording RelayInstance.Expired on the peer's
own aggregate, and the event store's version check lets only one writer append that event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from eventsourcing.persistence import IntegrityError

from actors.context import ActorContext
from actors.heartbeats import InstanceTable
from events.errors import DomainError
from events.instance import EXPIRED, lease_key

log = logging.getLogger("relay.cluster")

# Called with (org, app, executor ids, the instance they were on) after an adoption.
AdoptionHandler = Callable[[str, str, list[str], str], None]


def stale_instances(rows: list[dict[str, Any]], me: str, now: float, timeout_s: float) -> list[str]:
    """Peers whose last heartbeat is older than the timeout."""
    return [str(r["instance"]) for r in rows if r["instance"] != me and now - float(r["heartbeat_at"]) > timeout_s]


class Cluster:
    def __init__(
        self,
        ctx: ActorContext,
        table: InstanceTable,
        address: str,
        port: int,
        timeout_s: float,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.address = address
        self.port = port
        self.timeout_s = timeout_s
        self.wall = wall
        self.handlers: list[AdoptionHandler] = []

    @property
    def me(self) -> str:
        return self.ctx.instance_id

    def join(self) -> None:
        self.table.beat(self.me, self.address, self.port, self.wall(), started=True)

    def leave(self) -> None:
        """A clean stop: mark the heartbeat as stale at once so a peer adopts our executors now."""
        self.table.beat(self.me, self.address, self.port, 0.0)

    def beat(self) -> list[str]:
        """Refresh our heartbeat and adopt whichever silent peers we win; return those adopted."""
        now = self.wall()
        self.table.beat(self.me, self.address, self.port, now)
        adopted = []
        for peer in stale_instances(self.table.rows(), self.me, now, self.timeout_s):
            if self.adopt(peer):
                adopted.append(peer)
        return adopted

    def adopt(self, peer: str) -> bool:
        aggregate = self.ctx.log.instance(peer)
        if aggregate is None or aggregate.status == EXPIRED:
            self.table.remove(peer)
            return False
        at = self.ctx.clock()
        try:
            self.ctx.log.update_instance(peer, lambda i: i.expire(self.me, at))
        except (DomainError, IntegrityError):
            return False  # another survivor won
        log.info("instance %s stopped heartbeating; %s adopts its executors", peer, self.me)
        # Make sure our views include everything the peer recorded before we read its executors.
        self.ctx.runner.wait_for(self.ctx.log.recorder.max_notification_id() or 0, timeout=10)
        rows = self.ctx.views.registry.held_by(peer)
        if rows:
            self.ctx.log.update_instance(
                self.me,
                lambda i: [i.adopt_lease(lease_key(r["org"], r["app"], r["executor_id"]), peer, at) for r in rows],
            )
        self.table.remove(peer)
        by_app: dict[tuple[str, str], list[str]] = {}
        for row in rows:
            by_app.setdefault((row["org"], row["app"]), []).append(row["executor_id"])
        for (org, app), executor_ids in by_app.items():
            for handler in self.handlers:
                handler(org, app, executor_ids, peer)
        return True
