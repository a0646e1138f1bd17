"""The OrganizationAccess aggregate: who belongs to an organization and what they may do there.

One per organization (events/ids.py `organization_access_id`): its members (by user id, with the role each
holds), its custom roles, its join secrets (SHA-256 hashes only: the secret is shown once to whoever generated
it) and its claimed e-mail domains. The built-in roles are global (every organization has them, none can be
deleted). A person belongs to one organization at most: moving them is the caller's two commands, on two of
these aggregates, saved together. Pure: `at` comes in.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypedDict
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from relay.events.errors import AlreadyExistsError, ConflictError, InvalidValueError, NotFoundError
from relay.events.ids import organization_access_id
from relay.events.names import check_domain, check_org_name, check_role_name
from relay.events.organization import PERMISSIONS
from relay.events.versions import versioned

ORG_ADMIN = "Organization Admin"
ORG_MEMBER = "Organization Member"
# The global roles: every organization has them and none can be deleted.
BUILT_IN_ROLES: dict[str, frozenset[str]] = {
    ORG_ADMIN: frozenset(PERMISSIONS),
    ORG_MEMBER: frozenset(p for p in PERMISSIONS if p != "organization.write"),
}
# How a person came to be a member: registered and made the organization ("register"), with a join secret, through
# a claimed e-mail domain, as one of RELAY_OIDC_ADMIN_EMAILS, through their identity provider's groups claim.
VIA = ("register", "secret", "domain", "admin_emails", "roles_claim")
# A join secret may be used by anyone who has it, any number of times, until it expires.
SECRET_LIFETIME = timedelta(days=7)


class Member(TypedDict):
    username: str
    email: str
    role: str
    via: str
    joined_at: datetime


class JoinSecret(TypedDict):
    expires_at: datetime
    by: str


class DomainClaim(TypedDict):
    by: str
    at: datetime


@versioned({"Created": 1, "MemberJoined": 1, "MemberRemoved": 1, "RoleGranted": 1, "RoleCreated": 1,
            "RoleDeleted": 1, "SecretGenerated": 1, "SecretUsed": 1, "DomainClaimed": 1, "DomainReleased": 1})
class OrganizationAccess(Aggregate):
    """An organization's members, custom roles, join secrets and domain claims."""

    @staticmethod
    def create_id(org: str, at: datetime) -> UUID:
        return organization_access_id(org)

    @event("Created")
    def __init__(self, org: str, at: datetime) -> None:
        self.org = org
        self.members: dict[str, Member] = {}
        self.roles: dict[str, list[str]] = {}  # custom roles: name -> permissions
        self.secrets: dict[str, JoinSecret] = {}  # by SHA-256 hash; expired ones dropped when a new one is made
        self.claims: dict[str, DomainClaim] = {}

    @classmethod
    def create(cls, org: str, at: datetime) -> OrganizationAccess:
        return cls(org=check_org_name(org), at=at)

    # -- reads --------------------------------------------------------------------------------------------------------
    def permissions_of(self, role: str) -> frozenset[str] | None:
        """The role's permissions; None when the organization has no such role."""
        if role in BUILT_IN_ROLES:
            return BUILT_IN_ROLES[role]
        custom = self.roles.get(role)
        return frozenset(custom) if custom is not None else None

    def member_named(self, username: str) -> str | None:
        """The user id of the member called ``username``, if any."""
        return next((uid for uid, m in self.members.items() if m["username"] == username), None)

    def admins(self) -> list[str]:
        return sorted(uid for uid, m in self.members.items() if m["role"] == ORG_ADMIN)

    def secret_valid(self, secret_hash: str, at: datetime) -> bool:
        secret = self.secrets.get(secret_hash)
        return secret is not None and at < secret["expires_at"]

    def _the_member(self, user_id: str) -> Member:
        member = self.members.get(user_id)
        if member is None:
            raise NotFoundError(f"no such member of '{self.org}'")
        return member

    def _check_role(self, role: str) -> None:
        if self.permissions_of(role) is None:
            raise NotFoundError(f"no role '{role}' in '{self.org}'")

    def _check_not_last_admin(self, user_id: str, what: str) -> None:
        if self.admins() == [user_id]:
            raise ConflictError(f"{self.members[user_id]['username']} is the last Organization Admin of "
                                f"'{self.org}': {what}; make another member Organization Admin first")

    # -- members ------------------------------------------------------------------------------------------------------
    def join(self, user_id: str, username: str, email: str, role: str, via: str, by: str, at: datetime) -> None:
        if user_id in self.members:
            raise ConflictError(f"{username} is a member of '{self.org}' already")
        self._check_role(role)
        if via not in VIA:
            raise InvalidValueError(f"unknown way of joining: {via}")
        self._member_joined(user_id=user_id, username=username, email=email, role=role, via=via, by=by, at=at)

    @event("MemberJoined")
    def _member_joined(self, user_id: str, username: str, email: str, role: str, via: str, by: str,
                       at: datetime) -> None:
        self.members[user_id] = {"username": username, "email": email, "role": role, "via": via, "joined_at": at}

    def remove(self, user_id: str, by: str, at: datetime) -> Member:
        """Remove a member (who leaves with them: the caller revokes their keys); the member as they were."""
        member = self._the_member(user_id)
        self._check_not_last_admin(user_id, "they cannot leave or be removed")
        self._member_removed(user_id=user_id, by=by, at=at)
        return member

    @event("MemberRemoved")
    def _member_removed(self, user_id: str, by: str, at: datetime) -> None:
        self.members.pop(user_id, None)

    def grant(self, user_id: str, role: str, by: str, at: datetime) -> bool:
        """Give a member ``role`` (instead of the one they hold); False when they hold it already (nothing
        recorded)."""
        member = self._the_member(user_id)
        self._check_role(role)
        if member["role"] == role:
            return False
        if member["role"] == ORG_ADMIN:
            self._check_not_last_admin(user_id, "they cannot be given another role")
        self._role_granted(user_id=user_id, role=role, by=by, at=at)
        return True

    @event("RoleGranted")
    def _role_granted(self, user_id: str, role: str, by: str, at: datetime) -> None:
        self.members[user_id]["role"] = role

    # -- custom roles -------------------------------------------------------------------------------------------------
    def create_role(self, name: str, permissions: list[str], by: str, at: datetime) -> None:
        check_role_name(name)
        if name in self.roles or name in BUILT_IN_ROLES:
            raise AlreadyExistsError(f"a role named '{name}' exists in '{self.org}'")
        unknown = sorted(set(permissions) - set(PERMISSIONS))
        if unknown:
            raise InvalidValueError(f"unknown permission(s): {', '.join(unknown)}")
        self._role_created(name=name, permissions=sorted(set(permissions)), by=by, at=at)

    @event("RoleCreated")
    def _role_created(self, name: str, permissions: list[str], by: str, at: datetime) -> None:
        self.roles[name] = permissions

    def delete_role(self, name: str, by: str, at: datetime) -> None:
        if name in BUILT_IN_ROLES:
            raise ConflictError(f"'{name}' is a built-in role: it cannot be deleted")
        if name not in self.roles:
            raise NotFoundError(f"no role '{name}' in '{self.org}'")
        holders = sorted(m["username"] for m in self.members.values() if m["role"] == name)
        if holders:
            raise ConflictError(f"role '{name}' is held by {len(holders)} member(s) ({', '.join(holders[:5])}): "
                                "give them another role first")
        self._role_deleted(name=name, by=by, at=at)

    @event("RoleDeleted")
    def _role_deleted(self, name: str, by: str, at: datetime) -> None:
        self.roles.pop(name, None)

    # -- join secrets -------------------------------------------------------------------------------------------------
    def generate_secret(self, secret_hash: str, by: str, at: datetime) -> datetime:
        """Record a new join secret by its hash; when it expires."""
        if len(secret_hash) != 64:
            raise InvalidValueError("secret_hash must be a SHA-256 hex digest")
        if secret_hash in self.secrets:
            raise AlreadyExistsError("that join secret exists already")
        expires_at = at + SECRET_LIFETIME
        self._secret_generated(secret_hash=secret_hash, expires_at=expires_at, by=by, at=at)
        return expires_at

    @event("SecretGenerated")
    def _secret_generated(self, secret_hash: str, expires_at: datetime, by: str, at: datetime) -> None:
        # Expired secrets can never be used again: forget them, so the state stays small.
        self.secrets = {h: s for h, s in self.secrets.items() if at < s["expires_at"]}
        self.secrets[secret_hash] = {"expires_at": expires_at, "by": by}

    def use_secret(self, secret_hash: str, user_id: str, at: datetime) -> None:
        if not self.secret_valid(secret_hash, at):
            raise InvalidValueError(f"the join secret is not valid for '{self.org}' (unknown or expired)")
        self._secret_used(secret_hash=secret_hash, user_id=user_id, at=at)

    @event("SecretUsed")
    def _secret_used(self, secret_hash: str, user_id: str, at: datetime) -> None:
        """A record of who joined with which secret; the secret stays usable until it expires."""

    # -- domain claims ------------------------------------------------------------------------------------------------
    def claim_domain(self, domain: str, by: str, at: datetime) -> str:
        """Claim an e-mail domain (checked and lower-cased; returned); it takes effect at once (self-hosted)."""
        domain = check_domain(domain)
        if domain in self.claims:
            raise AlreadyExistsError(f"'{self.org}' has claimed {domain} already")
        self._domain_claimed(domain=domain, by=by, at=at)
        return domain

    @event("DomainClaimed")
    def _domain_claimed(self, domain: str, by: str, at: datetime) -> None:
        self.claims[domain] = {"by": by, "at": at}

    def release_domain(self, domain: str, by: str, at: datetime) -> None:
        domain = domain.lower()
        if domain not in self.claims:
            raise NotFoundError(f"'{self.org}' has no claim on {domain}")
        self._domain_released(domain=domain, by=by, at=at)

    @event("DomainReleased")
    def _domain_released(self, domain: str, by: str, at: datetime) -> None:
        self.claims.pop(domain, None)
