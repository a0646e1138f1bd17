"""Who a token stands for: the admin token or a `dbos_` API key (stored as SHA-256 hashes), read from the
applications view. One check for the API, the console and the executors' WebSocket keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from relay.events.organization import PERMISSIONS
from relay.projections.applications import ApplicationsQueries
from relay.projections.people import PeopleQueries, UserRow
from relay.wire.json_types import JSONObject

KEY_PREFIX = "dbos_"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: the admin (every permission, every org), one API key, or a person signed in with the
    identity provider (``person``: their e-mail; ``user_id`` and ``role`` once registered in an organization;
    an unregistered person, or one in no organization, has no org and no permission)."""

    admin: bool
    org: str | None = None
    key_name: str | None = None
    apps: tuple[str, ...] = ()
    permissions: frozenset[str] = field(default_factory=frozenset)
    person: str | None = None
    user_id: str | None = None
    role: str | None = None

    @property
    def display(self) -> str:
        """Who the audit trail names, and a key's `by`: "admin", "api_key:<name>", or the person's e-mail."""
        if self.person is not None:
            return self.person
        return "admin" if self.admin else f"api_key:{self.key_name}"

    def allows(self, permission: str, org: str, app: str | None = None) -> bool:
        if self.admin:
            return True
        if org != self.org or permission not in self.permissions:
            return False
        return app is None or not self.apps or app in self.apps

    # A key limited to some applications holds its org-level permissions for those applications only (issue 34,
    # docs/adr/0012): org-level routes show it the rows of its applications, and what belongs to no application
    # (org-wide entries, Relay's instances) not at all.
    @property
    def app_scoped(self) -> bool:
        return not self.admin and bool(self.apps)

    def sees_app(self, app: str | None) -> bool:
        """Whether an org-level listing shows this principal a row of `app` (None: a row of no application)."""
        return not self.app_scoped or (app is not None and app in self.apps)

    def covers(self, apps: list[str] | tuple[str, ...]) -> bool:
        """Whether a key limited to `apps` (empty: every application) is within this principal's scope: what it
        may list, revoke or issue."""
        return not self.app_scoped or (bool(apps) and set(apps) <= set(self.apps))


ADMIN = Principal(admin=True, permissions=frozenset(PERMISSIONS))


def person_principal(people: PeopleQueries, user: UserRow) -> Principal:
    """A registered person's principal, from the people view as it is now: their organization and their role's
    permissions there (none while they belong to no organization). Rebuilt for every request, so a member removed
    or given another role is treated so from their next request on."""
    membership = people.membership(user["user_id"])
    if membership is None:
        return Principal(admin=False, person=user["email"], user_id=user["user_id"])
    return Principal(admin=False, org=membership.org, permissions=people.role_permissions(*membership),
                     person=user["email"], user_id=user["user_id"], role=membership.role)


def unregistered_principal(email: str | None, subject: str) -> Principal:
    """A person the identity provider vouches for who has not registered (registerUser is what they may do):
    no organization, no permission. Named by their e-mail, else by their subject."""
    return Principal(admin=False, person=(email or "").strip().lower() or f"sub:{subject}")


_MAX_PRINCIPALS = 10_000


class Authenticator:
    """The one token -> principal check, for the API (bearer tokens), the console (the session keeps the
    token's hash) and the executors' WebSocket keys."""

    def __init__(self, admin_token: str, applications: ApplicationsQueries) -> None:
        self._admin_hash = hash_key(admin_token)
        self.applications = applications
        # An API key's principal, by hash, with the cached row it was made from: valid while the applications
        # snapshot still holds that very row (a revoke or re-issue replaces the snapshot, and the row with it).
        self._principals: dict[str, tuple[JSONObject, Principal]] = {}

    def principal_for(self, token: str) -> Principal | None:
        """The principal a token stands for, or None. Comparisons are constant-time on hashes."""
        if not token:
            return None
        token_hash = hash_key(token)
        if not token.startswith(KEY_PREFIX) and not hmac.compare_digest(token_hash, self._admin_hash):
            return None
        return self.principal_for_hash(token_hash)

    def principal_for_hash(self, token_hash: str) -> Principal | None:
        """The principal of a token known by its hash (a console session keeps only the hash)."""
        if hmac.compare_digest(token_hash, self._admin_hash):
            return ADMIN
        row = self.applications.shared_key_by_hash(token_hash)
        if row is None or not hmac.compare_digest(str(row["key_hash"]), token_hash):
            return None
        known = self._principals.get(token_hash)
        if known is not None and known[0] is row:
            return known[1]
        principal = Principal(
            admin=False,
            org=row["org"],
            key_name=row["name"],
            apps=tuple(row["apps"]),
            permissions=frozenset(row["permissions"]),
        )
        if len(self._principals) >= _MAX_PRINCIPALS:
            self._principals.clear()
        self._principals[token_hash] = (row, principal)
        return principal
