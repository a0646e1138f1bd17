"""Before an instance records its (re)start: is its identity free, or is another live process using it?

Two processes with one RELAY_INSTANCE_ID on one store would each record the other's start and stop (issue 29),
so `relay serve` refuses to start while the identity's heartbeat row is fresh (younger than
RELAY_INSTANCE_TIMEOUT_S, the window after which the cluster declares an instance gone) and is still being
refreshed. A fresh row that stops moving belongs to a process that died without a clean stop (kill -9): a
live instance beats every RELAY_HEARTBEAT_INTERVAL_S, so a row not refreshed within two intervals (and a
margin) is taken over at once rather than after the whole window. A clean stop zeroes the row (Cluster.leave),
so a restart after it is never refused. See docs/adr (identity claim).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from relay.actors.heartbeats import InstanceTable

MARGIN_S = 1.0  # beyond two heartbeat intervals: a beat delayed by a busy store or a busy process
POLL_S = 0.1


class IdentityInUse(Exception):
    """Another live process holds this instance identity."""

    def __init__(self, instance: str, address: str, port: int, age_s: float) -> None:
        super().__init__(instance, address, port, age_s)
        self.instance, self.address, self.port, self.age_s = instance, address, port, age_s

    def __str__(self) -> str:
        return (f"instance {self.instance} is already running: it listens at {self.address}:{self.port} and "
                f"beat {self.age_s:.1f} s ago; stop it first, or give this process its own RELAY_INSTANCE_ID")


def _row(table: InstanceTable, instance: str) -> dict[str, Any] | None:
    return next((r for r in table.rows() if r["instance"] == instance), None)


def claim_identity(
    table: InstanceTable,
    instance: str,
    *,
    timeout_s: float,
    heartbeat_interval_s: float,
    wall: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float | None:
    """Raise IdentityInUse when a live process beats as `instance`. Returns None when the identity was free
    (no row, a stale one, or one a clean stop zeroed), else the age (s) of the dead holder's last beat."""
    row = _row(table, instance)
    if row is None:
        return None
    first = float(row["heartbeat_at"])
    if first <= 0 or wall() - first > timeout_s:
        return None
    deadline = clock() + 2 * heartbeat_interval_s + MARGIN_S
    while clock() < deadline:
        sleep(POLL_S)
        row = _row(table, instance)
        if row is None:
            return None  # adopted and removed by a peer meanwhile: gone
        beat = float(row["heartbeat_at"])
        if beat <= 0:
            return None  # stopped cleanly meanwhile
        if beat != first:
            raise IdentityInUse(instance, str(row["address"]), int(row["port"]), max(0.0, wall() - beat))
        if wall() - beat > timeout_s:
            return None
    return max(0.0, wall() - first)
