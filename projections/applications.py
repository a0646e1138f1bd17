"""The applications view: organizations, applications with their settings, and API keys as hashes."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from relay.events.application import DEFAULT_SETTINGS
from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import (
    AggregateEvent,
    ViewProjection,
    decoded,
    event_name,
    handles,
    iso,
    to_json,
)
from relay.wire.json_types import JSONObject


class _Named(AggregateEvent, Protocol):
    name: str  # Organization.Created


class _KeyRevoked(AggregateEvent, Protocol):
    key_name: str


class _KeyIssued(_KeyRevoked, Protocol):
    key_hash: str
    apps: list[str]
    permissions: list[str]


class _AppRegistered(_Named, Protocol):
    org: str


class _SettingsChanged(AggregateEvent, Protocol):
    changes: Mapping[str, object]


class _DataPlaneConfigured(AggregateEvent, Protocol):
    config: Mapping[str, object]


class _PolicySet(AggregateEvent, Protocol):
    policy: Mapping[str, object]

class ApplicationsSchema:
    name = "applications"
    tables = ("relay_orgs", "relay_apps", "relay_api_keys")
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_orgs (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
        "created_at TEXT)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_apps (id TEXT PRIMARY KEY, org TEXT NOT NULL, name TEXT NOT NULL, "
        "deleted INTEGER NOT NULL DEFAULT 0, settings TEXT NOT NULL, created_at TEXT, updated_at TEXT)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_api_keys (org TEXT NOT NULL, name TEXT NOT NULL, "
        "key_hash TEXT NOT NULL, apps TEXT NOT NULL, permissions TEXT NOT NULL, issued_at TEXT, "
        "revoked_at TEXT, PRIMARY KEY (org, name))"),
        "CREATE INDEX IF NOT EXISTS relay_api_keys_hash ON {s}relay_api_keys (key_hash)",
    )


class ApplicationsProjection(ViewProjection):
    schema = ApplicationsSchema()

    def __init__(self, view: ViewStore, cache: ApplicationsCache | None = None) -> None:
        super().__init__(view)
        self.cache = cache

    def committed(self, batch: list[tuple[Any, int]]) -> None:
        # After the commit, before the runner publishes the batch's position: a command that waited for the
        # views (a revoke, a delete) is seen by every read that follows it.
        if self.cache is not None and any(event_name(e) in self.handlers for e, _ in batch):
            self.cache.invalidate()

    def moved_elsewhere(self) -> None:
        if self.cache is not None:
            self.cache.invalidate()

    @handles("Organization.Created")
    def org_created(self, sql: Sql, e: _Named, _: int) -> None:
        sql.write(
            "INSERT INTO {s}relay_orgs (id, name, created_at) VALUES (?, ?, ?)",
            (str(e.originator_id), e.name, iso(e.at)),
        )

    def _org_name(self, sql: Sql, e: AggregateEvent) -> str:
        row = sql.one("SELECT name FROM {s}relay_orgs WHERE id = ?", (str(e.originator_id),))
        assert row is not None, "key event for an organization the view never saw"
        return str(row["name"])

    @handles("Organization.ApiKeyIssued")
    def key_issued(self, sql: Sql, e: _KeyIssued, _: int) -> None:
        sql.write(
            "INSERT INTO {s}relay_api_keys (org, name, key_hash, apps, permissions, issued_at, revoked_at) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (org, name) DO UPDATE SET key_hash = excluded.key_hash, "
            "apps = excluded.apps, permissions = excluded.permissions, issued_at = excluded.issued_at, "
            "revoked_at = NULL",
            (self._org_name(sql, e), e.key_name, e.key_hash, to_json(e.apps), to_json(e.permissions), iso(e.at)),
        )

    @handles("Organization.ApiKeyRevoked")
    def key_revoked(self, sql: Sql, e: _KeyRevoked, _: int) -> None:
        sql.write(
            "UPDATE {s}relay_api_keys SET revoked_at = ? WHERE org = ? AND name = ?",
            (iso(e.at), self._org_name(sql, e), e.key_name),
        )

    @handles("App.Registered")
    def app_registered(self, sql: Sql, e: _AppRegistered, _: int) -> None:
        at = iso(e.at)
        sql.write(
            "INSERT INTO {s}relay_apps (id, org, name, deleted, settings, created_at, updated_at) "
            "VALUES (?, ?, ?, 0, ?, ?, ?)",
            (str(e.originator_id), e.org, e.name, to_json(DEFAULT_SETTINGS), at, at),
        )

    @handles("App.Reregistered")
    def app_reregistered(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        sql.write(
            "UPDATE {s}relay_apps SET deleted = 0, settings = ?, updated_at = ? WHERE id = ?",
            (to_json(DEFAULT_SETTINGS), iso(e.at), str(e.originator_id)),
        )

    @handles("App.SettingsChanged")
    def settings_changed(self, sql: Sql, e: _SettingsChanged, _: int) -> None:
        self._merge_settings(sql, e, e.changes)

    # The data plane's settings (a reference to the system database URL, never the URL) ride in the settings
    # document under "dataPlane": the API's Application shows only Conductor's settings (web/api/views_to_api.py).
    @handles("App.DataPlaneConfigured")
    def data_plane_configured(self, sql: Sql, e: _DataPlaneConfigured, _: int) -> None:
        self._merge_settings(sql, e, {"dataPlane": dict(e.config)})

    @handles("App.DataPlaneRemoved")
    def data_plane_removed(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        self._merge_settings(sql, e, {"dataPlane": None})

    # The autoscaling policy (events/autoscaling.py) rides there too, under "autoscalingPolicy".
    @handles("App.AutoscalingPolicySet")
    def autoscaling_policy_set(self, sql: Sql, e: _PolicySet, _: int) -> None:
        self._merge_settings(sql, e, {"autoscalingPolicy": dict(e.policy)})

    @handles("App.AutoscalingPolicyCleared")
    def autoscaling_policy_cleared(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        self._merge_settings(sql, e, {"autoscalingPolicy": None})

    def _merge_settings(self, sql: Sql, e: AggregateEvent, changes: Mapping[str, object]) -> None:
        row = sql.one("SELECT settings FROM {s}relay_apps WHERE id = ?", (str(e.originator_id),))
        assert row is not None, f"{event_name(e)} for an application the view never saw"
        settings = json.loads(row["settings"])
        settings.update(changes)
        sql.write(
            "UPDATE {s}relay_apps SET settings = ?, updated_at = ? WHERE id = ?",
            (to_json(settings), iso(e.at), str(e.originator_id)),
        )

    @handles("App.Deleted")
    def app_deleted(self, sql: Sql, e: AggregateEvent, _: int) -> None:
        sql.write(
            "UPDATE {s}relay_apps SET deleted = 1, updated_at = ? WHERE id = ?", (iso(e.at), str(e.originator_id))
        )


def _app_row(row: Mapping[str, object]) -> dict[str, object]:
    return decoded(row, ("settings",), flags=("deleted",))


def _key_row(row: Mapping[str, object]) -> dict[str, object]:
    return decoded(row, ("apps", "permissions"))


# How long a reader waits for another's load of the snapshot before reading the database itself.
_LOAD_WAIT_S = 2.0


@dataclass(frozen=True)
class _Snapshot:
    orgs: frozenset[str]
    apps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # live (not deleted) apps
    keys: dict[str, dict[str, object]] = field(default_factory=dict)  # active (not revoked) keys by hash


class ApplicationsCache:
    """What every handshake and API call asks of the applications view (the org exists, the app exists,
    the key behind a hash), held in memory: a snapshot of the view's orgs, live apps and active keys.

    Kept correct by invalidation, never by guessing: the applications projection invalidates it when a batch
    it applied changed the view (after the commit, before the runner publishes the position, so a command
    that waited for the views is seen at once), and when the view is found at a position this process did
    not leave it at (an HA peer's projector applied events first, `relay replay` reset it): on a peer
    instance a change is seen once its runner next catches up (woken by its own appends, else within its
    poll interval). The next read loads a new snapshot. Only positive answers come from memory: a miss (an
    unknown key, app or org) reads the database, so something created on a peer is never refused here
    because this snapshot is older. Used only while a ProjectionRunner keeps it current (`enabled`)."""

    def __init__(self) -> None:
        self.enabled = False
        self._snapshot: _Snapshot | None = None
        self._generation = 0
        self._lock = threading.Lock()
        self._loading = threading.Lock()

    def invalidate(self) -> None:
        with self._lock:
            self._generation += 1
            self._snapshot = None

    def get(self, load: Callable[[], _Snapshot | None]) -> _Snapshot | None:
        """The current snapshot (loaded with `load()` if there is none); None when the cache is off, or when
        another caller's load takes too long (the caller then reads the database itself)."""
        if not self.enabled:
            return None
        snapshot = self._snapshot
        if snapshot is not None:
            return snapshot
        # One load at a time: after an invalidation a storm of handshakes would otherwise each read the
        # whole view at once, and exhaust the view store's pool.
        if not self._loading.acquire(timeout=_LOAD_WAIT_S):
            return None
        try:
            snapshot = self._snapshot
            if snapshot is not None:
                return snapshot
            generation = self._generation
            snapshot = load()
            with self._lock:
                if self._generation == generation:  # not invalidated while we read: keep it
                    self._snapshot = snapshot
            return snapshot
        finally:
            self._loading.release()


class ApplicationsQueries:
    def __init__(self, store: ViewStore, cache: ApplicationsCache | None = None) -> None:
        self.store = store
        self.cache = cache if cache is not None else ApplicationsCache()

    def _load(self) -> _Snapshot:
        with self.store.transaction(commit=False) as sql:
            orgs = sql.all("SELECT name FROM {s}relay_orgs")
            apps = sql.all("SELECT * FROM {s}relay_apps WHERE deleted = 0")
            keys = sql.all("SELECT * FROM {s}relay_api_keys WHERE revoked_at IS NULL")
        return _Snapshot(
            orgs=frozenset(str(r["name"]) for r in orgs),
            apps={(str(r["org"]), str(r["name"])): _app_row(r) for r in apps},
            keys={str(r["key_hash"]): _key_row(r) for r in keys},
        )

    def organization_exists(self, org: str) -> bool:
        snapshot = self.cache.get(self._load)
        if snapshot is not None and org in snapshot.orgs:
            return True
        with self.store.transaction(commit=False) as sql:
            return sql.one("SELECT 1 AS x FROM {s}relay_orgs WHERE name = ?", (org,)) is not None

    def apps(self, org: str) -> list[dict[str, Any]]:
        rows = self.store.all("SELECT * FROM {s}relay_apps WHERE org = ? AND deleted = 0 ORDER BY name", (org,))
        return [_app_row(r) for r in rows]

    def app(self, org: str, name: str) -> dict[str, Any] | None:
        snapshot = self.cache.get(self._load)
        if snapshot is not None and (row := snapshot.apps.get((org, name))) is not None:
            return copy.deepcopy(row)  # the caller's to change
        row = self.store.one("SELECT * FROM {s}relay_apps WHERE org = ? AND name = ? AND deleted = 0", (org, name))
        return _app_row(row) if row else None

    def app_exists(self, org: str, name: str) -> bool:
        """`app(org, name) is not None`, without copying the row (every API call asks it)."""
        snapshot = self.cache.get(self._load)
        if snapshot is not None and (org, name) in snapshot.apps:
            return True
        return self.app(org, name) is not None

    def app_setting(self, org: str, name: str, setting: str) -> Any:
        """A copy of one of the app's settings (None when unset or no such app): the whole row is not copied."""
        snapshot = self.cache.get(self._load)
        row = snapshot.apps.get((org, name)) if snapshot is not None else None
        if row is None:
            row = self.app(org, name)
        value = (row or {}).get("settings", {}).get(setting)
        return copy.deepcopy(value) if isinstance(value, dict | list) else value

    def key_by_hash(self, key_hash: str) -> JSONObject | None:
        """The active key with this hash (the caller's to change). The caller compares hashes again in
        constant time."""
        row = self.shared_key_by_hash(key_hash)
        return copy.deepcopy(row) if row is not None else None

    def shared_key_by_hash(self, key_hash: str) -> dict[str, Any] | None:
        """`key_by_hash`, not copied: the cached row itself when the snapshot has it (read it, never change it).
        The same object for as long as the snapshot lives, so a caller may memoize on its identity."""
        snapshot = self.cache.get(self._load)
        if snapshot is not None and (row := snapshot.keys.get(key_hash)) is not None:
            return row
        row = self.store.one(
            "SELECT * FROM {s}relay_api_keys WHERE key_hash = ? AND revoked_at IS NULL", (key_hash,)
        )
        return _key_row(row) if row else None

    def keys(self, org: str) -> list[dict[str, Any]]:
        rows = self.store.all("SELECT * FROM {s}relay_api_keys WHERE org = ? ORDER BY name", (org,))
        return [_key_row(r) for r in rows]
