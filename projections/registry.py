"""The executor registry view: every executor's current state, and the history of its recoveries."""

from __future__ import annotations

from typing import Any

from projections.backend import Sql, ViewStore
from projections.projector import Handler, ViewProjection, iso, to_json


class RegistrySchema:
    name = "registry"
    tables = ("relay_executors", "relay_recoveries")
    create_statements = (
        "CREATE TABLE IF NOT EXISTS {s}relay_executors ("
        "id TEXT PRIMARY KEY, org TEXT NOT NULL, app TEXT NOT NULL, executor_id TEXT NOT NULL, "
        "status TEXT NOT NULL, app_version TEXT, hostname TEXT, language TEXT, dbos_version TEXT, "
        "metadata TEXT, instance TEXT, created_at TEXT, connected_at TEXT, disconnected_at TEXT, "
        "dead_at TEXT, updated_at TEXT, recovery_attempts INTEGER NOT NULL DEFAULT 0, "
        "recovery_peer TEXT, recovered INTEGER NOT NULL DEFAULT 0)",
        "CREATE INDEX IF NOT EXISTS relay_executors_app ON {s}relay_executors (org, app, status)",
        "CREATE TABLE IF NOT EXISTS {s}relay_recoveries ("
        "id TEXT NOT NULL, attempt INTEGER NOT NULL, org TEXT NOT NULL, app TEXT NOT NULL, "
        "executor_id TEXT NOT NULL, peer TEXT NOT NULL, instance TEXT, dispatched_at TEXT, "
        "outcome TEXT NOT NULL, reason TEXT, finished_at TEXT, PRIMARY KEY (id, attempt))",
    )


def _info_columns(info: dict[str, Any]) -> tuple[Any, ...]:
    metadata = info.get("metadata")
    return (
        info.get("application_version"),
        info.get("hostname"),
        info.get("language"),
        info.get("dbos_version"),
        to_json(metadata) if metadata is not None else None,
    )


class RegistryProjection(ViewProjection):
    schema = RegistrySchema()

    def build_handlers(self) -> dict[str, Handler]:
        return {
            "Executor.Connected": self.connected,
            "Executor.Reconnected": self.reconnected,
            "Executor.Disconnected": self.disconnected,
            "Executor.DeclaredDead": self.declared_dead,
            "Executor.RecoveryDispatched": self.recovery_dispatched,
            "Executor.RecoveryFailed": self.recovery_failed,
            "Executor.RecoveryAcknowledged": self.recovery_acknowledged,
            "Executor.Deleted": self.deleted,
            "RelayInstance.LeaseAdopted": self.lease_adopted,
        }

    def connected(self, sql: Sql, e: Any, _: int) -> None:
        at = iso(e.at)
        sql.execute(
            "INSERT INTO {s}relay_executors (id, org, app, executor_id, status, app_version, hostname, "
            "language, dbos_version, metadata, instance, created_at, connected_at, updated_at) "
            "VALUES (?, ?, ?, ?, 'HEALTHY', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (str(e.originator_id), e.org, e.app, e.executor, *_info_columns(e.info), e.instance, at, at, at),
        )

    def reconnected(self, sql: Sql, e: Any, _: int) -> None:
        at = iso(e.at)
        sql.execute(
            "UPDATE {s}relay_executors SET status = 'HEALTHY', app_version = ?, hostname = ?, language = ?, "
            "dbos_version = ?, metadata = ?, instance = ?, connected_at = ?, disconnected_at = NULL, "
            "dead_at = NULL, updated_at = ?, recovery_attempts = 0, recovery_peer = NULL, recovered = 0 "
            "WHERE id = ?",
            (*_info_columns(e.info), e.instance, at, at, str(e.originator_id)),
        )

    def _set(self, sql: Sql, e: Any, assignments: str, params: tuple[Any, ...] = ()) -> None:
        sql.execute(
            f"UPDATE {{s}}relay_executors SET {assignments}, updated_at = ? WHERE id = ?",  # noqa: S608
            (*params, iso(e.at), str(e.originator_id)),
        )

    def disconnected(self, sql: Sql, e: Any, _: int) -> None:
        self._set(sql, e, "status = 'DISCONNECTED', disconnected_at = ?", (iso(e.at),))

    def declared_dead(self, sql: Sql, e: Any, _: int) -> None:
        self._set(sql, e, "status = 'DEAD', dead_at = ?", (iso(e.at),))

    def recovery_dispatched(self, sql: Sql, e: Any, _: int) -> None:
        self._set(sql, e, "recovery_attempts = ?, recovery_peer = ?", (e.attempt, e.peer))
        row = sql.one("SELECT org, app, executor_id FROM {s}relay_executors WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "RecoveryDispatched for an executor the registry never saw"
        sql.execute(
            "INSERT INTO {s}relay_recoveries (id, attempt, org, app, executor_id, peer, instance, "
            "dispatched_at, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending')",
            (str(e.originator_id), e.attempt, row["org"], row["app"], row["executor_id"], e.peer, e.instance,
             iso(e.at)),
        )

    def _finish(self, sql: Sql, e: Any, outcome: str, reason: str | None) -> None:
        sql.execute(
            "UPDATE {s}relay_recoveries SET outcome = ?, reason = ?, finished_at = ? WHERE id = ? AND attempt = ?",
            (outcome, reason, iso(e.at), str(e.originator_id), e.attempt),
        )

    def recovery_failed(self, sql: Sql, e: Any, _: int) -> None:
        self._set(sql, e, "recovery_peer = NULL")
        self._finish(sql, e, "failed", e.reason)

    def recovery_acknowledged(self, sql: Sql, e: Any, _: int) -> None:
        self._set(sql, e, "recovery_peer = NULL, recovered = 1")
        self._finish(sql, e, "acknowledged", None)

    def deleted(self, sql: Sql, e: Any, _: int) -> None:
        self._set(sql, e, "status = 'DELETED'")

    def lease_adopted(self, sql: Sql, e: Any, _: int) -> None:
        # The lease key is org/app/executor_id; executor ids may contain '/', org and app may not.
        org, app, executor_id = e.lease.split("/", 2)
        sql.execute(
            "UPDATE {s}relay_executors SET instance = ? WHERE org = ? AND app = ? AND executor_id = ? AND instance = ?",
            (e.to_instance, org, app, executor_id, e.from_instance),
        )


class RegistryQueries:
    """Reads of the registry view used by web/ and by actors rebuilding their timers."""

    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def executors(self, org: str, app: str, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        condition = "" if include_deleted else " AND status <> 'DELETED'"
        with self.store.transaction(commit=False) as sql:
            return sql.all(
                f"SELECT * FROM {{s}}relay_executors WHERE org = ? AND app = ?{condition} "  # noqa: S608
                "ORDER BY connected_at, executor_id",
                (org, app),
            )

    def executor(self, org: str, app: str, executor_id: str) -> dict[str, Any] | None:
        with self.store.transaction(commit=False) as sql:
            return sql.one(
                "SELECT * FROM {s}relay_executors WHERE org = ? AND app = ? AND executor_id = ?",
                (org, app, executor_id),
            )

    def unfinished(self) -> list[dict[str, Any]]:
        """Executors that are not HEALTHY-and-done: what a restarted instance must keep watching."""
        with self.store.transaction(commit=False) as sql:
            return sql.all(
                "SELECT * FROM {s}relay_executors WHERE status IN ('HEALTHY', 'DISCONNECTED', 'DEAD') "
                "ORDER BY org, app, executor_id"
            )

    def counts_by_status(self, org: str, app: str) -> dict[str, int]:
        with self.store.transaction(commit=False) as sql:
            rows = sql.all(
                "SELECT status, COUNT(*) AS n FROM {s}relay_executors WHERE org = ? AND app = ? GROUP BY status",
                (org, app),
            )
        return {row["status"]: int(row["n"]) for row in rows}

    def leases(self) -> dict[str, list[dict[str, Any]]]:
        """Which instance holds which executors (the lease is the instance that executor reached)."""
        with self.store.transaction(commit=False) as sql:
            rows = sql.all(
                "SELECT instance, org, app, executor_id, status FROM {s}relay_executors "
                "WHERE status <> 'DELETED' ORDER BY instance, org, app, executor_id"
            )
        held: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            held.setdefault(str(row["instance"]), []).append(row)
        return held

    def holders(self) -> list[str]:
        """The instances that hold at least one lease (a row not DELETED)."""
        with self.store.transaction(commit=False) as sql:
            rows = sql.all(
                "SELECT DISTINCT instance FROM {s}relay_executors WHERE status <> 'DELETED' AND instance IS NOT NULL"
            )
        return sorted(str(r["instance"]) for r in rows)

    def held_by(self, instance: str) -> list[dict[str, Any]]:
        with self.store.transaction(commit=False) as sql:
            return sql.all(
                "SELECT * FROM {s}relay_executors WHERE instance = ? AND status <> 'DELETED' "
                "ORDER BY org, app, executor_id",
                (instance,),
            )

    def recoveries(self, org: str, app: str, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        with self.store.transaction(commit=False) as sql:
            return sql.all(
                "SELECT * FROM {s}relay_recoveries WHERE org = ? AND app = ? "
                "ORDER BY dispatched_at DESC, attempt DESC LIMIT ? OFFSET ?",
                (org, app, limit, offset),
            )
