"""The instances table: one row per Relay instance, its heartbeat updated in place.

Heartbeats are liveness chatter, not events (DESIGN.md): the row is overwritten every beat. The
decision that an instance is gone is an event (RelayInstance.Expired), recorded by one survivor.
"""

from __future__ import annotations

from typing import Any

from relay.projections.backend import StoreConfig, ViewStore


class InstancesSchema:
    name = "instances"
    tables = ("relay_instances",)
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_instances (instance TEXT PRIMARY KEY, address TEXT NOT NULL, "
        "port INTEGER NOT NULL, started_at DOUBLE PRECISION NOT NULL, heartbeat_at DOUBLE PRECISION NOT NULL)"),
    )


class InstanceTable:
    def __init__(self, config: StoreConfig) -> None:
        self.store = ViewStore(config, InstancesSchema())

    def beat(self, instance: str, address: str, port: int, now: float, *, started: bool = False) -> None:
        """Upsert this instance's row with the time of this beat (epoch seconds)."""
        with self.store.transaction(commit=True) as sql:
            sql.execute(
                "INSERT INTO {s}relay_instances (instance, address, port, started_at, heartbeat_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (instance) DO UPDATE SET address = excluded.address, "
                "port = excluded.port, heartbeat_at = excluded.heartbeat_at"
                + (", started_at = excluded.started_at" if started else ""),
                (instance, address, port, now, now),
            )

    def rows(self) -> list[dict[str, Any]]:
        with self.store.transaction(commit=False) as sql:
            return sql.all("SELECT * FROM {s}relay_instances ORDER BY instance")

    def remove(self, instance: str) -> None:
        with self.store.transaction(commit=True) as sql:
            sql.execute("DELETE FROM {s}relay_instances WHERE instance = ?", (instance,))

    def close(self) -> None:
        self.store.close()
