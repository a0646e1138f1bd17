"""Failing parts under a real `relay serve`: the store goes away, the process is killed mid-write, the disk fills,
the database is locked, executors misbehave. Relay must say so clearly, lose nothing, double nothing, and carry on.

- PostgreSQL stopped and restarted (a throwaway cluster of this test's own: never the shared server) while an
  executor disconnects, another connects and a recovery is due: /readyz answers 503 during the outage, the API
  503 (not 500), handshakes 503; recording is retried with backoff; after the restart every event is in the log
  exactly once, the due recovery and the one that became due are both done, the new executor is in.
- SIGKILL of Relay while it appends events (executors connecting and leaving, applications registered): after
  each restart the log and the views agree (`relay replay --verify`), every acknowledged write is there, and the
  killed connections' records go through their lifecycle again.
- SQLite: another process holding the write lock makes writes wait (then succeed once it lets go), readers and
  /readyz unaffected; a file-size limit (RLIMIT_FSIZE, the disk-full case) makes writes fail with a 503 saying so
  and a clear log line, without corrupting anything (integrity_check, replay --verify after).
- Executors that never answer (504 at RELAY_REQUEST_TIMEOUT_S, the request forgotten), answer garbage (502 at
  once, naming what is wrong) or flood Relay with frames (Relay stays responsive, its memory and log bounded).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import websocket

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
                      "acknowledged writes checked": STATS["kill acknowledged"]},
               outcome="after every restart: views equal the log (`relay replay --verify`), no acknowledged "
                       "write missing, killed connections' records resumed")
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
    from events.log import RelayLog
    from web.config import Settings

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
    """Executors connecting, identifying and leaving, as fast as they can (Connected/Disconnected events)."""
    n = 0
    while not stop.is_set():
        fake = FakeExecutor(relay, app, key, executor_id=f"churn-{round_}-{n}")
        n += 1
        try:
            fake.connect_and_identify(timeout=5)
            fake.ping_pong(timeout=5)
        except Exception:
            return
        finally:
            fake.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_sigkill_during_appends_leaves_log_and_views_consistent(store: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url") if store == "postgres" else None
    app = "sigkill-app"
    acknowledged: list[str] = []
    with RelayProcess(database_url=url) as relay:
        register_app(relay, app)
        assert relay.api("PATCH", f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": 1}).status_code == 204
        key = create_key(relay, "sigkill")
        T0 = time.monotonic()
        for round_ in range(3):
            before = len(raw_events(relay)) if round_ else 0
            stop = threading.Event()
            workers = [threading.Thread(target=_appender, args=(relay, key, app, stop, acknowledged, round_)),
                       threading.Thread(target=_churner, args=(relay, key, app, stop, round_)),
                       threading.Thread(target=_churner, args=(relay, key, app, stop, round_ + 100))]
            for worker in workers:
                worker.start()
            target = len(acknowledged) + 15
            wait_until(lambda target=target: len(acknowledged) >= target, timeout=60, message="no appends")
            print("T acks", time.monotonic() - T0)
            relay.kill()  # SIGKILL, mid-stream: requests and frames in flight
            stop.set()
            for worker in workers:
                worker.join(timeout=30)
            STATS["kills"] += 1
            events = raw_events(relay)
            STATS["kill events"] += len(events) - before
            assert_log_is_whole(events)
            print("T joined", time.monotonic() - T0)
            replay_verify(relay)  # the views, as the killed process left them, equal a rebuild from the log
            print("T verified", time.monotonic() - T0)
            relay.start()
            print("T started", time.monotonic() - T0)
            names = {a["name"] for a in relay.api("GET", "/v2/orgs/local/apps").json()}
            missing = set(acknowledged) - names
            assert not missing, f"acknowledged registrations lost: {sorted(missing)[:5]}"
            STATS["kill acknowledged"] += len(acknowledged)
        # The killed connections' records were resumed: no one is left HEALTHY (grace 1 s, then DEAD).
        wait_until(lambda: all(e["status"] == "DEAD" for e in executors(relay, app).values()), timeout=60,
                   message="records of killed connections were not taken over after the restart")
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
                    "sys.argv = ['relay', 'serve']; runpy.run_module('web.cli', run_name='__main__')")
        return [sys.executable, "-c", launcher]


def test_sqlite_full_is_a_clear_error_and_corrupts_nothing() -> None:
    with LimitedRelay() as relay:
        register_app(relay, "full-app")
        relay.stop()
        sizes = [p.stat().st_size for p in relay.data_dir.iterdir() if p.is_file()]
        relay.fsize = max(sizes) + 96 * 1024  # room for a few dozen events, not for a thousand
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
        wait_until(lambda: "disk is full" in relay.log_text() or "full" in relay.log_text(), timeout=10)
        relay.stop()
        relay.fsize = None
        _integrity_ok(relay.data_dir)
        replay_verify(relay)
        relay.start()
        names = {a["name"] for a in relay.api("GET", "/v2/orgs/local/apps").json()}
        assert set(acknowledged) <= names
        assert not {n for n in names if n.startswith("full-again")}
        assert relay.api("PUT", "/v2/orgs/local/apps/after-full", json={}).status_code == 204
