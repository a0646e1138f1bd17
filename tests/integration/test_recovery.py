"""Issue 4, end to end: workflows of a crashed DBOS executor complete on a healthy peer, through Relay.

Real `relay serve` (SQLite store), real DBOS 3.2.0 executors (`executor_apps/recovery_app.py`) sharing one
PostgreSQL system database, short timings (grace 2 s, ping every 0.5 s, pong deadline 2 s). The workflow
`paced` runs step `first`, step `waiting`, a durable sleep, step `last`; each step appends a line to a shared
effects file, so side effects are counted across processes. An executor is killed while its workflow sleeps.

- a dead executor's workflow finishes SUCCESS exactly once on a peer; the dead record is deleted;
- a peer that answers an error, one that drops the dispatch (closes) and one that never answers are each
  replaced by the next candidate, and a real executor takes over;
- with no peer online the executor stays DEAD until one connects;
- Relay restarting in between (with the executor HEALTHY, DISCONNECTED, DEAD, or its dispatch pending);
- peers of the dead executor's application_version are preferred over newer ones;
- liveness: a frozen executor (SIGSTOP: its TCP stays open) misses the pong deadline and is recovered.
"""

from __future__ import annotations

import json
import secrets
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import requests
import websocket

from tests.integration.fake_executor import FakeExecutor, create_key, executors, register_app
from tests.support import pg
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, ManagedProcess, RelayProcess

pytestmark = pytest.mark.integration

T = TypeVar("T")

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "recovery_app.py"
ORG = "local"
VERSION = "v1"
GRACE_S = 2
DEADLINE_S = 30.0
RELAY_ENV = {
    "RELAY_PING_INTERVAL_S": "0.5",
    "RELAY_PONG_TIMEOUT_S": "2",
    "RELAY_RECOVERY_TIMEOUT_S": "2",
}


# ------------------------------------------------------------------------------------------- scene


@dataclass
class Executor:
    name: str
    proc: ExecutorProcess
    executor_id: str = ""


@dataclass
class Scene:
    """One Relay, one application with a short grace period, executors sharing a system database."""

    relay: RelayProcess
    app: str
    key: str
    sysdb: str
    tmp: Path
    workflow_id: str = field(default_factory=lambda: f"wf-{secrets.token_hex(4)}")
    procs: list[ManagedProcess] = field(default_factory=list)
    fakes: list[FakePeer] = field(default_factory=list)

    @property
    def effects_file(self) -> Path:
        return self.tmp / "effects.txt"

    @property
    def trigger_file(self) -> Path:
        return self.tmp / "start-workflow"

    def executors(self, *specs: tuple[str, str, bool]) -> list[Executor]:
        """Start executors (name, application_version, runs the workflow) at once; wait until each is ready."""
        started = []
        for name, version, runs_workflow in specs:
            env = {
                "APP_NAME": self.app,
                "CONDUCTOR_URL": self.relay.ws_url,
                "CONDUCTOR_KEY": self.key,
                "SYSTEM_DATABASE_URL": self.sysdb,
                "APP_VERSION": version,
                "EFFECTS_FILE": str(self.effects_file),
                "PAUSE_S": "3",
            }
            if runs_workflow:
                env |= {"START_WORKFLOW": self.workflow_id, "TRIGGER_FILE": str(self.trigger_file)}
            proc = ExecutorProcess(APP_SCRIPT, cwd=self.tmp / name, name=name, env=env)
            self.procs.append(proc)
            started.append(Executor(name, proc.start()))
        for executor in started:
            executor.proc.wait_for_log("READY ", timeout=DEADLINE_S)
            line = next(x for x in executor.proc.log_text().splitlines() if x.startswith("READY "))
            executor.executor_id = json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"]
        for executor in started:
            self.eventually(lambda e=executor: self.status(e.executor_id) == "HEALTHY", f"{executor.name} HEALTHY")
        return started

    def fake(self, behaviour: str, version: str = VERSION) -> FakePeer:
        peer = FakePeer(self.relay, self.app, self.key, behaviour, version)
        self.fakes.append(peer)
        self.eventually(lambda: self.status(peer.executor_id) == "HEALTHY", f"fake {behaviour} HEALTHY")
        return peer

    def run_workflow_until_paused(self) -> None:
        """Let the workflow start and reach its sleep (its `first` step is then checkpointed)."""
        self.trigger_file.touch()
        self.eventually(lambda: self.effects("waiting"), "the workflow reached its pause")

    # -- reads

    def eventually(self, predicate: Callable[[], T], what: str, timeout: float = DEADLINE_S) -> T:
        try:
            return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))
        except AssertionError as error:
            logs = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.log_tail(30)}" for p in [self.relay, *self.procs])
            raise AssertionError(f"{error}\n{logs}") from None

    def status(self, executor_id: str) -> str | None:
        return executors(self.relay, self.app).get(executor_id, {}).get("status")

    def recoveries(self, executor_id: str) -> list[dict[str, Any]]:
        """This executor's recovery attempts, oldest first."""
        response = self.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{self.app}/recoveries")
        assert response.status_code == 200, response.text
        rows = [r for r in response.json()["recoveries"] if r["executorId"] == executor_id]
        return sorted(rows, key=lambda r: r["attempt"])

    def acknowledged(self, executor_id: str) -> list[dict[str, Any]]:
        return [r for r in self.recoveries(executor_id) if r["outcome"] == "acknowledged"]

    def effects(self, step: str) -> list[str]:
        """Executor ids that ran `step` of this scene's workflow, one per run."""
        if not self.effects_file.exists():
            return []
        lines = [line.split() for line in self.effects_file.read_text().splitlines()]
        return [exe for name, wf, exe in lines if name == step and wf == self.workflow_id]

    def workflow(self) -> dict[str, Any] | None:
        with psycopg.connect(self.sysdb, autocommit=True) as conn:
            row = conn.execute(
                "SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s", (self.workflow_id,)
            ).fetchone()
        return {"status": row[0], "executor_id": row[1]} if row else None

    def instance_restarts(self) -> list[dict[str, Any]]:
        response = self.relay.api("GET", "/relay/v1/events", params={"type": "RelayInstance.Restarted"})
        assert response.status_code == 200, response.text
        return response.json()["events"]

    def events_of(self, executor_id: str) -> list[dict[str, Any]]:
        response = self.relay.api("GET", "/relay/v1/events", params={"org": ORG, "app": self.app, "limit": 10000})
        assert response.status_code == 200, response.text
        return [e for e in response.json()["events"] if e["subject"] == executor_id]

    # -- the common ending

    def assert_recovered(self, dead: Executor, by: Executor) -> None:
        """The dead executor's workflow finished SUCCESS once, its last step on `by`; the record is gone."""
        self.eventually(lambda: self.acknowledged(dead.executor_id), f"recovery of {dead.name} acknowledged")
        [ack] = self.acknowledged(dead.executor_id)
        assert ack["peer"] == by.executor_id, ack
        self.eventually(lambda: (self.workflow() or {}).get("status") == "SUCCESS", "the workflow SUCCEEDED")
        assert self.workflow() == {"status": "SUCCESS", "executor_id": by.executor_id}
        assert self.effects("first") == [dead.executor_id]  # checkpointed on the dead one: not run again
        assert self.effects("last") == [by.executor_id]  # exactly once, on the peer
        self.eventually(lambda: dead.executor_id not in executors(self.relay, self.app), "dead record deleted")
        names = [e["event"] for e in self.events_of(dead.executor_id)]
        tail = names[names.index("Executor.DeclaredDead"):]
        assert tail[-3:] == ["Executor.RecoveryDispatched", "Executor.RecoveryAcknowledged", "Executor.Deleted"]
        assert names.count("Executor.DeclaredDead") == 1


class FakePeer:
    """A scripted executor connection that answers `recovery` as told: "error" (an error response),
    "close" (drops the socket on it), "silent" (never answers). Pings are answered by websocket-client."""

    def __init__(self, relay: RelayProcess, app: str, key: str, behaviour: str, version: str) -> None:
        self.behaviour = behaviour
        self.conn = FakeExecutor(relay, app, key, executor_id=f"fake-{behaviour}-{secrets.token_hex(3)}")
        request = self.conn.connect()
        self.conn.identify(request, application_version=version)
        self.executor_id = self.conn.executor_id
        self.recoveries: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        ws = self.conn.socket
        ws.settimeout(None)
        try:
            while True:
                opcode, frame = ws.recv_data_frame(control_frame=False)
                if opcode != websocket.ABNF.OPCODE_TEXT:
                    return
                message = json.loads(frame.data.decode())
                if message.get("type") != "recovery":
                    continue
                self.recoveries.append(message)
                if self.behaviour == "error":
                    ws.send(json.dumps({"type": "recovery", "request_id": message["request_id"], "success": False,
                                        "error_message": "recovery refused by the test"}))
                elif self.behaviour == "close":
                    ws.close(timeout=1)
                    return
        except (websocket.WebSocketException, OSError, ValueError):
            return

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def scene_factory(pg_url: str, tmp_path: Path) -> Iterator[Callable[..., Scene]]:
    """Build the scene (Relay started with `env` on top of RELAY_ENV); everything is stopped afterwards."""
    pg.migrate_dbos(pg_url)  # once, so executors can launch together
    scenes: list[Scene] = []

    def build(**env: str) -> Scene:
        relay = RelayProcess(tmp_path / "relay-data", env={**RELAY_ENV, **env}).start()
        app = f"rec-{secrets.token_hex(3)}"
        register_app(relay, app)
        response = relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{app}", json={"executorTimeoutSecs": GRACE_S})
        assert response.status_code == 204, response.text
        scene = Scene(relay, app, create_key(relay, f"{app}-key", appNames=[app]), pg_url, tmp_path)
        scenes.append(scene)
        return scene

    yield build
    for scene in scenes:
        for fake in scene.fakes:
            fake.close()
        for proc in scene.procs:
            proc.kill()
        scene.relay.stop()


# ------------------------------------------------------------------------------------------- tests


def test_dead_executors_workflow_finishes_once_on_a_peer(scene_factory: Callable[..., Scene]) -> None:
    scene = scene_factory()
    a, b = scene.executors(("a", VERSION, True), ("b", VERSION, False))
    scene.run_workflow_until_paused()
    a.proc.kill()

    scene.assert_recovered(a, by=b)
    [attempt] = scene.recoveries(a.executor_id)
    assert attempt["attempt"] == 1 and attempt["instance"] and attempt["finishedAt"]
    names = [e["event"] for e in scene.events_of(a.executor_id)]
    assert names == ["Executor.Connected", "Executor.Disconnected", "Executor.DeclaredDead",
                     "Executor.RecoveryDispatched", "Executor.RecoveryAcknowledged", "Executor.Deleted"]
    # B was never in doubt, and nothing crossed into other applications.
    assert scene.status(b.executor_id) == "HEALTHY"
    assert scene.recoveries(b.executor_id) == []


def test_failed_dispatches_fail_over_to_the_next_peer(scene_factory: Callable[..., Scene]) -> None:
    scene = scene_factory()
    # Connected before C, so ranked before it (same version, connected longer), in this order.
    refusing, dropping, silent = scene.fake("error"), scene.fake("close"), scene.fake("silent")
    a, c = scene.executors(("a", VERSION, True), ("c", VERSION, False))
    scene.run_workflow_until_paused()
    a.proc.kill()

    scene.assert_recovered(a, by=c)
    attempts = scene.recoveries(a.executor_id)
    assert [(r["peer"], r["outcome"]) for r in attempts] == [
        (refusing.executor_id, "failed"),
        (dropping.executor_id, "failed"),
        (silent.executor_id, "failed"),
        (c.executor_id, "acknowledged"),
    ]
    assert [r["attempt"] for r in attempts] == [1, 2, 3, 4]
    reasons = [r["reason"] for r in attempts[:3]]
    assert reasons == [
        "peer answered an error: recovery refused by the test",
        "peer disconnected before answering",
        "no answer within 2 s",
    ]
    for fake in (refusing, dropping, silent):
        assert [m["executor_ids"] for m in fake.recoveries[:1]] == [[a.executor_id]]


def test_without_a_peer_the_executor_stays_dead_until_one_connects(scene_factory: Callable[..., Scene]) -> None:
    scene = scene_factory()
    [a] = scene.executors(("a", VERSION, True))
    scene.run_workflow_until_paused()
    a.proc.kill()

    scene.eventually(lambda: scene.status(a.executor_id) == "DEAD", "a declared DEAD")
    assert scene.recoveries(a.executor_id) == []  # nobody to send it to
    assert (scene.workflow() or {}).get("status") == "PENDING"
    [b] = scene.executors(("b", VERSION, False))
    scene.assert_recovered(a, by=b)


@pytest.mark.parametrize("state", ["HEALTHY", "DISCONNECTED", "DEAD", "DISPATCHED"])
def test_recovery_survives_a_relay_restart(scene_factory: Callable[..., Scene], state: str) -> None:
    """Relay is SIGKILLed with A in `state`; the restarted Relay still declares A dead and recovers it."""
    # DISCONNECTED needs a grace period that outlasts the restart; DISPATCHED a dispatch that stays pending. The
    # restart after the kill waits two heartbeat intervals (and a margin) for the killed process's heartbeat to stand
    # still (actors/identity_claim.py): 2 s with 0.5 s beats, not 5 s with the default 2 s.
    scene = scene_factory(RELAY_RECOVERY_TIMEOUT_S="120", RELAY_HEARTBEAT_INTERVAL_S="0.5")
    grace = 8 if state == "DISCONNECTED" else GRACE_S
    response = scene.relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{scene.app}", json={"executorTimeoutSecs": grace})
    assert response.status_code == 204, response.text
    [a] = scene.executors(("a", VERSION, True))
    silent = scene.fake("silent") if state == "DISPATCHED" else None
    scene.run_workflow_until_paused()

    if state == "HEALTHY":
        scene.relay.kill()
        a.proc.kill()  # while Relay is down: nobody sees it go
    else:
        a.proc.kill()
        if state == "DISPATCHED":
            assert silent is not None
            scene.eventually(lambda: [r["outcome"] for r in scene.recoveries(a.executor_id)] == ["pending"],
                             "recovery dispatched to the silent peer")
        else:
            scene.eventually(lambda: scene.status(a.executor_id) == state, f"a {state}")
        killed_at = datetime.now(UTC)
        scene.relay.kill()
    scene.relay.start()

    [b] = scene.executors(("b", VERSION, False))
    scene.assert_recovered(a, by=b)
    attempts = scene.recoveries(a.executor_id)
    if state == "DISPATCHED":
        assert silent is not None
        assert [(r["peer"], r["outcome"], r["reason"]) for r in attempts] == [
            (silent.executor_id, "failed", "relay restarted before the peer answered"),
            (b.executor_id, "acknowledged", None),
        ]
    else:
        assert [(r["peer"], r["outcome"]) for r in attempts] == [(b.executor_id, "acknowledged")]
    events = {e["event"]: e for e in scene.events_of(a.executor_id)}
    if state == "HEALTHY":  # never seen going: recorded as gone when the restarted Relay gave up on it
        assert events["Executor.Disconnected"]["details"]["reason"] == "not reconnected after relay restart"
    if state == "DISCONNECTED":
        # Its grace period ran from its disconnection, less the downtime (nobody could reconnect then): what
        # was left of it when Relay was killed (known to its last heartbeat, every 0.5 s) runs from the restart.
        disconnected_at = datetime.fromisoformat(events["Executor.Disconnected"]["at"])
        dead_at = datetime.fromisoformat(events["Executor.DeclaredDead"]["at"])
        restarted_at = max(datetime.fromisoformat(e["at"]) for e in scene.instance_restarts())
        assert dead_at - disconnected_at >= timedelta(seconds=grace)
        used_before_the_kill = killed_at - disconnected_at
        assert dead_at >= restarted_at + timedelta(seconds=grace) - used_before_the_kill
        assert dead_at < restarted_at + timedelta(seconds=grace + 5)


def test_peers_of_the_same_version_are_preferred(scene_factory: Callable[..., Scene]) -> None:
    scene = scene_factory()
    # The newer one connects first: ranked by connection age alone it would be chosen.
    a, newer = scene.executors(("a", VERSION, True), ("newer", "v2", False))
    [same] = scene.executors(("same", VERSION, False))
    scene.run_workflow_until_paused()
    a.proc.kill()

    scene.assert_recovered(a, by=same)
    assert [r["peer"] for r in scene.recoveries(a.executor_id)] == [same.executor_id]
    assert scene.status(newer.executor_id) == "HEALTHY"


def test_a_frozen_executor_misses_its_pong_deadline_and_is_recovered(scene_factory: Callable[..., Scene]) -> None:
    scene = scene_factory()
    a, b = scene.executors(("a", VERSION, True), ("b", VERSION, False))
    scene.run_workflow_until_paused()
    assert a.proc.proc is not None
    a.proc.proc.send_signal(signal.SIGSTOP)  # its TCP connection stays open: no FIN, only silence
    try:
        disconnected = scene.eventually(
            lambda: [e for e in scene.events_of(a.executor_id) if e["event"] == "Executor.Disconnected"],
            "the frozen executor seen gone",
        )
        assert disconnected[0]["details"]["reason"] == "pong timeout"
    finally:
        # A frozen DBOS process also keeps its system-database transactions open, which blocks a peer's
        # recovery of its workflows until that connection dies: end it, as its host eventually would.
        a.proc.kill()
    scene.assert_recovered(a, by=b)


def test_relay_answers_an_executors_ping_while_pinging_it(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "relay-data", env=RELAY_ENV) as relay:
        app = f"rec-{secrets.token_hex(3)}"
        register_app(relay, app)
        with FakeExecutor(relay, app, create_key(relay, f"{app}-key", appNames=[app])) as fake:
            fake.connect_and_identify()
            fake.socket.settimeout(5)
            opcode, _ = fake.socket.recv_data_frame(control_frame=True)
            assert opcode == websocket.ABNF.OPCODE_PING  # Relay's liveness ping (answered by the client)
            fake.ping_pong(timeout=5)  # ours, answered by Relay
            fake.ping_pong(timeout=5)
        wait_until(lambda: next(iter(executors(relay, app).values()))["status"] == "DISCONNECTED", 10)

        # The recoveries endpoint: application.read on that app, a registered app.
        path = f"/relay/v1/orgs/{ORG}/apps/{app}/recoveries"
        assert relay.api("GET", path).json() == {"recoveries": []}
        connect_only = create_key(relay, f"{app}-ws", appNames=[app], permissions=["websocket.connect"])
        assert relay.api("GET", path, token=connect_only).status_code == 403
        assert relay.api("GET", path, token="").status_code == 401
        assert relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/no-such-app/recoveries").status_code == 404
        assert relay.api("GET", path, params={"limit": 0}).status_code == 422
