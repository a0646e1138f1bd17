"""Issue 29, point 2: a `relay serve` that cannot start writes nothing.

A second `relay serve` on a live one's port and data directory, or on another port with the live one's
identity (RELAY_INSTANCE_ID), exits 2 and leaves the event log as it was: the live instance stays RUNNING. A
restart after a kill -9 with the same identity still starts (its last heartbeat no longer moves).
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.procs import CLI_MODULE, RELAY_PYTHON, REPO_ROOT, RelayProcess, clean_env

pytestmark = pytest.mark.integration

IDENTITY = "relay-one"
ENV = {"RELAY_INSTANCE_ID": IDENTITY, "RELAY_HEARTBEAT_INTERVAL_S": "0.5", "RELAY_INSTANCE_TIMEOUT_S": "5"}


def event_count(data_dir: Path) -> int:
    with sqlite3.connect(f"file:{data_dir / 'events.sqlite'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT COUNT(*) FROM stored_events").fetchone()[0])


def instance_status(relay: RelayProcess) -> str:
    answer = relay.api("GET", "/relay/v1/instances")
    assert answer.status_code == 200, answer.text
    listed = answer.json()["instances"]
    mine = [r for r in listed if r["instanceId"] == IDENTITY]
    assert len(mine) == 1, listed
    return str(mine[0]["status"])


def second_serve(relay: RelayProcess, port: int) -> subprocess.CompletedProcess[str]:
    """Another `relay serve` with the live one's data directory and identity, on `port`, run to its end."""
    env = {**relay.relay_env(), "RELAY_PORT": str(port)}
    return subprocess.run([str(RELAY_PYTHON), "-m", CLI_MODULE, "serve"], env=clean_env(env), cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_second_serve_on_the_same_port_writes_nothing() -> None:
    with RelayProcess(env=ENV) as relay:
        relay.start()
        before = event_count(relay.data_dir)
        second = second_serve(relay, relay.port)
        assert second.returncode == 2, second.stderr
        assert "Address already in use" in second.stderr, second.stderr
        assert event_count(relay.data_dir) == before
        assert instance_status(relay) == "RUNNING"


def test_a_second_serve_with_the_same_identity_is_refused() -> None:
    with RelayProcess(env=ENV) as relay:
        relay.start()
        before = event_count(relay.data_dir)
        second = second_serve(relay, free_port())
        assert second.returncode == 2, second.stderr
        assert f"instance {IDENTITY} is already running" in second.stderr, second.stderr
        assert f"listens at 127.0.0.1:{relay.port}" in second.stderr, second.stderr
        assert " s ago" in second.stderr and "RELAY_INSTANCE_ID" in second.stderr, second.stderr
        assert event_count(relay.data_dir) == before
        assert instance_status(relay) == "RUNNING"


def test_a_restart_after_kill_9_takes_its_identity_back_at_once() -> None:
    with RelayProcess(env=ENV) as relay:
        relay.start()
        relay.kill()
        started = time.monotonic()
        relay.start()  # within the 5 s liveness window: its heartbeat is fresh, but no longer moves
        assert time.monotonic() - started < 5, "waited for the whole liveness window"
        assert instance_status(relay) == "RUNNING"
        assert "no longer beats" in relay.log_text()
