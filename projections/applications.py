"""The applications view: organizations, applications with their settings, and API keys as hashes."""

from __future__ import annotations

import json
from typing import Any

from events.app import DEFAULT_SETTINGS
from projections.backend import Sql, ViewStore
from projections.projector import Handler, ViewProjection, iso, to_json


class ApplicationsSchema:
    name = "applications"
    tables = ("relay_orgs", "relay_apps", "relay_api_keys")
    create_statements = (
        "CREATE TABLE IF NOT EXISTS {s}relay_orgs (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
        "created_at TEXT)",
        "CREATE TABLE IF NOT EXISTS {s}relay_apps (id TEXT PRIMARY KEY, org TEXT NOT NULL, name TEXT NOT NULL, "
        "deleted INTEGER NOT NULL DEFAULT 0, settings TEXT NOT NULL, created_at TEXT, updated_at TEXT)",
        "CREATE TABLE IF NOT EXISTS {s}relay_api_keys (org TEXT NOT NULL, name TEXT NOT NULL, "
        "key_hash TEXT NOT NULL, apps TEXT NOT NULL, permissions TEXT NOT NULL, issued_at TEXT, "
        "revoked_at TEXT, PRIMARY KEY (org, name))",
        "CREATE INDEX IF NOT EXISTS relay_api_keys_hash ON {s}relay_api_keys (key_hash)",
    )


class ApplicationsProjection(ViewProjection):
    schema = ApplicationsSchema()

    def build_handlers(self) -> dict[str, Handler]:
        return {
            "Organization.Created": self.org_created,
            "Organization.ApiKeyIssued": self.key_issued,
            "Organization.ApiKeyRevoked": self.key_revoked,
            "App.Registered": self.app_registered,
            "App.Reregistered": self.app_reregistered,
            "App.SettingsChanged": self.settings_changed,
            "App.Deleted": self.app_deleted,
        }

    def org_created(self, sql: Sql, e: Any, _: int) -> None:
        sql.execute(
            "INSERT INTO {s}relay_orgs (id, name, created_at) VALUES (?, ?, ?)",
            (str(e.originator_id), e.name, iso(e.at)),
        )

    def _org_name(self, sql: Sql, e: Any) -> str:
        row = sql.one("SELECT name FROM {s}relay_orgs WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "key event for an organization the view never saw"
        return str(row["name"])

    def key_issued(self, sql: Sql, e: Any, _: int) -> None:
        sql.execute(
            "INSERT INTO {s}relay_api_keys (org, name, key_hash, apps, permissions, issued_at, revoked_at) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (org, name) DO UPDATE SET key_hash = excluded.key_hash, "
            "apps = excluded.apps, permissions = excluded.permissions, issued_at = excluded.issued_at, "
            "revoked_at = NULL",
            (self._org_name(sql, e), e.key_name, e.key_hash, to_json(e.apps), to_json(e.permissions), iso(e.at)),
        )

    def key_revoked(self, sql: Sql, e: Any, _: int) -> None:
        sql.execute(
            "UPDATE {s}relay_api_keys SET revoked_at = ? WHERE org = ? AND name = ?",
            (iso(e.at), self._org_name(sql, e), e.key_name),
        )

    def app_registered(self, sql: Sql, e: Any, _: int) -> None:
        at = iso(e.at)
        sql.execute(
            "INSERT INTO {s}relay_apps (id, org, name, deleted, settings, created_at, updated_at) "
            "VALUES (?, ?, ?, 0, ?, ?, ?)",
            (str(e.originator_id), e.org, e.name, to_json(DEFAULT_SETTINGS), at, at),
        )

    def app_reregistered(self, sql: Sql, e: Any, _: int) -> None:
        sql.execute(
            "UPDATE {s}relay_apps SET deleted = 0, settings = ?, updated_at = ? WHERE id = ?",
            (to_json(DEFAULT_SETTINGS), iso(e.at), str(e.originator_id)),
        )

    def settings_changed(self, sql: Sql, e: Any, _: int) -> None:
        row = sql.one("SELECT settings FROM {s}relay_apps WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "SettingsChanged for an application the view never saw"
        settings = json.loads(row["settings"])
        settings.update(e.changes)
        sql.execute(
            "UPDATE {s}relay_apps SET settings = ?, updated_at = ? WHERE id = ?",
            (to_json(settings), iso(e.at), str(e.originator_id)),
        )

    def app_deleted(self, sql: Sql, e: Any, _: int) -> None:
        sql.execute(
            "UPDATE {s}relay_apps SET deleted = 1, updated_at = ? WHERE id = ?", (iso(e.at), str(e.originator_id))
        )


def _app_row(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["settings"] = json.loads(row["settings"])
    row["deleted"] = bool(row["deleted"])
    return row


def _key_row(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["apps"] = json.loads(row["apps"])
    row["permissions"] = json.loads(row["permissions"])
    return row


class ApplicationsQueries:
    def __init__(self, store: ViewStore) -> None:
        self.store = store

    def organization_exists(self, org: str) -> bool:
        with self.store.transaction(commit=False) as sql:
            return sql.one("SELECT 1 AS x FROM {s}relay_orgs WHERE name = ?", (org,)) is not None

    def apps(self, org: str) -> list[dict[str, Any]]:
        with self.store.transaction(commit=False) as sql:
            rows = sql.all("SELECT * FROM {s}relay_apps WHERE org = ? AND deleted = 0 ORDER BY name", (org,))
        return [_app_row(r) for r in rows]

    def app(self, org: str, name: str) -> dict[str, Any] | None:
        with self.store.transaction(commit=False) as sql:
            row = sql.one("SELECT * FROM {s}relay_apps WHERE org = ? AND name = ? AND deleted = 0", (org, name))
        return _app_row(row) if row else None

    def key_by_hash(self, key_hash: str) -> dict[str, Any] | None:
        """The active key with this hash. The caller compares hashes again in constant time."""
        with self.store.transaction(commit=False) as sql:
            row = sql.one(
                "SELECT * FROM {s}relay_api_keys WHERE key_hash = ? AND revoked_at IS NULL", (key_hash,)
            )
        return _key_row(row) if row else None

    def keys(self, org: str) -> list[dict[str, Any]]:
        with self.store.transaction(commit=False) as sql:
            rows = sql.all("SELECT * FROM {s}relay_api_keys WHERE org = ? ORDER BY name", (org,))
        return [_key_row(r) for r in rows]
