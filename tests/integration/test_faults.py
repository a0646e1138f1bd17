"""Failing parts under a real `relay serve`: the store goes away, the process is killed mid-write, the disk fills,
the database is locked, executors misbehave. Relay must say so clearly, lose nothing, double nothing, and carry on.

- PostgreSQL stopped and restarted (a throwaway cluster of this test's own: never the shared server) while an
  executor disconnects, another connects and a recovery is due: /readyz answers 503 during the outage, the API
  503 (not 500), handshakes 503; recording is retried with backoff; after the restart every event is in the log
  exactly once, the due recovery and the one that became due are both done, the new executor is in.
- SIGKILL of Relay while it appends events (executors connecting and leaving, a connect storm, applications
  registered): after each restart the log and the views agree (`relay replay --verify`), every acknowledged write
  is there (each storm executor reported HEALTHY has its Connected, none has two), and the killed connections'
  records go through their lifecycle again.
- SQLite: another process holding the write lock makes writes wait (then succeed once it lets go), readers and
  /readyz unaffected; a file-size limit (RLIMIT_FSIZE, the disk-full case) makes writes fail with a 503 saying so
  and a clear log line, without corrupting anything (integrity_check, replay --verify after).
- Executors that never answer (504 at RELAY_REQUEST_TIMEOUT_S, the request forgotten), answer garbage (502 at
  once, naming what is wrong) or flood Relay with frames (Relay stays responsive, its memory and log bounded).
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import websocket

from relay.events.refs import executor_ref
from tests.integration.fake_executor import (
    FakeExecutor,
    HandshakeRefusedError,
    create_key,
    executors,
    register_app,
    wait_status,
)
from tests.support import pg
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

STATS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed != failed_before:
        return
    if STATS["pg outages"]:
        record("faults-1-postgres", area="PostgreSQL stopped and restarted under a live Relay",
               tried={"outages": STATS["pg outages"], "seconds down": round(STATS["pg seconds down"], 1),
                      "events checked after": STATS["pg events"], "recoveries due": STATS["pg recoveries"]},
               outcome="/readyz 503 within 3 s, API and handshakes 503; after: every event once, every recovery "
                       "done, `relay replay --verify` passes")
    if STATS["kills"]:
        record("faults-2-sigkill", area="SIGKILL of Relay during event appends",
               tried={"kills": STATS["kills"], "events appended": STATS["kill events"],
                      "acknowledged writes checked": STATS["kill acknowledged"],
                      "storm executors connecting": STATS["kill storm tried"],
                      "storm Connected in the log at the kill": STATS["kill storm recorded"],
                      "storm executors reported HEALTHY before the kill": STATS["kill storm acknowledged"]},
               outcome="after every restart: views equal the log (`relay replay --verify`), no acknowledged "
                       "write missing, each storm executor's Connected once at most (once if reported HEALTHY), "
                       "killed connections' records resumed")
    if STATS["sqlite faults"]:
        record("faults-3-sqlite", area="SQLite locked by another process, and full (RLIMIT_FSIZE)",
               tried={"writes under a held lock": STATS["locked writes"],
                      "writes refused when full": STATS["full writes"]},
               outcome="locked: writes wait, then succeed; full: 503 naming the store, a clear log line; "
                       "integrity_check ok and `relay replay --verify` passes after")
    if STATS["misbehaving"]:
        record("faults-4-executors", area="Executors that never answer, answer garbage, flood",
               tried={"unanswered requests": STATS["unanswered"], "garbage answers": STATS["garbage answers"],
                      "flood frames": STATS["flood frames"], "flood MiB": round(STATS["flood bytes"] / 2**20, 1)},
               outcome="504 at the timeout, 502 at once naming the fault; under the flood the API and a healthy "
                       "executor stay responsive, memory and log bounded")


# -- the event log, read straight from the store ---------------------------------------------------------------------


def raw_events(relay: RelayProcess) -> list[tuple[int, str, str, int]]:
    """(position, topic, aggregate id, version) of every event in the store, read without Relay."""
    from relay.actors.configuration.settings import Settings
    from relay.projections.store.log import RelayLog

    settings = Settings.from_env(relay.relay_env())
    relay_log = RelayLog(env=settings.store.event_store_env())
    try:
        rows = relay_log.recorder.select_notifications(start=1, limit=1_000_000)
        return [(n.id, n.topic, str(n.originator_id), n.originator_version) for n in rows]
    finally:
        relay_log.close()


def assert_log_is_whole(events: list[tuple[int, str, str, int]]) -> None:
    """No event twice, and every aggregate's versions 1..n without a gap (eventsourcing's invariant)."""
    assert len({e[0] for e in events}) == len(events)
    versions: dict[str, list[int]] = {}
    for _position, _topic, aggregate, version in events:
        versions.setdefault(aggregate, []).append(version)
    for aggregate, seen in versions.items():
        assert seen == list(range(1, len(seen) + 1)), (aggregate, seen)


def topics_of(executor_id: str, relay: RelayProcess, app: str) -> list[str]:
    """The event names of one executor, in order (from the audit view, which names subjects)."""
    rows = relay.api("GET", f"/relay/v1/events?app={app}&limit=10000").json()["events"]
    return [r["event"].split(".", 1)[1] for r in rows if r["kind"] == "Executor" and r["subject"] == executor_id]


def sessions(url: str) -> int:
    """Open sessions on the database ``url`` names (besides this one)."""
    import psycopg

    with psycopg.connect(pg.with_database(url, "postgres"), autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (pg.database_name(url),))
        return int(row.fetchone()[0])  # type: ignore[index]


def replay_verify(relay: RelayProcess) -> None:
    result = relay.run_cli(["replay", "--verify"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified" in result.stdout


# -- executors the tests drive ---------------------------------------------------------------------------------------


@dataclass
class Peer:
    """A scripted executor that stays connected (its reader answers pings) and acknowledges every recovery."""

    fake: FakeExecutor
    recovered: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Peer:
        self.fake.connect_and_identify()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        return self

    def _serve(self) -> None:
        ws = self.fake.socket
        ws.settimeout(0.5)
        while not self.stop.is_set():
            try:
                opcode, frame = ws.recv_data_frame(control_frame=False)
            except websocket.WebSocketTimeoutException:
                continue
            except Exception:
                return
            if opcode != websocket.ABNF.OPCODE_TEXT:
                continue
            request = json.loads(frame.data.decode())
            answer: dict[str, Any] = {"type": request["type"], "request_id": request["request_id"]}
            if request["type"] == "recovery":
                self.recovered.extend(request["executor_ids"])
                answer["success"] = True
            elif request["type"] in ("list_workflows", "list_queued_workflows"):
                answer["output"] = []
            else:
                answer["error_message"] = "Unknown message type"
            ws.send(json.dumps(answer))

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        self.fake.close()


class RestartableCluster(pg.ThrowawayCluster):
    """A throwaway cluster that can be stopped and started again on the same port, keeping its data."""

    def pause(self) -> None:
        proc, self._proc = self._proc, None
        assert proc is not None
        pg._terminate(proc, signal.SIGINT, pg.STOP_TIMEOUT_S)

    def resume(self) -> None:
        assert self.bindir is not None and self.base_dir is not None and self.port is not None
        argv = [
            str(self.bindir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port), "-k", str(self.base_dir),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off", "-c", "max_connections=200",
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                          **self._popen_kwargs())  # type: ignore[call-overload]
        assert self._wait_ready(self._proc, self.port), self.log_tail()


def connect_eventually(fake: FakeExecutor, stop: threading.Event, outcomes: Counter[str]) -> None:
    """Like an SDK: try to connect every half second until admitted; count how each attempt ended."""
    while not stop.is_set():
        try:
            request = fake.connect(timeout=60)
        except HandshakeRefusedError as refused:
            outcomes[f"refused {refused.status}"] += 1
        except Exception as error:
            outcomes[type(error).__name__] += 1
        else:
            fake.identify(request)
            fake.socket.settimeout(3)
            try:  # admitted, unless Relay could not record it: then it closes with 1013 (try again later)
                code = fake.wait_closed(timeout=3)
            except (AssertionError, websocket.WebSocketTimeoutException):
                outcomes["admitted"] += 1
                return
            outcomes[f"closed {code}"] += 1
            fake.close()
        stop.wait(0.5)


# -- PostgreSQL outage -----------------------------------------------------------------------------------------------


def test_postgres_outage_loses_nothing_and_misses_no_recovery() -> None:
    app = "pg-outage-app"
    with RestartableCluster() as cluster:
        url = pg.create_database(cluster.url)
        env = {"RELAY_PING_INTERVAL_S": "2", "RELAY_PONG_TIMEOUT_S": "120", "RELAY_RECOVERY_TIMEOUT_S": "20"}
        with RelayProcess(database_url=url, env=env) as relay:
            register_app(relay, app)
            assert relay.api("PATCH", f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": 2}).status_code == 204
            key = create_key(relay, "pg-outage")
            peer = Peer(FakeExecutor(relay, app, key, executor_id="peer")).start()
            due = FakeExecutor(relay, app, key, executor_id="due-before")  # its recovery falls due in the outage
            leaving = FakeExecutor(relay, app, key, executor_id="leaves-during")  # disconnects in the outage
            for fake in (due, leaving):
                fake.connect_and_identify()
                wait_status(relay, app, fake.executor_id, "HEALTHY")
            due.close()
            wait_status(relay, app, "due-before", "DISCONNECTED")

            cluster.pause()
            down = time.monotonic()
            STATS["pg outages"] += 1
            started = time.monotonic()
            ready = requests.get(f"{relay.base_url}/readyz", timeout=10)
            assert ready.status_code == 503 and time.monotonic() - started < 5, ready.text
            leaving.close()  # its Disconnected cannot be recorded now
            joining = FakeExecutor(relay, app, key, executor_id="joins-during")
            stop, outcomes = threading.Event(), Counter[str]()
            joiner = threading.Thread(target=connect_eventually, args=(joining, stop, outcomes), daemon=True)
            joiner.start()
            api = requests.get(f"{relay.base_url}/v2/orgs/local/apps/{app}", timeout=90,
                               headers={"Authorization": f"Bearer {relay.admin_token}"})
            assert api.status_code == 503 and "store is unavailable" in api.json()["detail"], api.text
            assert relay.running
            cluster.resume()
            STATS["pg seconds down"] += time.monotonic() - down

            wait_until(lambda: requests.get(f"{relay.base_url}/readyz", timeout=10).status_code == 200,
                       timeout=120, message=f"relay not ready after the restart:\n{relay.log_tail()}")
            # Both recoveries happen: the one due during the outage, and the one the outage's disconnect caused.
            wait_until(lambda: {"due-before", "leaves-during"} <= set(peer.recovered), timeout=120,
                       message=f"recoveries missed: {peer.recovered}\n{relay.log_tail()}")
            STATS["pg recoveries"] += 2
            wait_until(lambda: not {"due-before", "leaves-during"} & set(executors(relay, app)), timeout=60,
                       message="recovered executors' records not deleted")
            joiner.join(timeout=120)
            stop.set()
            assert outcomes["admitted"] == 1, outcomes
            wait_status(relay, app, "joins-during", "HEALTHY", timeout=30)

            events = raw_events(relay)
            STATS["pg events"] += len(events)
            assert_log_is_whole(events)
            audited = lambda: [r["position"] for r in relay.api("GET", "/relay/v1/events?limit=10000").json()["events"]]  # noqa: E731
            wait_until(lambda: audited() == [e[0] for e in events], timeout=30, message="the audit view lags the log")
            for executor_id in ("due-before", "leaves-during"):
                names = topics_of(executor_id, relay, app)
                assert names.count("Disconnected") == 1, names
                assert names.count("DeclaredDead") == 1, names
                assert names.count("RecoveryAcknowledged") == 1 and names[-1] == "Deleted", names
            assert topics_of("joins-during", relay, app) == ["Connected"]
            assert topics_of("peer", relay, app) == ["Connected"]
            peer.close()
            joining.close()
        replay_verify(relay)


# -- SIGKILL during appends ------------------------------------------------------------------------------------------


def _appender(relay: RelayProcess, key: str, app: str, stop: threading.Event, acknowledged: list[str],
              round_: int) -> None:
    """Register applications one after another; remember each one the API acknowledged."""
    n = 0
    while not stop.is_set():
        name = f"kill-{round_}-{n}"
        n += 1
        try:
            response = requests.put(f"{relay.base_url}/v2/orgs/local/apps/{name}", json={}, timeout=10,
                                    headers={"Authorization": f"Bearer {relay.admin_token}"})
        except requests.RequestException:
            return
        if response.status_code == 204:
            acknowledged.append(name)


def _churner(relay: RelayProcess, key: str, app: str, stop: threading.Event, round_: int) -> None:
    """Executors connecting, identifying and leaving, as fast as they can (Connected/Reconnected/Disconnected).
    Three ids in turn, each back well within the grace period: none is declared dead while the round runs (a
    peer connecting would otherwise get every dead one's recovery, and the test would measure that instead)."""
    n = 0
    while not stop.is_set():
        fake = FakeExecutor(relay, app, key, executor_id=f"churn-{round_}-{n % 3}")
        n += 1
        try:
            fake.connect_and_identify(timeout=5)
            fake.ping_pong(timeout=5)
        except Exception:
            return
        finally:
            fake.close()
        stop.wait(0.05)  # paced: a few connections a second, not a storm (see the PostgreSQL note in the report)


STORM_SIZE = 300  # executors connecting at once in each round of the SIGKILL test


def _storm(relay: RelayProcess, key: str, app: str, round_: int, stop: threading.Event,
           healthy: set[str]) -> list[threading.Thread]:
    """STORM_SIZE executors connecting at once (one thread each, each once, kept open), and a reader that
    adds to ``healthy`` each storm executor the API reports HEALTHY: the acknowledged connections."""
    fakes = [FakeExecutor(relay, app, key, executor_id=f"storm-{round_}-{n}") for n in range(STORM_SIZE)]

    def connect(fake: FakeExecutor) -> None:
        try:
            fake.connect_and_identify(timeout=30)
            stop.wait(120)
        except Exception:
            pass
        finally:
            fake.close()

    def watch() -> None:
        while not stop.is_set():
            try:
                response = requests.get(f"{relay.base_url}/v2/orgs/local/apps/{app}/executors", timeout=10,
                                        headers={"Authorization": f"Bearer {relay.admin_token}"})
            except requests.RequestException:
                return
            if response.status_code == 200:
                healthy.update(e["executorId"] for e in response.json()
                               if e["status"] == "HEALTHY" and e["executorId"].startswith(f"storm-{round_}-"))
            stop.wait(0.05)

    return [threading.Thread(target=connect, args=(fake,)) for fake in fakes] + [threading.Thread(target=watch)]


def _assert_connected_once(events: list[tuple[int, str, str, int]], app: str, round_: int,
                           acknowledged: set[str]) -> int:
    """Every acknowledged storm executor's Connected is in the log, and no storm executor's twice. Returns how
    many storm executors' Connected are in the log."""
    from relay.events.ids import executor_id

    connected = Counter(aggregate for _position, topic, aggregate, _version in events
                        if topic.endswith("Executor.Connected"))
    for n in range(STORM_SIZE):
        name = f"storm-{round_}-{n}"
        count = connected[str(executor_id("local", app, name))]
        assert count <= 1, f"{name} connected once, recorded {count} times"
        if name in acknowledged:
            assert count == 1, f"{name} was reported HEALTHY, its Connected is not in the log"
    return sum(1 for n in range(STORM_SIZE) if connected[str(executor_id("local", app, f"storm-{round_}-{n}"))])


# A restart after a SIGKILL waits two heartbeat intervals (and a margin) to see the killed process's heartbeat row
# stand still (actors/identity_claim.py): 2 s with 0.5 s beats, not 5 s with the default 2 s.
QUICK_HEARTBEAT = {"RELAY_HEARTBEAT_INTERVAL_S": "0.5"}


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_sigkill_during_appends_leaves_log_and_views_consistent(store: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url") if store == "postgres" else None
    acknowledged: list[str] = []
    apps = [f"sigkill-app-{n}" for n in range(3)]  # one per round: a round's dead are not the next one's business
    with RelayProcess(database_url=url, env=QUICK_HEARTBEAT) as relay:
        for app in apps:
            register_app(relay, app)
            assert relay.api("PATCH", f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": 2}).status_code == 204
        key = create_key(relay, "sigkill")
        for round_, app in enumerate(apps):
            before = len(raw_events(relay))
            stop = threading.Event()
            workers = [threading.Thread(target=_appender, args=(relay, key, app, stop, acknowledged, round_)),
                       threading.Thread(target=_churner, args=(relay, key, app, stop, round_))]
            for worker in workers:
                worker.start()
            target = len(acknowledged) + 15
            wait_until(lambda target=target: len(acknowledged) >= target, timeout=60, message="no appends")
            # And the churn got at least one executor recorded, so the round has a connection to take over.
            wait_until(lambda app=app: executors(relay, app), timeout=60, message="no churn recorded")
            # A connect storm, killed while it is being admitted (group commits in flight).
            healthy: set[str] = set()
            storm = _storm(relay, key, app, round_, stop, healthy)
            for worker in storm:
                worker.start()
            wait_until(lambda healthy=healthy: len(healthy) >= STORM_SIZE // 10, timeout=60,
                       message="no storm executor admitted")
            relay.kill()  # SIGKILL, mid-stream: requests and frames in flight
            stop.set()
            acknowledged_storm = set(healthy)
            for worker in workers + storm:
                worker.join(timeout=30)
            STATS["kills"] += 1
            STATS["kill storm acknowledged"] += len(acknowledged_storm)
            if url is not None:  # the killed process's sessions go before the store is read again
                wait_until(lambda: sessions(url) == 0, timeout=30, message="the killed relay's sessions linger")
            events = raw_events(relay)
            STATS["kill events"] += len(events) - before
            assert_log_is_whole(events)
            STATS["kill storm recorded"] += _assert_connected_once(events, app, round_, acknowledged_storm)
            STATS["kill storm tried"] += STORM_SIZE
            replay_verify(relay)  # the views, as the killed process left them, equal a rebuild from the log
            relay.start()
            names = {a["name"] for a in relay.api("GET", "/v2/orgs/local/apps").json()}
            missing = set(acknowledged) - names
            assert not missing, f"acknowledged registrations lost: {sorted(missing)[:5]}"
            STATS["kill acknowledged"] += len(acknowledged)
        # The killed connections' records were resumed: no one is left HEALTHY (grace 2 s, then DEAD).
        for app in apps:
            wait_until(lambda app=app: all(e["status"] == "DEAD" for e in executors(relay, app).values()),
                       timeout=60, message=f"records of killed connections of {app} were not taken over")
            assert executors(relay, app)
        events = raw_events(relay)
        assert_log_is_whole(events)
        relay.stop()
        replay_verify(relay)


# -- SQLite: locked, full --------------------------------------------------------------------------------------------

LOCKER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
connection.execute("BEGIN IMMEDIATE")  # the write lock, held until told
print("locked", flush=True)
sys.stdin.readline()
connection.execute("ROLLBACK")
print("released", flush=True)
"""


def _integrity_ok(data_dir: Path) -> int:
    checked = 0
    for path in sorted(data_dir.glob("*.sqlite")):
        with sqlite3.connect(path) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok", path.name
        checked += 1
    assert checked >= 2
    return checked


def test_sqlite_locked_by_another_process_makes_writes_wait(tmp_path: Path) -> None:
    with RelayProcess() as relay:
        register_app(relay, "locked-app")
        key = create_key(relay, "locked")
        holder = subprocess.Popen([sys.executable, "-c", LOCKER, str(relay.data_dir / "events.sqlite")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "locked"
            STATS["sqlite faults"] += 1
            # Readers are not held up (WAL): health, readiness, reads.
            assert relay.api("GET", "/readyz", token="", timeout=5).status_code == 200
            assert relay.api("GET", "/v2/orgs/local/apps/locked-app", timeout=5).status_code == 200
            # Writers wait for the lock: an application registration and an executor's Connected.
            results: dict[str, Any] = {}
            writer = threading.Thread(target=lambda: results.update(
                put=relay.api("PUT", "/v2/orgs/local/apps/written-while-locked", json={}, timeout=40)))
            fake = FakeExecutor(relay, "locked-app", key, executor_id="connects-while-locked")
            connector = threading.Thread(target=lambda: results.update(hello=fake.connect_and_identify()))
            writer.start()
            connector.start()
            STATS["locked writes"] += 2
            writer.join(timeout=1.5)
            assert writer.is_alive(), "a write went through while another process held the write lock"
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "released"
            writer.join(timeout=40)
            connector.join(timeout=40)
            assert results["put"].status_code == 204, results["put"].text
            wait_status(relay, "locked-app", "connects-while-locked", "HEALTHY", timeout=30)
            fake.close()
        finally:
            holder.kill()
            holder.wait(timeout=10)
        relay.stop()
        _integrity_ok(relay.data_dir)
        replay_verify(relay)


class LimitedRelay(RelayProcess):
    """`relay serve` with RLIMIT_FSIZE: no file it writes may grow past ``fsize`` bytes (a full disk, for it)."""

    fsize: int | None = None

    def command(self) -> list[str]:
        if self.fsize is None:
            return super().command()
        launcher = ("import resource, runpy, sys; "
                    f"resource.setrlimit(resource.RLIMIT_FSIZE, ({self.fsize}, {self.fsize})); "
                    "sys.argv = ['relay', 'serve']; runpy.run_module('relay.web.cli.main', run_name='__main__')")
        return [sys.executable, "-c", launcher]


# No heartbeat while the store is full: a beat waits up to 10 s for the views (which cannot write then), and the
# audit entry of every write queued behind the beats in the instance actor until its 15 s timeout (20 s a write).
QUIET_HEARTBEAT = {"RELAY_HEARTBEAT_INTERVAL_S": "600", "RELAY_INSTANCE_TIMEOUT_S": "1200"}


def test_sqlite_full_is_a_clear_error_and_corrupts_nothing() -> None:
    with LimitedRelay(env=QUIET_HEARTBEAT) as relay:
        register_app(relay, "full-app")
        relay.stop()
        sizes = [p.stat().st_size for p in relay.data_dir.iterdir() if p.is_file()]
        relay.fsize = max(sizes) + 8 * 1024  # room for a few events (views, which lag then, wait 5 s each)
        relay.start()
        STATS["sqlite faults"] += 1
        acknowledged, refusal = [], None
        for n in range(3000):
            response = relay.api("PUT", f"/v2/orgs/local/apps/full-{n}", json={}, timeout=40)
            if response.status_code == 204:
                acknowledged.append(f"full-{n}")
                continue
            refusal = response
            break
        assert refusal is not None, "the store never filled up"
        STATS["full writes"] += 1
        assert refusal.status_code == 503, refusal.text
        assert refusal.headers["Content-Type"] == "application/problem+json"
        assert "store is unavailable" in refusal.json()["detail"]
        for n in range(3):  # it stays a clear refusal, and the process stays up
            again = relay.api("PUT", f"/v2/orgs/local/apps/full-again-{n}", json={}, timeout=40)
            STATS["full writes"] += 1
            assert again.status_code == 503, again.text
        assert relay.api("GET", "/healthz", token="").status_code == 200
        assert relay.running
        clear = ("store unavailable during a request: OperationalError: disk I/O error",
                 "store unavailable during a request: OperationalError: database or disk is full")
        wait_until(lambda: any(line in relay.log_text() for line in clear), timeout=10, message=relay.log_tail())
        relay.stop()
        relay.fsize = None
        _integrity_ok(relay.data_dir)
        replay_verify(relay)
        relay.start()
        names = {a["name"] for a in relay.api("GET", "/v2/orgs/local/apps").json()}
        assert set(acknowledged) <= names
        assert not {n for n in names if n.startswith("full-again")}
        assert relay.api("PUT", "/v2/orgs/local/apps/after-full", json={}).status_code == 204


# -- executors that misbehave ----------------------------------------------------------------------------------------


def test_an_executor_that_never_answers_times_out_and_holds_nothing() -> None:
    env = {"RELAY_REQUEST_TIMEOUT_S": "1", "RELAY_MAX_INFLIGHT_PER_EXECUTOR": "3"}
    with RelayProcess(env=env) as relay:
        register_app(relay, "silent-app")
        key = create_key(relay, "silent")
        with FakeExecutor(relay, "silent-app", key) as silent:
            silent.connect_and_identify()
            wait_status(relay, "silent-app", silent.executor_id, "HEALTHY")
            STATS["misbehaving"] += 1
            for _ in range(6):  # twice the in-flight limit: timed-out requests are forgotten, not held
                started = time.monotonic()
                response = relay.api("GET", "/v2/orgs/local/apps/silent-app/workflows", timeout=30)
                STATS["unanswered"] += 1
                assert response.status_code == 504, response.text
                assert "did not answer 'list_workflows' within 1 s" in response.json()["detail"]
                assert time.monotonic() - started < 10
                assert silent.recv_json()["type"] == "list_workflows"  # it was asked, and said nothing
            silent.ping_pong()
            assert executors(relay, "silent-app")[silent.executor_id]["status"] == "HEALTHY"


GARBAGE_ANSWERS: dict[str, Callable[[str], str]] = {
    "a field of the wrong type": lambda rid: json.dumps({"type": "list_workflows", "request_id": rid, "output": 7}),
    "truncated": lambda rid: json.dumps({"type": "list_workflows", "request_id": rid, "output": []})[:-3],
    "records that are not objects": lambda rid: json.dumps({"type": "list_workflows", "request_id": rid,
                                                            "output": ["x", 1]}),
    "error_message not a string": lambda rid: json.dumps({"type": "list_workflows", "request_id": rid,
                                                          "error_message": {"m": 1}}),
    "nested past the limit": lambda rid: '{"type": "list_workflows", "request_id": "' + rid + '", "output": '
                                         + "[" * 150 + "]" * 150 + "}",
    "no output": lambda rid: json.dumps({"type": "list_workflows", "request_id": rid}),
}


def test_an_executor_that_answers_garbage_gets_a_clear_502_at_once() -> None:
    with RelayProcess(env={"RELAY_REQUEST_TIMEOUT_S": "30"}) as relay:
        register_app(relay, "garbage-app")
        key = create_key(relay, "garbage")
        with FakeExecutor(relay, "garbage-app", key) as fake:
            fake.connect_and_identify()
            wait_status(relay, "garbage-app", fake.executor_id, "HEALTHY")
            STATS["misbehaving"] += 1
            for kind, answer in GARBAGE_ANSWERS.items():
                result: dict[str, requests.Response] = {}
                caller = threading.Thread(target=lambda result=result: result.update(
                    r=relay.api("GET", "/v2/orgs/local/apps/garbage-app/workflows", timeout=40)))
                started = time.monotonic()
                caller.start()
                request = fake.recv_json()
                fake.send_text(answer(request["request_id"]))
                caller.join(timeout=40)
                STATS["garbage answers"] += 1
                response = result["r"]
                assert response.status_code == 502, (kind, response.text)
                assert time.monotonic() - started < 5, kind  # at once, not at the 30 s timeout
                detail = response.json()["detail"]
                assert "answered 'list_workflows' with a malformed frame" in detail, (kind, detail)
                assert fake.executor_id in detail
            fake.ping_pong()  # the connection itself is kept: one bad answer is not a dead executor


def _rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_an_executor_that_floods_relay_does_not_take_it_down() -> None:
    frames, big = 20_000, 100
    with RelayProcess(env={"RELAY_MAX_FRAME_BYTES": str(1024 * 1024)}) as relay:
        register_app(relay, "flood-app")
        key = create_key(relay, "flood")
        flooder = FakeExecutor(relay, "flood-app", key, executor_id="flooder")
        flooder.connect_and_identify()
        peer = Peer(FakeExecutor(relay, "flood-app", key, executor_id="steady")).start()  # newest: API goes there
        wait_status(relay, "flood-app", "steady", "HEALTHY")
        assert relay.pid is not None
        rss_before = _rss_kib(relay.pid, "VmRSS")
        STATS["misbehaving"] += 1
        rng = random.Random(7)
        done = threading.Event()

        def flood() -> None:
            try:
                for n in range(frames):
                    size = 200_000 if n % (frames // big) == 0 else rng.randint(200, 4000)
                    frame = json.dumps({"type": "list_workflows", "request_id": f"flood-{n}", "output": [],
                                        "pad": "f" * size})
                    STATS["flood bytes"] += len(frame)
                    flooder.send_text(frame)
                    STATS["flood frames"] += 1
            finally:
                done.set()

        sender = threading.Thread(target=flood)
        sender.start()
        latencies = []
        while not done.is_set():
            for path in ("/healthz", "/v2/orgs/local/apps/flood-app/workflows"):
                started = time.monotonic()
                response = relay.api("GET", path, token="" if path == "/healthz" else None, timeout=30)
                latencies.append(time.monotonic() - started)
                assert response.status_code == 200, (path, response.text)
        sender.join(timeout=120)
        flooder.ping_pong(timeout=60)  # every flood frame was read and processed, and it is still served
        assert len(latencies) >= 4 and max(latencies) < 5, latencies
        grown_mib = (_rss_kib(relay.pid, "VmHWM") - rss_before) / 1024
        assert grown_mib < 200, f"relay's memory grew by {grown_mib:.0f} MiB under the flood"
        lines = [line for line in relay.log_text().splitlines() if "flood-app/flooder" in line]
        assert len(lines) <= 100 + frames // 1000 + 5, len(lines)
        assert executors(relay, "flood-app")["steady"]["status"] == "HEALTHY"
        peer.close()
        flooder.close()


# -- the retries themselves, in-process, with time driven by hand ----------------------------------------------------
# The outage above is shorter than eventsourcing's own retries (ten tries of the connection pool's 5 s), which
# absorb it; a longer one reaches Relay's: these drive them directly, the store refusing for as long as a test says.


class FlakyLog:
    """A RelayLog (in memory) whose executor commands and reads fail while ``down``, as an unreachable store's do."""

    def __new__(cls) -> Any:
        from eventsourcing.persistence import OperationalError

        from relay.events.executor import Executor
        from relay.projections.store.log import RelayLog

        class _Flaky(RelayLog):
            down = False
            refused = 0

            def _check(self) -> None:
                if self.down:
                    self.refused += 1
                    raise OperationalError("connection refused")

            def load(self, aggregate_id: Any, kind: Any) -> Any:
                if kind is Executor:  # every executor command and read loads it first
                    self._check()
                return super().load(aggregate_id, kind)

        return _Flaky()


class _Socket:
    def __init__(self, clock: Any) -> None:
        self.clock, self.sent, self.closed = clock, [], None

    def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    def ping(self) -> None:
        pass

    def last_pong(self) -> float:
        return float("inf")  # always answers its pings

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


@pytest.fixture
def world() -> Iterator[tuple[Any, Any, Any]]:
    import pykka

    from relay.actors.application import ApplicationActor
    from relay.actors.configuration.limits import Limits
    from relay.actors.context import ActorContext
    from relay.actors.directory import Directory
    from relay.actors.scheduler import ManualScheduler

    class Apps:
        def app(self, org: str, app: str) -> dict[str, Any]:
            return {"settings": {"executorTimeoutSecs": 20}}

    @dataclass
    class Views:
        applications: Apps = field(default_factory=Apps)

    clock = ManualScheduler()
    ctx = ActorContext(log=FlakyLog(), views=Views(), runner=None, instance_id="relay-1",  # type: ignore[arg-type]
                       limits=Limits(recovery_timeout_s=30), clock=clock.wall, scheduler=clock)
    directory = Directory(lambda org, app: ApplicationActor.start(ctx, org, app))
    yield ctx, directory, clock
    pykka.ActorRegistry.stop_all()


def _executor(world: Any, executor_id: str) -> tuple[Any, _Socket]:
    from relay.actors.executor import Connection, ExecutorActor

    ctx, directory, clock = world
    socket = _Socket(clock)
    ref = ExecutorActor.start(ctx, directory, socket, Connection("acme", "shop", "key", "127.0.0.1"))
    hello = _last(ref, socket)
    ref.proxy().on_frame(json.dumps({"type": "executor_info", "request_id": hello["request_id"],
                                     "executor_id": executor_id, "application_version": "v1",
                                     "language": "python", "dbos_version": "3.2.0"})).get(timeout=5)
    return ref, socket


def _last(ref: Any, socket: _Socket) -> dict[str, Any]:
    ref.proxy().closed.get(timeout=5)
    return socket.sent[-1]


def _run(world: Any, seconds: float, *refs: Any) -> None:
    _ctx, directory, clock = world
    for _ in range(round(seconds * 4)):
        clock.advance(0.25)
        for ref in refs:
            if ref.is_alive():
                ref.proxy().closed.get(timeout=5)
        directory.application("acme", "shop").proxy().lifecycle_snapshot().get(timeout=5)


def _names(ctx: Any, executor_id: str) -> list[str]:
    record = ctx.log.get(executor_ref("acme", "shop", executor_id))
    return [type(e).__name__ for e in ctx.log.events.get(record.id)] if record else []


def _answer_recovery(world: Any, peer: Any, socket: _Socket, dead: str) -> None:
    request = socket.sent[-1]
    assert (request["type"], request["executor_ids"]) == ("recovery", [dead])
    peer.proxy().on_frame(json.dumps({"type": "recovery", "request_id": request["request_id"],
                                      "success": True})).get(timeout=5)
    # Relay confirms a success: none of the dead executor's workflows (of its version) remain pending.
    wait_until(lambda: socket.sent[-1]["type"] == "exist_pending_workflows", timeout=10,
               message=f"no exist_pending_workflows check after the recovery: {socket.sent[-1]}")
    check = socket.sent[-1]
    assert check["executor_id"] == dead, check
    peer.proxy().on_frame(json.dumps({"type": "exist_pending_workflows", "request_id": check["request_id"],
                                      "exist": False})).get(timeout=5)


def test_a_disconnect_the_store_refuses_is_recorded_once_it_is_back(world: Any) -> None:
    ctx, _directory, _clock = world
    dying, _ = _executor(world, "dying")
    peer, peer_socket = _executor(world, "peer")
    ctx.log.down = True
    closed_at = ctx.clock()
    dying.proxy().on_closed("socket closed").get(timeout=5)
    assert dying.is_alive()  # socketless, keeping the Disconnected until it is recorded
    _run(world, 20, dying, peer)
    attempts = ctx.log.refused
    assert 5 <= attempts <= 7, attempts  # 0.5, 1, 2, 4, 8 s apart: backing off, not hammering
    ctx.log.down = False
    _run(world, 17, dying, peer)  # the next attempt (16 s after the last) records it
    assert not dying.is_alive()
    record = ctx.log.get(executor_ref("acme", "shop", "dying"))
    assert record.disconnected_at == closed_at  # recorded as when it happened, not when the store came back
    # Its grace period (20 s) counted from then, so it was over at once: dead, and its recovery with the peer.
    assert record.status == "DEAD"
    _answer_recovery(world, peer, peer_socket, "dying")
    _run(world, 1, peer)
    assert _names(ctx, "dying") == ["Connected", "Disconnected", "DeclaredDead", "RecoveryDispatched",
                                    "RecoveryAcknowledged", "Deleted"]


def test_a_connection_the_store_cannot_record_is_closed_and_its_record_still_watched(world: Any) -> None:
    ctx, _directory, _clock = world
    comeback, _ = _executor(world, "comeback")
    peer, peer_socket = _executor(world, "peer")
    comeback.proxy().on_closed("socket closed").get(timeout=5)
    _run(world, 5, peer)  # DISCONNECTED, 15 s of grace left
    ctx.log.down = True
    again, socket = _executor(world, "comeback")  # it comes back while the store is down
    assert socket.closed == (1013, "relay store unavailable, reconnect later")
    again.proxy().on_closed("socket closed").get(timeout=5)
    _run(world, 10, peer)
    ctx.log.down = False
    # Its timers were stopped by the refused connection's claim; the record is read again and watched as it
    # stands: DISCONNECTED, so declared dead at the end of its grace, and recovered.
    _run(world, 10, peer)
    assert ctx.log.get(executor_ref("acme", "shop", "comeback")).status == "DEAD"
    _answer_recovery(world, peer, peer_socket, "comeback")
    _run(world, 1, peer)
    assert _names(ctx, "comeback") == ["Connected", "Disconnected", "DeclaredDead", "RecoveryDispatched",
                                       "RecoveryAcknowledged", "Deleted"]
