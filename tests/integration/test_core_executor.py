"""Issue 2, end to end: a real DBOS executor connects to a real `relay serve`, and everything it does is
recorded, served and replayable, on both stores (the embedded SQLite default and PostgreSQL).

One scenario per store, in the order an operator lives it:

1. start `relay serve`; register an application and issue a key through the Conductor v2 API;
2. start an unmodified DBOS Python executor (dbos 3.2.0, `executor_apps/minimal_app.py`) with that key;
   the executors list shows it HEALTHY with what the SDK reported about itself;
3. SIGKILL it: the list shows it DISCONNECTED;
4. the event log (`/relay/v1/events`) holds App.Registered, Organization.ApiKeyIssued, Executor.Connected
   and Executor.Disconnected with the right org/app/subject, and never the key or its hash;
5. `relay replay --verify` passes while the server runs and after it stopped; `relay replay` rebuilds,
   `--verify` passes again, and a restarted server answers the same executors list;
6. the server's log never contains the key (a refused handshake with the key in its path included).
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import requests

from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, ManagedProcess, RelayProcess

pytestmark = pytest.mark.integration

T = TypeVar("T")

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "minimal_app.py"
ORG = "local"
APP = "core-app"
KEY_NAME = "core-key"
DEADLINE_S = 45.0  # an upper bound only: idle, an executor connects in ~1.5 s and is seen gone in ~0.1 s
DBOS_VERSION = "3.2.0"


@dataclass
class Store:
    kind: str  # "sqlite" | "postgres"
    data_dir: Path
    database_url: str | None


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The store `relay serve` runs on: the embedded default (no RELAY_DATABASE_URL) or a fresh PG database."""
    data_dir = tmp_path / "relay-data"
    data_dir.mkdir()
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    return Store(kind=request.param, data_dir=data_dir, database_url=url)


def eventually(predicate: Callable[[], T], what: str, *procs: ManagedProcess, timeout: float = DEADLINE_S) -> T:
    """``wait_until`` whose failure quotes the logs of the processes involved."""
    try:
        return wait_until(predicate, timeout, message=what, ignore=(requests.RequestException,))
    except AssertionError as error:
        logs = "\n".join(f"--- {p.name} log ({p.log_path}):\n{p.log_tail(40)}" for p in procs)
        raise AssertionError(f"{error}\n{logs}") from None


def executors(relay: RelayProcess) -> list[dict[str, Any]]:
    response = relay.api("GET", f"/v2/orgs/{ORG}/apps/{APP}/executors")
    assert response.status_code == 200, response.text
    return response.json()


def executor_in(relay: RelayProcess, executor_id: str, status: str) -> dict[str, Any] | None:
    return next((e for e in executors(relay) if e["executorId"] == executor_id and e["status"] == status), None)


def by_event(entries: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["event"] == name]


def check_verify(relay: RelayProcess, when: str) -> None:
    result = relay.run_cli(["replay", "--verify"])
    assert result.returncode == 0, f"replay --verify {when}: {result.stdout}\n{result.stderr}"
    assert "verified" in result.stdout, f"replay --verify {when}: {result.stdout!r}"
    assert "MISMATCH" not in result.stdout


def test_executor_lifecycle_is_served_recorded_and_replayable(store: Store, tmp_path: Path) -> None:
    relay = RelayProcess(store.data_dir, database_url=store.database_url)
    executor: ExecutorProcess | None = None
    with relay:
        # The server runs on the store this case is about.
        if store.kind == "sqlite":
            assert f"(store sqlite:{store.data_dir})" in relay.log_text()
        else:
            assert "(store postgresql://" in relay.log_text()

        # 1. Register the application, issue its key: both through the API.
        response = relay.api("PUT", f"/v2/orgs/{ORG}/apps/{APP}", json={})
        assert response.status_code == 204, response.text
        # Pin the executor's state for the test's lifetime: a SIGKILLed executor is declared DEAD (and its
        # recovery dispatched) executorTimeoutSecs after it disconnected, 60 s by default, which a slow run
        # could reach before the restart check below.
        response = relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{APP}", json={"executorTimeoutSecs": 3600})
        assert response.status_code == 204, response.text
        response = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{KEY_NAME}", json={"appNames": [APP]})
        assert response.status_code == 201, response.text
        key = response.json()["token"]
        assert key.startswith("dbos_")
        key_hash = hashlib.sha256(key.encode()).hexdigest()
        assert executors(relay) == []

        # 2. A real DBOS executor, in its own process, with its SQLite system database in its own dir.
        executor_dir = tmp_path / "executor"
        executor = ExecutorProcess(
            APP_SCRIPT,
            cwd=executor_dir,
            name="executor",
            env={
                "APP_NAME": APP,
                "SYSTEM_DATABASE_URL": f"sqlite:///{executor_dir / 'dbos_system.sqlite'}",
                "CONDUCTOR_URL": relay.ws_url,
                "CONDUCTOR_KEY": key,
            },
        )
        try:
            executor.start()
            executor.wait_for_log("READY ", timeout=DEADLINE_S)
            ready_line = next(line for line in executor.log_text().splitlines() if line.startswith("READY "))
            reported = json.JSONDecoder().raw_decode(ready_line.removeprefix("READY "))[0]
            executor_id, app_version = reported["executor_id"], reported["app_version"]
            # With a conductor key, dbos 3.2.0 ignores DBOS__VMID and picks a fresh UUID per launch.
            assert executor_id and executor_id != "local"
            assert app_version

            healthy = eventually(
                lambda: executor_in(relay, executor_id, "HEALTHY"), "executor never HEALTHY", relay, executor
            )
            assert healthy["executorId"] == executor_id
            assert healthy["appVersion"] == app_version
            assert healthy["hostname"] == socket.gethostname()
            assert healthy["language"] == "python"
            assert healthy["dbosVersion"] == DBOS_VERSION
            assert healthy["executorMetadata"] is None
            assert healthy["createdAt"] and healthy["updatedAt"]
            assert (executor_dir / "dbos_system.sqlite").exists()
            assert len(executors(relay)) == 1

            # The same key, used for an application it may not reach, is refused at the handshake.
            refused = requests.get(
                f"{relay.base_url}/websocket/not-registered/{key}",
                headers={
                    "Connection": "Upgrade",
                    "Upgrade": "websocket",
                    "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                },
                timeout=10,
            )
            assert refused.status_code == 403
            assert key not in refused.text

            # 3. SIGKILL: no goodbye from the SDK, the socket just drops.
            assert executor.kill() == -9
        finally:
            executor.kill()
        disconnected = eventually(
            lambda: executor_in(relay, executor_id, "DISCONNECTED"), "executor never DISCONNECTED", relay, executor
        )
        assert len(executors(relay)) == 1
        assert disconnected["appVersion"] == app_version
        assert disconnected["hostname"] == socket.gethostname()
        assert disconnected["updatedAt"] >= healthy["updatedAt"]

        # 4. The event log.
        response = relay.api("GET", "/relay/v1/events", params={"limit": 1000})
        assert response.status_code == 200
        assert key not in response.text
        assert key_hash not in response.text
        entries = response.json()["events"]
        positions = [e["position"] for e in entries]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)

        (registered,) = by_event(entries, "App.Registered")
        assert (registered["org"], registered["app"], registered["subject"]) == (ORG, APP, APP)
        (issued,) = by_event(entries, "Organization.ApiKeyIssued")
        assert (issued["org"], issued["subject"]) == (ORG, ORG)
        assert issued["details"]["key_name"] == KEY_NAME
        assert issued["details"]["apps"] == [APP]
        assert "key_hash" not in issued["details"]
        (connected,) = by_event(entries, "Executor.Connected")
        assert (connected["org"], connected["app"], connected["subject"]) == (ORG, APP, executor_id)
        info = connected["details"]["info"]
        assert (info["language"], info["dbos_version"], info["application_version"], info["hostname"]) == (
            "python", DBOS_VERSION, app_version, socket.gethostname()
        )
        (gone,) = by_event(entries, "Executor.Disconnected")
        assert (gone["org"], gone["app"], gone["subject"]) == (ORG, APP, executor_id)
        assert registered["position"] < issued["position"] < connected["position"] < gone["position"]

        # ?app= keeps to the application's own events.
        response = relay.api("GET", "/relay/v1/events", params={"app": APP})
        assert response.status_code == 200
        app_events = response.json()["events"]
        assert {e["app"] for e in app_events} == {APP}
        assert [e["event"] for e in app_events if e["kind"] != "Operation"] == [
            "App.Registered", "App.SettingsChanged", "Executor.Connected", "Executor.Disconnected"
        ]
        # The API calls that made them are in the log too, each right after its change (issue 14).
        assert [e["details"]["operation"] for e in app_events if e["kind"] == "Operation"] == [
            "registerApp", "updateApp"
        ]

        # 5a. Verify against the live views while the server runs.
        check_verify(relay, "while the server runs")
        before_restart = executors(relay)

        # 6. The server never logged the key (nor its hash); the refusal was logged, redacted.
        eventually(
            lambda: "/websocket/not-registered/<redacted>" in relay.log_text(), "refusal not logged", relay
        )
        server_log = relay.log_text()
        assert key not in server_log
        assert key_hash not in server_log
        assert executor_id in server_log  # the log did see the executor come and go

        assert relay.stop() == 0

        # 5b. With the server stopped: verify, rebuild, verify.
        check_verify(relay, "after the server stopped")
        result = relay.run_cli(["replay"])
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
        assert "replayed" in result.stdout
        assert key not in result.stdout + result.stderr
        check_verify(relay, "after a rebuild")

        # 5c. A restarted server serves the rebuilt views: the same executors list.
        relay.start()
        assert executors(relay) == before_restart
        response = relay.api("GET", "/relay/v1/events", params={"app": APP})
        assert [e["event"] for e in response.json()["events"]] == [e["event"] for e in app_events]
        assert key not in relay.log_text()

    if store.kind == "postgres":
        # Everything went to PostgreSQL: tables there, no embedded event store beside the data dir.
        assert store.database_url is not None
        with psycopg.connect(store.database_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchone()
        assert row is not None and row[0] > 0
        assert not (store.data_dir / "events.sqlite").exists()
    else:
        assert (store.data_dir / "events.sqlite").exists()
