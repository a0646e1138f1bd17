"""Issue 16: `relay serve --workers 2` on PostgreSQL: two worker processes on one port (SO_REUSEPORT), each an
instance of one cluster (web/cli/workers.py), as real processes.

- refused: more than one worker on SQLite, `--workers 0`, a port someone already listens on (exit 2, clear);
- fake executors (tests/integration/fake_executor.py, kept connected and reconnecting like an SDK) connect
  through the one port and land on both workers (GET /relay/v1/instances); a call for any executor succeeds
  through either worker (forwarded to the other one's own port, signed) and through the public port;
- a real DBOS Python executor is reached through either worker;
- SIGKILL one worker: its executors reconnect to the survivors, its leases are adopted once, nobody is declared
  DEAD (they came back within the grace period), the supervisor starts it again as a new instance;
- SIGTERM to the supervisor stops every worker cleanly (exit 0, instances STOPPED); no secret in the log.

Timings: heartbeat 0.5 s, instance timeout 3 s, pings 0.5 s, pong deadline 2 s, grace 8 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import requests
import websocket

from tests.integration.fake_executor import (
    FakeExecutor,
    create_key,
    dbos_executor,
    executors,
    register_app,
    unique,
)
from tests.support import pg
from tests.support.ports import free_port, wait_until
from tests.support.procs import RelayProcess, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

T = TypeVar("T")
ORG = "local"
DEADLINE_S = 45.0
GRACE_S = 8
EXECUTORS = 12
RELAY_ENV = {
    "RELAY_HEARTBEAT_INTERVAL_S": "0.5",
    "RELAY_INSTANCE_TIMEOUT_S": "3",
    "RELAY_PING_INTERVAL_S": "0.5",
    "RELAY_PONG_TIMEOUT_S": "2",
    "RELAY_REQUEST_TIMEOUT_S": "10",
}


class Responder(threading.Thread):
    """A fake executor that stays connected as an SDK does: it answers `executor_info` (the handshake's and
    later ones), and reconnects with the same executor id whenever its socket drops."""

    def __init__(self, relay: RelayProcess, app: str, key: str) -> None:
        super().__init__(daemon=True)
        self.fake = FakeExecutor(relay, app, key)
        self.executor_id = self.fake.executor_id
        self.connects = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.fake.connect_and_identify()
                self.connects += 1
                while not self.stopping.is_set():
                    try:
                        frame = self.fake.recv_json(timeout=1.0)
                    except websocket.WebSocketTimeoutException:
                        continue
                    if frame.get("type") == "executor_info":
                        self.fake.identify(frame)
            except (websocket.WebSocketException, OSError, AssertionError):
                with contextlib.suppress(Exception):
                    self.fake.close()
                self.stopping.wait(0.2)

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(Exception):
            self.fake.close()


def children(pid: int) -> dict[int, str]:
    """The supervisor's worker processes: pid -> RELAY_INSTANCE_ID (from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) != pid:
                continue
            lines = (entry / "environ").read_bytes().decode().split("\0")
            env = dict(line.split("=", 1) for line in lines if "=" in line)
        except (OSError, ValueError):
            continue
        out[int(entry.name)] = env.get("RELAY_INSTANCE_ID", "")
    return out


class Scene:
    def __init__(self, relay: RelayProcess, store: str) -> None:
        self.relay = relay
        self.store = store
        self.responders: list[Responder] = []

    def eventually(self, predicate: Callable[[], T], what: str, timeout: float = DEADLINE_S) -> T:
        try:
            return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))
        except AssertionError as error:
            raise AssertionError(f"{error}\n--- log tail:\n{self.relay.log_tail(40)}") from None

    def get(self, path: str, port: int | None = None, **params: Any) -> Any:
        """A fresh connection each time (to the public port: any worker; to a worker's own port: that one)."""
        response = requests.get(f"http://127.0.0.1:{port or self.relay.port}{path}", params=params, timeout=10,
                                headers={"Authorization": f"Bearer {self.relay.admin_token}"})
        assert response.status_code == 200, response.text
        return response.json()

    def instances(self) -> dict[str, dict[str, Any]]:
        return {i["instanceId"]: i for i in self.get("/relay/v1/instances")["instances"]}

    def running(self) -> dict[str, dict[str, Any]]:
        return {n: i for n, i in self.instances().items() if i["status"] == "RUNNING"}

    def holders(self) -> dict[str, str]:
        """executor id -> the RUNNING instance whose lease it is on, for HEALTHY leases."""
        return {lease["executorId"]: name for name, i in self.running().items() for lease in i["leases"]
                if lease["status"] == "HEALTHY"}

    def events(self, **params: Any) -> list[dict[str, Any]]:
        return self.get("/relay/v1/events", limit=10000, **params)["events"]


@pytest.fixture(scope="module")
def scene(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    store = pg.create_database(pg_server)
    relay = RelayProcess(tmp_path_factory.mktemp("workers"), database_url=store, env=RELAY_ENV,
                         args=["--workers", "2"])
    try:
        relay.start()
        scene = Scene(relay, store)
        scene.eventually(lambda: len(scene.running()) == 2 and len(children(relay.pid)) == 2, "two RUNNING workers")
        # The forward secret the supervisor generated: a secret the log must never hold.
        for pid in children(relay.pid):
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
            relay.remember_secret(next(v.split("=", 1)[1] for v in environ if v.startswith("RELAY_FORWARD_SECRET=")),
                                  "generated forward secret")
        yield scene
    finally:
        for responder in scene.responders if "scene" in locals() else []:
            responder.stop()
        relay.stop(timeout=60)
        pg.drop_database(store)


# ------------------------------------------------------------------------------------------------ refusals


def test_refusals_are_clear(tmp_path: Path, pg_url: str) -> None:
    env = {"RELAY_DATA_DIR": str(tmp_path), "RELAY_PORT": str(free_port()), "RELAY_ADMIN_TOKEN": "x" * 40}
    sqlite = run_cli(["serve", "--workers", "2"], env, timeout=30)
    assert sqlite.returncode == 2 and "--workers > 1 needs PostgreSQL (RELAY_DATABASE_URL)" in sqlite.stderr
    by_env = run_cli(["serve"], {**env, "RELAY_WORKERS": "3"}, timeout=30)
    assert by_env.returncode == 2 and "RELAY_WORKERS > 1 needs PostgreSQL" in by_env.stderr
    for bad in ("0", "two", "65"):
        result = run_cli(["serve", "--workers", bad], env, timeout=30)
        assert result.returncode == 2 and "argument --workers: must be an integer from 1 to 64" in result.stderr
    assert "RELAY_WORKERS must be an integer" in run_cli(["serve"], {**env, "RELAY_WORKERS": "x"}).stderr

    # The port taken by another listener: refused before any worker starts (SO_REUSEPORT would share it).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_cli(["serve", "--workers", "2"], {**env, "RELAY_PORT": str(port), "RELAY_DATABASE_URL": pg_url},
                       timeout=60)
    assert busy.returncode == 2, busy.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in busy.stderr and "worker 0 started" not in busy.stderr


# ------------------------------------------------------------------------------------------------ the cluster


@pytest.fixture(scope="module")
def app(scene: Scene) -> dict[str, Any]:
    """An application (grace GRACE_S) with EXECUTORS fake executors connected through the public port."""
    name = unique("wk")
    register_app(scene.relay, name)
    response = scene.relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{name}", json={"executorTimeoutSecs": GRACE_S})
    assert response.status_code == 204, response.text
    key = create_key(scene.relay, f"{name}-key", appNames=[name])
    responders = [Responder(scene.relay, name, key) for _ in range(EXECUTORS)]
    scene.responders += responders
    for responder in responders:
        responder.start()
    ids = {r.executor_id for r in responders}
    scene.eventually(lambda: ids <= set(scene.holders()), "every executor HEALTHY on a lease")
    return {"name": name, "responders": responders, "ids": ids}


def test_executors_land_on_both_workers_and_every_one_answers_through_either(
    scene: Scene, app: dict[str, Any]
) -> None:
    running = scene.running()
    assert len(running) == 2
    holders = scene.holders()
    by_worker = {name: {e for e, h in holders.items() if h == name} for name in running}
    assert all(by_worker.values()), by_worker  # the kernel spread the connections over both workers
    assert {e["executorId"] for e in executors(scene.relay, app["name"]).values()
            if e["status"] == "HEALTHY"} == app["ids"]
    # Each worker advertises a port of its own, not the public one: that is where peers forward.
    ports = {name: i["port"] for name, i in running.items()}
    assert len(set(ports.values())) == 2 and scene.relay.port not in ports.values()

    for name, port in ports.items():  # every executor through each worker: half of them forwarded
        for executor_id in app["ids"]:
            path = f"/relay/v1/orgs/{ORG}/apps/{app['name']}/executors/{executor_id}/requests"
            answer = requests.post(f"http://127.0.0.1:{port}{path}", json={"type": "executor_info"}, timeout=15,
                                   headers={"Authorization": f"Bearer {scene.relay.admin_token}"})
            assert answer.status_code == 200, (name, executor_id, answer.text)
            assert answer.json()["executor_id"] == executor_id
    for executor_id in app["ids"]:  # and through the public port, from new connections (any worker)
        path = f"/relay/v1/orgs/{ORG}/apps/{app['name']}/executors/{executor_id}/requests"
        answer = requests.post(f"{scene.relay.base_url}{path}", json={"type": "executor_info"}, timeout=15,
                               headers={"Authorization": f"Bearer {scene.relay.admin_token}"})
        assert answer.status_code == 200 and answer.json()["executor_id"] == executor_id, answer.text
    # Every worker ran forwards for the other (its log lines name the worker that wrote them).
    log = scene.relay.log_text()
    for name in running:
        forwards = [line for line in log.splitlines() if f"[{name}]" in line and "POST /internal/v1/forward/" in line]
        assert len(forwards) >= len(by_worker[name]), name
    assert "[supervisor] relay.workers: worker 0 started" in log


def test_a_real_dbos_executor_is_reached_through_either_worker(scene: Scene, tmp_path: Path) -> None:
    """A DBOS 3.2.0 Python executor connects through the one port; listing its workflows (answered by the
    executor) works through each worker's own port: one of them forwards to the other."""
    name = unique("wk-dbos")
    register_app(scene.relay, name)
    key = create_key(scene.relay, f"{name}-key", appNames=[name])
    proc = dbos_executor(scene.relay, name, key, cwd=tmp_path / "dbos").start()
    try:
        proc.wait_for_log("test executor launched", timeout=DEADLINE_S)
        [executor_id] = scene.eventually(
            lambda: [e for e, x in executors(scene.relay, name).items() if x["status"] == "HEALTHY"], "HEALTHY")
        home = scene.eventually(lambda: scene.holders().get(executor_id), "its lease visible")
        for worker, instance in scene.running().items():
            listed = requests.get(f"http://127.0.0.1:{instance['port']}/v2/orgs/{ORG}/apps/{name}/workflows",
                                  headers={"Authorization": f"Bearer {scene.relay.admin_token}"}, timeout=15)
            assert listed.status_code == 200, (worker, home, listed.text)
            assert isinstance(listed.json(), list)
    finally:
        proc.kill()


def test_sigkill_a_worker_its_executors_come_back_its_leases_are_adopted_once_and_it_restarts(
    scene: Scene, app: dict[str, Any]
) -> None:
    workers = children(scene.relay.pid)
    holders = {e: h for e, h in scene.holders().items() if e in app["ids"]}
    victim_pid, victim = next((pid, name) for pid, name in workers.items() if name in holders.values())
    on_victim = {e for e, h in holders.items() if h == victim}
    # One executor of the killed worker goes with it (it never comes back): its lease stays on the worker until
    # a survivor adopts it; the others reconnect at once, and their records follow them.
    doomed = next(r for r in app["responders"] if r.executor_id in on_victim)
    os.kill(victim_pid, signal.SIGKILL)
    doomed.stop()
    live = app["ids"] - {doomed.executor_id}

    # Its executors reconnect through the public port, to the survivor (or the restarted worker).
    scene.eventually(lambda: (h := scene.holders()) and all(h.get(e) not in (None, victim) for e in live),
                     "every executor HEALTHY on a live worker")
    scene.eventually(lambda: scene.instances()[victim]["status"] == "EXPIRED", "the killed worker EXPIRED")
    # The supervisor started it again, as a new instance; the cluster has two RUNNING workers again.
    restarted = scene.eventually(lambda: [n for n in scene.running() if n.startswith(victim.split(".")[0] + ".")],
                                 "the worker restarted as a new instance")
    assert len(restarted) == 1 and len(scene.running()) == 2
    assert victim_pid not in children(scene.relay.pid) and len(children(scene.relay.pid)) == 2
    slot = victim.rsplit("/w", 1)[1].split(".")[0]
    assert f"worker {slot} ({victim}) died (signal SIGKILL)" in scene.relay.log_text()

    # Adopted once: one Expired, the doomed executor's lease adopted by that one adopter, no lease twice.
    [expired] = scene.eventually(lambda: [e for e in scene.events(type="RelayInstance.Expired")
                                          if e["subject"] == victim], "one Expired for the killed worker")
    lease = f"{ORG}/{app['name']}/{doomed.executor_id}"

    def adopted() -> list[dict[str, Any]]:
        return [e["details"] for e in scene.events(type="RelayInstance.LeaseAdopted")
                if e["details"]["from_instance"] == victim]

    scene.eventually(lambda: lease in [a["lease"] for a in adopted()], "the doomed executor's lease adopted")
    leases = [a["lease"] for a in adopted()]
    assert len(leases) == len(set(leases))
    assert {a["to_instance"] for a in adopted()} == {expired["details"]["by"]}
    # The adopter runs its grace timer: it alone is declared DEAD; those that came back within the grace are not.
    scene.eventually(lambda: executors(scene.relay, app["name"]).get(doomed.executor_id, {}).get("status") == "DEAD",
                     "the doomed executor DEAD after its grace period", timeout=GRACE_S + DEADLINE_S)
    events = scene.events(org=ORG, app=app["name"])
    assert [e["subject"] for e in events if e["event"] == "Executor.DeclaredDead"] == [doomed.executor_id]
    assert all(r.connects >= 2 for r in app["responders"] if r.executor_id in on_victim - {doomed.executor_id})
    # And every executor is still reached, wherever it is now.
    headers = {"Authorization": f"Bearer {scene.relay.admin_token}"}
    for executor_id in live:
        url = f"{scene.relay.base_url}/relay/v1/orgs/{ORG}/apps/{app['name']}/executors/{executor_id}/requests"
        answer = requests.post(url, json={"type": "executor_info"}, timeout=15, headers=headers)
        assert answer.status_code == 200 and answer.json()["executor_id"] == executor_id, answer.text


def test_sigterm_to_the_supervisor_stops_every_worker_cleanly(scene: Scene, app: dict[str, Any]) -> None:
    workers = children(scene.relay.pid)
    names = set(workers.values())
    assert len(workers) == 2
    for responder in app["responders"]:
        responder.stopping.set()  # no reconnects to a stopping server
    assert scene.relay.stop(timeout=60) == 0  # SIGTERM; also checks no secret reached the log
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    log = scene.relay.log_text()
    assert "relay serve: stopping 2 worker(s) (SIGTERM)" in log and "relay serve: every worker stopped" in log
    assert all(f"[{name}] relay.server: relay stopping" in log for name in names)
    # None left looking alive: each marked its heartbeat stale as it left (0), or the last one standing adopted
    # the first one to stop, as HA does for a clean stop, and removed its row.
    with psycopg.connect(scene.store, autocommit=True) as conn:
        beats = dict(conn.execute("SELECT instance, heartbeat_at FROM relay_instances").fetchall())
    assert all(beats.get(name, 0.0) == 0.0 for name in names), beats
