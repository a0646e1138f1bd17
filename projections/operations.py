"""The operations view: managed retention runs, and what Relay's own metrics count (applications with their
retention settings, recovery dispatches by outcome).

Fed by RetentionRun.*, App.* and Executor.* (connections and recoveries) events. Read by the retention actors,
web/api/alerting.py, the console and the metrics scrape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import (
    AggregateEvent,
    ViewProjection,
    decoded,
    event_name,
    handles,
    iso,
    recovery_row_id,
    to_json,
)
from relay.wire.json_types import JSONObject

_RETENTION_KEYS = ("gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs")
_RECOVERY_OUTCOME = {"Executor.RecoveryFailed": "failed", "Executor.RecoveryAcknowledged": "acknowledged"}


class _OfApp(AggregateEvent, Protocol):
    org: str
    app: str


class _RetentionStarted(_OfApp, Protocol):
    slot: int
    executor: str
    policy: Mapping[str, object]
    settings: Mapping[str, object]
    instance: str


class _RetentionFinished(AggregateEvent, Protocol):
    outcome: str
    reason: str | None


class _AppRegistered(AggregateEvent, Protocol):
    org: str
    name: str


class _SettingsChanged(AggregateEvent, Protocol):
    changes: Mapping[str, object]


class _Attempt(AggregateEvent, Protocol):
    attempt: int  # Executor.RecoveryDispatched, RecoveryFailed, RecoveryAcknowledged


class OperationsSchema:
    name = "operations"
    tables = ("relay_operations_retention_runs", "relay_operations_apps", "relay_operations_executors",
              "relay_operations_recoveries")
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_operations_retention_runs (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL, slot BIGINT NOT NULL, executor TEXT NOT NULL, policy TEXT NOT NULL, "
        "settings TEXT NOT NULL, instance TEXT, started_at TEXT, outcome TEXT, reason TEXT, finished_at TEXT)"),
        ("CREATE INDEX IF NOT EXISTS relay_operations_retention_runs_app ON {s}relay_operations_retention_runs "
        "(org, app, started_at)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_operations_apps (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0, retention TEXT NOT NULL)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_operations_executors (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_operations_recoveries (id TEXT NOT NULL, attempt INTEGER NOT NULL, "
        "org TEXT NOT NULL, app TEXT NOT NULL, outcome TEXT NOT NULL, dispatched_at TEXT, finished_at TEXT, "
        "PRIMARY KEY (id, attempt))"),
    )


def _no_retention() -> str:
    return to_json(dict.fromkeys(_RETENTION_KEYS))


class OperationsProjection(ViewProjection):
    schema = OperationsSchema()

    # -- retention runs
    @handles("RetentionRun.Started")
    def retention_started(self, sql: Sql, e: _RetentionStarted, _: int) -> None:
        sql.insert("relay_operations_retention_runs", {
            "id": str(e.originator_id), "org": e.org, "app": e.app, "slot": e.slot, "executor": e.executor,
            "policy": to_json(e.policy), "settings": to_json(e.settings), "instance": e.instance,
            "started_at": iso(e.at),
        })

    @handles("RetentionRun.Finished")
    def retention_finished(self, sql: Sql, e: _RetentionFinished, _: int) -> None:
        sql.update("relay_operations_retention_runs", {"id": str(e.originator_id)},
                   {"outcome": e.outcome, "reason": e.reason, "finished_at": iso(e.at)})

    # -- applications (which ones exist, their retention settings)
    @handles("App.Registered")
    def app_registered(self, sql: Sql, e: _AppRegistered, _: int) -> None:
        sql.insert("relay_operations_apps", {"id": str(e.originator_id), "org": e.org, "app": e.name,
                                             "deleted": 0, "retention": _no_retention()})

    @handles("App.Reregistered")
    def app_reregistered(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        sql.update("relay_operations_apps", {"id": str(e.originator_id)},
                   {"deleted": 0, "retention": _no_retention()})

    @handles("App.SettingsChanged")
    def app_settings_changed(self, sql: Sql, e: _SettingsChanged, _: int) -> None:
        changes = {k: v for k, v in e.changes.items() if k in _RETENTION_KEYS}
        if not changes:
            return
        row = sql.one("SELECT retention FROM {s}relay_operations_apps WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "SettingsChanged for an application the view never saw"
        retention = json.loads(row["retention"])
        retention.update(changes)
        sql.update("relay_operations_apps", {"id": str(e.originator_id)}, {"retention": to_json(retention)})

    @handles("App.Deleted")
    def app_deleted(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        sql.update("relay_operations_apps", {"id": str(e.originator_id)}, {"deleted": 1})

    # -- recoveries (Relay's own recovery counts)
    @handles("Executor.Connected")
    def executor_connected(self, sql: Sql, e: _OfApp, _: int) -> None:
        sql.write("INSERT INTO {s}relay_operations_executors (id, org, app) VALUES (?, ?, ?) "
                  "ON CONFLICT (id) DO NOTHING", (str(e.originator_id), e.org, e.app))

    @handles("Executor.RecoveryDispatched")
    def recovery_dispatched(self, sql: Sql, e: _Attempt, _: int) -> None:
        row = sql.one("SELECT org, app FROM {s}relay_operations_executors WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "RecoveryDispatched for an executor the view never saw"
        key = recovery_row_id(sql, "relay_operations_recoveries", str(e.originator_id), e.attempt, dispatched=True)
        sql.insert("relay_operations_recoveries", {
            "id": key, "attempt": e.attempt, "org": row["org"], "app": row["app"],
            "outcome": "pending", "dispatched_at": iso(e.at),
        })

    @handles(*_RECOVERY_OUTCOME)
    def recovery_finished(self, sql: Sql, e: _Attempt, _: int) -> None:
        self._recovery_finished(sql, e, _RECOVERY_OUTCOME[event_name(e)])

    def _recovery_finished(self, sql: Sql, e: _Attempt, outcome: str) -> None:
        key = recovery_row_id(sql, "relay_operations_recoveries", str(e.originator_id), e.attempt)
        sql.update("relay_operations_recoveries", {"id": key, "attempt": e.attempt},
                   {"outcome": outcome, "finished_at": iso(e.at)})


def _run_row(row: Mapping[str, object]) -> JSONObject:
    return decoded(row, ("policy", "settings"))


class OperationsQueries:
    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def retention_runs(self, org: str, app: str, limit: int = 100, offset: int = 0) -> list[JSONObject]:
        rows = self.store.all(
            "SELECT * FROM {s}relay_operations_retention_runs WHERE org = ? AND app = ? "
            "ORDER BY started_at DESC, slot DESC LIMIT ? OFFSET ?",
            (org, app, limit, offset),
        )
        return [_run_row(r) for r in rows]

    def apps(self) -> list[dict[str, Any]]:
        """Every registered (not deleted) application, with its retention settings."""
        rows = self.store.all("SELECT org, app, retention FROM {s}relay_operations_apps WHERE deleted = 0 "
                              "ORDER BY org, app")
        return [{"org": r["org"], "app": r["app"], "retention": json.loads(r["retention"])} for r in rows]

    def recovery_counts(self) -> list[dict[str, Any]]:
        """Recovery dispatches by (org, app, outcome): pending, failed, acknowledged."""
        return self.store.all(
            "SELECT org, app, outcome, COUNT(*) AS n FROM {s}relay_operations_recoveries "
            "GROUP BY org, app, outcome ORDER BY org, app, outcome"
        )

    def recovery_counts_between(self, org: str, app: str, start: str, end: str) -> dict[str, int]:
        """The app's recovery dispatches made in [start, end) (ISO times), by outcome."""
        rows = self.store.all(
            "SELECT outcome, COUNT(*) AS n FROM {s}relay_operations_recoveries WHERE org = ? AND app = ? "
            "AND dispatched_at >= ? AND dispatched_at < ? GROUP BY outcome ORDER BY outcome",
            (org, app, start, end),
        )
        return {r["outcome"]: int(r["n"]) for r in rows}
