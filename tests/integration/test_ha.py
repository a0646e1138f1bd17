"""Issue 5, end to end: three `relay serve` instances on one PostgreSQL store behind haproxy (Debian's, on
loopback, round-robin, WebSocket tunnels), real DBOS 3.2.0 executors (executor_apps/recovery_app.py) that
connect through the balancer and share a second PostgreSQL database as their system database.

- every instance shows the cluster (GET /relay/v1/instances) and reaches an executor connected to any other:
  the call is forwarded, signed, to that instance's /internal/v1/forward/{appID};
- forged, replayed (old timestamp, or the same signed request twice) and looping (hop 1) forwards are refused
  (401/401/409) and nothing runs: the frame they carry (cancel a PENDING workflow) runs only once signed right;
- an executor dies: the instance holding its lease dispatches its recovery to the one peer of the application,
  which sits on another instance (through the forward endpoint); the workflow finishes once;
- SIGKILL one instance together with an executor running a workflow on it: its other executors reconnect
  through the balancer to the survivors, its leases are adopted exactly once (one Expired, one LeaseAdopted per
  lease), the dead executor's workflow is recovered exactly once (SUCCESS; side effects counted);
- afterwards `relay replay --verify` passes against the store with every instance's environment.

Timings: heartbeat 0.5 s, instance timeout 5 s, grace 2 s, pings 0.5 s, pong deadline 2 s.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import requests

from relay.wire import signing as forwarding
from tests.integration.fake_executor import create_key, executors, register_app
from tests.support import pg
from tests.support.ports import free_port, port_is_open, wait_until
from tests.support.procs import ExecutorProcess, ManagedProcess, RelayProcess, clean_env

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

T = TypeVar("T")

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "recovery_app.py"
ALERTING_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "alerting_app.py"
HAPROXY = Path("/usr/sbin/haproxy")
ORG = "local"
GRACE_S = 2
DEADLINE_S = 45.0
NAMES = ("relay-a", "relay-b", "relay-c")
RELAY_ENV = {
    "RELAY_HEARTBEAT_INTERVAL_S": "0.5",
    "RELAY_INSTANCE_TIMEOUT_S": "5",
    "RELAY_PING_INTERVAL_S": "0.5",
    "RELAY_PONG_TIMEOUT_S": "2",
    "RELAY_RECOVERY_TIMEOUT_S": "10",
    "RELAY_REQUEST_TIMEOUT_S": "10",
    "RELAY_ALERT_INTERVAL_S": "1",
}

HAPROXY_CONFIG = """
global
    maxconn 2000

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    # WebSockets: once upgraded, a connection is a tunnel; executors keep theirs for the whole test.
    timeout tunnel 1h
    retries 3
    option redispatch

frontend relays_in
    bind 127.0.0.1:{port}
    default_backend relays

backend relays
    balance roundrobin
    option httpchk GET {check}
    default-server inter 300ms fall 2 rise 1
{servers}
"""


class HaproxyProcess(ManagedProcess):
    """Debian's haproxy in the foreground (-db), round-robin over the given backends."""

    name = "haproxy"

    def __init__(self, workdir: Path, backends: dict[str, int], check: str = "/healthz") -> None:
        self.port = free_port()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        servers = "\n".join(f"    server {name} 127.0.0.1:{port} check" for name, port in backends.items())
        self.config = self.dir / "haproxy.cfg"
        self.config.write_text(HAPROXY_CONFIG.format(port=self.port, servers=servers, check=check))
        super().__init__(self.dir / "haproxy.log")

    def command(self) -> list[str]:
        return [str(HAPROXY), "-db", "-f", str(self.config)]

    def environment(self) -> dict[str, str]:
        return clean_env()

    def workdir(self) -> Path:
        return self.dir

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


@dataclass
class Executor:
    name: str
    proc: ExecutorProcess
    executor_id: str = ""


@dataclass
class Cluster:
    relays: dict[str, RelayProcess]
    lb: HaproxyProcess
    sysdb: str
    secret: str
    tmp: Path
    procs: list[ExecutorProcess] = field(default_factory=list)

    # -- reads, from whichever instance is up
    def any(self) -> RelayProcess:
        return next(r for r in self.relays.values() if r.running)

    def eventually(self, predicate: Callable[[], T], what: str, timeout: float = DEADLINE_S) -> T:
        try:
            return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))
        except AssertionError as error:
            logs = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.log_tail(25)}"
                             for p in [*self.relays.values(), *self.procs])
            raise AssertionError(f"{error}\n{logs}") from None

    def instances(self, relay: RelayProcess | None = None) -> dict[str, dict[str, Any]]:
        response = (relay or self.any()).api("GET", "/relay/v1/instances")
        assert response.status_code == 200, response.text
        return {i["instanceId"]: i for i in response.json()["instances"]}

    def holder(self, executor_id: str) -> str | None:
        """The instance whose lease the executor is on (GET /relay/v1/instances)."""
        for name, instance in self.instances().items():
            if any(lease["executorId"] == executor_id for lease in instance["leases"]):
                return name
        return None

    def status(self, app: str, executor_id: str) -> str | None:
        return executors(self.any(), app).get(executor_id, {}).get("status")

    def events(self, **params: Any) -> list[dict[str, Any]]:
        response = self.any().api("GET", "/relay/v1/events", params={"limit": 10000, **params})
        assert response.status_code == 200, response.text
        return response.json()["events"]

    def recoveries(self, app: str, executor_id: str) -> list[dict[str, Any]]:
        response = self.any().api("GET", f"/relay/v1/orgs/{ORG}/apps/{app}/recoveries")
        assert response.status_code == 200, response.text
        return sorted((r for r in response.json()["recoveries"] if r["executorId"] == executor_id),
                      key=lambda r: r["attempt"])

    def workflow(self, workflow_id: str) -> dict[str, Any] | None:
        with psycopg.connect(self.sysdb, autocommit=True) as conn:
            row = conn.execute("SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = %s",
                               (workflow_id,)).fetchone()
        return {"status": row[0], "executor_id": row[1]} if row else None

    def effects(self, app: str, step: str, workflow_id: str) -> list[str]:
        path = self.tmp / f"effects-{app}.txt"
        if not path.exists():
            return []
        lines = [line.split() for line in path.read_text().splitlines()]
        return [exe for name, wf, exe in lines if name == step and wf == workflow_id]

    # -- setup
    def application(self, prefix: str) -> tuple[str, str, str]:
        """Register an app (grace GRACE_S) and mint its key; returns (app, key, App aggregate id)."""
        relay = self.relays[NAMES[0]]
        app = f"{prefix}-{secrets.token_hex(3)}"
        register_app(relay, app)
        response = relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{app}", json={"executorTimeoutSecs": GRACE_S})
        assert response.status_code == 204, response.text
        key = create_key(relay, f"{app}-key", appNames=[app])
        app_id = relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}").json()["id"]
        return app, key, app_id

    def executor(self, app: str, key: str, name: str, *, version: str = "v1", workflow: str | None = None,
                 trigger: bool = False, pause_s: float = 3, on: set[str] | None = None) -> Executor:
        """Start a DBOS executor through the balancer; with `on`, until one lands on one of those instances
        (round-robin: the next connection goes to the next instance)."""
        for attempt in range(4):
            env = {
                "APP_NAME": app, "CONDUCTOR_URL": self.lb.ws_url, "CONDUCTOR_KEY": key,
                # DBOS wants version names unique across the applications sharing a system database.
                "SYSTEM_DATABASE_URL": self.sysdb, "APP_VERSION": f"{app}-{version}",
                "EFFECTS_FILE": str(self.tmp / f"effects-{app}.txt"), "PAUSE_S": str(pause_s),
            }
            if workflow is not None:
                env["START_WORKFLOW"] = workflow
                if trigger:
                    env["TRIGGER_FILE"] = str(self.tmp / f"trigger-{workflow}")
            proc = ExecutorProcess(APP_SCRIPT, cwd=self.tmp / f"{app}-{name}-{attempt}", name=f"{name}-{attempt}",
                                   env=env)
            self.procs.append(proc)
            executor = Executor(name, proc.start())
            proc.wait_for_log("READY ", timeout=DEADLINE_S)
            line = next(x for x in proc.log_text().splitlines() if x.startswith("READY "))
            executor.executor_id = json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"]
            self.eventually(lambda e=executor: self.status(app, e.executor_id) == "HEALTHY", f"{name} HEALTHY")
            # Its lease is in the instances view, which its own projector folds apart from the registry's
            # status: HEALTHY there does not mean the lease is visible yet (seen once in a clean run).
            holder = self.eventually(lambda e=executor: self.holder(e.executor_id), f"{name}'s lease visible")
            if on is None or holder in on:
                return executor
            proc.kill()
        raise AssertionError(f"{name} never landed on {sorted(on or ())}")

    def run_until_paused(self, app: str, workflow_id: str) -> None:
        (self.tmp / f"trigger-{workflow_id}").touch()
        self.eventually(lambda: self.effects(app, "waiting", workflow_id), f"{workflow_id} reached its pause")


@pytest.fixture(scope="module")
def cluster(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    assert HAPROXY.exists(), "haproxy is missing: `make test` installs it (apt-get install haproxy)"
    tmp = tmp_path_factory.mktemp("ha")
    store, sysdb = pg.create_database(pg_server), pg.create_database(pg_server)
    pg.migrate_dbos(sysdb)
    secret = secrets.token_urlsafe(32)
    admin = f"relay-ha-{secrets.token_urlsafe(24)}"
    relays: dict[str, RelayProcess] = {}
    lb: HaproxyProcess | None = None
    procs: list[ExecutorProcess] = []
    try:
        for name in NAMES:  # one after the other: the first creates the tables
            relays[name] = RelayProcess(
                tmp / name, database_url=store, admin_token=admin,
                env={**RELAY_ENV, "RELAY_INSTANCE_ID": name, "RELAY_FORWARD_SECRET": secret},
            ).start()
        lb = HaproxyProcess(tmp / "haproxy", {name: r.port for name, r in relays.items()}).start()
        wait_until(lambda: port_is_open(lb.port), 10, message="haproxy listening")
        scene = Cluster(relays, lb, sysdb, secret, tmp, procs)
        scene.eventually(lambda: sorted(n for n, i in scene.instances().items() if i["status"] == "RUNNING")
                         == list(NAMES), "three RUNNING instances")
        yield scene
    finally:
        for proc in procs:
            proc.kill()
        if lb is not None:
            lb.stop()
        for relay in relays.values():
            relay.stop()
        pg.drop_database(sysdb)
        pg.drop_database(store)


def signed(secret: str, body: dict[str, Any], *, to: str, now: float | None = None,
           hop: str = "0") -> tuple[bytes, dict]:
    """A forward as an instance sends it to instance `to`: a fresh request id in the frame, signed now (or at
    `now`) with a fresh nonce."""
    body = {**body, "frame": {**body["frame"], "request_id": secrets.token_hex(8)}}
    payload = json.dumps(body).encode()
    headers = forwarding.signed_headers(secret, payload, now=now, target=to)
    headers[forwarding.HOP_HEADER] = hop
    return payload, headers


def forward(relay: RelayProcess, app_id: str, payload: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(f"{relay.base_url}/internal/v1/forward/{app_id}", data=payload, headers=headers, timeout=15)


# ------------------------------------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def lonely(cluster: Cluster) -> dict[str, Any]:
    """An application with one executor, whose workflow sleeps long enough to stay PENDING."""
    app, key, app_id = cluster.application("fwd")
    workflow_id = f"wf-{secrets.token_hex(4)}"
    executor = cluster.executor(app, key, "lonely", workflow=workflow_id, pause_s=600)
    cluster.eventually(lambda: cluster.effects(app, "waiting", workflow_id), "the long workflow started")
    return {"app": app, "app_id": app_id, "executor": executor, "workflow_id": workflow_id,
            "on": cluster.holder(executor.executor_id)}


def test_every_instance_reaches_an_executor_connected_to_any_other(cluster: Cluster, lonely: dict[str, Any]) -> None:
    app, executor, home = lonely["app"], lonely["executor"], lonely["on"]
    assert home in NAMES
    for name, relay in cluster.relays.items():
        # The cluster as this instance shows it: three RUNNING instances, the executor's lease on its home.
        shown = cluster.instances(relay)
        assert {n: i["status"] for n, i in shown.items()} == dict.fromkeys(NAMES, "RUNNING")
        assert all(0 <= i["heartbeatAgeSecs"] < 5 and i["port"] == cluster.relays[n].port and i["startedAt"]
                   for n, i in shown.items())
        holders = [n for n, i in shown.items() for lease in i["leases"] if lease["executorId"] == executor.executor_id]
        assert holders == [home]

        listed = relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/workflows")
        assert listed.status_code == 200, (name, listed.text)
        assert [w["workflowId"] for w in listed.json()] == [lonely["workflow_id"]]
        raw = relay.api("POST", f"/relay/v1/orgs/{ORG}/apps/{app}/executors/{executor.executor_id}/requests",
                        json={"type": "executor_info"})
        assert raw.status_code == 200, (name, raw.text)
        assert raw.json()["executor_id"] == executor.executor_id
        missing = relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/workflows/no-such-workflow")
        assert missing.status_code == 404, (name, missing.text)  # the executor's answer, read as a local one
    # The two other instances had no executor of the app: their calls went to its home, signed.
    assert cluster.relays[home].log_text().count(f"/internal/v1/forward/{lonely['app_id']}") >= 6
    for name in set(NAMES) - {home}:
        assert f"/internal/v1/forward/{lonely['app_id']}" not in cluster.relays[name].log_text()

    # Who may read the cluster: the admin, a key with organization.read (its own org's leases); not others.
    relay = cluster.relays[NAMES[0]]
    assert relay.api("GET", "/relay/v1/instances", token="").status_code == 401
    reader = create_key(relay, f"reader-{secrets.token_hex(3)}", permissions=["organization.read"])
    assert relay.api("GET", "/relay/v1/instances", token=reader).status_code == 200
    writer = create_key(relay, f"writer-{secrets.token_hex(3)}", permissions=["application.read"])
    assert relay.api("GET", "/relay/v1/instances", token=writer).status_code == 403


def test_forged_replayed_and_looping_forwards_are_refused_and_nothing_runs(
    cluster: Cluster, lonely: dict[str, Any]
) -> None:
    app, app_id, executor, workflow_id = lonely["app"], lonely["app_id"], lonely["executor"], lonely["workflow_id"]
    home = cluster.relays[lonely["on"]]
    cancel = {"org": ORG, "app": app, "executor_id": executor.executor_id,
              "frame": {"type": "cancel", "workflow_id": workflow_id}}
    assert cluster.workflow(workflow_id)["status"] == "PENDING"

    for name, relay in cluster.relays.items():
        forged = signed("not-the-cluster-secret-at-all", cancel, to=name)
        replayed = signed(cluster.secret, cancel, to=name, now=time.time() - 120)
        looping = signed(cluster.secret, cancel, to=name, hop="1")
        unsigned = (json.dumps(cancel).encode(), {"Content-Type": "application/json", forwarding.HOP_HEADER: "0"})
        answers = [forward(relay, app_id, *case).status_code for case in (forged, replayed, looping, unsigned)]
        assert answers == [401, 401, 409, 401], relay.name
    # The same signed request twice: the second is a replay.
    # (A frame the SDK cannot parse makes the Python SDK drop its connection: send a complete one.)
    info = {"org": ORG, "app": app, "executor_id": executor.executor_id, "frame": {"type": "executor_info"}}
    once = signed(cluster.secret, info, to=lonely["on"])
    first, second = forward(home, app_id, *once), forward(home, app_id, *once)
    assert first.status_code == 200, first.text
    assert first.json()["executor_id"] == executor.executor_id and first.json()["error_message"] is None
    assert second.status_code == 401 and "replay" in second.json()["detail"]
    assert cluster.workflow(workflow_id)["status"] == "PENDING"  # nothing ran

    # Signed right, the very frame they carried runs (on the executor's own instance only).
    elsewhere = next(r for n, r in cluster.relays.items() if n != lonely["on"])
    not_here = forward(elsewhere, app_id, *signed(cluster.secret, cancel, to=elsewhere.extra_env["RELAY_INSTANCE_ID"]))
    assert not_here.status_code == 503, not_here.text  # never forwarded again
    unknown_app = "00000000-0000-0000-0000-000000000000"
    assert forward(home, unknown_app, *signed(cluster.secret, cancel, to=lonely["on"])).status_code == 404
    assert cluster.workflow(workflow_id)["status"] == "PENDING"
    done = forward(home, app_id, *signed(cluster.secret, cancel, to=lonely["on"]))
    assert done.status_code == 200, done.text
    assert done.json()["success"] is True
    cluster.eventually(lambda: cluster.workflow(workflow_id)["status"] == "CANCELLED", "the cancel ran")
    for relay in cluster.relays.values():
        assert cluster.secret not in relay.log_text()


def test_recovery_is_dispatched_to_a_peer_on_another_instance(cluster: Cluster) -> None:
    app, key, app_id = cluster.application("xrec")
    workflow_id = f"wf-{secrets.token_hex(4)}"
    dead = cluster.executor(app, key, "doomed", workflow=workflow_id, trigger=True)
    home = cluster.holder(dead.executor_id)
    peer = cluster.executor(app, key, "peer", on=set(NAMES) - {home})
    there = cluster.holder(peer.executor_id)
    assert there != home
    cluster.run_until_paused(app, workflow_id)
    dead.proc.kill()

    cluster.eventually(lambda: [r["outcome"] for r in cluster.recoveries(app, dead.executor_id)] == ["acknowledged"],
                       "recovery acknowledged")
    [attempt] = cluster.recoveries(app, dead.executor_id)
    assert (attempt["instance"], attempt["peer"]) == (home, peer.executor_id)  # dispatched by the lease holder
    cluster.eventually(lambda: (cluster.workflow(workflow_id) or {}).get("status") == "SUCCESS", "SUCCESS")
    assert cluster.workflow(workflow_id) == {"status": "SUCCESS", "executor_id": peer.executor_id}
    assert cluster.effects(app, "first", workflow_id) == [dead.executor_id]
    assert cluster.effects(app, "last", workflow_id) == [peer.executor_id]
    assert f"/internal/v1/forward/{app_id}" in cluster.relays[there].log_text()  # through the peer's instance
    cluster.eventually(lambda: dead.executor_id not in executors(cluster.any(), app), "dead record deleted")


def test_an_alert_reaches_the_receiving_apps_executor_on_another_instance(cluster: Cluster) -> None:
    """The rule's source app is served by relay-a only (a WorkflowFailure rule is evaluated where the source's
    executors are), the receiving app's only executor is on relay-b: the alert goes there by a forward."""
    (src, src_key, _), (sink, sink_key, _) = cluster.application("alsrc"), cluster.application("alsink")
    here, there = cluster.relays[NAMES[0]], cluster.relays[NAMES[1]]
    alerts_file, commands = cluster.tmp / f"{sink}-alerts.jsonl", cluster.tmp / f"{src}-commands"
    ids = {}
    for app, key, relay in ((src, src_key, here), (sink, sink_key, there)):
        env = {"APP_NAME": app, "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key,
               "ALERTS_FILE": str(alerts_file), "COMMANDS_DIR": str(commands if app == src else cluster.tmp / app)}
        proc = ExecutorProcess(ALERTING_SCRIPT, cwd=cluster.tmp / f"{app}-alerting", name=app, env=env)
        cluster.procs.append(proc.start())
        proc.wait_for_log("READY ", timeout=DEADLINE_S)
        line = next(x for x in proc.log_text().splitlines() if x.startswith("READY "))
        ids[app] = json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"]
        cluster.eventually(lambda a=app: cluster.status(a, ids[a]) == "HEALTHY", f"{app} HEALTHY")
        # HEALTHY is the registry's view; the lease is in the instances view, folded by its own projector, so it
        # may show a moment later (seen once in a clean run: the sink's holder still None).
        cluster.eventually(lambda a=app: cluster.holder(ids[a]), f"{app}'s lease visible")
    assert (cluster.holder(ids[src]), cluster.holder(ids[sink])) == (NAMES[0], NAMES[1])

    rules = f"/v2/orgs/{ORG}/apps/{src}/alerting-rules"
    created = here.api("POST", rules, json={"ruleType": "WorkflowFailure", "receivingAppName": sink,
                                            "minIntervalSecs": 3600,
                                            "ruleMetadata": {"threshold": 1, "periodSecs": 600}})
    assert created.status_code == 201, created.text
    commands.mkdir(exist_ok=True)
    (commands / "0001.json").write_text(json.dumps({"action": "fail", "count": 1}))

    def received() -> list[dict[str, Any]]:
        text = alerts_file.read_text() if alerts_file.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    [got] = cluster.eventually(received, "the alert at the receiving app's executor on relay-b")
    assert got["name"] == "WorkflowFailure" and src in got["message"]

    def recorded() -> list[tuple[dict[str, Any], dict[str, Any]]]:  # the incident and its opening (issue 32)
        base = f"/relay/v1/orgs/{ORG}/apps/{src}/incidents"
        response = there.api("GET", base)
        assert response.status_code == 200, response.text
        return [(i, n) for i in response.json()["incidents"]
                for n in there.api("GET", f"{base}/{i['incidentId']}").json()["notifications"] if n["kind"] == "open"]

    [(incident, sent)] = cluster.eventually(recorded, "the delivery recorded")
    assert incident["instance"] == NAMES[0], incident  # opened on relay-a, which holds no executor of the sink
    assert sent["deliveredTo"] == [ids[sink]] and sent["failed"] == [], sent


def test_sigkill_an_instance_its_leases_are_adopted_once_and_its_dead_executor_recovered_once(
    cluster: Cluster,
) -> None:
    app, key, _ = cluster.application("ha")
    workflow_id = f"wf-{secrets.token_hex(4)}"
    doomed = cluster.executor(app, key, "doomed", workflow=workflow_id, trigger=True)
    victim = cluster.holder(doomed.executor_id)
    assert victim in NAMES
    peer = cluster.executor(app, key, "peer", on=set(NAMES) - {victim})
    # Another executor of the app on the victim (another version: the peer is the only one to recover v1).
    survivor = cluster.executor(app, key, "survivor", version="v2", on={victim})
    cluster.run_until_paused(app, workflow_id)
    on_victim = {lease["executorId"] for lease in cluster.instances()[victim]["leases"]
                 if lease["status"] == "HEALTHY"} - {doomed.executor_id}
    assert survivor.executor_id in on_victim

    cluster.relays[victim].kill()  # SIGKILL: no Stopped, no Disconnected, no clean anything
    doomed.proc.kill()

    survivors = set(NAMES) - {victim}
    # Its executors come back through the balancer, to the survivors.
    cluster.eventually(lambda: all(cluster.holder(e) in survivors for e in on_victim), "executors reconnected")
    assert cluster.status(app, survivor.executor_id) == "HEALTHY"
    # Adopted once: one Expired, by one survivor; each lease of the victim adopted once.
    cluster.eventually(lambda: cluster.instances()[victim]["status"] == "EXPIRED", "victim declared EXPIRED")
    lease = f"{ORG}/{app}/{doomed.executor_id}"

    def adopted() -> list[dict[str, Any]]:
        return [e["details"] for e in cluster.events(type="RelayInstance.LeaseAdopted")
                if e["details"]["from_instance"] == victim]

    # (The event log is a view: it may lag the store the instances' statuses are read from.)
    cluster.eventually(lambda: lease in [a["lease"] for a in adopted()], "the doomed executor's lease adopted")
    [expired] = [e for e in cluster.events(type="RelayInstance.Expired") if e["subject"] == victim]
    adopter = expired["details"]["by"]
    assert adopter in survivors
    leases = adopted()
    assert sorted(a["lease"] for a in leases) == sorted({a["lease"] for a in leases})  # none twice
    assert {a["to_instance"] for a in leases} == {adopter}
    assert cluster.instances()[victim]["leases"] == [] and cluster.instances()[victim]["heartbeatAgeSecs"] is None

    # The doomed executor's workflow: recovered exactly once, by the only v1 peer, dispatched by the adopter.
    cluster.eventually(lambda: [r["outcome"] for r in cluster.recoveries(app, doomed.executor_id)]
                       == ["acknowledged"], "recovery acknowledged")
    [attempt] = cluster.recoveries(app, doomed.executor_id)
    assert (attempt["instance"], attempt["peer"]) == (adopter, peer.executor_id)
    cluster.eventually(lambda: (cluster.workflow(workflow_id) or {}).get("status") == "SUCCESS", "SUCCESS")
    assert cluster.workflow(workflow_id) == {"status": "SUCCESS", "executor_id": peer.executor_id}
    assert cluster.effects(app, "first", workflow_id) == [doomed.executor_id]
    assert cluster.effects(app, "last", workflow_id) == [peer.executor_id]
    names = [e["event"] for e in cluster.events(org=ORG, app=app) if e["subject"] == doomed.executor_id]
    assert names.count("Executor.DeclaredDead") == 1 and names.count("Executor.RecoveryDispatched") == 1
    disconnected = [e for e in cluster.events(org=ORG, app=app)
                    if e["subject"] == doomed.executor_id and e["event"] == "Executor.Disconnected"]
    assert [d["details"]["reason"] for d in disconnected] == ["not reconnected after its relay instance stopped"]
    # Nobody else was declared dead: the survivor and the peer stayed (or came back) HEALTHY.
    for executor in (survivor, peer):
        events = [e["event"] for e in cluster.events(org=ORG, app=app) if e["subject"] == executor.executor_id]
        assert "Executor.DeclaredDead" not in events, (executor.name, events)
    cluster.eventually(lambda: doomed.executor_id not in executors(cluster.any(), app), "dead record deleted")


def test_the_event_log_replays_to_the_live_views_with_every_instances_settings(cluster: Cluster) -> None:
    for name, relay in cluster.relays.items():
        result = relay.run_cli(["replay", "--verify"], timeout=120)
        assert result.returncode == 0, (name, result.stdout, result.stderr)
        assert "verified" in result.stdout, (name, result.stdout)
