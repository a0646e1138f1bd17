"""actors/identity_claim.py: when a start may take its identity (issue 29, point 2), on a simulated clock."""

from __future__ import annotations

from typing import Any

import pytest

from relay.actors.identity_claim import IdentityInUse, claim_identity

ME = "relay-one"


class Table:
    """An instances table whose row for ME beats every `beat_every_s` of simulated time (never when None)."""

    def __init__(self, clock: list[float], heartbeat_at: float | None, beat_every_s: float | None = None) -> None:
        self.clock, self.heartbeat_at, self.beat_every_s = clock, heartbeat_at, beat_every_s

    def rows(self) -> list[dict[str, Any]]:
        if self.heartbeat_at is None:
            return []
        every = self.beat_every_s
        if every is not None and self.heartbeat_at > 0 and self.clock[0] - self.heartbeat_at >= every:
            self.heartbeat_at = self.clock[0]
        return [{"instance": ME, "address": "10.0.0.5", "port": 8090, "heartbeat_at": self.heartbeat_at}]


def claim(table: Table, clock: list[float]) -> float | None:
    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return claim_identity(table, ME, timeout_s=10.0, heartbeat_interval_s=2.0,  # type: ignore[arg-type]
                          wall=lambda: clock[0], clock=lambda: clock[0], sleep=sleep)


def test_no_row_a_clean_stop_or_a_stale_beat_leave_the_identity_free() -> None:
    clock = [1000.0]
    assert claim(Table(clock, None), clock) is None
    assert claim(Table(clock, 0.0), clock) is None  # Cluster.leave: a clean stop
    assert claim(Table(clock, 980.0), clock) is None  # 20 s old: past the 10 s window
    assert clock[0] == 1000.0  # none of them waited


def test_a_live_holder_is_refused_naming_its_address_and_the_age_of_its_beat() -> None:
    clock = [1000.0]
    with pytest.raises(IdentityInUse) as refused:
        claim(Table(clock, 999.0, beat_every_s=2.0), clock)
    assert "listens at 10.0.0.5:8090" in str(refused.value) and "beat 0.0 s ago" in str(refused.value)
    assert clock[0] <= 1001.5  # refused as soon as the beat moved


def test_a_fresh_beat_that_no_longer_moves_is_a_dead_holder_taken_over_within_two_intervals() -> None:
    clock = [1000.0]
    age = claim(Table(clock, 999.0), clock)
    assert age is not None and 5.0 <= age <= 6.5
    assert clock[0] - 1000.0 <= 2 * 2.0 + 1.0 + 0.2
