"""The cyclic garbage collector's pace for a long-running `relay serve` (issue 16).

With CPython's default thresholds (700, 10, 10) a young collection runs every 700 container allocations and
each tenth of those scans the middle generation; once thousands of executors are held, the full collections
these trigger walk every live object (their actors, sockets, greenlets). In a 3,000-executor connect storm the
collector took 1.25 s of the relay's CPU on SQLite (0.88 s in 7 full collections) and 1.7 s on PostgreSQL,
a fifth of what admitting them cost. Fewer, larger young collections find the same garbage (a request's
cycles are short-lived) and trigger far fewer full ones: 0.45 s in the same storms. (`gc.freeze` of what
startup built made no measurable difference on top of this, so it is not done.)
"""

from __future__ import annotations

import gc

# Container allocations between young collections (CPython's default: 700), then young collections between
# middle ones, and middle ones between full ones (CPython also skips a full collection until the objects that
# survived since the last one are a quarter of all that are tracked).
THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Collect at the pace above from now on (called once startup is done)."""
    gc.set_threshold(*THRESHOLDS)
