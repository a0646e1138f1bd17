"""Issue 32, point 1: a rolling upgrade with no downtime, from the previous release (built from git by `make
test-deps`: .venv-relay-previous, CHANGELOG.md's newest "Commit:") to this tree.

Three instances of the previous release on one PostgreSQL store behind haproxy (Debian's, round-robin, WebSocket
tunnels), real DBOS 3.2.0 executors (executor_apps/recovery_app.py) connected through it, and an API client asking
through it all along. Each instance in turn is stopped (SIGTERM) and started again, same name and port, on this
release. Then, and at every step:

- no instance crashed (every stop exits 0; no traceback in any log, of either release);
- no executor was declared dead, none recovered: every one is HEALTHY again within 30 s of each restart;
- the API answered every request, except requests that were in flight on the stopping instance (none seen so
  far; an error is allowed only inside a stop's window, and at most one per window);
- while the releases are mixed the cluster reports both, and the newer instances write nothing the older cannot
  read (the release gate: a gated write is refused with 409, docs/adr/0050); once every instance is new, it is
  allowed;
- afterwards `relay replay --verify` passes: no view was corrupted.

Timings: heartbeat 0.5 s, instance timeout 5 s, grace 10 s, pings 0.5 s.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests

from relay.events.releases import RELEASE
from tests.integration.fake_executor import create_key, register_app
from tests.integration.test_ha import HAPROXY, HaproxyProcess
from tests.support import pg
from tests.support.ports import port_is_open, wait_until
from tests.support.procs import CLI_MODULE, RELAY_PYTHON, REPO_ROOT, ExecutorProcess, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

T = TypeVar("T")

PREVIOUS_PYTHON = REPO_ROOT / ".venv-relay-previous" / "bin" / "python"
APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "recovery_app.py"
ORG = "local"
NAMES = ("relay-a", "relay-b", "relay-c")
GRACE_S = 10
BACK_WITHIN_S = 30.0
DEADLINE_S = 45.0
RELAY_ENV = {
    "RELAY_HEARTBEAT_INTERVAL_S": "0.5",
    "RELAY_INSTANCE_TIMEOUT_S": "5",
    "RELAY_PING_INTERVAL_S": "0.5",
    "RELAY_PONG_TIMEOUT_S": "2",
    "RELAY_REQUEST_TIMEOUT_S": "10",
    # Longer than haproxy's health check needs to take a stopping instance out (inter 300 ms x fall 2); the
    # previous release has no drain and ignores it.
    "RELAY_DRAIN_S": "1",
}


def previous_release() -> str:
    """The version CHANGELOG.md gives the commit .venv-relay-previous was built from."""
    built = (REPO_ROOT / ".venv-relay-previous" / ".installed").read_text().strip()
    version = None
    for line in (REPO_ROOT / "CHANGELOG.md").read_text().splitlines():
        if line.startswith("## "):
            version = line.split()[1]
        elif line.strip() == f"Commit: {built}":
            assert version is not None
            return version
    raise AssertionError(f"CHANGELOG.md names no release with commit {built}")


class ReleasedRelay(RelayProcess):
    """`relay serve` from one build: `python` is that build's interpreter (its own site-packages)."""

    def __init__(self, *args: Any, python: Path, **kwargs: Any) -> None:
        self.python = python
        super().__init__(*args, **kwargs)

    def command(self) -> list[str]:
        assert self.python.exists(), f"{self.python} is missing: `make test-deps` builds the previous release"
        return [str(self.python), "-m", CLI_MODULE, "serve", *self.args]


@dataclass
class Window:
    """One instance's restart: from the SIGTERM until it answered /readyz on the new release."""

    name: str
    release: str
    start: float
    stopped: float = float("inf")
    end: float = float("inf")


@dataclass
class Watch:
    """Asks the API through the balancer, as an operator's dashboard would, until stopped; keeps every failure."""

    url: str
    app: str
    token: str
    failures: list[tuple[float, float, str]] = field(default_factory=list)  # (sent, answered, what)
    dead_seen: list[str] = field(default_factory=list)
    answered: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        session = requests.Session()
        paths = [f"/v2/orgs/{ORG}/apps/{self.app}/executors", f"/v2/orgs/{ORG}/apps/{self.app}/workflows"]
        while not self._stop.is_set():
            for path in paths:
                at = time.monotonic()
                try:
                    response = session.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"},
                                           timeout=15)
                except requests.RequestException as error:
                    self.failures.append((at, time.monotonic(), f"{path}: {type(error).__name__}"))
                    continue
                if response.status_code >= 500:
                    failed = f"{path}: {response.status_code} {response.text[:200]}"
                    self.failures.append((at, time.monotonic(), failed))
                    continue
                self.answered += 1
                if path.endswith("/executors") and response.status_code == 200:
                    self.dead_seen += [e["executorId"] for e in response.json() if e.get("status") == "DEAD"]
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Scene:
    relays: dict[str, ReleasedRelay]
    lb: HaproxyProcess
    sysdb: str
    tmp: Path
    procs: list[ExecutorProcess] = field(default_factory=list)

    def eventually(self, predicate: Callable[[], T], what: str, timeout: float = DEADLINE_S) -> T:
        try:
            return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))
        except AssertionError as error:
            logs = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.log_tail(25)}" for p in [*self.relays.values(),
                                                                                        *self.procs])
            raise AssertionError(f"{error}\n{logs}") from None

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        relay = next(r for r in self.relays.values() if r.running)
        return requests.request(method, f"http://127.0.0.1:{self.lb.port}{path}",
                                headers={"Authorization": f"Bearer {relay.admin_token}"}, timeout=15, **kwargs)

    def instances(self) -> dict[str, dict[str, Any]]:
        response = self.api("GET", "/relay/v1/instances")
        assert response.status_code == 200, response.text
        return {i["instanceId"]: i for i in response.json()["instances"]}

    def statuses(self, app: str) -> dict[str, str]:
        response = self.api("GET", f"/v2/orgs/{ORG}/apps/{app}/executors")
        assert response.status_code == 200, response.text
        return {e["executorId"]: e["status"] for e in response.json()}

    def executor(self, app: str, key: str, name: str) -> str:
        env = {"APP_NAME": app, "CONDUCTOR_URL": self.lb.ws_url, "CONDUCTOR_KEY": key,
               "SYSTEM_DATABASE_URL": self.sysdb, "APP_VERSION": f"{app}-v1",
               "EFFECTS_FILE": str(self.tmp / f"effects-{app}.txt")}
        proc = ExecutorProcess(APP_SCRIPT, cwd=self.tmp / name, name=name, env=env)
        self.procs.append(proc)
        proc.start()
        proc.wait_for_log("READY ", timeout=DEADLINE_S)
        line = next(x for x in proc.log_text().splitlines() if x.startswith("READY "))
        return str(json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"])


@pytest.fixture(scope="module")
def scene(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    assert HAPROXY.exists(), "haproxy is missing: `make test` installs it (apt-get install haproxy)"
    tmp = tmp_path_factory.mktemp("upgrade")
    store, sysdb = pg.create_database(pg_server), pg.create_database(pg_server)
    pg.migrate_dbos(sysdb)
    admin = f"relay-upgrade-{secrets.token_urlsafe(24)}"
    secret = secrets.token_urlsafe(32)
    relays: dict[str, ReleasedRelay] = {}
    lb: HaproxyProcess | None = None
    scene: Scene | None = None
    try:
        for name in NAMES:  # one after the other: the first creates the tables
            relays[name] = ReleasedRelay(
                tmp / name, database_url=store, admin_token=admin, python=PREVIOUS_PYTHON,
                env={**RELAY_ENV, "RELAY_INSTANCE_ID": name, "RELAY_FORWARD_SECRET": secret},
            ).start()
        # Checked on /readyz, as the README says: a stopping instance (of this release) leaves the rotation.
        lb = HaproxyProcess(tmp / "haproxy", {name: r.port for name, r in relays.items()}, check="/readyz").start()
        wait_until(lambda: port_is_open(lb.port), 10, message="haproxy listening")
        scene = Scene(relays, lb, sysdb, tmp)
        yield scene
    finally:
        for proc in scene.procs if scene is not None else []:
            proc.kill()
        if lb is not None:
            lb.stop()
        for relay in relays.values():
            relay.stop()
        pg.drop_database(sysdb)
        pg.drop_database(store)


def test_a_rolling_upgrade_from_the_previous_release_has_no_downtime(scene: Scene) -> None:
    previous = previous_release()
    assert previous != RELEASE
    assert "release" not in next(iter(scene.instances().values()))  # 0.1.0's API did not show it

    first = scene.relays[NAMES[0]]
    app = f"upgrade-{secrets.token_hex(3)}"
    register_app(first, app)
    response = first.api("PATCH", f"/v2/orgs/{ORG}/apps/{app}", json={"executorTimeoutSecs": GRACE_S})
    assert response.status_code == 204, response.text
    key = create_key(first, f"{app}-key", appNames=[app])
    ids = [scene.executor(app, key, f"exe-{n}") for n in range(3)]
    scene.eventually(lambda: all(scene.statuses(app).get(i) == "HEALTHY" for i in ids), "executors HEALTHY")

    watch = Watch(f"http://127.0.0.1:{scene.lb.port}", app, first.admin_token)
    watcher = threading.Thread(target=watch.run, daemon=True)
    watcher.start()
    windows: list[Window] = []
    try:
        # The upgrade, then a rolling restart of this release (the next upgrade's first half: how it stops).
        for step, name in enumerate([*NAMES, *NAMES]):
            relay = scene.relays[name]
            window = Window(name, RELEASE if relay.python == RELAY_PYTHON else previous, time.monotonic())
            windows.append(window)
            code = relay.stop(timeout=30 if window.release == RELEASE else 15)
            window.stopped = time.monotonic()
            # The previous release may not exit after SIGTERM: a request on a kept-alive connection, served while
            # it stops, starts an application actor anew, whose thread outlives the stop (CHANGELOG.md, 0.1.0);
            # its heartbeat is stale already, so its peers have taken its executors. This release exits.
            assert code == 0 or (window.release == previous and code == -9), (
                f"{name} ({relay.python}) did not stop cleanly ({code}):\n{relay.log_tail()}")
            relay.python = RELAY_PYTHON
            relay.start()
            window.end = time.monotonic()
            scene.eventually(lambda: all(scene.statuses(app).get(i) == "HEALTHY" for i in ids),
                             f"every executor HEALTHY after {name} restarted", timeout=BACK_WITHIN_S)
            shown = relay.api("GET", "/relay/v1/instances").json()  # this release's answer, from the new instance
            assert {i["instanceId"]: i["release"] for i in shown["instances"]} == {
                n: RELEASE if k <= step else previous for k, n in enumerate(NAMES)}
            assert shown["releaseFloor"] == (RELEASE if step >= len(NAMES) - 1 else previous)
            if step in (0, len(NAMES) - 1):
                # Mixed, the new instance holds back what the old ones could not read (docs/adr/0050): a rule
                # that repeats is its own event class; once every instance is new, it is written.
                rule = relay.api("POST", f"/v2/orgs/{ORG}/apps/{app}/alerting-rules", json={
                    "ruleType": "WorkflowFailure", "renotifyIntervalSecs": 600,
                    "ruleMetadata": {"threshold": 1000}})
                if step == 0:
                    assert rule.status_code == 409, rule.text
                    assert f"release {previous} is still running" in rule.json()["detail"], rule.text
                else:
                    assert rule.status_code == 201, rule.text
    finally:
        watch.stop()
        watcher.join(timeout=20)

    # No executor was declared dead or recovered, at any moment.
    assert not watch.dead_seen, watch.dead_seen
    events = scene.api("GET", "/relay/v1/events", params={"limit": 10000, "org": ORG, "app": app})
    assert events.status_code == 200, events.text
    kinds = {e["event"] for e in events.json()["events"]}
    assert not kinds & {"Executor.DeclaredDead", "Executor.RecoveryDispatched"}, kinds
    # The API answered throughout, but for requests on a stopping instance of the previous release: it closes
    # its executors' sockets under the requests waiting for them and keeps answering kept-alive connections with
    # its store closed. This release drains first (RELAY_DRAIN_S) and its requests wait for executors that are
    # reconnecting: while one of its instances stopped, not one request failed.
    assert watch.answered > 50, watch.answered
    for sent, answered, what in watch.failures:  # in flight during an old instance's stop: sent before it ended
        assert any(sent <= w.stopped + 0.5 and answered >= w.start for w in windows if w.release == previous), (
            what, watch.failures, windows)
    assert any(w.release == RELEASE for w in windows)
    # Nothing crashed, in either release: no traceback in a run of this release, none in a run of the previous
    # one while it served beside newer instances (after it began stopping, its 0.1.0 defect above may log one).
    for relay in scene.relays.values():
        for run in relay.log_text().split("--- relay: ")[1:]:
            served = run if run.startswith(str(RELAY_PYTHON)) else run.split("relay stopping")[0]
            assert "Traceback" not in served, run[-6000:]
    result = scene.relays[NAMES[0]].run_cli(["replay", "--verify"], timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "verified" in result.stdout, result.stdout
