"""The stores the benchmarks run on: a fresh PostgreSQL database (created and dropped here), the event log's
position over time, and a quick way to fill a log with many events (written through events.log.RelayLog)."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ENV_URL = "RELAY_BENCH_DATABASE_URL"
DB_PREFIX = "relay_bench_"


def server_url() -> str:
    """RELAY_BENCH_DATABASE_URL (a loopback server that must answer), else a throwaway cluster of our own.

    The throwaway (tests/support/pg.py) runs durable, fsync on, so the figures measure a real write path; it is
    stopped and deleted when the run's process exits. Nothing assumes a server at 5432.
    """
    import psycopg

    url = os.environ.get(ENV_URL, "").strip()
    if not url:
        from tests.support.pg import ThrowawayCluster

        return ThrowawayCluster(durable=True).start()
    host = urlparse(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"{ENV_URL} must point at a loopback server")
    with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
        conn.execute("SELECT 1")
    return url


def _with_db(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


@contextlib.contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A new database on the server at `url` (its URL), dropped afterwards."""
    import psycopg
    from psycopg import sql

    name = DB_PREFIX + secrets.token_hex(6)
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_db(url, name)
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            for _ in range(100):
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                             "AND pid <> pg_backend_pid()", (name,))
                try:
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
                    break
                except psycopg.errors.ObjectInUse:
                    time.sleep(0.1)


def store_config(data_dir: Path, database_url: str | None) -> object:
    from relay.projections.backend import StoreConfig

    return StoreConfig(data_dir=data_dir, database_url=database_url)


def open_log(data_dir: Path, database_url: str | None) -> object:
    """A RelayLog on that store (the same event log `relay serve` writes)."""
    from relay.projections.store.log import RelayLog

    config = store_config(data_dir, database_url)
    return RelayLog(env=config.event_store_env())  # type: ignore[attr-defined]


class Position:
    """The event log's max notification id, read from the store itself."""

    def __init__(self, data_dir: Path, database_url: str | None) -> None:
        self.log = open_log(data_dir, database_url)

    def read(self) -> int:
        return int(self.log.recorder.max_notification_id() or 0)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.log.close()  # type: ignore[attr-defined]


def fill_log(data_dir: Path, database_url: str | None, events: int, *, batch_events: int = 5000,
             progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Append about `events` executor events (Connected, then Disconnected/Reconnected pairs, ending
    Disconnected: 10 per executor) through RelayLog.save, many aggregates per save; the rate it took."""
    from relay.events.executor import Executor, ExecutorInfo

    relay_log = open_log(data_dir, database_url)
    per_executor = 10
    executors = max(1, events // per_executor)
    per_batch = max(1, batch_events // per_executor)
    info = ExecutorInfo(application_version="bench-v1", hostname="bench", language="python",
                        dbos_version="3.2.0", metadata=None)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    written = 0
    begin = time.perf_counter()
    try:
        for start in range(0, executors, per_batch):
            batch = []
            for n in range(start, min(start + per_batch, executors)):
                at = base + timedelta(seconds=n)
                executor = Executor.connect("local", "bench", f"replay-{n:07d}", info, "bench:0", at)
                for k in range(4):
                    executor.disconnect("bench", at + timedelta(milliseconds=10 * k + 1))
                    executor.reconnect(info, "bench:0", at + timedelta(milliseconds=10 * k + 5))
                executor.disconnect("bench", at + timedelta(milliseconds=99))
                batch.append(executor)
            recordings = relay_log.save(*batch)  # type: ignore[attr-defined]
            written += len(recordings)
            if progress is not None:
                progress(written)
    finally:
        relay_log.close()  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - begin
    return {"events": written, "seconds": elapsed, "rate": written / elapsed if elapsed else 0.0}
