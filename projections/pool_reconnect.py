"""PostgreSQL pools reconnect within seconds of the server coming back, however long it was away.

psycopg_pool retries a lost connection with exponential backoff (1 s, 2 s, 4 s, ... for up to
`reconnect_timeout`) and, while such an attempt is pending, counts it as one of the pool's connections: a
request then waits for the attempt's next turn instead of opening a new connection. After an outage of a
minute the next turn can be a minute away, and every request meanwhile times out with "couldn't get a
connection" (503) although the server is up again. Relay caps the delay between attempts instead: one
connection attempt every couple of seconds per missing connection costs the server nothing worth saving.
"""

from __future__ import annotations

import inspect

import psycopg_pool.pool
from psycopg_pool.base import AttemptWithBackoff

PINNED = "psycopg-pool 3.3.3"

MAX_RECONNECT_DELAY_S = 2.0


class CappedBackoff(AttemptWithBackoff):
    """psycopg_pool's backoff, never waiting more than MAX_RECONNECT_DELAY_S between attempts."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, MAX_RECONNECT_DELAY_S)


def install() -> None:
    """Make every psycopg_pool.ConnectionPool (eventsourcing's included) retry with the capped backoff.

    The pool module looks the class up by name when a connection is lost, so replacing the name there is
    enough; install() is idempotent, and refuses loudly a psycopg_pool that no longer works so."""
    if "AttemptWithBackoff(" not in inspect.getsource(psycopg_pool.pool) or not callable(
            getattr(AttemptWithBackoff, "update_delay", None)):
        raise RuntimeError(f"psycopg_pool changed since {PINNED}: its pool no longer makes AttemptWithBackoff "
                           "by name (projections/pool_reconnect.py caps its delay)")
    psycopg_pool.pool.AttemptWithBackoff = CappedBackoff  # type: ignore[misc]
