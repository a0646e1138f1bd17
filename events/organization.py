"""The Organization aggregate: an organization and the API keys issued in it (as hashes, never keys)."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from relay.events.errors import AlreadyExistsError, InvalidValueError, NotFoundError
from relay.events.ids import organization_id
from relay.events.names import check_org_name, check_token_name
from relay.events.versions import versioned

PERMISSIONS: tuple[str, ...] = (
    "application.read",
    "application.write",
    "metric.read",
    "token.read",
    "token.write",
    "websocket.connect",
    "organization.read",
    "organization.write",
)
# What a key gets when its creator names no permissions: everything an application's executors and tools need.
DEFAULT_KEY_PERMISSIONS: tuple[str, ...] = ("application.read", "application.write", "metric.read", "websocket.connect")


class ApiKey(TypedDict):
    """An API key as the organization holds it (its hash only, never the key)."""

    key_hash: str
    apps: list[str]
    permissions: list[str]
    issued_at: datetime
    revoked_at: datetime | None


# updateOrg's auditLogRetentionDays: what the reference allows.
MIN_RETENTION_DAYS, MAX_RETENTION_DAYS = 7, 3650


@versioned({"Created": 1, "ApiKeyIssued": 1, "ApiKeyRevoked": 1, "RetentionChanged": 1})
class Organization(Aggregate):
    """An organization. Its API keys are recorded by name with the SHA-256 hash of the key."""

    @staticmethod
    def create_id(name: str, at: datetime) -> UUID:
        return organization_id(name)

    @event("Created")
    def __init__(self, name: str, at: datetime) -> None:
        self.name = name
        self.created_at = at
        self.keys: dict[str, ApiKey] = {}
        self.key_creators: dict[str, str] = {}  # key name -> who issued it (`by`: a person's e-mail, "admin", ...)
        self.audit_log_retention_days: int | None = None  # None: kept for as long as Relay keeps it

    @classmethod
    def create(cls, name: str, at: datetime) -> Organization:
        return cls(name=check_org_name(name), at=at)

    def active_key(self, key_name: str) -> ApiKey | None:
        key = self.keys.get(key_name)
        return key if key is not None and key["revoked_at"] is None else None

    def issue_key(
        self, key_name: str, key_hash: str, apps: list[str], permissions: list[str], at: datetime, by: str = "relay"
    ) -> None:
        check_token_name(key_name)
        if self.active_key(key_name) is not None:
            raise AlreadyExistsError(f"an API key named '{key_name}' exists in '{self.name}'")
        unknown = sorted(set(permissions) - set(PERMISSIONS))
        if unknown:
            raise InvalidValueError(f"unknown permission(s): {', '.join(unknown)}")
        if len(key_hash) != 64:
            raise InvalidValueError("key_hash must be a SHA-256 hex digest")
        self._key_issued(
            key_name=key_name,
            key_hash=key_hash,
            apps=sorted(set(apps)),
            permissions=sorted(set(permissions)),
            at=at,
            by=by,
        )

    @event("ApiKeyIssued")
    def _key_issued(
        self, key_name: str, key_hash: str, apps: list[str], permissions: list[str], at: datetime, by: str
    ) -> None:
        self.keys[key_name] = {
            "key_hash": key_hash,
            "apps": apps,
            "permissions": permissions,
            "issued_at": at,
            "revoked_at": None,
        }
        self.key_creators[key_name] = by

    def active_keys_created_by(self, by: str) -> list[str]:
        """The names of the active keys ``by`` issued (a removed member's keys are revoked with them)."""
        return sorted(name for name, creator in self.key_creators.items()
                      if creator == by and self.active_key(name) is not None)

    def revoke_key(self, key_name: str, at: datetime, by: str = "relay") -> None:
        if self.active_key(key_name) is None:
            raise NotFoundError(f"no active API key named '{key_name}' in '{self.name}'")
        self._key_revoked(key_name=key_name, at=at, by=by)

    @event("ApiKeyRevoked")
    def _key_revoked(self, key_name: str, at: datetime, by: str) -> None:
        self.keys[key_name]["revoked_at"] = at

    def change_retention(self, days: int, at: datetime, by: str = "relay") -> bool:
        """Record the audit log's retention in days (updateOrg); False when it is that already (nothing recorded)."""
        if isinstance(days, bool) or not isinstance(days, int) or not MIN_RETENTION_DAYS <= days <= MAX_RETENTION_DAYS:
            raise InvalidValueError(f"auditLogRetentionDays must be a whole number of days from "
                                    f"{MIN_RETENTION_DAYS} to {MAX_RETENTION_DAYS}")
        if days == self.audit_log_retention_days:
            return False
        self._retention_changed(audit_log_retention_days=days, by=by, at=at)
        return True

    @event("RetentionChanged")
    def _retention_changed(self, audit_log_retention_days: int, by: str, at: datetime) -> None:
        self.audit_log_retention_days = audit_log_retention_days
