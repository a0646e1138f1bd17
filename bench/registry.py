"""Part `registry` (issue 32, point 4): is the executor registry current through a connect storm?

N simulated executors (bench/loadgen.py) connect at once to a fresh Relay. Meanwhile, until every one is listed
or the deadline passes:
- a sampler reads, every 25 ms and from the store itself, the event log's position and the ids the registry
  view holds. View lag, per sample: log position - the position up to which every Connected is in the view
  (events), and how long until the view held every Connected the log held at that sample (seconds). (The
  view's tracking position is no measure: the runner skips batches a view folds nothing of, projector.py);
- a lister asks `GET /v2/orgs/{org}/apps/{app}/executors` back to back (what an operator's client sees).
Per executor, from its handshake's end (its Connected committed to the log: the first sample whose log position
reached the event's notification id) to its first appearance in the view and in a GET's answer (when that
answer arrived), p50/p99/max; and from its executor_info answer (the load generator's clock) to that commit.
All clocks are this machine's wall clock; the sampler's period bounds the resolution.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

from bench.procs import APP, ORG, CpuMeter, LoadGen, Relay
from bench.stores import Position

SAMPLE_S = 0.025


class RegistryView:
    """The registry view's position and executor ids, read from its store (SQLite file or PostgreSQL table)."""

    def __init__(self, data_dir: Path, database_url: str | None) -> None:
        self.postgres = database_url is not None
        if database_url is None:
            self.conn: Any = sqlite3.connect(data_dir / "view_registry.sqlite", timeout=5, check_same_thread=False)
        else:
            import psycopg

            self.conn = psycopg.connect(database_url, autocommit=True)

    def _rows(self, statement: str) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(statement).fetchall())

    def position(self) -> int:
        table = "tracking_registry" if self.postgres else "tracking"
        rows = self._rows(f"SELECT max(notification_id) FROM {table} WHERE application_name = 'relay'")
        return int(rows[0][0] or 0) if rows else 0

    def ids(self) -> list[tuple[str, str]]:
        """(aggregate id, executor id) of each executor the view holds."""
        return [(str(r[0]), str(r[1])) for r in self._rows(
            f"SELECT id, executor_id FROM relay_executors WHERE org = '{ORG}' AND app = '{APP}'")]

    def connected_positions(self, data_dir: Path) -> dict[str, int]:
        """Each executor aggregate's first Connected: its notification id in the event log."""
        where = "WHERE topic LIKE '%Executor.Connected' GROUP BY originator_id"
        if self.postgres:  # eventsourcing's tables: PostgreSQL's named after the application
            return {str(r[0]): int(r[1]) for r in self._rows(
                f"SELECT originator_id::text, min(notification_id) FROM relay_events {where}")}
        statement = f"SELECT originator_id, min(rowid) FROM stored_events {where}"
        with contextlib.closing(sqlite3.connect(data_dir / "events.sqlite", timeout=30)) as conn:
            return {_uuid(r[0]): int(r[1]) for r in conn.execute(statement).fetchall()}

    def close(self) -> None:
        self.conn.close()


def _uuid(value: object) -> str:
    """An aggregate id as the views write it, from however SQLite holds it (text with or without dashes)."""
    return str(UUID(bytes=value)) if isinstance(value, bytes) else str(UUID(str(value)))


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    data = sorted(values)
    return data[min(len(data) - 1, max(0, round(p / 100 * len(data) + 0.5) - 1))]


def _summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50_ms": _ms(_pct(values, 50)), "p99_ms": _ms(_pct(values, 99)),
            "max_ms": _ms(max(values) if values else None)}


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def view_lag(samples: list[tuple[float, int]], positions: dict[str, int],
             in_view: dict[str, float]) -> tuple[list[int], list[float]]:
    """Per sample (time, log position): (events: log position - the position up to which every Connected is
    in the view then; seconds: until the view held every Connected the log held then). A Connected never
    seen in the view leaves its samples out of the seconds."""
    events = sorted((p, in_view.get(a)) for a, p in positions.items())
    lag_events, lag_s = [], []
    for t, log_pos in samples:
        upto = next((p - 1 for p, seen in events if seen is None or seen > t), log_pos)
        lag_events.append(max(0, log_pos - upto))
        shown = [seen for p, seen in events if p <= log_pos]
        if None not in shown:
            lag_s.append(max(0.0, max(shown, default=t) - t))  # type: ignore[type-var]
    return lag_events, lag_s


def committed_at(samples: list[tuple[float, int]], positions: dict[str, int]) -> dict[str, float]:
    """When each aggregate's event (by notification id) was first seen in the log: the first sample whose log
    position reached it."""
    times = [t for t, _ in samples]
    logged = [log_pos for _, log_pos in samples]
    out = {}
    for aggregate_id, notification_id in positions.items():
        k = bisect_left(logged, notification_id)
        if k < len(times):
            out[aggregate_id] = times[k]
    return out


def measure(relay: Relay, lg: LoadGen, count: int, timeout: float, say: Callable[[str], None],
            database_url: str | None, prefix: str = "reg") -> dict[str, Any]:
    """Start `count` executors at once and watch the registry until all are listed (see the module's doc)."""
    position = Position(relay.data_dir, database_url)
    view = RegistryView(relay.data_dir, database_url)
    samples: list[tuple[float, int]] = []  # (time.time(), log position)
    in_view: dict[str, float] = {}  # aggregate id -> when the view first held it
    names: dict[str, str] = {}  # aggregate id -> executor id
    errors: list[str] = []
    in_get: dict[str, float] = {}
    gets: list[float] = []  # seconds per GET
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                log_pos = position.read()
                now = time.time()
                samples.append((now, log_pos))
                for aggregate_id, executor_id in view.ids():
                    if aggregate_id not in in_view:
                        in_view[aggregate_id], names[aggregate_id] = now, executor_id
            except Exception as error:  # reported, not fatal: the next sample tries again
                errors.append(f"{type(error).__name__}: {error}")
            done.wait(SAMPLE_S)

    def list_all() -> None:
        while not done.is_set():
            began = time.time()
            with contextlib.suppress(OSError, RuntimeError):
                rows = relay.http.ok("GET", f"/v2/orgs/{ORG}/apps/{APP}/executors", timeout=60)
                now = time.time()
                gets.append(now - began)
                for row in rows:
                    in_get.setdefault(row["executorId"], now)
                if len(in_get) >= count:
                    return

    threads = [threading.Thread(target=sample, daemon=True), threading.Thread(target=list_all, daemon=True)]
    meter = CpuMeter({"relay": relay.pid, "loadgen": lg.pid})
    t0 = time.monotonic()
    lg.start(relay.ws_url, prefix, count, concurrency=None)
    for thread in threads:
        thread.start()
    all_identified = all_listed = None
    try:
        while time.monotonic() - t0 < timeout:
            time.sleep(0.25)
            if all_identified is None and lg.status()["identified"] >= count:
                all_identified = time.monotonic() - t0
                say(f"registry: all {count} identified after {all_identified:.1f} s")
            if len(in_get) >= count and len(in_view) >= count:
                all_listed = time.monotonic() - t0
                break
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=90)
        cpu = meter.read()
        identified = lg.call("identified_times")["times"]
        with contextlib.suppress(Exception):
            samples.append((time.time(), position.read()))
        positions = view.connected_positions(relay.data_dir)
        position.close()
        view.close()
    committed = {names[a]: t for a, t in committed_at(samples, positions).items() if a in names}
    to_view = [in_view[a] - committed[names[a]] for a in in_view if names[a] in committed]
    to_get = [in_get[e] - t for e, t in committed.items() if e in in_get]
    identified_to_committed = [committed[e] - t for e, t in identified.items() if e in committed]
    lag_events, lags = view_lag(samples, positions, in_view)
    status = lg.status()
    return {
        "count": count,
        "all_identified_s": all_identified,
        "all_listed_s": all_listed,
        "identified": len(identified),
        "listed_in_view": len(in_view),
        "listed_in_get": len(in_get),
        "committed_to_view": _summary(to_view),
        "committed_to_get": _summary(to_get),
        "identified_to_committed": _summary(identified_to_committed),
        "get_s": _summary(gets),
        "gets": len(gets),
        "view_lag_events_max": max(lag_events, default=None),
        "view_lag_s": _summary(lags),
        "samples": len(samples),
        "sample_errors": sorted(set(errors))[:5],
        "cpu": cpu,
        "reconnects": status["reconnects"],
        "given_up": status["given_up"],
        "connect_errors": status["connect_errors"],
    }


def bench_registry(work: Path, count: int, say: Callable[[str], None], *, store: str = "sqlite",
                   database_url: str | None = None, timeout: float = 300.0) -> dict[str, Any]:
    relay = Relay(work, f"registry-{store}", database_url=database_url, max_files=count * 2 + 4096)
    lg: LoadGen | None = None
    try:
        relay.start()
        relay.setup_app()
        lg = LoadGen(work, f"registry-{store}-loadgen", open_timeout=60.0, max_attempts=20,
                     max_executors=count + 10, backoff_max=1.0)
        say(f"registry ({store}): {count} executors at once")
        result = measure(relay, lg, count, timeout, say, database_url)
        result["store"] = store
        return result
    finally:
        if lg is not None:
            lg.stop()
        relay.stop()
