"""The executor registry view: every executor's current state, and the history of its recoveries."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import (
    AggregateEvent,
    ExecutorConnection,
    LeaseAdoption,
    ViewProjection,
    handles,
    iso,
    recovery_row_id,
    to_json,
)
from relay.wire.json_types import JSONObject

HEALTHY = "HEALTHY"
# Ids per IN (...) lookup (well under SQLite's limit on bound parameters).
_IDS_PER_QUERY = 500


class _Recovery(AggregateEvent, Protocol):
    """Executor.RecoveryDispatched, RecoveryFailed and RecoveryAcknowledged."""

    attempt: int
    peer: str
    instance: str
    reason: str


class RegistrySchema:
    name = "registry"
    tables = ("relay_executors", "relay_recoveries")
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_executors ("
        "id TEXT PRIMARY KEY, org TEXT NOT NULL, app TEXT NOT NULL, executor_id TEXT NOT NULL, "
        "status TEXT NOT NULL, app_version TEXT, hostname TEXT, language TEXT, dbos_version TEXT, "
        "metadata TEXT, instance TEXT, created_at TEXT, connected_at TEXT, disconnected_at TEXT, "
        "dead_at TEXT, updated_at TEXT, recovery_attempts INTEGER NOT NULL DEFAULT 0, "
        "recovery_peer TEXT, recovered INTEGER NOT NULL DEFAULT 0)"),
        "CREATE INDEX IF NOT EXISTS relay_executors_app ON {s}relay_executors (org, app, status)",
        ("CREATE TABLE IF NOT EXISTS {s}relay_recoveries ("
        "id TEXT NOT NULL, attempt INTEGER NOT NULL, org TEXT NOT NULL, app TEXT NOT NULL, "
        "executor_id TEXT NOT NULL, peer TEXT NOT NULL, instance TEXT, dispatched_at TEXT, "
        "outcome TEXT NOT NULL, reason TEXT, finished_at TEXT, PRIMARY KEY (id, attempt))"),
        "CREATE INDEX IF NOT EXISTS relay_recoveries_executor ON {s}relay_recoveries (org, app, executor_id)",
    )


def _info_columns(info: Mapping[str, object]) -> tuple[object, ...]:
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

    @handles("Executor.Connected")
    def connected(self, sql: Sql, e: ExecutorConnection, _: int) -> None:
        at = iso(e.at)
        app_version, hostname, language, dbos_version, metadata = _info_columns(e.info)
        sql.insert("relay_executors", {
            "id": str(e.originator_id), "org": e.org, "app": e.app, "executor_id": e.executor, "status": HEALTHY,
            "app_version": app_version, "hostname": hostname, "language": language, "dbos_version": dbos_version,
            "metadata": metadata, "instance": e.instance, "created_at": at, "connected_at": at, "updated_at": at,
        })

    @handles("Executor.Reconnected")
    def reconnected(self, sql: Sql, e: ExecutorConnection, _: int) -> None:
        at = iso(e.at)
        app_version, hostname, language, dbos_version, metadata = _info_columns(e.info)
        self._set(sql, e, {
            "status": HEALTHY, "app_version": app_version, "hostname": hostname, "language": language,
            "dbos_version": dbos_version, "metadata": metadata, "instance": e.instance, "connected_at": at,
            "disconnected_at": None, "dead_at": None, "recovery_attempts": 0, "recovery_peer": None,
            "recovered": 0,
        })

    def _set(self, sql: Sql, e: AggregateEvent, values: Mapping[str, object]) -> None:
        # Plain values only (see Sql.update): an executor's run of events in a batch folds into one write.
        sql.update("relay_executors", {"id": str(e.originator_id)}, {**values, "updated_at": iso(e.at)})

    @handles("Executor.Disconnected")
    def disconnected(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        self._set(sql, e, {"status": "DISCONNECTED", "disconnected_at": iso(e.at)})

    @handles("Executor.DeclaredDead")
    def declared_dead(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        self._set(sql, e, {"status": "DEAD", "dead_at": iso(e.at)})

    @handles("Executor.RecoveryDispatched")
    def recovery_dispatched(self, sql: Sql, e: _Recovery, _: int) -> None:
        self._set(sql, e, {"recovery_attempts": e.attempt, "recovery_peer": e.peer})
        row = sql.one("SELECT org, app, executor_id FROM {s}relay_executors WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "RecoveryDispatched for an executor the registry never saw"
        key = recovery_row_id(sql, "relay_recoveries", str(e.originator_id), e.attempt, dispatched=True)
        sql.write(
            "INSERT INTO {s}relay_recoveries (id, attempt, org, app, executor_id, peer, instance, "
            "dispatched_at, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending')",
            (key, e.attempt, row["org"], row["app"], row["executor_id"], e.peer, e.instance, iso(e.at)),
        )

    def _finish(self, sql: Sql, e: _Recovery, outcome: str, reason: str | None) -> None:
        key = recovery_row_id(sql, "relay_recoveries", str(e.originator_id), e.attempt)
        sql.write(
            "UPDATE {s}relay_recoveries SET outcome = ?, reason = ?, finished_at = ? WHERE id = ? AND attempt = ?",
            (outcome, reason, iso(e.at), key, e.attempt),
        )

    @handles("Executor.RecoveryFailed")
    def recovery_failed(self, sql: Sql, e: _Recovery, _: int) -> None:
        self._set(sql, e, {"recovery_peer": None})
        self._finish(sql, e, "failed", e.reason)

    @handles("Executor.RecoveryAcknowledged")
    def recovery_acknowledged(self, sql: Sql, e: _Recovery, _: int) -> None:
        self._set(sql, e, {"recovery_peer": None, "recovered": 1})
        self._finish(sql, e, "acknowledged", None)

    @handles("Executor.Deleted")
    def deleted(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        self._set(sql, e, {"status": "DELETED"})

    @handles("RelayInstance.LeaseAdopted")
    def lease_adopted(self, sql: Sql, e: LeaseAdoption, _: int) -> None:
        # The lease key is org/app/executor_id; executor ids may contain '/', org and app may not.
        org, app, executor_id = e.lease.split("/", 2)
        sql.write(
            "UPDATE {s}relay_executors SET instance = ? WHERE org = ? AND app = ? AND executor_id = ? AND instance = ?",
            (e.to_instance, org, app, executor_id, e.from_instance),
        )


class RegistryQueries:
    """Reads of the registry view used by web/ and by actors rebuilding their timers."""

    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def executors(self, org: str, app: str, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        condition = "" if include_deleted else " AND status <> 'DELETED'"
        return self.store.all(
            f"SELECT * FROM {{s}}relay_executors WHERE org = ? AND app = ?{condition} "  # noqa: S608
            "ORDER BY connected_at, executor_id",
            (org, app),
        )

    def executors_page(
        self, org: str, app: str, *, status: str | None, limit: int, offset: int
    ) -> list[dict[str, Any]]:
        """A page of the app's live executors (DELETED left out), of one `status` or any, in the order of
        `executors`: the console pages them (10,000 executors would not fit a page)."""
        condition = " AND status = ?" if status else " AND status <> 'DELETED'"
        return self.store.all(
            f"SELECT * FROM {{s}}relay_executors WHERE org = ? AND app = ?{condition} "  # noqa: S608
            "ORDER BY connected_at, executor_id LIMIT ? OFFSET ?",
            (org, app, *((status,) if status else ()), limit, offset),
        )

    def deleted_executors(self, org: str, app: str, limit: int) -> list[dict[str, Any]]:
        """The app's DELETED executors, the latest gone first (by death, else by the last change)."""
        return self.store.all(
            "SELECT * FROM {s}relay_executors WHERE org = ? AND app = ? AND status = 'DELETED' "
            "ORDER BY COALESCE(dead_at, updated_at) DESC LIMIT ?",
            (org, app, limit),
        )

    def healthy_versions(self, org: str, app: str) -> set[str]:
        rows = self.store.all(
            "SELECT DISTINCT app_version FROM {s}relay_executors WHERE org = ? AND app = ? AND status = 'HEALTHY'",
            (org, app),
        )
        return {str(row["app_version"] or "") for row in rows}

    def executor(self, org: str, app: str, executor_id: str) -> JSONObject | None:
        return self.store.one(
            "SELECT * FROM {s}relay_executors WHERE org = ? AND app = ? AND executor_id = ?",
            (org, app, executor_id),
        )

    def unfinished(self) -> list[dict[str, Any]]:
        """Executors that are not HEALTHY-and-done: what a restarted instance must keep watching."""
        return self.store.all(
            "SELECT * FROM {s}relay_executors WHERE status IN ('HEALTHY', 'DISCONNECTED', 'DEAD') "
            "ORDER BY org, app, executor_id"
        )

    def running_versions(self, org: str, app: str) -> dict[str, int]:
        """How many HEALTHY executors run each application version, by version in order: one GROUP BY, not a
        read of every executor (10,000 rows for a line of the applications page)."""
        rows = self.store.all("SELECT app_version, COUNT(*) AS n FROM {s}relay_executors WHERE org = ? AND app = ? "
                              "AND status = 'HEALTHY' AND app_version IS NOT NULL AND app_version <> '' "
                              "GROUP BY app_version", (org, app))
        return {str(row["app_version"]): int(row["n"]) for row in sorted(rows, key=lambda r: str(r["app_version"]))}

    def any_healthy(self, org: str, app: str) -> bool:
        """Whether an executor of the application is HEALTHY (on any instance): one indexed row at most."""
        return self.store.one("SELECT 1 AS found FROM {s}relay_executors WHERE org = ? AND app = ? AND "
                              "status = 'HEALTHY' LIMIT 1", (org, app)) is not None

    def languages(self, org: str, app: str) -> list[str]:
        """'language dbos_version' of its executors (DELETED left out), sorted and distinct."""
        rows = self.store.all("SELECT DISTINCT language, dbos_version FROM {s}relay_executors WHERE org = ? AND "
                              "app = ? AND status <> 'DELETED' AND language IS NOT NULL AND language <> ''", (org, app))
        return sorted({f"{row['language']} {row['dbos_version']}" for row in rows})

    def counts_by_status(self, org: str, app: str) -> dict[str, int]:
        rows = self.store.all(
            "SELECT status, COUNT(*) AS n FROM {s}relay_executors WHERE org = ? AND app = ? GROUP BY status",
            (org, app),
        )
        return {row["status"]: int(row["n"]) for row in rows}

    def leases(self) -> dict[str, list[JSONObject]]:
        """Which instance holds which executors (the lease is the instance that executor reached)."""
        rows = self.store.all(
            "SELECT instance, org, app, executor_id, status FROM {s}relay_executors "
            "WHERE status <> 'DELETED' ORDER BY instance, org, app, executor_id"
        )
        held: dict[str, list[JSONObject]] = {}
        for row in rows:
            held.setdefault(str(row["instance"]), []).append(row)
        return held

    def holders(self) -> list[str]:
        """The instances that hold at least one lease (a row not DELETED)."""
        rows = self.store.all(
            "SELECT DISTINCT instance FROM {s}relay_executors WHERE status <> 'DELETED' AND instance IS NOT NULL"
        )
        return sorted(str(r["instance"]) for r in rows)

    def held_by(self, instance: str) -> list[dict[str, Any]]:
        return self.store.all(
            "SELECT * FROM {s}relay_executors WHERE instance = ? AND status <> 'DELETED' "
            "ORDER BY org, app, executor_id",
            (instance,),
        )

    def recoveries(self, org: str, app: str, limit: int = 100, offset: int = 0) -> list[JSONObject]:
        return self.store.all(
            "SELECT * FROM {s}relay_recoveries WHERE org = ? AND app = ? "
            "ORDER BY dispatched_at DESC, attempt DESC LIMIT ? OFFSET ?",
            (org, app, limit, offset),
        )

    def recovered_deaths(self, org: str, app: str, since: str) -> list[JSONObject]:
        """The app's executor deaths whose recovery was first dispatched at or after ``since`` (an ISO time),
        oldest first: one row per death (its first attempt), however many peers its recovery then took."""
        return self.store.all(
            "SELECT executor_id, dispatched_at FROM {s}relay_recoveries WHERE org = ? AND app = ? "
            "AND attempt = 1 AND dispatched_at >= ? ORDER BY dispatched_at, executor_id",
            (org, app, since),
        )

    def latest_recoveries(self, org: str, app: str, executor_ids: Collection[str]) -> dict[str, JSONObject]:
        """The latest recovery attempt of each of these executors (by executor_id): what the app page shows
        beside the ones that are down. Only those are read: the page's live table asks every few seconds."""
        wanted = sorted(set(executor_ids))
        latest: dict[str, JSONObject] = {}
        with self.store.transaction(commit=False) as sql:
            for chunk in range(0, len(wanted), _IDS_PER_QUERY):
                ids = wanted[chunk:chunk + _IDS_PER_QUERY]
                rows = sql.all(
                    f"SELECT * FROM {{s}}relay_recoveries WHERE org = ? AND app = ? "  # noqa: S608 - placeholders
                    f"AND executor_id IN ({', '.join('?' * len(ids))}) ORDER BY dispatched_at, attempt",
                    (org, app, *ids),
                )
                latest.update({str(row["executor_id"]): row for row in rows})
        return latest
