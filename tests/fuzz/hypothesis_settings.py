"""Hypothesis settings shared by the fuzz tests.

Examples are bounded (the whole suite runs on 2 cores), random on every run, with no example database written
(a failure prints the failing example and a blob to reproduce it with ``@reproduce_failure``), and without
Hypothesis's deadline (a loaded CI machine is not a bug). ``RELAY_FUZZ_EXAMPLES`` multiplies every bound, e.g.
``RELAY_FUZZ_EXAMPLES=20`` for a long local run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("RELAY_FUZZ_EXAMPLES", "1") or "1"))

BASE = settings(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def fuzz(examples: int) -> settings:
    """Settings for one property: at most ``examples`` (times RELAY_FUZZ_EXAMPLES) examples."""
    return settings(BASE, max_examples=examples * SCALE)
