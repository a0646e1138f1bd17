"""The alerting view: every alerting rule, the alerts it fired (release 0.1.0) and its incidents, with where each
notification went.

Fed by AlertingRule.*, Alert.* and Incident.* events. Read by the alerting actors (which rules, the latest alert's
and incident's number), by web/api/alerting.py, web/api/incidents.py, the console and the metrics scrape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
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


class _IncidentOpened(AggregateEvent, Protocol):
    org: str
    app: str
    rule_id: str
    number: int
    rule_type: str
    message: str
    metadata: Mapping[str, str]
    receiving_app: str
    instance: str


class _RenotifySet(AggregateEvent, Protocol):
    interval_secs: int


class _IncidentResolved(AggregateEvent, Protocol):
    quiet: bool


class _IncidentBy(AggregateEvent, Protocol):
    by: str


class _IncidentSilenced(_IncidentBy, Protocol):
    until: datetime


class _IncidentNotified(_AlertDelivered, Protocol):
    kind: str


class AlertingSchema:
    name = "alerting"
    tables = ("relay_alerting_rules", "relay_alerting_alerts", "relay_alerting_sinks", "relay_alerting_renotify",
              "relay_alerting_incidents", "relay_alerting_notifications")
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
        # Tables of their own (issue 32), so that stores made before them get them as they start: a rule's renotify
        # interval (AlertingRule.RenotifySet), incidents, and each notification of an incident.
        ("CREATE TABLE IF NOT EXISTS {s}relay_alerting_renotify (id TEXT PRIMARY KEY, "
         "renotify_interval_secs INTEGER NOT NULL)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_alerting_incidents (id TEXT PRIMARY KEY, org TEXT NOT NULL, "
         "app TEXT NOT NULL, rule_id TEXT NOT NULL, number INTEGER NOT NULL, rule_type TEXT NOT NULL, "
         "message TEXT NOT NULL, metadata TEXT NOT NULL, receiving_app TEXT NOT NULL, instance TEXT, "
         "opened_at TEXT NOT NULL, resolved_at TEXT, resolved_quietly INTEGER NOT NULL DEFAULT 0, "
         "acknowledged_at TEXT, acknowledged_by TEXT, silenced_until TEXT, silenced_by TEXT, "
         "renotified INTEGER NOT NULL DEFAULT 0, last_notified_at TEXT)"),
        "CREATE INDEX IF NOT EXISTS relay_alerting_incidents_app ON {s}relay_alerting_incidents (org, app, opened_at)",
        ("CREATE TABLE IF NOT EXISTS {s}relay_alerting_notifications (id TEXT PRIMARY KEY, incident TEXT NOT NULL, "
         "kind TEXT NOT NULL, at TEXT NOT NULL, delivered_to TEXT NOT NULL, failed TEXT NOT NULL, webhook TEXT, "
         "sinks TEXT NOT NULL)"),
        "CREATE INDEX IF NOT EXISTS relay_alerting_notifications_of ON {s}relay_alerting_notifications (incident, at)",
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

    @handles("AlertingRule.RenotifySet")
    def renotify_set(self, sql: Sql, e: _RenotifySet, _: int) -> None:
        rule = str(e.originator_id)
        sql.write("DELETE FROM {s}relay_alerting_renotify WHERE id = ?", (rule,))
        sql.insert("relay_alerting_renotify", {"id": rule, "renotify_interval_secs": e.interval_secs})

    # -- incidents
    @handles("Incident.Opened")
    def incident_opened(self, sql: Sql, e: _IncidentOpened, _: int) -> None:
        sql.insert("relay_alerting_incidents", {
            "id": str(e.originator_id), "org": e.org, "app": e.app, "rule_id": e.rule_id, "number": e.number,
            "rule_type": e.rule_type, "message": e.message, "metadata": to_json(e.metadata),
            "receiving_app": e.receiving_app, "instance": e.instance, "opened_at": iso(e.at),
            "last_notified_at": iso(e.at),
        })
        self._fired(sql, e)

    @staticmethod
    def _fired(sql: Sql, e: _IncidentOpened) -> None:
        """The rule's lastFiredAt (Conductor's field): its latest incident notified as open or again."""
        sql.write("UPDATE {s}relay_alerting_rules SET last_fired_at = ? WHERE org = ? AND app = ? AND rule_id = ?",
                  (iso(e.at), e.org, e.app, e.rule_id))

    @handles("Incident.Renotified")
    def incident_renotified(self, sql: Sql, e: _IncidentOpened, _: int) -> None:
        sql.write("UPDATE {s}relay_alerting_incidents SET renotified = renotified + 1, last_notified_at = ?, "
                  "message = ?, metadata = ? WHERE id = ?",
                  (iso(e.at), e.message, to_json(e.metadata), str(e.originator_id)))
        incident = str(e.originator_id)
        sql.write("UPDATE {s}relay_alerting_rules SET last_fired_at = ? WHERE "
                  "org = (SELECT org FROM {s}relay_alerting_incidents WHERE id = ?) AND "
                  "app = (SELECT app FROM {s}relay_alerting_incidents WHERE id = ?) AND "
                  "rule_id = (SELECT rule_id FROM {s}relay_alerting_incidents WHERE id = ?)",
                  (iso(e.at), incident, incident, incident))

    @handles("Incident.Resolved")
    def incident_resolved(self, sql: Sql, e: _IncidentResolved, _: int) -> None:
        sql.update("relay_alerting_incidents", {"id": str(e.originator_id)},
                   {"resolved_at": iso(e.at), "resolved_quietly": int(bool(e.quiet))})

    @handles("Incident.Acknowledged")
    def incident_acknowledged(self, sql: Sql, e: _IncidentBy, _: int) -> None:
        sql.update("relay_alerting_incidents", {"id": str(e.originator_id)},
                   {"acknowledged_at": iso(e.at), "acknowledged_by": e.by})

    @handles("Incident.Silenced")
    def incident_silenced(self, sql: Sql, e: _IncidentSilenced, _: int) -> None:
        sql.update("relay_alerting_incidents", {"id": str(e.originator_id)},
                   {"silenced_until": iso(e.until), "silenced_by": e.by})

    @handles("Incident.Unsilenced")
    def incident_unsilenced(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        sql.update("relay_alerting_incidents", {"id": str(e.originator_id)},
                   {"silenced_until": None, "silenced_by": None})

    @handles("Incident.Notified")
    def incident_notified(self, sql: Sql, e: _IncidentNotified, position: int) -> None:
        sql.insert("relay_alerting_notifications", {
            "id": f"{e.originator_id}:{position}", "incident": str(e.originator_id), "kind": e.kind,
            "at": iso(e.at), "delivered_to": to_json(e.delivered_to), "failed": to_json(e.failed),
            "webhook": to_json(e.webhook) if e.webhook is not None else None, "sinks": to_json(e.sinks or {}),
        })


# A rule with its renotify interval (AlertingRule.RenotifySet: a table of its own, see AlertingSchema).
_RULES = ("SELECT r.*, n.renotify_interval_secs FROM {s}relay_alerting_rules r "
          "LEFT JOIN {s}relay_alerting_renotify n ON n.id = r.id")


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
        condition = "" if include_deleted else " AND r.deleted = 0"
        rows = self.store.all(
            f"{_RULES} WHERE r.org = ? AND r.app = ?{condition} ORDER BY r.created_at, r.rule_id",
            (org, app),
        )
        return [_rule_row(r) for r in rows]

    def rule(self, org: str, app: str, rule_id: str) -> JSONObject | None:
        row = self.store.one(f"{_RULES} WHERE r.org = ? AND r.app = ? AND r.rule_id = ?",
                             (org, app, rule_id))
        return _rule_row(row) if row else None

    # -- incidents
    def deleted_rules_with_open_incidents(self, org: str, app: str) -> list[dict[str, Any]]:
        """Deleted rules whose incident is still open: the next evaluation resolves it (and sends the resolution)."""
        rows = self.store.all(
            f"{_RULES} WHERE r.org = ? AND r.app = ? AND r.deleted = 1 AND EXISTS (SELECT 1 FROM "  # noqa: S608
            "{s}relay_alerting_incidents i WHERE i.org = r.org AND i.app = r.app AND i.rule_id = r.rule_id "
            "AND i.resolved_at IS NULL)", (org, app))
        return [_rule_row(r) for r in rows]

    def incident_numbers(self, org: str, app: str) -> dict[str, int]:
        """Each rule's latest incident number (where the evaluator's walk along them starts)."""
        rows = self.store.all("SELECT rule_id, MAX(number) AS n FROM {s}relay_alerting_incidents "
                              "WHERE org = ? AND app = ? GROUP BY rule_id", (org, app))
        return {str(r["rule_id"]): int(r["n"]) for r in rows}

    def incidents(self, org: str, app: str, state: str = "all", limit: int = 100,
                  offset: int = 0) -> list[JSONObject]:
        """The app's incidents, newest first: ``state`` "open" (not resolved), "resolved" or "all"."""
        condition = {"open": " AND resolved_at IS NULL", "resolved": " AND resolved_at IS NOT NULL"}.get(state, "")
        rows = self.store.all(
            f"SELECT * FROM {{s}}relay_alerting_incidents WHERE org = ? AND app = ?{condition} "  # noqa: S608
            "ORDER BY opened_at DESC, number DESC LIMIT ? OFFSET ?",
            (org, app, limit, offset),
        )
        return [decoded(r, ("metadata",), flags=("resolved_quietly",)) for r in rows]

    def incident(self, org: str, app: str, incident_id: str) -> JSONObject | None:
        """One incident, with its notifications (oldest first)."""
        row = self.store.one("SELECT * FROM {s}relay_alerting_incidents WHERE org = ? AND app = ? AND id = ?",
                             (org, app, incident_id))
        if row is None:
            return None
        out = decoded(row, ("metadata",), flags=("resolved_quietly",))
        sent = self.store.all("SELECT * FROM {s}relay_alerting_notifications WHERE incident = ? ORDER BY at, id",
                              (incident_id,))
        out["notifications"] = [
            {**decoded(n, ("delivered_to", "failed", "sinks")),
             "webhook": json.loads(n["webhook"]) if n["webhook"] is not None else None} for n in sent]
        return out

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
