"""The instances view: every Relay instance of the cluster, its status, and the executors it holds.

Status and leases are folded by one projector into one store, so a reader sees both at one position: an
instance shown EXPIRED has its leases moved in the same answer (the adopter's `Expired` and `LeaseAdopted`
are appended in one transaction and read in one batch). Heartbeats are liveness, not events: they stay in
the instances table (actors/heartbeats.py) and `InstancesQueries.describe` joins them in at read time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import (
    AggregateEvent,
    ExecutorConnection,
    LeaseAdoption,
    ViewProjection,
    event_name,
    handles,
    iso,
)

RUNNING = "RUNNING"
STOPPED = "STOPPED"
EXPIRED = "EXPIRED"
_DELETED = "DELETED"
# The status an executor's lease is left in by each of these events.
_LEASE_STATUS = {"Executor.Disconnected": "DISCONNECTED", "Executor.DeclaredDead": "DEAD", "Executor.Deleted": _DELETED}


class _Start(AggregateEvent, Protocol):
    """RelayInstance.Started and Restarted."""

    instance: str
    address: str
    port: int
    version: str


class _Expiry(AggregateEvent, Protocol):
    by: str


class InstancesSchema:
    name = "instances"
    tables = ("relay_instance_states", "relay_instance_expiries", "relay_instance_leases")
    create_statements = (
        # `id`: the aggregate's id. Only `Started` names the instance; later events are known by the id.
        ("CREATE TABLE IF NOT EXISTS {s}relay_instance_states ("
        "id TEXT PRIMARY KEY, instance TEXT NOT NULL, address TEXT, port INTEGER, version TEXT, "
        "status TEXT NOT NULL, started_at TEXT, stopped_at TEXT, expired_by TEXT)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_instance_expiries ("
        "instance TEXT NOT NULL, position INTEGER NOT NULL, expired_by TEXT NOT NULL, "
        "PRIMARY KEY (instance, position))"),
        # One row per executor record: the instance its connection reached (its lease) and its status.
        ("CREATE TABLE IF NOT EXISTS {s}relay_instance_leases ("
        "id TEXT PRIMARY KEY, org TEXT NOT NULL, app TEXT NOT NULL, executor_id TEXT NOT NULL, "
        "instance TEXT, status TEXT NOT NULL)"),
        "CREATE INDEX IF NOT EXISTS relay_instance_leases_holder ON {s}relay_instance_leases (instance, status)",
    )


class InstancesProjection(ViewProjection):
    schema = InstancesSchema()

    @handles("RelayInstance.Started")
    def started(self, sql: Sql, e: _Start, _: int) -> None:
        sql.insert("relay_instance_states", {"id": str(e.originator_id), "instance": e.instance, **_running(e)})

    @handles("RelayInstance.Restarted")
    def restarted(self, sql: Sql, e: _Start, _: int) -> None:
        sql.update("relay_instance_states", {"id": str(e.originator_id)}, _running(e))

    @handles("RelayInstance.Expired")
    def expired(self, sql: Sql, e: _Expiry, position: int) -> None:
        self._finish(sql, e, EXPIRED, e.by)
        row = sql.one("SELECT instance FROM {s}relay_instance_states WHERE id = ?", (str(e.originator_id),))
        if row is not None:
            sql.insert("relay_instance_expiries",
                       {"instance": row["instance"], "position": position, "expired_by": e.by})

    @handles("RelayInstance.Stopped")
    def stopped(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        self._finish(sql, e, STOPPED)

    def _finish(self, sql: Sql, e: AggregateEvent, status: str, by: str | None = None) -> None:
        sql.update("relay_instance_states", {"id": str(e.originator_id)},
                   {"status": status, "stopped_at": iso(e.at), "expired_by": by})

    @handles("RelayInstance.LeaseAdopted")
    def lease_adopted(self, sql: Sql, e: LeaseAdoption, _: int) -> None:
        # The lease key is org/app/executor_id; executor ids may contain '/', org and app may not.
        org, app, executor_id = e.lease.split("/", 2)
        sql.write("UPDATE {s}relay_instance_leases SET instance = ? WHERE org = ? AND app = ? AND executor_id = ? "
                  "AND instance = ?", (e.to_instance, org, app, executor_id, e.from_instance))

    @handles("Executor.Connected")
    def connected(self, sql: Sql, e: ExecutorConnection, _: int) -> None:
        sql.insert("relay_instance_leases", {"id": str(e.originator_id), "org": e.org, "app": e.app,
                                    "executor_id": e.executor, "instance": e.instance, "status": "HEALTHY"})

    @handles("Executor.Reconnected")
    def reconnected(self, sql: Sql, e: ExecutorConnection, _: int) -> None:
        sql.update("relay_instance_leases", {"id": str(e.originator_id)}, {"instance": e.instance, "status": "HEALTHY"})

    @handles(*_LEASE_STATUS)
    def lease_status_changed(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        self._lease_status(sql, e, _LEASE_STATUS[event_name(e)])

    def _lease_status(self, sql: Sql, e: AggregateEvent, status: str) -> None:
        sql.update("relay_instance_leases", {"id": str(e.originator_id)}, {"status": status})


def _running(e: _Start) -> dict[str, object]:
    return {"address": e.address, "port": e.port, "version": e.version, "status": RUNNING,
            "started_at": iso(e.at), "stopped_at": None, "expired_by": None}


@dataclass(frozen=True)
class InstanceState:
    """One instance as the API and the console show it."""

    instance: str
    status: str | None
    address: str | None
    port: int | None
    version: str | None
    started_at: str | None
    stopped_at: str | None
    expired_by: str | None
    heartbeat_age_s: float | None
    leases: list[dict[str, object]]


class InstancesQueries:
    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def status_of(self, instance: str) -> str | None:
        """RUNNING, STOPPED or EXPIRED; None for an instance that never started."""
        row = self.store.one("SELECT status FROM {s}relay_instance_states WHERE instance = ?", (instance,))
        return None if row is None else str(row["status"])

    def releases_of(self, instances: Iterable[str]) -> dict[str, str | None]:
        """The release each instance recorded at its latest (re)start; None for one that has not recorded it yet.
        One read of every instance's row: a cluster has a few."""
        found = {str(r["instance"]): r["version"]
                 for r in self.store.all("SELECT instance, version FROM {s}relay_instance_states")}
        return {name: found.get(name) for name in instances}

    def counts(self) -> dict[str, int]:
        """How many instances are RUNNING, STOPPED, EXPIRED."""
        rows = self.store.all("SELECT status, COUNT(*) AS n FROM {s}relay_instance_states GROUP BY status")
        return {r["status"]: int(r["n"]) for r in rows}

    def expiries(self) -> list[dict[str, Any]]:
        """Every `Expired`, oldest first: (instance, position, expired_by)."""
        return self.store.all("SELECT instance, position, expired_by FROM {s}relay_instance_expiries "
                              "ORDER BY position")

    def lease_counts(self, org: str | None = None) -> dict[str, dict[str, int]]:
        """How many executors each instance holds, by status (of `org` only unless None): one GROUP BY, so a
        page about the cluster costs the same at 10 executors as at 10,000."""
        if org is None:
            rows = self.store.all("SELECT instance, status, COUNT(*) AS n FROM {s}relay_instance_leases "
                                  "WHERE status <> ? GROUP BY instance, status", (_DELETED,))
        else:
            rows = self.store.all("SELECT instance, status, COUNT(*) AS n FROM {s}relay_instance_leases "
                                  "WHERE status <> ? AND org = ? GROUP BY instance, status", (_DELETED, org))
        out: dict[str, dict[str, int]] = {}
        for row in rows:
            out.setdefault(str(row["instance"]), {})[str(row["status"])] = int(row["n"])
        return out

    def lease_page(self, instance: str, limit: int, offset: int = 0, *,
                   org: str | None = None) -> list[dict[str, object]]:
        """One page of an instance's leases (of `org` only unless None), in the order `describe` lists them."""
        if org is None:
            rows = self.store.all("SELECT org, app, executor_id, status FROM {s}relay_instance_leases WHERE "
                                  "instance = ? AND status <> ? ORDER BY org, app, executor_id LIMIT ? OFFSET ?",
                                  (instance, _DELETED, limit, offset))
        else:
            rows = self.store.all("SELECT org, app, executor_id, status FROM {s}relay_instance_leases WHERE "
                                  "instance = ? AND status <> ? AND org = ? ORDER BY org, app, executor_id "
                                  "LIMIT ? OFFSET ?", (instance, _DELETED, org, limit, offset))
        return [{key: row[key] for key in ("org", "app", "executor_id", "status")} for row in rows]

    def describe(self, beats: Iterable[dict[str, Any]], now: float, *,
                 org: str | None = None, with_leases: bool = True) -> list[InstanceState]:
        """Every instance with its leases (of `org` only unless None), from one read of the view, joined with
        the heartbeat rows (`beats`: instance, address, port, started_at, heartbeat_at; epoch seconds). An
        instance with a heartbeat row shows that row's address, port and start, and its heartbeat age.
        Without `with_leases`, the instances alone (empty leases: `lease_counts` and `lease_page` read them)."""
        with self.store.transaction(commit=False) as sql:
            instances = {str(r["instance"]): r for r in sql.all("SELECT * FROM {s}relay_instance_states")}
            leases = sql.all("SELECT instance, org, app, executor_id, status FROM {s}relay_instance_leases "
                             "WHERE status <> ? ORDER BY instance, org, app, executor_id",
                             (_DELETED,)) if with_leases else []
        held: dict[str, list[dict[str, Any]]] = {}
        for row in leases:
            if org is None or row["org"] == org:
                held.setdefault(str(row["instance"]), []).append(
                    {key: row[key] for key in ("org", "app", "executor_id", "status")})
        table = {str(r["instance"]): r for r in beats}
        out = []
        for name in sorted(set(instances) | {h for h in held if h and h != "None"}):
            row = instances.get(name, {})
            beat = table.get(name)
            state = InstanceState(
                instance=name, status=row.get("status"), address=row.get("address"), port=row.get("port"),
                version=row.get("version"), started_at=row.get("started_at"), stopped_at=row.get("stopped_at"),
                expired_by=row.get("expired_by"), heartbeat_age_s=None, leases=held.get(name, []),
            )
            if beat is not None:
                beat_at, started = float(beat["heartbeat_at"]), float(beat["started_at"])
                state = replace(
                    state, address=beat["address"], port=int(beat["port"]),
                    started_at=datetime.fromtimestamp(started, UTC).isoformat() if started > 0 else None,
                    heartbeat_age_s=round(max(0.0, now - beat_at), 3) if beat_at > 0 else None,
                )
            out.append(state)
        return out
