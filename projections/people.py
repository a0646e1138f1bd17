"""The people view: registered persons, the organization each belongs to with their role, each organization's
custom roles, join secrets (hashes) and claimed e-mail domains, and its audit log retention.

Fed by User.*, OrganizationAccess.* and Organization.Created/RetentionChanged events. Read on every request of a
person (their principal is rebuilt from here: a removed member is refused from the next request on), by
actors/services/people.py, the API and the console.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypedDict

from relay.events.access import BUILT_IN_ROLES
from relay.projections.backend import Sql, ViewStore
from relay.projections.projector import AggregateEvent, ViewProjection, handles, iso, to_json


class UserRow(TypedDict):
    user_id: str
    username: str
    email: str
    issuer: str
    subject: str
    given_name: str
    family_name: str
    company: str
    registered_at: str  # ISO time


class MemberRow(TypedDict):
    """A member of an organization, with their profile (the reference's Member, and OrgMembers' entries)."""

    user_id: str
    org: str
    username: str
    email: str
    given_name: str
    family_name: str
    company: str
    role: str
    via: str  # how they joined: events/access.py VIA
    joined_at: str


class RoleRow(TypedDict):
    """The reference's RoleOutput: ``is_global`` for the built-in roles."""

    name: str
    permissions: list[str]
    is_global: bool


class ClaimRow(TypedDict):
    """The reference's DomainClaim. Self-hosted: a claim takes effect at once, so it is always "approved"."""

    domain: str
    org: str
    status: str
    requested_by: str
    requested_at: str


class Membership(NamedTuple):
    org: str
    role: str


class SecretOrg(NamedTuple):
    org: str
    expires_at: datetime


class _Registered(AggregateEvent, Protocol):
    username: str
    email: str
    issuer: str
    subject: str
    given_name: str
    family_name: str
    company: str


class _Named(AggregateEvent, Protocol):
    name: str  # Organization.Created


class _AccessCreated(AggregateEvent, Protocol):
    org: str


class _Joined(AggregateEvent, Protocol):
    user_id: str
    username: str
    email: str
    role: str
    via: str
    by: str


class _OfUser(AggregateEvent, Protocol):
    user_id: str  # MemberRemoved


class _Granted(_OfUser, Protocol):
    role: str


class _RoleCreated(AggregateEvent, Protocol):
    name: str
    permissions: list[str]
    by: str


class _SecretGenerated(AggregateEvent, Protocol):
    secret_hash: str
    expires_at: datetime
    by: str


class _SecretUsed(AggregateEvent, Protocol):
    secret_hash: str


class _Domain(AggregateEvent, Protocol):
    domain: str
    by: str


class _Retention(AggregateEvent, Protocol):
    audit_log_retention_days: int


class PeopleSchema:
    name = "people"
    tables = ("relay_users", "relay_access_orgs", "relay_members", "relay_roles", "relay_join_secrets",
              "relay_domain_claims", "relay_org_settings")
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_users ("
         "user_id TEXT PRIMARY KEY, username TEXT NOT NULL, email TEXT NOT NULL, issuer TEXT NOT NULL, "
         "subject TEXT NOT NULL, given_name TEXT NOT NULL, family_name TEXT NOT NULL, company TEXT NOT NULL, "
         "registered_at TEXT NOT NULL)"),
        "CREATE INDEX IF NOT EXISTS relay_users_username ON {s}relay_users (username)",
        "CREATE INDEX IF NOT EXISTS relay_users_email ON {s}relay_users (email)",
        "CREATE INDEX IF NOT EXISTS relay_users_subject ON {s}relay_users (issuer, subject)",
        # Which organization an OrganizationAccess aggregate is (only its Created names it).
        "CREATE TABLE IF NOT EXISTS {s}relay_access_orgs (id TEXT PRIMARY KEY, org TEXT NOT NULL)",
        ("CREATE TABLE IF NOT EXISTS {s}relay_members ("
         "org TEXT NOT NULL, user_id TEXT NOT NULL, username TEXT NOT NULL, email TEXT NOT NULL, "
         "role TEXT NOT NULL, via TEXT NOT NULL, added_by TEXT NOT NULL, joined_at TEXT NOT NULL, "
         "PRIMARY KEY (org, user_id))"),
        "CREATE INDEX IF NOT EXISTS relay_members_user ON {s}relay_members (user_id)",
        ("CREATE TABLE IF NOT EXISTS {s}relay_roles ("
         "org TEXT NOT NULL, name TEXT NOT NULL, permissions TEXT NOT NULL, created_by TEXT NOT NULL, "
         "created_at TEXT NOT NULL, PRIMARY KEY (org, name))"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_join_secrets ("
         "secret_hash TEXT NOT NULL, org TEXT NOT NULL, expires_at TEXT NOT NULL, created_by TEXT NOT NULL, "
         "created_at TEXT NOT NULL, uses INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (secret_hash, org))"),
        # One organization per domain (the service refuses a second claim); the key is wider so that a claim
        # two instances raced to record at once cannot stop this view.
        ("CREATE TABLE IF NOT EXISTS {s}relay_domain_claims ("
         "domain TEXT NOT NULL, org TEXT NOT NULL, requested_by TEXT NOT NULL, requested_at TEXT NOT NULL, "
         "PRIMARY KEY (domain, org))"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_org_settings ("
         "id TEXT PRIMARY KEY, org TEXT NOT NULL, audit_log_retention_days INTEGER)"),
    )


def _access_org(sql: Sql, e: AggregateEvent) -> str:
    row = sql.one("SELECT org FROM {s}relay_access_orgs WHERE id = ?", (str(e.originator_id),))
    assert row is not None, "an OrganizationAccess event before its Created"
    return str(row["org"])


class PeopleProjection(ViewProjection):
    schema = PeopleSchema()

    @handles("User.Registered")
    def registered(self, sql: Sql, e: _Registered, _: int) -> None:
        sql.insert("relay_users", {
            "user_id": str(e.originator_id), "username": e.username, "email": e.email, "issuer": e.issuer,
            "subject": e.subject, "given_name": e.given_name, "family_name": e.family_name, "company": e.company,
            "registered_at": iso(e.at),
        })

    @handles("Organization.Created")
    def organization_created(self, sql: Sql, e: _Named, _: int) -> None:
        sql.insert("relay_org_settings", {"id": str(e.originator_id), "org": e.name, "audit_log_retention_days": None})

    @handles("Organization.RetentionChanged")
    def retention_changed(self, sql: Sql, e: _Retention, _: int) -> None:
        sql.update("relay_org_settings", {"id": str(e.originator_id)},
                   {"audit_log_retention_days": e.audit_log_retention_days})

    @handles("OrganizationAccess.Created")
    def access_created(self, sql: Sql, e: _AccessCreated, _: int) -> None:
        sql.insert("relay_access_orgs", {"id": str(e.originator_id), "org": e.org})

    @handles("OrganizationAccess.MemberJoined")
    def member_joined(self, sql: Sql, e: _Joined, _: int) -> None:
        sql.insert("relay_members", {
            "org": _access_org(sql, e), "user_id": e.user_id, "username": e.username, "email": e.email,
            "role": e.role, "via": e.via, "added_by": e.by, "joined_at": iso(e.at),
        })

    @handles("OrganizationAccess.MemberRemoved")
    def member_removed(self, sql: Sql, e: _OfUser, _: int) -> None:
        sql.write("DELETE FROM {s}relay_members WHERE org = ? AND user_id = ?", (_access_org(sql, e), e.user_id))

    @handles("OrganizationAccess.RoleGranted")
    def role_granted(self, sql: Sql, e: _Granted, _: int) -> None:
        sql.update("relay_members", {"org": _access_org(sql, e), "user_id": e.user_id}, {"role": e.role})

    @handles("OrganizationAccess.RoleCreated")
    def role_created(self, sql: Sql, e: _RoleCreated, _: int) -> None:
        sql.insert("relay_roles", {"org": _access_org(sql, e), "name": e.name,
                                   "permissions": to_json(sorted(e.permissions)), "created_by": e.by,
                                   "created_at": iso(e.at)})

    @handles("OrganizationAccess.RoleDeleted")
    def role_deleted(self, sql: Sql, e: _Named, _: int) -> None:
        sql.write("DELETE FROM {s}relay_roles WHERE org = ? AND name = ?", (_access_org(sql, e), e.name))

    @handles("OrganizationAccess.SecretGenerated")
    def secret_generated(self, sql: Sql, e: _SecretGenerated, _: int) -> None:
        org = _access_org(sql, e)
        # As the aggregate does: expired secrets of this organization are forgotten when a new one is made.
        sql.write("DELETE FROM {s}relay_join_secrets WHERE org = ? AND expires_at <= ?", (org, iso(e.at)))
        sql.insert("relay_join_secrets", {"secret_hash": e.secret_hash, "org": org, "expires_at": iso(e.expires_at),
                                          "created_by": e.by, "created_at": iso(e.at), "uses": 0})

    @handles("OrganizationAccess.SecretUsed")
    def secret_used(self, sql: Sql, e: _SecretUsed, _: int) -> None:
        sql.write("UPDATE {s}relay_join_secrets SET uses = uses + 1 WHERE org = ? AND secret_hash = ?",
                  (_access_org(sql, e), e.secret_hash))

    @handles("OrganizationAccess.DomainClaimed")
    def domain_claimed(self, sql: Sql, e: _Domain, _: int) -> None:
        sql.insert("relay_domain_claims", {"domain": e.domain, "org": _access_org(sql, e), "requested_by": e.by,
                                           "requested_at": iso(e.at)})

    @handles("OrganizationAccess.DomainReleased")
    def domain_released(self, sql: Sql, e: _Domain, _: int) -> None:
        sql.write("DELETE FROM {s}relay_domain_claims WHERE domain = ? AND org = ?", (e.domain, _access_org(sql, e)))


def _role_row(name: str, permissions: list[str], is_global: bool) -> RoleRow:
    return {"name": name, "permissions": sorted(permissions), "is_global": is_global}


BUILT_IN_ROWS: dict[str, RoleRow] = {
    name: _role_row(name, list(permissions), True) for name, permissions in BUILT_IN_ROLES.items()
}

_MEMBER_COLUMNS = ("SELECT m.user_id, m.org, m.username, m.email, m.role, m.via, m.joined_at, "
                   "COALESCE(u.given_name, '') AS given_name, COALESCE(u.family_name, '') AS family_name, "
                   "COALESCE(u.company, '') AS company FROM {s}relay_members m "
                   "LEFT JOIN {s}relay_users u ON u.user_id = m.user_id")


def _member(row: dict[str, Any]) -> MemberRow:
    return {"user_id": row["user_id"], "org": row["org"], "username": row["username"], "email": row["email"],
            "given_name": row["given_name"], "family_name": row["family_name"], "company": row["company"],
            "role": row["role"], "via": row["via"], "joined_at": row["joined_at"]}


def _user(row: dict[str, Any] | None) -> UserRow | None:
    if row is None:
        return None
    return {"user_id": row["user_id"], "username": row["username"], "email": row["email"], "issuer": row["issuer"],
            "subject": row["subject"], "given_name": row["given_name"], "family_name": row["family_name"],
            "company": row["company"], "registered_at": row["registered_at"]}


class PeopleQueries:
    """Reads of the people view (``views.people``)."""

    def __init__(self, store: ViewStore) -> None:
        self.store = store

    # -- persons ------------------------------------------------------------------------------------------------------
    def user(self, user_id: str) -> UserRow | None:
        return _user(self.store.one("SELECT * FROM {s}relay_users WHERE user_id = ?", (user_id,)))

    def user_by_subject(self, issuer: str, subject: str) -> UserRow | None:
        return _user(self.store.one("SELECT * FROM {s}relay_users WHERE issuer = ? AND subject = ? "
                                    "ORDER BY registered_at LIMIT 1", (issuer, subject)))

    def user_by_name(self, username: str) -> UserRow | None:
        return _user(self.store.one("SELECT * FROM {s}relay_users WHERE username = ? ORDER BY registered_at LIMIT 1",
                                    (username,)))

    def user_by_email(self, email: str) -> UserRow | None:
        return _user(self.store.one("SELECT * FROM {s}relay_users WHERE email = ? ORDER BY registered_at LIMIT 1",
                                    (email.lower(),)))

    # -- memberships and roles ----------------------------------------------------------------------------------------
    def membership(self, user_id: str) -> Membership | None:
        """The organization a person belongs to and their role there; None: in no organization."""
        row = self.store.one("SELECT org, role FROM {s}relay_members WHERE user_id = ? ORDER BY joined_at DESC "
                             "LIMIT 1", (user_id,))
        return None if row is None else Membership(str(row["org"]), str(row["role"]))

    def members(self, org: str) -> list[MemberRow]:
        rows = self.store.all(_MEMBER_COLUMNS + " WHERE m.org = ? ORDER BY m.username", (org,))
        return [_member(row) for row in rows]

    def member(self, org: str, username: str) -> MemberRow | None:
        row = self.store.one(_MEMBER_COLUMNS + " WHERE m.org = ? AND m.username = ?", (org, username))
        return None if row is None else _member(row)

    def roles(self, org: str) -> dict[str, RoleRow]:
        """Every role of the organization by name: the built-in ones (global) first, then its own."""
        rows = self.store.all("SELECT name, permissions FROM {s}relay_roles WHERE org = ? ORDER BY name", (org,))
        own = {str(r["name"]): _role_row(str(r["name"]), json.loads(r["permissions"]), False) for r in rows}
        return {**BUILT_IN_ROWS, **own}

    def role_permissions(self, org: str, role: str) -> frozenset[str]:
        """The role's permissions in ``org`` (empty when it has no such role)."""
        if role in BUILT_IN_ROLES:
            return BUILT_IN_ROLES[role]
        row = self.store.one("SELECT permissions FROM {s}relay_roles WHERE org = ? AND name = ?", (org, role))
        return frozenset(json.loads(row["permissions"])) if row is not None else frozenset()

    # -- join secrets and domain claims -------------------------------------------------------------------------------
    def secret_org(self, secret_hash: str) -> SecretOrg | None:
        """The organization a join secret (by its hash) lets one join, and when it expires; None: unknown."""
        row = self.store.one("SELECT org, expires_at FROM {s}relay_join_secrets WHERE secret_hash = ? "
                             "ORDER BY expires_at DESC LIMIT 1", (secret_hash,))
        return None if row is None else SecretOrg(str(row["org"]), datetime.fromisoformat(str(row["expires_at"])))

    def claims(self, org: str) -> list[ClaimRow]:
        rows = self.store.all("SELECT * FROM {s}relay_domain_claims WHERE org = ? ORDER BY domain", (org,))
        return [{"domain": r["domain"], "org": r["org"], "status": "approved", "requested_by": r["requested_by"],
                 "requested_at": r["requested_at"]} for r in rows]

    def claim_org(self, domain: str) -> str | None:
        """The organization that claimed this e-mail domain (exactly: subdomains are claimed separately)."""
        row = self.store.one("SELECT org FROM {s}relay_domain_claims WHERE domain = ? ORDER BY requested_at LIMIT 1",
                             (domain.lower(),))
        return None if row is None else str(row["org"])

    # -- organizations ------------------------------------------------------------------------------------------------
    def retention_days(self, org: str) -> int | None:
        """The audit log retention updateOrg recorded (None: never set)."""
        row = self.store.one("SELECT audit_log_retention_days FROM {s}relay_org_settings WHERE org = ?", (org,))
        value = None if row is None else row["audit_log_retention_days"]
        return None if value is None else int(value)

