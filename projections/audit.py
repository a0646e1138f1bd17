"""The audit view: every event of the log as an auditor reads it (who/what/when), without secrets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import Handler, ViewProjection, decoded, event_name, iso, to_json
from relay.wire.json_types import JSONObject

# Event attributes that are bookkeeping, not audit content. key_hash and secret_hash (a join secret's) are not
# secrets, but an auditor has no use for them and they need not travel further than their views.
_HIDDEN = {"originator_id", "originator_version", "timestamp", "originator_topic", "key_hash", "secret_hash", "at"}

# Ids per subject lookup (well under SQLite's limit on bound parameters).
_LOOKUP_CHUNK = 500


def _subject_of(kind: str, e: Any) -> tuple[str | None, str | None, str | None] | None:
    """(org, app, subject) named by an aggregate's creation event, or None for unknown kinds."""
    if kind == "Organization":
        return e.name, None, e.name
    if kind == "App":
        return e.org, e.name, e.name
    if kind == "RelayInstance":
        return None, None, e.instance
    subject: Callable[[], str] | None = {
        "Executor": lambda: e.executor,
        "AlertingRule": lambda: e.rule_id,
        "Alert": lambda: f"{e.rule_id}#{e.sequence}",
        "Incident": lambda: f"{e.rule_id}#{e.number}",  # its org and app: the change feed's incidents topic
        "RetentionRun": lambda: str(e.slot),
        "Operation": lambda: e.targets[0] if e.targets else e.operation,
        "OrganizationAccess": lambda: e.org,  # its members, roles, secrets and claims: the organization's entries
        "User": lambda: e.username,
    }.get(kind)
    if subject is None:
        return None
    return getattr(e, "org", None), getattr(e, "app", None), subject()


class AuditSchema:
    name = "audit"
    tables = ("relay_audit", "relay_audit_subjects")
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_audit (position BIGINT PRIMARY KEY, at TEXT, recorded_at TEXT, "
        "kind TEXT NOT NULL, event TEXT NOT NULL, org TEXT, app TEXT, subject TEXT, details TEXT NOT NULL)"),
        "CREATE INDEX IF NOT EXISTS relay_audit_app ON {s}relay_audit (org, app, position)",
        "CREATE INDEX IF NOT EXISTS relay_audit_kind ON {s}relay_audit (kind, org, position)",
        ("CREATE TABLE IF NOT EXISTS {s}relay_audit_subjects (id TEXT PRIMARY KEY, kind TEXT NOT NULL, "
        "org TEXT, app TEXT, subject TEXT)"),
    )


def _details(domain_event: object) -> JSONObject:
    return {k: v for k, v in vars(domain_event).items() if k not in _HIDDEN and not k.startswith("_")}


class AuditProjection(ViewProjection):
    schema = AuditSchema()

    def __init__(self, view: ViewStore) -> None:
        super().__init__(view)
        # Within a batch's transaction: the subject (org, app, subject) of each aggregate the batch names,
        # read once for the whole batch instead of once per event.
        self._subjects: dict[str, tuple[Any, Any, Any]] = {}

    def build_handlers(self) -> dict[str, Handler]:
        # Every event of every aggregate is audited.
        return {}

    def folds(self, batch: list[tuple[Any, int]]) -> bool:
        return bool(batch)

    def apply(self, sql: Sql, batch: list[tuple[Any, int]]) -> None:
        self._subjects = self._known_subjects(sql, batch)
        try:
            for domain_event, position in batch:
                self.audit(sql, domain_event, position)
        finally:
            self._subjects = {}

    def _known_subjects(self, sql: Sql, batch: list[tuple[Any, int]]) -> dict[str, tuple[Any, Any, Any]]:
        """The recorded subjects of the aggregates whose events the batch holds but does not create."""
        created = {str(e.originator_id) for e, _ in batch if e.originator_version == 1}
        wanted = sorted({str(e.originator_id) for e, _ in batch} - created)
        known: dict[str, tuple[Any, Any, Any]] = {}
        for chunk in range(0, len(wanted), _LOOKUP_CHUNK):
            ids = wanted[chunk:chunk + _LOOKUP_CHUNK]
            rows = sql.all(
                f"SELECT id, org, app, subject FROM {{s}}relay_audit_subjects "  # noqa: S608 - placeholders only
                f"WHERE id IN ({', '.join('?' * len(ids))})",
                ids,
            )
            for row in rows:
                known[str(row["id"])] = (row["org"], row["app"], row["subject"])
        return known

    def audit(self, sql: Sql, e: Any, position: int) -> None:
        name = event_name(e)
        kind = name.split(".")[0]
        subject_id = str(e.originator_id)
        named = _subject_of(kind, e) if e.originator_version == 1 else None
        if named is not None:
            sql.write(
                "INSERT INTO {s}relay_audit_subjects (id, kind, org, app, subject) VALUES (?, ?, ?, ?, ?)",
                (subject_id, kind, *named),
            )
            self._subjects[subject_id] = named
        org, app, subject = self._subjects.get(subject_id, (None, None, None))
        sql.write(
            "INSERT INTO {s}relay_audit (position, at, recorded_at, kind, event, org, app, subject, details) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (position, iso(getattr(e, "at", None)), iso(e.timestamp), kind, name, org, app, subject,
             to_json(_details(e))),
        )


class AuditQueries:
    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def entries(
        self,
        *,
        org: str | None = None,
        app: str | None = None,
        apps: tuple[str, ...] | None = None,
        event: str | None = None,
        since: int = 0,
        start_time: str | None = None,
        end_time: str | None = None,
        limit: int = 100,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[dict[str, Any]]:
        where = ["position > ?"]
        params: list[object] = [since]
        for column, value in (("org", org), ("app", app)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if apps is not None:  # entries of these applications only (an app-scoped key's; none: nothing)
            where.append(f"app IN ({', '.join('?' * len(apps)) or 'NULL'})")
            params += list(apps)
        if event is not None:
            where.append("(event = ? OR kind = ?)")
            params += [event, event]
        if start_time is not None:
            where.append("at >= ?")
            params.append(start_time)
        if end_time is not None:
            where.append("at <= ?")
            params.append(end_time)
        order = "DESC" if newest_first else "ASC"
        rows = self.store.all(
            f"SELECT * FROM {{s}}relay_audit WHERE {' AND '.join(where)} "  # noqa: S608 - fixed columns
            f"ORDER BY position {order} LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [decoded(row, ("details",)) for row in rows]

    def touched(self, after: int, through: int) -> list[tuple[str, str | None, str | None]]:
        """The (kind, org, app) of the entries at positions in (after, through]: what the change feed publishes."""
        rows = self.store.all(
            "SELECT kind, org, app FROM {s}relay_audit WHERE position > ? AND position <= ? GROUP BY kind, org, app",
            (after, through),
        )
        return [(str(row["kind"]), row["org"], row["app"]) for row in rows]

    def first_position(self, *, org: str, kind: str) -> int | None:
        """The position of the organization's first entry of aggregate `kind`, if any."""
        row = self.store.one(
            "SELECT MIN(position) AS first FROM {s}relay_audit WHERE kind = ? AND org = ?", (kind, org)
        )
        return None if row is None or row["first"] is None else int(row["first"])
