"""Issue 15, the data plane, with the current TypeScript and Go DBOS releases: @dbos-inc/dbos-sdk 5.3.0
(tests/integration/ts_current_app) and dbos-transact-golang v1.9.0 (go_current_app). Their conductor clients are
no longer open, so these apps never connect to Relay: Relay can reach them only through their system database.

Each case runs the real app on a fresh PostgreSQL system database (a finished ``greet``, a finished queued
``greet``, a ``gate`` left waiting) and a real ``relay serve`` with the app's data plane configured (read-write,
an ``env:`` reference). What the data plane reports about the database (``state.schemaVersion``) is checked
against the version the release is measured to write:

* TypeScript 5.3.0 writes schema 123, in the range dbos 3.4.0's ``DBOSClient`` reads: Relay lists the app's
  workflows, gets one and its steps, lists its queue and versions, and cancels the waiting gate; the app's own SDK
  then reads it CANCELLED and its run stops. A resume runs it again in the app (opened, it finishes there) and a
  fork of ``greet`` runs in the app too.
* Go v1.9.0 writes schema 130 (migrations 126-130 add a SUSPENDED workflow status: a suspend key, its indexes,
  a send_message that wakes it), newer than dbos 3.4.0 (the newest Python release) knows (125), and neither it nor
  the v2 API knows that status: the data plane refuses the database up front, reads and writes alike (422,
  "upgrade Relay"), and the app keeps running untouched (its gate is still PENDING).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from relay.actors.adapters.dataplane.schema import MIN_SCHEMA_VERSION
from tests.integration.sdk_apps import ORG, readable, ready_info
from tests.support import pg
from tests.support.ports import wait_until
from tests.support.procs import ManagedProcess, RelayProcess, clean_env

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

HERE = Path(__file__).parent
SERVED_FROM = "X-Relay-Served-From"
DEADLINE_S = 20.0


@dataclass(frozen=True)
class CurrentSdk:
    """One current SDK release's test app (built by `make test-deps`) and the schema version it writes."""

    key: str
    release: str  # as the app reports it (READY's dbos_version)
    tool: str
    artifact: Path
    argv: tuple[str, ...]
    schema_version: int  # dbos.dbos_migrations after the app launched, measured
    expected: str  # the data plane's state for that schema: "ready", or "refused" (outside the client's range)

    @property
    def queue(self) -> str:
        return f"{self.key}_queue"

    @property
    def app(self) -> str:
        """The Relay app's name, also the DBOS app's (the SDK scopes queue and version rows by it)."""
        return f"dpc-{self.key}"

    @property
    def env_name(self) -> str:
        return f"DPC_SYSDB_{self.key.upper()}"


TS_DIR = HERE / "ts_current_app"
GO_BIN = HERE / "go_current_app" / "bin" / "relay-go-current-app"
SDKS = (
    CurrentSdk("ts", "5.3.0", "node", TS_DIR / "node_modules" / ".installed", ("node", str(TS_DIR / "app.mjs")),
               123, "ready"),
    CurrentSdk("go", "v1.9.0", "go", GO_BIN, (str(GO_BIN),), 130, "refused"),
)  # fmt: skip


class CurrentApp(ManagedProcess):
    def __init__(self, sdk: CurrentSdk, env: dict[str, str], log_dir: Path) -> None:
        self.sdk, self.env, self.name = sdk, env, f"{sdk.key}-current"
        super().__init__(log_dir / f"{self.name}.log")

    def command(self) -> list[str]:
        return list(self.sdk.argv)

    def environment(self) -> dict[str, str]:
        return clean_env(self.env)

    def workdir(self) -> Path:
        return self.sdk.artifact.parent if self.sdk.key == "go" else TS_DIR


@dataclass
class World:
    sdk: CurrentSdk
    relay: RelayProcess
    app: CurrentApp
    control_port: int

    @property
    def base(self) -> str:
        return f"/v2/orgs/{ORG}/apps/{self.sdk.app}"

    @property
    def data_plane(self) -> str:
        return f"/relay/v1/orgs/{ORG}/apps/{self.sdk.app}/data-plane"

    def db(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        """A v2 call the system database must answer with ``status``; its JSON (None for an empty body)."""
        response = self.relay.api(method, self.base + path, timeout=30, **kwargs)
        assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text[:800]}"
        assert response.headers.get(SERVED_FROM) == "database", (method, path, dict(response.headers))
        return response.json() if response.content else None

    def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = requests.request(method, f"http://127.0.0.1:{self.control_port}{path}", json=body, timeout=10)
        assert response.status_code == 200, f"control {method} {path}: {response.status_code} {response.text}"
        return response.json()

    def start(self, workflow: str, arg: str, workflow_id: str, queue: str | None = None) -> str:
        body: dict[str, Any] = {"workflow": workflow, "args": [arg], "workflowId": workflow_id}
        if queue:
            body["queueName"] = queue
        return self.control("POST", "/start", body)["workflowId"]

    def app_status(self, workflow_id: str) -> str | None:
        """The workflow's status as the app's own SDK reads it."""
        return self.control("GET", f"/status/{workflow_id}")["status"]

    def wait_app_status(self, workflow_id: str, status: str) -> None:
        wait_until(lambda: self.app_status(workflow_id) == status, DEADLINE_S, interval=0.1,
                   message=f"the app never saw {workflow_id} {status}:\n{self.app.log_tail()}")  # fmt: skip

    def seen(self, event: str, workflow_id: str) -> list[dict[str, Any]]:
        return [s for s in self.control("GET", "/seen")["seen"]
                if s["event"] == event and s["workflow_id"] == workflow_id]  # fmt: skip

    def wait_seen(self, event: str, workflow_id: str, count: int = 1) -> list[dict[str, Any]]:
        return wait_until(lambda: (found := self.seen(event, workflow_id)) and len(found) >= count and found,
                          DEADLINE_S, interval=0.1,
                          message=f"the app never recorded {count} {event!r} of {workflow_id}:\n"
                                  f"{self.app.log_tail()}")  # fmt: skip

    def wait_db_status(self, workflow_id: str, status: str) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            found = self.db("GET", f"/workflows/{workflow_id}")
            return found if found["status"] == status else None

        return wait_until(reached, DEADLINE_S, interval=0.1, message=f"{workflow_id} never {status} in the database")


@pytest.fixture(scope="module")
def databases(pg_server: str) -> Iterator[dict[str, str]]:
    """One fresh system database per SDK, made before Relay starts (it reads `env:` references from its own
    environment)."""
    with pg.fresh_databases(pg_server, [sdk.key for sdk in SDKS]) as urls:
        yield urls


@pytest.fixture(scope="module")
def relay_env(databases: dict[str, str]) -> dict[str, str]:
    env = {sdk.env_name: databases[sdk.key] for sdk in SDKS}
    # The operator binds each reference to its application (RELAY_DATA_PLANE_REFERENCES).
    env["RELAY_DATA_PLANE_REFERENCES"] = " ".join(f"{ORG}/{sdk.app}=env:{sdk.env_name}" for sdk in SDKS)
    return env


@pytest.fixture(scope="module", autouse=True)
def _urls_are_secrets(relay: RelayProcess, databases: dict[str, str]) -> None:
    for url in databases.values():
        relay.remember_secret(url, "system database URL")  # never in its log


@pytest.fixture(params=SDKS, ids=[sdk.key for sdk in SDKS])
def world(request: pytest.FixtureRequest, relay: RelayProcess, databases: dict[str, str],
          tmp_path: Path) -> Iterator[World]:  # fmt: skip
    sdk: CurrentSdk = request.param
    if not sdk.artifact.exists():
        pytest.fail(f"{sdk.artifact} is missing: `make test-deps` builds the {sdk.key} current-release app")
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{sdk.app}", json={}).status_code == 204
    env = {"APP_NAME": sdk.app, "SYSTEM_DATABASE_URL": databases[sdk.key], "APP_VERSION": "v1", "CONTROL_PORT": "0"}
    app = CurrentApp(sdk, env, tmp_path)
    try:
        app.start()
        try:
            ready = ready_info(app, timeout=60)
        except Exception as exc:
            raise AssertionError(f"the {sdk.key} app never became READY:\n{app.log_tail()}") from exc
        assert (ready["dbos_version"], ready["app_version"]) == (sdk.release, "v1"), ready
        yield World(sdk, relay, app, ready["control_port"])
    finally:
        app.kill()
        relay.api("DELETE", f"/relay/v1/orgs/{ORG}/apps/{sdk.app}/data-plane")


def configure(w: World) -> dict[str, Any]:
    """The app's data plane, read-write, from `relay serve`'s environment; its state once it tried the database."""
    body = {"systemDatabaseUrlFrom": f"env:{w.sdk.env_name}", "mode": "read-write", "statementTimeoutMs": 10000,
            "poolSize": 2}  # fmt: skip
    response = w.relay.api("PUT", w.data_plane, json=body)
    assert response.status_code == 200, f"PUT data-plane: {response.status_code} {response.text}"

    def tried() -> dict[str, Any] | None:
        got = w.relay.api("GET", w.data_plane)
        assert got.status_code == 200, got.text
        state = got.json()["state"]
        return state if state["status"] in {"ready", "refused"} else None

    return wait_until(tried, DEADLINE_S, interval=0.1, message="the data plane never tried the database")


def managed(w: World, state: dict[str, Any], ids: dict[str, str]) -> None:
    """A database in range: read, cancel, resume and fork through Relay, each change seen by the app's SDK."""
    greet, queued, gate = ids["greet"], ids["queued"], ids["gate"]
    assert state["status"] == "ready", state
    supported = re.search(r"reads (\d+) to (\d+)", state["detail"])
    assert supported, state
    assert int(supported[1]) == MIN_SCHEMA_VERSION <= state["schemaVersion"] <= int(supported[2]), state

    listed = {wf["workflowId"]: wf for wf in w.db("GET", "/workflows")}
    assert {i: (listed[i]["workflowName"], listed[i]["status"]) for i in (greet, queued, gate)} == {
        greet: ("greet", "SUCCESS"), queued: ("greet", "SUCCESS"), gate: ("gate", "PENDING")}
    assert listed[queued]["queueName"] == w.sdk.queue
    assert {listed[i]["appVersion"] for i in (greet, queued, gate)} == {"v1"}
    found = w.db("GET", f"/workflows/{greet}")
    assert (found["workflowName"], found["status"]) == ("greet", "SUCCESS"), found
    assert "HELLO RELAY!" in readable(found["output"]), found
    assert [s["stepName"] for s in w.db("GET", f"/workflows/{greet}/steps")] == ["shout", "exclaim"]
    assert w.db("POST", "/workflows/search", json={"status": ["PENDING"]})[0]["workflowId"] == gate
    (queue,) = [q for q in w.db("GET", "/queues") if q["name"] == w.sdk.queue]
    assert queue["workerConcurrency"] == 2, queue
    assert [v["versionName"] for v in w.db("GET", "/versions")] == ["v1"]
    w.db("GET", "/workflows/no-such-workflow", 404)

    # Cancel: the app's run stops at its next step, and the app's SDK reads the workflow CANCELLED.
    w.db("POST", f"/workflows/{gate}/cancel", 204, json={})
    assert w.db("GET", f"/workflows/{gate}")["status"] == "CANCELLED"
    w.wait_seen("gate-stopped", gate)
    w.wait_app_status(gate, "CANCELLED")

    # Resume: the app runs it again (from its internal queue); opened, it finishes there.
    w.db("POST", f"/workflows/{gate}/resume", 204, json={})
    w.wait_seen("gate-started", gate, count=2)
    w.control("POST", "/open", {"label": "gated"})
    w.wait_seen("gate-finished", gate)
    w.wait_app_status(gate, "SUCCESS")
    assert "gated:opened" in readable(w.wait_db_status(gate, "SUCCESS")["output"])

    # Fork: a new workflow from the finished greet, run by the app.
    forked = w.db("POST", f"/workflows/{greet}/fork", 201, json={})["workflowId"]
    assert forked != greet
    assert w.wait_seen("greet", forked)[0]["result"] == "HELLO RELAY!"
    w.wait_app_status(forked, "SUCCESS")
    done = w.wait_db_status(forked, "SUCCESS")
    assert (done["forkedFrom"], done["workflowName"]) == (greet, "greet"), done


def refused(w: World, state: dict[str, Any], ids: dict[str, str]) -> None:
    """A schema newer than the pinned client knows: refused up front, for reads and writes, and nothing touched."""
    assert state["status"] == "refused", state
    assert f"schema version {w.sdk.schema_version} is newer than" in state["detail"], state
    assert "upgrade Relay" in state["detail"], state
    for method, path, body in (("GET", "/workflows", None), ("GET", f"/workflows/{ids['greet']}", None),
                               ("POST", f"/workflows/{ids['gate']}/cancel", {})):  # fmt: skip
        response = w.relay.api(method, w.base + path, json=body, timeout=30)
        assert (response.status_code, response.headers.get(SERVED_FROM)) == (422, "database"), (
            f"{method} {path}: {response.status_code} {response.text}")
        print(f"{method} {path}: {response.status_code} {response.text}")  # (the exact refusal, for -s)
        detail = response.json()["detail"]
        assert f"schema version {w.sdk.schema_version}" in detail and "upgrade Relay" in detail, detail
    # The refused cancel changed nothing: the gate still runs in the app.
    assert w.app_status(ids["gate"]) == "PENDING"
    assert w.seen("gate-stopped", ids["gate"]) == []
    again = w.relay.api("GET", w.data_plane).json()["state"]
    assert (again["status"], again["schemaVersion"]) == ("refused", w.sdk.schema_version), again


def test_a_current_sdks_app_is_managed_through_its_system_database(world: World) -> None:
    w = world
    key = w.sdk.key
    ids = {"greet": w.start("greet", "relay", f"dpc-{key}-greet"),
           "queued": w.start("greet", "queue", f"dpc-{key}-queued", queue=w.sdk.queue),
           "gate": w.start("gate", "gated", f"dpc-{key}-gate")}  # fmt: skip
    w.wait_app_status(ids["greet"], "SUCCESS")
    w.wait_app_status(ids["queued"], "SUCCESS")
    w.wait_seen("gate-started", ids["gate"])

    state = configure(w)
    print(f"\n{key} {w.sdk.release}: data plane {json.dumps(state)}")  # (the measured schema version, for -s)
    assert (state["status"], state["schemaVersion"]) == (w.sdk.expected, w.sdk.schema_version), state
    if w.sdk.expected == "refused":
        refused(w, state, ids)
    else:
        managed(w, state, ids)
