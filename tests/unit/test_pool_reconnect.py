"""PostgreSQL pools retry a lost server every couple of seconds, not with an ever-growing backoff."""

from __future__ import annotations

import inspect
import subprocess
import sys

import psycopg_pool.pool

from relay.projections.pool_reconnect import MAX_RECONNECT_DELAY_S, CappedBackoff, install


def test_the_delay_between_attempts_is_capped() -> None:
    attempt = CappedBackoff(timeout=300)
    delays = []
    for step in range(12):  # uncapped, the twelfth delay would be about 2**11 s
        attempt.update_delay(now=float(step))
        delays.append(attempt.delay)
    assert delays[0] <= 1.1
    assert max(delays) == MAX_RECONNECT_DELAY_S
    assert all(delay <= MAX_RECONNECT_DELAY_S for delay in delays)


def test_giving_up_still_follows_the_reconnect_timeout() -> None:
    attempt = CappedBackoff(timeout=10)
    attempt.update_delay(now=0.0)
    assert not attempt.time_to_give_up(9.9)
    assert attempt.time_to_give_up(10.0)


def test_every_pool_uses_it_once_installed() -> None:
    install()
    install()  # idempotent
    # psycopg_pool looks the class up by this name whenever a connection attempt fails.
    assert psycopg_pool.pool.AttemptWithBackoff is CappedBackoff
    assert "AttemptWithBackoff(" in inspect.getsource(psycopg_pool.pool), "psycopg_pool changed since 3.3.3"


def test_nothing_is_patched_on_import() -> None:
    code = ("import psycopg_pool.pool, relay.projections.pool_reconnect as p, relay.projections.views; "
            "assert psycopg_pool.pool.AttemptWithBackoff is not p.CappedBackoff")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
