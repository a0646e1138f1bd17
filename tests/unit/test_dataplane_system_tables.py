"""The data plane's reads of the SDK's tables (actors/adapters/dataplane/system_tables.py, issue 36) on a small
SQLite file shaped like the SDK's tables, and the queue record of a queues row (wire/client_records.py). Against
real system databases written by the SDK: tests/integration/test_dataplane_communications.py."""

from __future__ import annotations

import base64
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from relay.actors.adapters.dataplane import system_tables
from relay.actors.errors import DataPlaneRefusedError
from relay.wire.client_records import queue_row

WF = "wf-1"
TABLES = """
CREATE TABLE workflow_events (workflow_uuid TEXT, key TEXT, value TEXT, serialization TEXT);
CREATE TABLE notifications (destination_uuid TEXT, message_uuid TEXT, topic TEXT, message TEXT,
                            serialization TEXT, created_at_epoch_ms INTEGER, consumed BOOLEAN);
CREATE TABLE streams (workflow_uuid TEXT, key TEXT, value TEXT, "offset" INTEGER, serialization TEXT);
"""


class Evil:
    """Not plain data: its pickle must never be loaded."""


def pickled(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    path = tmp_path / "sysdb.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(TABLES)
    made = sa.create_engine(f"sqlite:///{path}")
    yield made
    made.dispose()


def insert(engine: Any, table: str, *rows: tuple[Any, ...]) -> None:
    with sqlite3.connect(engine.url.database) as db:
        db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def test_the_schema_versions_read_are_the_pinned_clients() -> None:
    assert [system_tables.supports(v) for v in (None, 108, 109, 125, 126)] == [False, False, True, True, False]


def test_values_are_loaded_as_the_client_loads_them_or_shown_as_stored(engine: Any) -> None:
    evil = pickled(Evil())
    insert(engine, "workflow_events", (WF, "b", pickled({"n": 1}), "py_pickle"), (WF, "a", "[1, 2]", "portable_json"),
           (WF, "c", evil, "py_pickle"), (WF, "d", "superjson text", "js_superjson"), (WF, "e", pickled("x"), None),
           ("other", "z", pickled(0), "py_pickle"))  # fmt: skip
    assert system_tables.events(engine, "dbos", WF) == [
        {"key": "a", "value": "[1, 2]"}, {"key": "b", "value": '{"n": 1}'}, {"key": "c", "value": evil},
        {"key": "d", "value": "superjson text"}, {"key": "e", "value": "x"}]


def test_notifications_oldest_first_with_their_topic_and_consumed(engine: Any) -> None:
    insert(engine, "notifications", (WF, "m2", "__null__topic__", pickled(None), "py_pickle", 20, 0),
           (WF, "m1", "t", pickled("hi"), "py_pickle", 10, 1))  # fmt: skip
    assert system_tables.notifications(engine, "dbos", WF) == [
        {"topic": "t", "message": "hi", "created_at_epoch_ms": 10, "consumed": True},
        {"topic": None, "message": None, "created_at_epoch_ms": 20, "consumed": False}]


def test_streams_end_where_they_were_closed(engine: Any) -> None:
    insert(engine, "streams", (WF, "p", pickled("b"), 1, "py_pickle"), (WF, "p", pickled("a"), 0, "py_pickle"),
           (WF, "p", '"__DBOS_STREAM_CLOSED__"', 2, "portable_json"), (WF, "p", pickled("late"), 3, "py_pickle"),
           (WF, "legacy", "__DBOS_STREAM_CLOSED__", 0, None), (WF, "o", '{"k": 1}', 0, "portable_json"))  # fmt: skip
    assert system_tables.streams(engine, "dbos", WF) == [
        {"key": "legacy", "values": []}, {"key": "o", "values": ['{"k": 1}']}, {"key": "p", "values": ["a", "b"]}]


def test_more_rows_than_the_cap_are_refused_not_cut(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system_tables, "MAX_ROWS", 2)
    insert(engine, "workflow_events", *[(WF, f"k{i}", pickled(i), "py_pickle") for i in range(3)])
    with pytest.raises(DataPlaneRefusedError, match="more than 2 events"):
        system_tables.events(engine, "dbos", WF)
    assert system_tables.events(engine, "dbos", "nobody") == []


def test_the_reads_are_read_only(engine: Any) -> None:
    with system_tables.read_only(engine) as connection, pytest.raises(sa.exc.OperationalError, match="readonly"):
        connection.exec_driver_sql("DELETE FROM workflow_events")


def test_a_queue_row_is_the_executors_queue_record() -> None:
    row = {"name": "q", "concurrency": 5, "worker_concurrency": 2, "rate_limit_max": None,
           "rate_limit_period_sec": 9.0, "priority_enabled": 1, "partition_queue": 0, "polling_interval_sec": 0.5,
           "application_name": "app", "partition_concurrency": None, "partition_worker_concurrency": 1,
           "partition_rate_limit_max": None, "partition_rate_limit_period_sec": 3.0}  # fmt: skip
    assert queue_row(row) == {
        "name": "q", "concurrency": 5, "worker_concurrency": 2, "rate_limit_max": None,
        "rate_limit_period_sec": None,  # a period without its limit limits nothing (the SDK's Queue reads it so)
        "priority_enabled": True, "partition_queue": True,  # a per-partition limit partitions the queue
        "polling_interval_sec": 0.5, "application_name": "app", "partition_concurrency": None,
        "partition_worker_concurrency": 1, "partition_rate_limit_max": None, "partition_rate_limit_period_sec": None}
    plain = {**row, "partition_worker_concurrency": None, "priority_enabled": False, "rate_limit_max": 4}
    assert (queue_row(plain)["partition_queue"], queue_row(plain)["priority_enabled"],
            queue_row(plain)["rate_limit_period_sec"]) == (False, False, 9.0)
