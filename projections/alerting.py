"""The alerting view: every alerting rule and the alerts it fired, with where each alert went.

Fed by AlertingRule.* and Alert.* events. Read by the alerting actors (which rules, the latest alert's
number), by web/api/alerting.py, the console and the metrics scrape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import AggregateEvent, ViewProjection, decoded, handles, iso, to_json
from relay.wire.json_types import JSONObject


class _RuleCreated(AggregateEvent, Protocol):
    org: str
    app: str
    rule_id: str
    rule_type: str
    metadata: Mapping[str, object]
    receiving_app: str | None
    min_interval_secs: int | None


class _AlertFired(_RuleCreated, Protocol):
    sequence: int
    slot: int
    message: str
    instance: str


class _AlertDelivered(AggregateEvent, Protocol):
    delivered_to: list[str]
    failed: list[dict[str, str]]
    webhook: Mapping[str, object] | None
    sinks: Mapping[str, object] | None


class AlertingSchema:
    name = "alerting"
    tables = ("relay_alerting_rules", "relay_alerting_alerts", "relay_alerting_sinks")
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_alerting_rules (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL, rule_id TEXT NOT NULL, rule_type TEXT NOT NULL, metadata TEXT NOT NULL, "
        "receiving_app TEXT NOT NULL, min_interval_secs INTEGER, created_at TEXT, deleted INTEGER NOT NULL "
        "DEFAULT 0, deleted_at TEXT, last_fired_at TEXT, alerts INTEGER NOT NULL DEFAULT 0)"),
        "CREATE INDEX IF NOT EXISTS relay_alerting_rules_app ON {s}relay_alerting_rules (org, app, created_at)",
        ("CREATE TABLE IF NOT EXISTS {s}relay_alerting_alerts (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
        "app TEXT NOT NULL, rule_id TEXT NOT NULL, sequence INTEGER NOT NULL, rule_type TEXT NOT NULL, "
        "slot BIGINT NOT NULL, message TEXT NOT NULL, metadata TEXT NOT NULL, receiving_app TEXT NOT NULL, "
        "instance TEXT, fired_at TEXT, delivered_at TEXT, delivered_to TEXT, failed TEXT, webhook TEXT)"),
        "CREATE INDEX IF NOT EXISTS relay_alerting_alerts_app ON {s}relay_alerting_alerts (org, app, fired_at)",
        # Each alert's outcome at the sinks besides the webhook (Slack, PagerDuty), when it went to any. A table of
        # its own: stores made before the sinks get it as they start, and their older alerts have none.
        "CREATE TABLE IF NOT EXISTS {s}relay_alerting_sinks (id TEXT PRIMARY KEY, sinks TEXT NOT NULL)",
    )


class AlertingProjection(ViewProjection):
    schema = AlertingSchema()

    @handles("AlertingRule.Created")
    def rule_created(self, sql: Sql, e: _RuleCreated, _: int) -> None:
        sql.insert("relay_alerting_rules", {
            "id": str(e.originator_id), "org": e.org, "app": e.app, "rule_id": e.rule_id, "rule_type": e.rule_type,
            "metadata": to_json(e.metadata), "receiving_app": e.receiving_app,
            "min_interval_secs": e.min_interval_secs, "created_at": iso(e.at),
        })

    @handles("AlertingRule.Deleted")
    def rule_deleted(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        sql.update("relay_alerting_rules", {"id": str(e.originator_id)}, {"deleted": 1, "deleted_at": iso(e.at)})

    @handles("Alert.Fired")
    def alert_fired(self, sql: Sql, e: _AlertFired, _: int) -> None:
        sql.insert("relay_alerting_alerts", {
            "id": str(e.originator_id), "org": e.org, "app": e.app, "rule_id": e.rule_id, "sequence": e.sequence,
            "rule_type": e.rule_type, "slot": e.slot, "message": e.message, "metadata": to_json(e.metadata),
            "receiving_app": e.receiving_app, "instance": e.instance, "fired_at": iso(e.at),
        })
        sql.write(
            "UPDATE {s}relay_alerting_rules SET last_fired_at = ?, alerts = ? "
            "WHERE org = ? AND app = ? AND rule_id = ? AND alerts < ?",
            (iso(e.at), e.sequence, e.org, e.app, e.rule_id, e.sequence),
        )

    @handles("Alert.Delivered")
    def alert_delivered(self, sql: Sql, e: _AlertDelivered, _: int) -> None:
        sql.update("relay_alerting_alerts", {"id": str(e.originator_id)}, {
            "delivered_at": iso(e.at), "delivered_to": to_json(e.delivered_to), "failed": to_json(e.failed),
            "webhook": to_json(e.webhook) if e.webhook is not None else None,
        })
        if e.sinks:
            sql.insert("relay_alerting_sinks", {"id": str(e.originator_id), "sinks": to_json(e.sinks)})


def _rule_row(row: Mapping[str, object]) -> JSONObject:
    return decoded(row, ("metadata",), flags=("deleted",))


def _alert_row(row: Mapping[str, object]) -> JSONObject:
    row = decoded(row, ("metadata",))
    for key in ("delivered_to", "failed", "webhook"):
        row[key] = json.loads(row[key]) if row[key] is not None else None
    row["sinks"] = json.loads(row["sinks"]) if row.get("sinks") else {}
    return row


class AlertingQueries:
    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def rules(self, org: str, app: str, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        condition = "" if include_deleted else " AND deleted = 0"
        rows = self.store.all(
            f"SELECT * FROM {{s}}relay_alerting_rules WHERE org = ? AND app = ?{condition} "  # noqa: S608
            "ORDER BY created_at, rule_id",
            (org, app),
        )
        return [_rule_row(r) for r in rows]

    def rule(self, org: str, app: str, rule_id: str) -> JSONObject | None:
        row = self.store.one("SELECT * FROM {s}relay_alerting_rules WHERE org = ? AND app = ? AND rule_id = ?",
                             (org, app, rule_id))
        return _rule_row(row) if row else None

    def alerts(self, org: str, app: str, limit: int = 100, offset: int = 0) -> list[JSONObject]:
        """What the app's rules fired, newest first, with where each alert went."""
        rows = self.store.all(
            "SELECT a.*, k.sinks FROM {s}relay_alerting_alerts a LEFT JOIN {s}relay_alerting_sinks k "
            "ON k.id = a.id WHERE a.org = ? AND a.app = ? "
            "ORDER BY a.fired_at DESC, a.sequence DESC LIMIT ? OFFSET ?",
            (org, app, limit, offset),
        )
        return [_alert_row(r) for r in rows]

    def ruled_apps(self) -> set[tuple[str, str]]:
        """Applications with a live (not deleted) alerting rule."""
        rows = self.store.all("SELECT DISTINCT org, app FROM {s}relay_alerting_rules WHERE deleted = 0")
        return {(r["org"], r["app"]) for r in rows}

    def rule_counts(self) -> list[dict[str, Any]]:
        return self.store.all(
            "SELECT org, app, rule_type, COUNT(*) AS n FROM {s}relay_alerting_rules WHERE deleted = 0 "
            "GROUP BY org, app, rule_type ORDER BY org, app, rule_type"
        )
