"""Hypothesis against the handshake limits of web/transport/limits.py, checked against naive models.

- ``HandshakeFailures`` (RELAY_HANDSHAKE_FAILURES_PER_MIN): for any interleaving of clock steps, failures and
  checks over a few addresses, an address is refused exactly when the model (every failure time kept, counted over
  the last window) has ``limit`` failures in the window; the wait it announces is exactly when the model lets it in
  again; other addresses are never affected; memory stays bounded by ``max_addresses``.
- ``ConnectionSlots`` (RELAY_MAX_CONNECTIONS): acquires and releases in any order never exceed the limit and never
  lose a slot.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.web.transport.limits import ConnectionSlots, HandshakeFailures, retry_after_header
from tests.fuzz.hypothesis_settings import fuzz
from tests.support.reliability_report import record

STATS: Counter[str] = Counter()
ADDRESSES = ["10.0.0.1", "10.0.0.2", "::1", "127.0.0.1"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


operations = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(min_value=0, max_value=90, allow_nan=False)),
        st.tuples(st.just("fail"), st.sampled_from(ADDRESSES)),
        st.tuples(st.just("check"), st.sampled_from(ADDRESSES)),
    ),
    max_size=120,
)


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["operations"]:
        record(
            "limits-0-model", area="Handshake rate limit and connection slots, against models (Hypothesis)",
            tried={"operation sequences": STATS["sequences"], "operations": STATS["operations"],
                   "refusals checked": STATS["refusals"]},
            outcome="refused exactly when the model says, for exactly the announced wait; other addresses "
                    "unaffected; slots never over the limit nor lost",
        )


@fuzz(300)
@given(ops=operations, limit=st.integers(min_value=1, max_value=6), window=st.floats(min_value=1, max_value=120))
def test_failures_are_refused_exactly_as_the_model_says(
    ops: list[tuple[str, object]], limit: int, window: float
) -> None:
    clock = Clock()
    limiter = HandshakeFailures(limit, window, clock=clock)
    failures: dict[str, list[float]] = defaultdict(list)  # the model: every failure, forever
    STATS["sequences"] += 1
    for op, arg in ops:
        STATS["operations"] += 1
        if op == "advance":
            clock.now += float(arg)  # type: ignore[arg-type]
            continue
        address = str(arg)
        if op == "fail":
            limiter.failed(address)
            failures[address].append(clock.now)
            continue
        recent = [t for t in failures[address] if t > clock.now - window]
        wait = limiter.retry_after(address)
        if len(recent) < limit:
            assert wait is None
            continue
        STATS["refusals"] += 1
        assert wait is not None
        # The address gets in again once enough of its failures left the window: the limit-th newest one.
        expected = sorted(recent)[-limit] + window - clock.now
        assert wait == pytest.approx(expected, abs=1e-6)
        assert int(retry_after_header(wait)) >= 1
    assert limiter.tracked() <= len(ADDRESSES)


@fuzz(100)
@given(addresses=st.integers(min_value=1, max_value=400), cap=st.integers(min_value=1, max_value=50))
def test_tracked_addresses_stay_bounded(addresses: int, cap: int) -> None:
    clock = Clock()
    limiter = HandshakeFailures(3, 60, clock=clock, max_addresses=cap)
    STATS["sequences"] += 1
    for n in range(addresses):
        STATS["operations"] += 1
        limiter.failed(f"192.0.2.{n}")
        assert limiter.tracked() <= cap
    # The newest addresses are the ones remembered.
    for n in range(max(0, addresses - cap), addresses):
        for _ in range(2):
            limiter.failed(f"192.0.2.{n}")
        assert limiter.retry_after(f"192.0.2.{n}") is not None


@fuzz(200)
@given(ops=st.lists(st.booleans(), max_size=200), limit=st.integers(min_value=1, max_value=20))
def test_slots_never_exceed_the_limit_nor_leak(ops: list[bool], limit: int) -> None:
    slots = ConnectionSlots(limit)
    held = 0
    STATS["sequences"] += 1
    for acquire in ops:
        STATS["operations"] += 1
        if acquire:
            got = slots.acquire()
            assert got == (held < limit)
            held += got
        elif held:
            slots.release()
            held -= 1
        assert slots.open == held <= limit
    for _ in range(held):
        slots.release()
    assert slots.open == 0
    assert all(slots.acquire() for _ in range(limit)) and not slots.acquire()
