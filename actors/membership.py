"""Recording who belongs where, in the instance actor (actors/instance.py): the changes that touch several
aggregates at once, each saved in ONE transaction through `RelayLog.run_together` (all or none; reloaded and
decided again on a concurrent append).

- registering a person: their User, their organization's OrganizationAccess (with the join secret used, if any)
  and, for a person who makes their own organization, its Organization;
- moving a person to another organization with a join secret: removed there, joined here;
- removing a member: removed, and every API key they issued in that organization revoked (a key's `by` is its
  creator's display name: a person's e-mail).

The use cases around them (who may, where a person lands) are actors/services/people.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from eventsourcing.domain import Aggregate

from relay.events.access import ORG_MEMBER, Member, OrganizationAccess
from relay.events.errors import AlreadyExistsError, ConflictError, InvalidValueError, NotFoundError
from relay.events.organization import Organization
from relay.events.refs import access_ref, org_ref, user_ref
from relay.events.user import User
from relay.projections.store.log import RelayLog


@dataclass(frozen=True)
class Registration:
    """A person registering (from their token and registerUser's body) and where they land: ``org`` as ``role``,
    ``via`` one of events/access.py VIA; ``new_org``: they make ``org`` (named after them); ``secret_hash``: the
    join secret they gave (checked by the organization)."""

    username: str
    email: str
    issuer: str
    subject: str
    org: str
    role: str
    via: str
    new_org: bool = False
    secret_hash: str | None = None
    given_name: str = ""
    family_name: str = ""
    company: str = ""


@dataclass
class Removal:
    """What removing a member did: the member as they were, and the keys of theirs that were revoked."""

    org: str
    user_id: str
    member: Member
    revoked_keys: list[str] = field(default_factory=list)


def register(relay_log: RelayLog, plan: Registration, at: datetime) -> str:
    """Record a registration; the new user's id. AlreadyExistsError when the person is registered, ConflictError
    when the organization they would make exists."""
    def decide() -> list[Aggregate]:
        if relay_log.get(user_ref(plan.issuer, plan.subject)) is not None:
            raise AlreadyExistsError("you are registered already (GET /v2/users/me shows your profile)")
        user = User.register(plan.username, plan.email, plan.issuer, plan.subject, at, given_name=plan.given_name,
                             family_name=plan.family_name, company=plan.company)
        changed: list[Aggregate] = [user]
        if plan.new_org:
            if relay_log.get(org_ref(plan.org)) is not None:
                raise ConflictError(f"an organization named '{plan.org}' exists already: register with another "
                                    "user name, or ask a member of that organization for a join secret")
            changed.append(Organization.create(plan.org, at))
        access = relay_log.get(access_ref(plan.org)) or OrganizationAccess.create(plan.org, at)
        if plan.secret_hash is not None:
            access.use_secret(plan.secret_hash, str(user.id), at)
        access.join(str(user.id), user.username, user.email, plan.role, plan.via, by=user.email, at=at)
        changed.append(access)
        return changed

    [user, *_] = relay_log.run_together(decide)
    return str(user.id)


def move(relay_log: RelayLog, user: User, to_org: str, secret_hash: str, from_org: str | None,
         at: datetime) -> Removal | None:
    """A registered person joins ``to_org`` with its join secret, as Organization Member, leaving ``from_org``
    (their keys there revoked) in the same transaction; what leaving did (None: they were in no organization)."""
    uid = str(user.id)
    removal: Removal | None = None

    def decide() -> list[Aggregate]:
        nonlocal removal
        target = relay_log.get(access_ref(to_org))
        if target is None or not target.secret_valid(secret_hash, at):
            raise InvalidValueError(f"the join secret is not valid for '{to_org}' (unknown or expired)")
        if from_org == to_org:
            raise ConflictError(f"you are a member of '{to_org}' already")
        changed: list[Aggregate] = []
        removal = None
        if from_org is not None:
            removal, left = _remove(relay_log, from_org, uid, by=user.email, at=at)
            changed.extend(left)
        target.use_secret(secret_hash, uid, at)
        target.join(uid, user.username, user.email, ORG_MEMBER, "secret", by=user.email, at=at)
        return [*changed, target]

    relay_log.run_together(decide)
    return removal


def remove_member(relay_log: RelayLog, org: str, username: str, by: str, at: datetime) -> Removal:
    """Remove ``username`` from ``org`` and revoke the keys they issued there, in one transaction."""
    removal: Removal | None = None

    def decide() -> list[Aggregate]:
        nonlocal removal
        access = relay_log.get(access_ref(org))
        uid = access.member_named(username) if access is not None else None
        if uid is None:
            raise NotFoundError(f"no member '{username}' in '{org}'")
        removal, changed = _remove(relay_log, org, uid, by=by, at=at)
        return changed

    relay_log.run_together(decide)
    assert removal is not None
    return removal


def _remove(relay_log: RelayLog, org: str, uid: str, by: str, at: datetime) -> tuple[Removal, list[Aggregate]]:
    access = relay_log.get(access_ref(org))
    if access is None:
        raise NotFoundError(f"no organization '{org}'")
    member = access.remove(uid, by=by, at=at)
    changed: list[Aggregate] = [access]
    organization = relay_log.get(org_ref(org))
    revoked = organization.active_keys_created_by(member["email"]) if organization is not None else []
    if organization is not None and revoked:
        for name in revoked:
            organization.revoke_key(name, at, by)
        changed.append(organization)
    return Removal(org, uid, member, revoked), changed
