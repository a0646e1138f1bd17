"""Issue 32 (point 4), against a real `relay serve`: the executors list is current. Executors connect at once; as
soon as an executor's handshake is recorded (its Executor.Connected is in the event log, read from the store
itself), the very next GET /v2/.../executors lists it: the list waits for the views to reach the log's end
(docs/adr/0051), so it never answers from a view that trails a handshake already made.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.fake_executor import FakeExecutor, create_key, executors, register_app, unique
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

EXECUTORS = 40
DEADLINE_S = 60.0


def recorded(relay: RelayProcess, executor_ids: set[str]) -> set[str]:
    """Those of `executor_ids` whose Executor.Connected the event log holds now (Relay's SQLite store, read
    directly: what the handshake wrote, not what a view says)."""
    with contextlib.closing(sqlite3.connect(relay.data_dir / "events.sqlite", timeout=10)) as conn:
        states = [bytes(row[0]) for row in conn.execute(
            "SELECT state FROM stored_events WHERE topic LIKE '%Executor.Connected'")]
    return {e for e in executor_ids if any(e.encode() in state for state in states)}


@pytest.fixture
def connected(relay: RelayProcess) -> Iterator[tuple[str, list[FakeExecutor]]]:
    """EXECUTORS fake executors of a new app, connecting all at once (each in a thread of its own)."""
    app = unique("current")
    register_app(relay, app)
    key = create_key(relay, unique("key"), appNames=[app])
    fakes = [FakeExecutor(relay, app, key) for _ in range(EXECUTORS)]
    threads = [threading.Thread(target=fake.connect_and_identify, daemon=True) for fake in fakes]
    for thread in threads:
        thread.start()
    try:
        yield app, fakes
    finally:
        for thread in threads:
            thread.join(timeout=DEADLINE_S)
        for fake in fakes:
            with contextlib.suppress(Exception):
                fake.close()


def test_an_executor_is_listed_by_the_first_list_after_its_handshake(
        relay: RelayProcess, connected: tuple[str, list[FakeExecutor]]) -> None:
    app, fakes = connected
    wanted = {fake.executor_id for fake in fakes}
    deadline = time.monotonic() + DEADLINE_S
    checks = 0
    while True:
        before = recorded(relay, wanted)  # handshakes recorded before the request below is sent
        listed = set(executors(relay, app))
        assert before <= listed, f"recorded but not listed: {sorted(before - listed)[:5]}"
        checks += bool(before)
        if before == wanted:
            break
        assert time.monotonic() < deadline, f"only {len(before)} of {EXECUTORS} handshakes recorded in time"
    assert checks >= 1
    assert all(row["status"] == "HEALTHY" for row in executors(relay, app).values())
