"""Recovery across application versions, end to end: real `relay serve`, real DBOS 3.2.0 executors
(`executor_apps/versioned_app.py`) sharing one PostgreSQL system database.

A DBOS executor recovers only the dead executor's PENDING workflows of its OWN application version, and answers
`success: true` whatever it found. So when A (v1) is SIGKILLed with PENDING workflows and the only peer is B
(v2), B's success must not delete A's record: Relay confirms with `exist_pending_workflows(A, v1)`, which says
they remain; the attempt is recorded failed (with why), A stays DEAD, visibly, and B is tried again in rounds.
When C (v1) connects, it gets the recovery, the check confirms nothing remains, the record is deleted and every
workflow completes, on C, exactly once.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import requests

from tests.integration.fake_executor import create_key, executors, register_app
from tests.support import pg
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

T = TypeVar("T")

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "versioned_app.py"
ORG = "local"
GRACE_S = 2
DEADLINE_S = 40.0
RELAY_ENV = {"RELAY_PING_INTERVAL_S": "0.5", "RELAY_PONG_TIMEOUT_S": "2", "RELAY_RECOVERY_TIMEOUT_S": "2"}
REMAIN = "peer answered success but workflows of version v1 remain pending"


class Scene:
    def __init__(self, relay: RelayProcess, sysdb: str, tmp: Path) -> None:
        self.relay = relay
        self.sysdb = sysdb
        self.tmp = tmp
        self.app = f"ver-{secrets.token_hex(3)}"
        register_app(relay, self.app)
        response = relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{self.app}", json={"executorTimeoutSecs": GRACE_S})
        assert response.status_code == 204, response.text
        self.key = create_key(relay, f"{self.app}-key", appNames=[self.app])
        self.workflows = [f"wf-{secrets.token_hex(4)}" for _ in range(3)]
        self.procs: list[ExecutorProcess] = []

    def start(self, name: str, version: str, *, workflows: bool = False) -> tuple[ExecutorProcess, str]:
        env = {
            "APP_NAME": self.app, "CONDUCTOR_URL": self.relay.ws_url, "CONDUCTOR_KEY": self.key,
            "SYSTEM_DATABASE_URL": self.sysdb, "APP_VERSION": version, "EFFECTS_FILE": str(self.effects_file),
            "PAUSE_S": "4",
        }
        if workflows:
            env["WORKFLOWS"] = ",".join(self.workflows)
        proc = ExecutorProcess(APP_SCRIPT, cwd=self.tmp / name, name=name, env=env)
        self.procs.append(proc)
        proc.start()
        proc.wait_for_log("READY ", timeout=DEADLINE_S)
        line = next(x for x in proc.log_text().splitlines() if x.startswith("READY "))
        ready = json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]
        assert ready["app_version"] == version
        executor_id = ready["executor_id"]
        self.eventually(lambda: self.status(executor_id) == "HEALTHY", f"{name} HEALTHY")
        return proc, executor_id

    @property
    def effects_file(self) -> Path:
        return self.tmp / "effects.txt"

    def eventually(self, predicate: Callable[[], T], what: str, timeout: float = DEADLINE_S) -> T:
        try:
            return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))
        except AssertionError as error:
            logs = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.log_tail(30)}" for p in [self.relay, *self.procs])
            raise AssertionError(f"{error}\n{logs}") from None

    def status(self, executor_id: str) -> str | None:
        return executors(self.relay, self.app).get(executor_id, {}).get("status")

    def recoveries(self, executor_id: str) -> list[dict[str, Any]]:
        response = self.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{self.app}/recoveries", params={"limit": 1000})
        assert response.status_code == 200, response.text
        return sorted((r for r in response.json()["recoveries"] if r["executorId"] == executor_id),
                      key=lambda r: r["attempt"])

    def events_of(self, executor_id: str) -> list[str]:
        response = self.relay.api("GET", "/relay/v1/events", params={"org": ORG, "app": self.app, "limit": 10000})
        assert response.status_code == 200, response.text
        return [e["event"] for e in response.json()["events"] if e["subject"] == executor_id]

    def rows(self) -> dict[str, tuple[str, str, str]]:
        """workflow id -> (status, executor_id, application_version) in the system database."""
        with psycopg.connect(self.sysdb, autocommit=True) as conn:
            found = conn.execute(
                "SELECT workflow_uuid, status, executor_id, application_version FROM dbos.workflow_status "
                "WHERE workflow_uuid = ANY(%s)", (self.workflows,),
            ).fetchall()
        return {row[0]: (row[1], row[2], row[3]) for row in found}

    def effects(self, step: str) -> list[tuple[str, str]]:
        if not self.effects_file.exists():
            return []
        lines = [line.split() for line in self.effects_file.read_text().splitlines()]
        return sorted((wf, exe) for name, wf, exe in lines if name == step)


@pytest.fixture
def scene(pg_url: str, tmp_path: Path) -> Iterator[Scene]:
    pg.migrate_dbos(pg_url)
    relay = RelayProcess(tmp_path / "relay-data", env=RELAY_ENV).start()
    built = Scene(relay, pg_url, tmp_path)
    try:
        yield built
    finally:
        for proc in built.procs:
            proc.kill()
        relay.stop()


def test_a_peer_of_another_version_does_not_lose_a_dead_executors_workflows(scene: Scene) -> None:
    a_proc, a = scene.start("a", "v1", workflows=True)
    _, b = scene.start("b", "v2")
    scene.eventually(lambda: len(scene.effects("begin")) == 3, "a's workflows began (checkpointed, sleeping)")
    a_proc.kill()  # SIGKILL: its workflows stay PENDING, owned by a

    # B (v2) gets the recovery and answers success, twice at least (retry rounds); nothing is lost.
    scene.eventually(
        lambda: [(r["peer"], r["outcome"]) for r in scene.recoveries(a)][:2] == [(b, "failed")] * 2,
        "two attempts on b, both failed",
    )
    attempts = scene.recoveries(a)
    assert all(r["peer"] == b and REMAIN in (r["reason"] or "") for r in attempts if r["outcome"] == "failed"), attempts
    assert scene.status(a) == "DEAD"  # the record stays, visibly
    assert "Executor.RecoveryAcknowledged" not in scene.events_of(a)
    assert scene.rows() == dict.fromkeys(scene.workflows, ("PENDING", a, "v1"))
    assert "Recovering 0 workflows for executor " + a in scene.procs[1].log_text()  # b really was asked
    assert scene.effects("finish") == []

    # An executor of v1 connects: it recovers them; then (and only then) the record is deleted.
    _, c = scene.start("c", "v1")
    scene.eventually(lambda: a not in executors(scene.relay, scene.app), "a's record deleted")
    acknowledged = [r for r in scene.recoveries(a) if r["outcome"] == "acknowledged"]
    assert [r["peer"] for r in acknowledged] == [c]
    assert all(r["peer"] == b for r in scene.recoveries(a) if r["outcome"] == "failed")
    scene.eventually(lambda: scene.rows() == dict.fromkeys(scene.workflows, ("SUCCESS", c, "v1")),
                     "every workflow SUCCEEDED on c")
    assert scene.effects("begin") == sorted((wf, a) for wf in scene.workflows)  # checkpointed: not run again
    assert scene.effects("finish") == sorted((wf, c) for wf in scene.workflows)  # exactly once, on c
    names = scene.events_of(a)
    assert names[-3:] == ["Executor.RecoveryDispatched", "Executor.RecoveryAcknowledged", "Executor.Deleted"]
    assert names.count("Executor.DeclaredDead") == 1
    assert scene.status(b) == "HEALTHY" and scene.status(c) == "HEALTHY"
