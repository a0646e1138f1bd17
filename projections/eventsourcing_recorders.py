"""eventsourcing's recorders as Relay uses them, and the library internals that takes: every reach past the
library's public API (a connection's sqlite3 handle, the pool's connection factory, the tracking recorders'
statement lists and `_insert_tracking`) is in this module, checked by `install()` at start-up and by
tests/unit/test_library_hooks.py against the pinned eventsourcing (9.5.6)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import Notification, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.sqlite import (
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteDatastore,
    SQLiteFactory,
    SQLiteTrackingRecorder,
)
from eventsourcing.utils import Environment
from psycopg.sql import SQL

PINNED = "eventsourcing 9.5.6"


class _Schema(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def create_statements(self) -> tuple[str, ...]: ...


# Durability of the embedded (SQLite) store, event log and views alike. eventsourcing opens every file in WAL
# mode and leaves SQLite's default synchronous=FULL: an fsync per commit, ~4.4 ms on this kind of disk, taken
# on the gevent hub (no other greenlet runs meanwhile), once per recorded event. With WAL, synchronous=NORMAL
# fsyncs only at checkpoints (~0.3 ms per commit). The trade-off: a power cut or an OS crash may lose the last
# transactions committed before it (they roll back as if never made); it never corrupts the database, and a
# crash of Relay's process alone loses nothing (the WAL is in the OS's cache). What Relay may lose so is
# recent history (a Connected, a Disconnected) the executors re-create by reconnecting; recoveries are
# at-least-once already. `StoreConfig(sqlite_synchronous="FULL")` pays the fsync per commit instead.
SQLITE_SYNCHRONOUS = "NORMAL"
_SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")


class _TunedSQLitePool(SQLiteConnectionPool):
    """eventsourcing's SQLite pool, with `PRAGMA synchronous` set on each connection it opens (the setting
    is per connection, not stored in the file)."""

    synchronous = SQLITE_SYNCHRONOUS

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        connection._sqlite_conn.execute(f"PRAGMA synchronous={self.synchronous}")
        return connection


def tune_sqlite(datastore: SQLiteDatastore, synchronous: str = SQLITE_SYNCHRONOUS) -> SQLiteDatastore:
    """Give an SQLite datastore (no connection opened yet) a pool that sets `synchronous` on its connections."""
    level = synchronous.strip().upper()
    if level not in _SYNCHRONOUS_LEVELS:
        raise ValueError(f"bad SQLite synchronous level {synchronous!r}")
    old = datastore.pool
    pool = _TunedSQLitePool(
        db_name=old.db_name,
        lock_timeout=old.lock_timeout,
        pool_size=old.pool_size,
        max_overflow=old.max_overflow,
        pool_timeout=old.pool_timeout,
        max_age=old.max_age,
        pre_ping=old.pre_ping,
    )
    pool.synchronous = level
    datastore.pool = pool
    old.close()
    return datastore


class RelaySQLiteFactory(SQLiteFactory):
    """eventsourcing's SQLite persistence module (its recorders, unchanged) with the synchronous level of
    `SQLITE_SYNCHRONOUS` (env) on the event store's connections: see SQLITE_SYNCHRONOUS above."""

    SQLITE_SYNCHRONOUS = "SQLITE_SYNCHRONOUS"

    def __init__(self, env: Environment | dict[str, str] | None) -> None:
        super().__init__(env)
        tune_sqlite(self.datastore, self.env.get(self.SQLITE_SYNCHRONOUS) or SQLITE_SYNCHRONOUS)


class SQLiteView(SQLiteTrackingRecorder):
    def __init__(self, datastore: SQLiteDatastore, schema: _Schema) -> None:
        self._view_schema = schema
        super().__init__(datastore)

    def construct_create_table_statements(self) -> list[str]:
        statements = super().construct_create_table_statements()
        return statements + [s.replace("{s}", "") for s in self._view_schema.create_statements]


class PostgresView(PostgresTrackingRecorder):
    def __init__(self, datastore: PostgresDatastore, schema: _Schema, prefix: str) -> None:
        super().__init__(datastore, tracking_table_name=f"tracking_{schema.name}")
        for statement in schema.create_statements:
            self.sql_create_statements.append(SQL(statement.replace("{s}", prefix)))  # type: ignore[arg-type]


def insert_tracking(recorder: Any, cursor: Any, tracking: Tracking) -> None:
    """Insert a tracking row with the view's own cursor, inside the view's transaction."""
    recorder._insert_tracking(cursor, tracking)


def install() -> None:
    """Check, once at start-up, that the library still has what this module reaches into; a changed
    eventsourcing fails here, loudly, rather than deep in a projection."""
    missing = []
    if not callable(getattr(SQLiteConnectionPool, "_create_connection", None)):
        missing.append("SQLiteConnectionPool._create_connection")
    if "_sqlite_conn" not in inspect.getsource(SQLiteConnection):
        missing.append("SQLiteConnection._sqlite_conn")
    for recorder in (SQLiteTrackingRecorder, PostgresTrackingRecorder):
        insert = getattr(recorder, "_insert_tracking", None)
        if not callable(insert) or len(inspect.signature(insert).parameters) != 3:
            missing.append(f"{recorder.__name__}._insert_tracking(self, cursor, tracking)")
    if not callable(getattr(SQLiteTrackingRecorder, "construct_create_table_statements", None)):
        missing.append("SQLiteTrackingRecorder.construct_create_table_statements")
    if "sql_create_statements" not in inspect.getsource(PostgresTrackingRecorder.__init__):
        missing.append("PostgresTrackingRecorder.sql_create_statements")
    if missing:
        raise RuntimeError(f"eventsourcing changed since {PINNED}: {', '.join(missing)} (projections/"
                           "eventsourcing_recorders.py relies on them)")


def append_to_empty_log(recorder: Any, batches: Iterable[Sequence[Notification]],
                        before_commit: Callable[[], None] = lambda: None) -> int | None:
    """Write stored events into an empty event log, each at its own notification id, in ONE transaction: the
    recorder's `insert_events` would number them afresh (a PostgreSQL log has gaps, from rolled-back appends,
    which a copy keeps). Returns how many were written, or None when the log holds an event (nothing written).
    `before_commit` may raise to roll everything back. Reaches past the API: the recorder's table and columns,
    the datastore's transaction and, on PostgreSQL, the `notification_id` sequence, set past the last id."""
    table = recorder.events_table_name
    postgres = isinstance(recorder.datastore, PostgresDatastore)
    if postgres:
        table = f'"{recorder.datastore.schema}"."{table}"'
    insert = (f"INSERT INTO {table} (notification_id, originator_id, originator_version, topic, state) "  # noqa: S608
              "VALUES (%s, %s, %s, %s, %s)" if postgres else
              f"INSERT INTO {table} (rowid, originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?, ?)")  # noqa: S608
    written, last = 0, 0
    with recorder.datastore.transaction(commit=True) as curs:
        if postgres:
            curs.execute(SQL(f"LOCK TABLE {table} IN EXCLUSIVE MODE"))  # our names
        curs.execute(f"SELECT 1 FROM {table} LIMIT 1")  # noqa: S608
        if curs.fetchone() is not None:
            return None
        for batch in batches:
            curs.executemany(insert, [(n.id, n.originator_id if postgres else UUID(str(n.originator_id)).hex,
                                       n.originator_version, n.topic, n.state) for n in batch])
            written += len(batch)
            last = max([last, *(n.id for n in batch)])
        if postgres and last:
            curs.execute(SQL(f"SELECT setval(pg_get_serial_sequence('{table}', 'notification_id'), %s)"),
                         (last,))
        before_commit()
    return written


def count_notifications(recorder: Any, stop: int) -> int:
    """How many stored events the log holds up to notification id `stop` (without reading their states)."""
    table, column = recorder.events_table_name, "rowid"
    if isinstance(recorder.datastore, PostgresDatastore):
        table, column = f'"{recorder.datastore.schema}"."{table}"', "notification_id"
    with recorder.datastore.transaction(commit=False) as curs:
        curs.execute(f"SELECT COUNT(*) AS n FROM {table} WHERE {column} <= {int(stop)}")  # noqa: S608
        row = curs.fetchone()
    return int(row["n"] if isinstance(row, dict) else row[0])
