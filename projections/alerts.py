"""The operations view: alerting rules and the alerts they fired, retention runs, and what Relay's own
metrics count (applications with their retention settings, recovery dispatches by outcome, instances).

Fed by AlertingRule.*, Alert.*, RetentionRun.* and, for the counts, by App.*, Executor.* (connections and
recoveries) and RelayInstance.* events. Read by the alerting and retention actors (which rules, the latest
alert's number), by web/api_alerting.py and by the metrics scrape.
"""

from __future__ import annotations

import json
from typing import Any

from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import Handler, ViewProjection, iso, to_json

_RETENTION_KEYS = ("gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs")


class AlertsSchema:
    name = "alerts"
    tables = (
        "relay_alert_rules", "relay_alerts", "relay_retention_runs", "relay_ops_apps", "relay_ops_executors",
        "relay_ops_recoveries", "relay_ops_instances",
    )  # fmt: skip
    create_statements = (
        "CREATE TABLE IF NOT EXISTS {s}relay_alert_rules (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL, rule_id TEXT NOT NULL, rule_type TEXT NOT NULL, metadata TEXT NOT NULL, "
        "receiving_app TEXT NOT NULL, min_interval_secs INTEGER, created_at TEXT, deleted INTEGER NOT NULL "
        "DEFAULT 0, deleted_at TEXT, last_fired_at TEXT, alerts INTEGER NOT NULL DEFAULT 0)",
        "CREATE INDEX IF NOT EXISTS relay_alert_rules_app ON {s}relay_alert_rules (org, app, created_at)",
        "CREATE TABLE IF NOT EXISTS {s}relay_alerts (id TEXT PRIMARY KEY, org TEXT NOT NULL, app TEXT NOT NULL, "
        "rule_id TEXT NOT NULL, sequence INTEGER NOT NULL, rule_type TEXT NOT NULL, slot BIGINT NOT NULL, "
        "message TEXT NOT NULL, metadata TEXT NOT NULL, receiving_app TEXT NOT NULL, instance TEXT, "
        "fired_at TEXT, delivered_at TEXT, delivered_to TEXT, failed TEXT, webhook TEXT)",
        "CREATE INDEX IF NOT EXISTS relay_alerts_app ON {s}relay_alerts (org, app, fired_at)",
        "CREATE TABLE IF NOT EXISTS {s}relay_retention_runs (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL, slot BIGINT NOT NULL, executor TEXT NOT NULL, policy TEXT NOT NULL, "
        "settings TEXT NOT NULL, instance TEXT, started_at TEXT, outcome TEXT, reason TEXT, finished_at TEXT)",
        "CREATE INDEX IF NOT EXISTS relay_retention_runs_app ON {s}relay_retention_runs (org, app, started_at)",
        "CREATE TABLE IF NOT EXISTS {s}relay_ops_apps (id TEXT PRIMARY KEY, org TEXT NOT NULL, app TEXT NOT NULL, "
        "deleted INTEGER NOT NULL DEFAULT 0, retention TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {s}relay_ops_executors (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {s}relay_ops_recoveries (id TEXT NOT NULL, attempt INTEGER NOT NULL, "
        "org TEXT NOT NULL, app TEXT NOT NULL, outcome TEXT NOT NULL, dispatched_at TEXT, finished_at TEXT, "
        "PRIMARY KEY (id, attempt))",
        "CREATE TABLE IF NOT EXISTS {s}relay_ops_instances (id TEXT PRIMARY KEY, instance TEXT NOT NULL, "
        "status TEXT NOT NULL, updated_at TEXT)",
    )


def _no_retention() -> str:
    return to_json(dict.fromkeys(_RETENTION_KEYS))


class AlertsProjection(ViewProjection):
    schema = AlertsSchema()

    def build_handlers(self) -> dict[str, Handler]:
        return {
            "AlertingRule.Created": self.rule_created,
            "AlertingRule.Deleted": self.rule_deleted,
            "Alert.Fired": self.alert_fired,
            "Alert.Delivered": self.alert_delivered,
            "RetentionRun.Started": self.retention_started,
            "RetentionRun.Finished": self.retention_finished,
            "App.Registered": self.app_registered,
            "App.Reregistered": self.app_reregistered,
            "App.SettingsChanged": self.app_settings_changed,
            "App.Deleted": self.app_deleted,
            "Executor.Connected": self.executor_connected,
            "Executor.RecoveryDispatched": self.recovery_dispatched,
            "Executor.RecoveryFailed": lambda sql, e, _: self._recovery_finished(sql, e, "failed"),
            "Executor.RecoveryAcknowledged": lambda sql, e, _: self._recovery_finished(sql, e, "acknowledged"),
            "RelayInstance.Started": self.instance_started,
            "RelayInstance.Restarted": lambda sql, e, _: self._instance_status(sql, e, "RUNNING"),
            "RelayInstance.Stopped": lambda sql, e, _: self._instance_status(sql, e, "STOPPED"),
            "RelayInstance.Expired": lambda sql, e, _: self._instance_status(sql, e, "EXPIRED"),
        }

    # -- rules and alerts
    def rule_created(self, sql: Sql, e: Any, _: int) -> None:
        sql.write(
            "INSERT INTO {s}relay_alert_rules (id, org, app, rule_id, rule_type, metadata, receiving_app, "
            "min_interval_secs, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (str(e.originator_id), e.org, e.app, e.rule_id, e.rule_type, to_json(e.metadata), e.receiving_app,
             e.min_interval_secs, iso(e.at)),
        )

    def rule_deleted(self, sql: Sql, e: Any, _: int) -> None:
        sql.write("UPDATE {s}relay_alert_rules SET deleted = 1, deleted_at = ? WHERE id = ?",
                    (iso(e.at), str(e.originator_id)))

    def alert_fired(self, sql: Sql, e: Any, _: int) -> None:
        sql.write(
            "INSERT INTO {s}relay_alerts (id, org, app, rule_id, sequence, rule_type, slot, message, metadata, "
            "receiving_app, instance, fired_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (str(e.originator_id), e.org, e.app, e.rule_id, e.sequence, e.rule_type, e.slot, e.message,
             to_json(e.metadata), e.receiving_app, e.instance, iso(e.at)),
        )
        sql.write(
            "UPDATE {s}relay_alert_rules SET last_fired_at = ?, alerts = ? "
            "WHERE org = ? AND app = ? AND rule_id = ? AND alerts < ?",
            (iso(e.at), e.sequence, e.org, e.app, e.rule_id, e.sequence),
        )

    def alert_delivered(self, sql: Sql, e: Any, _: int) -> None:
        sql.write(
            "UPDATE {s}relay_alerts SET delivered_at = ?, delivered_to = ?, failed = ?, webhook = ? WHERE id = ?",
            (iso(e.at), to_json(e.delivered_to), to_json(e.failed),
             to_json(e.webhook) if e.webhook is not None else None, str(e.originator_id)),
        )

    # -- retention runs
    def retention_started(self, sql: Sql, e: Any, _: int) -> None:
        sql.write(
            "INSERT INTO {s}relay_retention_runs (id, org, app, slot, executor, policy, settings, instance, "
            "started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (str(e.originator_id), e.org, e.app, e.slot, e.executor, to_json(e.policy), to_json(e.settings),
             e.instance, iso(e.at)),
        )

    def retention_finished(self, sql: Sql, e: Any, _: int) -> None:
        sql.write("UPDATE {s}relay_retention_runs SET outcome = ?, reason = ?, finished_at = ? WHERE id = ?",
                    (e.outcome, e.reason, iso(e.at), str(e.originator_id)))

    # -- applications (which ones exist, their retention settings)
    def app_registered(self, sql: Sql, e: Any, _: int) -> None:
        sql.write("INSERT INTO {s}relay_ops_apps (id, org, app, deleted, retention) VALUES (?, ?, ?, 0, ?)",
                    (str(e.originator_id), e.org, e.name, _no_retention()))

    def app_reregistered(self, sql: Sql, e: Any, _: int) -> None:
        sql.write("UPDATE {s}relay_ops_apps SET deleted = 0, retention = ? WHERE id = ?",
                    (_no_retention(), str(e.originator_id)))

    def app_settings_changed(self, sql: Sql, e: Any, _: int) -> None:
        changes = {k: v for k, v in e.changes.items() if k in _RETENTION_KEYS}
        if not changes:
            return
        row = sql.one("SELECT retention FROM {s}relay_ops_apps WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "SettingsChanged for an application the view never saw"
        retention = json.loads(row["retention"])
        retention.update(changes)
        sql.write("UPDATE {s}relay_ops_apps SET retention = ? WHERE id = ?",
                    (to_json(retention), str(e.originator_id)))

    def app_deleted(self, sql: Sql, e: Any, _: int) -> None:
        sql.write("UPDATE {s}relay_ops_apps SET deleted = 1 WHERE id = ?", (str(e.originator_id),))

    # -- recoveries (Relay's own recovery counts)
    def executor_connected(self, sql: Sql, e: Any, _: int) -> None:
        sql.write("INSERT INTO {s}relay_ops_executors (id, org, app) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    (str(e.originator_id), e.org, e.app))

    def recovery_dispatched(self, sql: Sql, e: Any, _: int) -> None:
        row = sql.one("SELECT org, app FROM {s}relay_ops_executors WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "RecoveryDispatched for an executor the view never saw"
        sql.write(
            "INSERT INTO {s}relay_ops_recoveries (id, attempt, org, app, outcome, dispatched_at) "
            "VALUES (?, ?, ?, ?, 'pending', ?)",
            (str(e.originator_id), e.attempt, row["org"], row["app"], iso(e.at)),
        )

    def _recovery_finished(self, sql: Sql, e: Any, outcome: str) -> None:
        sql.write("UPDATE {s}relay_ops_recoveries SET outcome = ?, finished_at = ? WHERE id = ? AND attempt = ?",
                    (outcome, iso(e.at), str(e.originator_id), e.attempt))

    # -- instances
    def instance_started(self, sql: Sql, e: Any, _: int) -> None:
        sql.write(
            "INSERT INTO {s}relay_ops_instances (id, instance, status, updated_at) VALUES (?, ?, 'RUNNING', ?)",
            (str(e.originator_id), e.instance, iso(e.at)),
        )

    def _instance_status(self, sql: Sql, e: Any, status: str) -> None:
        sql.write("UPDATE {s}relay_ops_instances SET status = ?, updated_at = ? WHERE id = ?",
                    (status, iso(e.at), str(e.originator_id)))


def _rule_row(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["metadata"] = json.loads(row["metadata"])
    row["deleted"] = bool(row["deleted"])
    return row


def _alert_row(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["metadata"] = json.loads(row["metadata"])
    for key in ("delivered_to", "failed", "webhook"):
        row[key] = json.loads(row[key]) if row[key] is not None else None
    return row


def _run_row(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["policy"] = json.loads(row["policy"])
    row["settings"] = json.loads(row["settings"])
    return row


class AlertsQueries:
    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def rules(self, org: str, app: str, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        condition = "" if include_deleted else " AND deleted = 0"
        with self.store.transaction(commit=False) as sql:
            rows = sql.all(
                f"SELECT * FROM {{s}}relay_alert_rules WHERE org = ? AND app = ?{condition} "  # noqa: S608
                "ORDER BY created_at, rule_id",
                (org, app),
            )
        return [_rule_row(r) for r in rows]

    def rule(self, org: str, app: str, rule_id: str) -> dict[str, Any] | None:
        with self.store.transaction(commit=False) as sql:
            row = sql.one("SELECT * FROM {s}relay_alert_rules WHERE org = ? AND app = ? AND rule_id = ?",
                          (org, app, rule_id))
        return _rule_row(row) if row else None

    def alerts(self, org: str, app: str, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """What the app's rules fired, newest first, with where each alert went."""
        with self.store.transaction(commit=False) as sql:
            rows = sql.all(
                "SELECT * FROM {s}relay_alerts WHERE org = ? AND app = ? "
                "ORDER BY fired_at DESC, sequence DESC LIMIT ? OFFSET ?",
                (org, app, limit, offset),
            )
        return [_alert_row(r) for r in rows]

    def retention_runs(self, org: str, app: str, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        with self.store.transaction(commit=False) as sql:
            rows = sql.all(
                "SELECT * FROM {s}relay_retention_runs WHERE org = ? AND app = ? "
                "ORDER BY started_at DESC, slot DESC LIMIT ? OFFSET ?",
                (org, app, limit, offset),
            )
        return [_run_row(r) for r in rows]

    def apps(self) -> list[dict[str, Any]]:
        """Every registered (not deleted) application, with its retention settings."""
        with self.store.transaction(commit=False) as sql:
            rows = sql.all("SELECT org, app, retention FROM {s}relay_ops_apps WHERE deleted = 0 ORDER BY org, app")
        return [{"org": r["org"], "app": r["app"], "retention": json.loads(r["retention"])} for r in rows]

    def watched_apps(self) -> list[tuple[str, str]]:
        """Applications with a live alerting rule or a retention setting: their actors must run."""
        with self.store.transaction(commit=False) as sql:
            ruled = sql.all("SELECT DISTINCT org, app FROM {s}relay_alert_rules WHERE deleted = 0")
        with_rules = {(r["org"], r["app"]) for r in ruled}
        apps = self.apps()
        live = {(a["org"], a["app"]) for a in apps}
        retained = {(a["org"], a["app"]) for a in apps if any(v is not None for v in a["retention"].values())}
        return sorted((with_rules & live) | retained)

    def rule_counts(self) -> list[dict[str, Any]]:
        with self.store.transaction(commit=False) as sql:
            return sql.all(
                "SELECT org, app, rule_type, COUNT(*) AS n FROM {s}relay_alert_rules WHERE deleted = 0 "
                "GROUP BY org, app, rule_type ORDER BY org, app, rule_type"
            )

    def recovery_counts(self) -> list[dict[str, Any]]:
        """Recovery dispatches by (org, app, outcome): pending, failed, acknowledged."""
        with self.store.transaction(commit=False) as sql:
            return sql.all(
                "SELECT org, app, outcome, COUNT(*) AS n FROM {s}relay_ops_recoveries "
                "GROUP BY org, app, outcome ORDER BY org, app, outcome"
            )

    def recovery_counts_between(self, org: str, app: str, start: str, end: str) -> dict[str, int]:
        """The app's recovery dispatches made in [start, end) (ISO times), by outcome."""
        with self.store.transaction(commit=False) as sql:
            rows = sql.all(
                "SELECT outcome, COUNT(*) AS n FROM {s}relay_ops_recoveries WHERE org = ? AND app = ? "
                "AND dispatched_at >= ? AND dispatched_at < ? GROUP BY outcome ORDER BY outcome",
                (org, app, start, end),
            )
        return {r["outcome"]: int(r["n"]) for r in rows}

    def instance_counts(self) -> dict[str, int]:
        with self.store.transaction(commit=False) as sql:
            rows = sql.all("SELECT status, COUNT(*) AS n FROM {s}relay_ops_instances GROUP BY status")
        return {r["status"]: int(r["n"]) for r in rows}
