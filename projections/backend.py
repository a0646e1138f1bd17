"""Where the event log and the views live: SQLite files in a data dir, or one PostgreSQL database.

Views are eventsourcing tracking recorders: a view's rows and its tracking position are written in
one transaction, so an event is applied exactly once even across crashes.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

import psycopg
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore
from psycopg.sql import SQL

from relay.projections.eventsourcing_recorders import (
    SQLITE_SYNCHRONOUS,
    PostgresView,
    SQLiteView,
    insert_tracking,
    tune_sqlite,
)

log = logging.getLogger("relay.store")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
SQLITE_LOG_FILE = "events.sqlite"
# The data directory and what is in it (the store, its -wal/-shm files, the admin token) are the owner's only.
# `relay` runs with umask 077 (web/cli/main.py), so what it creates is born private; `private_dir` also closes up a
# directory made by an older Relay (0755, files 0644), before SQLite opens its files: the -wal and -shm files
# SQLite creates copy the database file's mode.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600




_NOT_OURS: set[Path] = set()  # directories already warned about


def relays_own_file(name: str) -> bool:
    """Whether a file of the data directory is one Relay writes (the store's files, the admin token)."""
    return name.startswith(SQLITE_LOG_FILE) or (name.startswith("view_") and ".sqlite" in name) \
        or name == "admin_token"


def private_dir(directory: Path) -> None:
    """Make `directory` (0700) if missing; make it and Relay's own files in it owner-only (other files there
    are left as they are)."""
    directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    try:
        if stat.S_IMODE(directory.stat().st_mode) != PRIVATE_DIR_MODE:
            directory.chmod(PRIVATE_DIR_MODE)
        with os.scandir(directory) as entries:
            for entry in entries:
                if (relays_own_file(entry.name) and entry.is_file(follow_symlinks=False)
                        and stat.S_IMODE(entry.stat().st_mode) & 0o077):
                    os.chmod(entry.path, PRIVATE_FILE_MODE)
    except PermissionError:  # not the owner (a volume made by another user): what it can write is still ours
        if directory not in _NOT_OURS:
            _NOT_OURS.add(directory)
            log.warning("could not make the data directory %s and its files owner-only (not their owner)",
                        directory)

@dataclass(frozen=True)
class StoreConfig:
    """The embedded SQLite store (data_dir) unless database_url names a PostgreSQL database."""

    data_dir: Path
    database_url: str | None = None
    schema: str = "public"
    sqlite_synchronous: str = SQLITE_SYNCHRONOUS

    @property
    def is_postgres(self) -> bool:
        return self.database_url is not None

    def describe(self) -> str:
        """Where the store is, without credentials (safe to log)."""
        if self.database_url is None:
            return f"sqlite:{self.data_dir}"
        parts = urlparse(self.database_url)
        return f"postgresql://{parts.hostname}:{parts.port or 5432}{parts.path} (schema {self.schema})"

    def log_exists(self, events_table: str) -> bool:
        """Whether the event log is there (without creating anything): the SQLite file, or the log's table in
        the schema. Raises psycopg.Error when the PostgreSQL database cannot be reached."""
        if self.database_url is None:
            return (self.data_dir / SQLITE_LOG_FILE).is_file()
        p = self.postgres_params()
        with psycopg.connect(dbname=p["dbname"], host=p["host"], port=p["port"], user=p["user"],
                             password=p["password"], connect_timeout=5) as conn:
            row = conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.{events_table}",)).fetchone()
        return row is not None and row[0] is not None

    def postgres_params(self) -> dict[str, str]:
        assert self.database_url is not None
        parts = urlparse(self.database_url)
        if parts.scheme not in ("postgres", "postgresql"):
            raise ValueError("RELAY_DATABASE_URL must be a postgresql:// URL")
        return {
            "dbname": unquote(parts.path.lstrip("/")) or "postgres",
            "host": parts.hostname or "127.0.0.1",
            "port": str(parts.port or 5432),
            "user": unquote(parts.username or "postgres"),
            "password": unquote(parts.password or ""),
        }

    def event_store_env(self) -> dict[str, str]:
        """The environment eventsourcing's persistence modules read for the event log."""
        if self.database_url is None:
            private_dir(self.data_dir)
            return {
                # eventsourcing.sqlite, tuned
                "PERSISTENCE_MODULE": "relay.projections.eventsourcing_recorders:RelaySQLiteFactory",
                "SQLITE_DBNAME": str(self.data_dir / SQLITE_LOG_FILE),
                "SQLITE_LOCK_TIMEOUT": "30",
                "SQLITE_SYNCHRONOUS": self.sqlite_synchronous,
            }
        p = self.postgres_params()
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": p["dbname"],
            "POSTGRES_HOST": p["host"],
            "POSTGRES_PORT": p["port"],
            "POSTGRES_USER": p["user"],
            "POSTGRES_PASSWORD": p["password"],
            "POSTGRES_SCHEMA": self.schema,
            "POSTGRES_POOL_SIZE": "2",
            "POSTGRES_MAX_OVERFLOW": "8",
            "POSTGRES_CONNECT_TIMEOUT": "5",
            "POSTGRES_PRE_PING": "y",
        }


# An INSERT ... VALUES (?, ...) with nothing after the values (no ON CONFLICT: a multi-row DO UPDATE may not
# touch a row twice), which PostgreSQL may be sent as one INSERT ... SELECT over arrays.
_PLAIN_INSERT = re.compile(r"^(\s*INSERT\s+INTO\s+\{s\}\w+\s*\([^)]*\))\s*VALUES\s*\(\s*\?(?:\s*,\s*\?)*\s*\)\s*$",
                           re.IGNORECASE)
_ARRAY_TYPES = {str: "text", int: "bigint"}


def _array_types(rows: list[tuple[object, ...]]) -> list[str] | None:
    """Each column's array type when every value is a str, an int or None and no column is all None (its
    type would be unknown); else None (the rows then go as executemany)."""
    types: list[str] = []
    for column in zip(*rows, strict=True):
        kinds = {type(v) for v in column if v is not None}
        if len(kinds) != 1 or (kind := kinds.pop()) not in _ARRAY_TYPES:
            return None
        types.append(_ARRAY_TYPES[kind])
    return types


_WRITE_TARGET = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\{s\}(\w+)", re.IGNORECASE)


class Sql:
    """A cursor that takes portable statements: `?` placeholders and `{s}` before table names.

    `write`, `insert` and `update` queue a statement whose result nobody reads (a projection's writes): queued
    writes to one table keep their order, and consecutive ones with the same statement go to the database as
    one `executemany` (psycopg 3 pipelines it: one round trip). Writes to different tables commute (the views
    have no foreign keys or triggers), so each table's queue is kept apart. Every read, `execute` and `flush`
    first sends what is queued, so the database never looks different from one statement at a time."""

    def __init__(self, cursor: Any, *, postgres: bool, prefix: str) -> None:
        self.cursor = cursor
        self.postgres = postgres
        self.prefix = prefix
        # Per table, in order: ("raw", statement, params), ("insert", None, row), ("update", key, values).
        self._queued: dict[str, list[tuple[str, Any, Any]]] = {}

    def _q(self, statement: str) -> str:
        q = statement.replace("{s}", self.prefix)
        return q.replace("?", "%s") if self.postgres else q

    def execute(self, statement: str, params: Sequence[object] = ()) -> None:
        if self._queued:
            self.flush()
        self.cursor.execute(self._q(statement), tuple(params))

    def write(self, statement: str, params: Sequence[object] = ()) -> None:
        target = _WRITE_TARGET.match(statement)
        if target is None:
            self.execute(statement, params)
            return
        self._queued.setdefault(target.group(1), []).append(("raw", statement, tuple(params)))

    def insert(self, table: str, row: Mapping[str, object]) -> None:
        """Queue `INSERT INTO table (columns of row) VALUES (...)`."""
        self._queued.setdefault(table, []).append(("insert", None, dict(row)))

    def update(self, table: str, key: Mapping[str, object], values: Mapping[str, object]) -> None:
        """Queue `UPDATE table SET values WHERE key`, values being plain values (not expressions of the
        row). Folded into the table's previous queued write when that one is an insert or an update of
        the same row: the row ends the same, in one statement instead of several."""
        runs = self._queued.setdefault(table, [])
        if runs:
            kind, previous_key, previous = runs[-1]
            if kind == "insert" and all(k in previous and previous[k] == v for k, v in key.items()):
                previous.update(values)
                return
            if kind == "update" and previous_key == key:
                previous.update(values)
                return
        runs.append(("update", dict(key), dict(values)))

    @staticmethod
    def _statement(table: str, kind: str, key: Any, data: Any) -> tuple[str, tuple[object, ...]]:
        if kind == "insert":
            columns = ", ".join(data)
            marks = ", ".join("?" * len(data))
            return f"INSERT INTO {{s}}{table} ({columns}) VALUES ({marks})", tuple(data.values())  # noqa: S608
        sets = ", ".join(f"{column} = ?" for column in data)
        where = " AND ".join(f"{column} = ?" for column in key)
        return (f"UPDATE {{s}}{table} SET {sets} WHERE {where}",  # noqa: S608 - our column names
                (*data.values(), *key.values()))

    def flush(self) -> None:
        """Send every queued write: per table in order, consecutive same statements as one executemany."""
        queued, self._queued = self._queued, {}
        for table, runs in queued.items():
            pending: tuple[str, list[tuple[object, ...]]] | None = None
            for kind, key, data in runs:
                statement, params = (key, data) if kind == "raw" else self._statement(table, kind, key, data)
                if pending is not None and pending[0] == statement:
                    pending[1].append(params)
                    continue
                if pending is not None:
                    self._send(*pending)
                pending = (statement, [params])
            if pending is not None:
                self._send(*pending)

    def _send(self, statement: str, rows: list[tuple[object, ...]]) -> None:
        if len(rows) == 1:
            self.cursor.execute(self._q(statement), rows[0])
            return
        plain_insert = _PLAIN_INSERT.match(statement) if self.postgres else None
        types = _array_types(rows) if plain_insert is not None else None
        if plain_insert is None or types is None:
            self.cursor.executemany(self._q(statement), rows)
            return
        # PostgreSQL: a plain INSERT of many rows as one statement over arrays, one per column (executemany
        # still sends, and psycopg handles, each row apart even when pipelined).
        arrays = ", ".join(f"?::{t}[]" for t in types)
        self.cursor.execute(self._q(f"{plain_insert.group(1)} SELECT * FROM unnest({arrays})"),  # noqa: S608
                            [list(column) for column in zip(*rows, strict=True)])

    def all(self, statement: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        self.execute(statement, params)
        return [dict(row) for row in self.cursor.fetchall()]

    def one(self, statement: str, params: Sequence[object] = ()) -> dict[str, Any] | None:
        rows = self.all(statement, params)
        return rows[0] if rows else None


class ViewSchema(Protocol):
    """What a view declares: its name, its tables (portable DDL) and the statements it runs."""

    @property
    def name(self) -> str: ...
    @property
    def tables(self) -> tuple[str, ...]: ...
    @property
    def create_statements(self) -> tuple[str, ...]: ...


class ViewStore:
    """A view's database: its tables and its tracking position, in SQLite or PostgreSQL."""

    def __init__(self, config: StoreConfig, schema: ViewSchema, *, location: str | None = None) -> None:
        """`location` overrides where the view lives: a directory (SQLite) or a schema (PostgreSQL),
        so a replay can rebuild beside the live view."""
        self.schema = schema
        self.postgres = config.is_postgres
        # Only a scratch store (a replay's) may ever drop its location.
        self.is_scratch = location is not None
        if config.database_url is None:
            directory = Path(location) if location else config.data_dir
            private_dir(directory)
            self.prefix = ""
            sqlite_store = tune_sqlite(
                SQLiteDatastore(db_name=str(directory / f"view_{schema.name}.sqlite"), lock_timeout=30),
                config.sqlite_synchronous,
            )
            self._datastore: Any = sqlite_store
            self.recorder: Any = SQLiteView(sqlite_store, schema)
        else:
            pg_schema = location or config.schema
            if not _SCHEMA_NAME.match(pg_schema):
                raise ValueError(f"bad schema name {pg_schema!r}")
            p = config.postgres_params()
            pg_store = PostgresDatastore(
                dbname=p["dbname"],
                host=p["host"],
                port=p["port"],
                user=p["user"],
                password=p["password"],
                schema=pg_schema,
                pool_size=1,
                max_overflow=4,
                pre_ping=True,
            )
            self._datastore = pg_store
            self.prefix = f'"{pg_schema}".'
            if location:
                with pg_store.transaction(commit=True) as curs:
                    curs.execute(SQL(f'CREATE SCHEMA IF NOT EXISTS "{pg_schema}"'))
            self.recorder = PostgresView(pg_store, schema, self.prefix)
        self.recorder.create_table()

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[Sql]:
        with self._datastore.transaction(commit=commit) as curs:
            sql = Sql(curs, postgres=self.postgres, prefix=self.prefix)
            yield sql
            sql.flush()

    def all(self, statement: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        """The rows of one query, read in a transaction of its own."""
        with self.transaction(commit=False) as sql:
            return sql.all(statement, params)

    def one(self, statement: str, params: Sequence[object] = ()) -> dict[str, Any] | None:
        """The first row of one query (None: no row), read in a transaction of its own."""
        with self.transaction(commit=False) as sql:
            return sql.one(statement, params)

    @contextmanager
    def batch_transaction(self) -> Iterator[Sql]:
        """A write transaction for a projector's batch. On PostgreSQL it runs in pipeline mode: statements
        are sent without waiting for each answer (a read waits for what precedes it), so a batch costs a
        few round trips instead of one per statement. Committed when the block ends, rolled back if it
        raises; errors are eventsourcing's (IntegrityError...), as from `transaction`."""
        if not self.postgres:
            with self.transaction(commit=True) as sql:
                yield sql
            return
        failure: BaseException | None = None
        with self._datastore.get_connection() as conn:
            with conn.pipeline():
                try:
                    with conn.transaction(), conn.cursor() as curs:
                        sql = Sql(curs, postgres=True, prefix=self.prefix)
                        yield sql
                        sql.flush()
                except Exception as error:  # re-raised once out of the pipeline (psycopg would warn)
                    failure = error
            if failure is not None:
                raise failure

    def record_tracking(self, sql: Sql, tracking: Tracking) -> None:
        """Insert the tracking row inside the view's transaction (raises IntegrityError if not new)."""
        insert_tracking(self.recorder, sql.cursor, tracking)

    def position(self, application_name: str) -> int:
        return self.recorder.max_tracking_id(application_name) or 0

    def _tracking_table(self) -> str:
        return "tracking" if not self.postgres else f"tracking_{self.schema.name}"

    def lock_position(self, sql: Sql, application_name: str) -> int:
        """Make this transaction the view's only writer until it ends, and return the view's position as
        committed now. Must come first in the transaction: in SQLite a write is what takes the lock (a
        transaction that read first cannot become the writer once another has committed)."""
        tracking_table = self._tracking_table()
        if self.postgres:
            sql.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (f"relay-view:{self.prefix}{tracking_table}",))
        else:
            sql.execute(
                f"UPDATE {tracking_table} SET notification_id = notification_id WHERE application_name = ?",  # noqa: S608
                (application_name,),
            )
        row = sql.one(
            f"SELECT notification_id FROM {{s}}{tracking_table} WHERE application_name = ?",  # noqa: S608
            (application_name,),
        )
        return int(row["notification_id"]) if row else 0

    def reset(self, application_name: str) -> None:
        """Empty the view and forget its position, in one transaction."""
        tracking_table = self._tracking_table()
        with self.transaction(commit=True) as sql:
            self.lock_position(sql, application_name)  # not while a projector's batch is being written
            for table in self.schema.tables:
                sql.execute(f"DELETE FROM {{s}}{table}")  # noqa: S608 - table names are ours
            sql.execute(f"DELETE FROM {{s}}{tracking_table} WHERE application_name = ?", (application_name,))  # noqa: S608

    def dump(self) -> dict[str, list[dict[str, object]]]:
        """Every row of every table, in a stable order: what --verify compares."""
        out: dict[str, list[dict[str, object]]] = {}
        with self.transaction(commit=False) as sql:
            for table in self.schema.tables:
                rows = sql.all(f"SELECT * FROM {{s}}{table}")  # noqa: S608
                out[table] = sorted(rows, key=lambda r: [str(r[k]) for k in sorted(r)])
        return out

    def drop_location(self) -> None:
        """Remove a replay's scratch schema (PostgreSQL); SQLite scratch dirs are removed by the caller."""
        if self.postgres and self.is_scratch:
            with self.transaction(commit=True) as sql:
                sql.execute(f"DROP SCHEMA IF EXISTS {self.prefix.rstrip('.')} CASCADE")

    def close(self) -> None:
        self._datastore.close()
