"""Where the event log and the views live: SQLite files in a data dir, or one PostgreSQL database.

Views are eventsourcing tracking recorders: a view's rows and its tracking position are written in
one transaction, so an event is applied exactly once even across crashes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteDatastore, SQLiteTrackingRecorder
from psycopg.sql import SQL

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


@dataclass(frozen=True)
class StoreConfig:
    """The embedded SQLite store (data_dir) unless database_url names a PostgreSQL database."""

    data_dir: Path
    database_url: str | None = None
    schema: str = "public"

    @property
    def is_postgres(self) -> bool:
        return self.database_url is not None

    def describe(self) -> str:
        """Where the store is, without credentials (safe to log)."""
        if self.database_url is None:
            return f"sqlite:{self.data_dir}"
        parts = urlparse(self.database_url)
        return f"postgresql://{parts.hostname}:{parts.port or 5432}{parts.path} (schema {self.schema})"

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
            self.data_dir.mkdir(parents=True, exist_ok=True)
            return {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": str(self.data_dir / "events.sqlite"),
                "SQLITE_LOCK_TIMEOUT": "30",
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


class Sql:
    """A cursor that takes portable statements: `?` placeholders and `{s}` before table names."""

    def __init__(self, cursor: Any, *, postgres: bool, prefix: str) -> None:
        self.cursor = cursor
        self.postgres = postgres
        self.prefix = prefix

    def _q(self, statement: str) -> str:
        q = statement.replace("{s}", self.prefix)
        return q.replace("?", "%s") if self.postgres else q

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        self.cursor.execute(self._q(statement), tuple(params))

    def all(self, statement: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        self.execute(statement, params)
        return [dict(row) for row in self.cursor.fetchall()]

    def one(self, statement: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.all(statement, params)
        return rows[0] if rows else None


class ViewSchema(Protocol):
    """What a view declares: its name, its tables (portable DDL) and the statements it runs."""

    name: str
    tables: tuple[str, ...]
    create_statements: tuple[str, ...]


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
            directory.mkdir(parents=True, exist_ok=True)
            self.prefix = ""
            sqlite_store = SQLiteDatastore(db_name=str(directory / f"view_{schema.name}.sqlite"), lock_timeout=30)
            self._datastore: Any = sqlite_store
            self.recorder: Any = _SQLiteView(sqlite_store, schema)
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
            self.recorder = _PostgresView(pg_store, schema, self.prefix)
        self.recorder.create_table()

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[Sql]:
        with self._datastore.transaction(commit=commit) as curs:
            yield Sql(curs, postgres=self.postgres, prefix=self.prefix)

    def record_tracking(self, sql: Sql, tracking: Tracking) -> None:
        """Insert the tracking row inside the view's transaction (raises IntegrityError if not new)."""
        self.recorder._insert_tracking(sql.cursor, tracking)

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

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every table, in a stable order: what --verify compares."""
        out: dict[str, list[dict[str, Any]]] = {}
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


class _SQLiteView(SQLiteTrackingRecorder):
    def __init__(self, datastore: SQLiteDatastore, schema: ViewSchema) -> None:
        self._view_schema = schema
        super().__init__(datastore)

    def construct_create_table_statements(self) -> list[str]:
        statements = super().construct_create_table_statements()
        return statements + [s.replace("{s}", "") for s in self._view_schema.create_statements]


class _PostgresView(PostgresTrackingRecorder):
    def __init__(self, datastore: PostgresDatastore, schema: ViewSchema, prefix: str) -> None:
        super().__init__(datastore, tracking_table_name=f"tracking_{schema.name}")
        for statement in schema.create_statements:
            self.sql_create_statements.append(SQL(statement.replace("{s}", prefix)))  # type: ignore[arg-type]
