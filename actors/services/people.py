"""People: persons signed in through the identity provider, the organizations they belong to, their roles, join
secrets and claimed e-mail domains (the 16 operations Conductor has only with OAuth on, and the console's Members
& roles page).

Reads come from the people view (projections/people.py); every write is one command of the instance actor
(actors/instance.py, actors/membership.py) run by `run_command`, so the views have caught up when a method returns.
Who may call what is the caller's check (`Principal.allows`); ``by`` is the caller's display name, recorded with
each event. Domain errors only: NotFoundError, AlreadyExistsError, ConflictError, InvalidValueError,
TimedOutError.

Where a registering person lands (first match):
1. their e-mail is one of RELAY_OIDC_ADMIN_EMAILS (and not marked unverified): the default organization, as
   Organization Admin;
2. they give a join secret: its organization, as Organization Member;
3. their e-mail's exact domain is claimed (and the e-mail is not marked unverified): that organization, as
   Organization Member;
4. one of their groups (RELAY_OIDC_ROLES_CLAIM) maps to a role of the default organization (RELAY_OIDC_ROLE_MAP):
   the default organization, with that role;
5. else a new organization named after their user name, as its Organization Admin.
In the default organization (2 and 3), a role their groups map to replaces Organization Member.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.actors.membership import Registration
from relay.actors.services.commands import run_command
from relay.events.access import ORG_ADMIN, ORG_MEMBER
from relay.events.errors import AlreadyExistsError, ConflictError, InvalidValueError, NotFoundError
from relay.events.names import check_domain, check_org_name, check_user_name
from relay.events.user import email_domain, normal_email
from relay.projections.identity import Principal, hash_key, person_principal, unregistered_principal
from relay.projections.people import ClaimRow, MemberRow, RoleRow, UserRow

if TYPE_CHECKING:
    import pykka

    from relay.actors.adapters.oidc.verifier import VerifiedClaims
    from relay.actors.instance import InstanceActor
    from relay.actors.runtime import Runtime

SECRET_BYTES = 32  # a join secret's randomness (shown once, URL-safe base64)


@dataclass(frozen=True)
class Profile:
    """A registered person as getCurrentUser (UserProfile) and the console's user menu show them: ``org`` and
    ``role`` are None while they belong to no organization."""

    user: UserRow
    org: str | None
    role: RoleRow | None


@dataclass(frozen=True)
class _Landing:
    org: str
    role: str
    via: str
    new_org: bool = False
    secret_hash: str | None = None


class People:
    """The identity use cases over a started runtime."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.view = rt.views.people

    # -- who is calling -----------------------------------------------------------------------------------------------
    def sign_in(self, claims: VerifiedClaims) -> Principal:
        """The principal of a person whose token was checked: registered, their organization and role's
        permissions; else a principal with no organization and no permission (it may only register). No write."""
        user = self.view.user_by_subject(claims.issuer, claims.subject)
        if user is None:
            return unregistered_principal(claims.email, claims.subject)
        return person_principal(self.view, user)

    def principal_of(self, user_id: str) -> Principal | None:
        """A registered person's principal by user id (a console session keeps the id); None: no such person."""
        user = self.view.user(user_id)
        return None if user is None else person_principal(self.view, user)

    def profile(self, user_id: str) -> Profile | None:
        """The person, their organization and role (getCurrentUser, the user menu); None: not registered."""
        user = self.view.user(user_id)
        if user is None:
            return None
        membership = self.view.membership(user_id)
        if membership is None:
            return Profile(user, None, None)
        role = self.view.roles(membership.org).get(membership.role)
        return Profile(user, membership.org, role)

    # -- registering and joining --------------------------------------------------------------------------------------
    def register(self, claims: VerifiedClaims, username: str, secret: str | None = None,
                 given_name: str | None = None, family_name: str | None = None, company: str | None = None) -> str:
        """Register the token's person as ``username`` and place them (see the module's docstring); their user id.
        AlreadyExistsError (409) when they are registered; ConflictError (409) when the user name or the e-mail is
        taken, or the organization they would make exists; InvalidValueError for a bad name, no e-mail in the
        token, an unknown or expired join secret."""
        check_user_name(username)
        email = normal_email(claims.email)
        if self.view.user_by_subject(claims.issuer, claims.subject) is not None:
            raise AlreadyExistsError("you are registered already (GET /v2/users/me shows your profile)")
        if self.view.user_by_name(username) is not None:
            raise ConflictError(f"the user name '{username}' is taken: choose another")
        if self.view.user_by_email(email) is not None:
            raise ConflictError(f"a person with the e-mail address {email} is registered already")
        landing = self._landing(claims, email, username, secret)
        plan = Registration(
            username=username, email=email, issuer=claims.issuer, subject=claims.subject, org=landing.org,
            role=landing.role, via=landing.via, new_org=landing.new_org, secret_hash=landing.secret_hash,
            given_name=given_name or claims.given_name or "", family_name=family_name or claims.family_name or "",
            company=company or "",
        )
        instance = self._instance()
        return str(run_command(self.rt, lambda: instance.proxy().register_person(plan)))

    def _landing(self, claims: VerifiedClaims, email: str, username: str, secret: str | None) -> _Landing:
        settings = self.rt.settings
        default_org = settings.default_org
        trusted = claims.email_verified is not False
        mapped = self._mapped_role(claims.groups, default_org)
        if trusted and email in settings.oidc_admin_emails:
            return _Landing(default_org, ORG_ADMIN, "admin_emails")
        if secret:
            secret_hash = hash_key(secret)
            found = self.view.secret_org(secret_hash)
            if found is None or found.expires_at <= self.rt.ctx.clock():
                raise InvalidValueError("the join secret is not valid (unknown or expired)")
            role = mapped if found.org == default_org and mapped else ORG_MEMBER
            return _Landing(found.org, role, "secret", secret_hash=secret_hash)
        claimed = self.view.claim_org(email_domain(email)) if trusted else None
        if claimed is not None:
            return _Landing(claimed, mapped if claimed == default_org and mapped else ORG_MEMBER, "domain")
        if mapped is not None:
            return _Landing(default_org, mapped, "roles_claim")
        if self.rt.views.applications.organization_exists(username):
            raise ConflictError(f"an organization named '{username}' exists already: register with another user "
                                "name, or ask a member of that organization for a join secret")
        return _Landing(username, ORG_ADMIN, "register", new_org=True)

    def _mapped_role(self, groups: tuple[str, ...], org: str) -> str | None:
        """The role the first of ``groups`` that RELAY_OIDC_ROLE_MAP names maps to, if ``org`` has that role."""
        role_map = self.rt.settings.oidc_role_map
        roles = self.view.roles(org)
        return next((role_map[g] for g in groups if g in role_map and role_map[g] in roles), None)

    def join(self, principal: Principal, org: str, secret: str) -> None:
        """A registered person joins ``org`` with one of its join secrets, as Organization Member. One who belongs
        to another organization leaves it in the same transaction (their keys there revoked, as for a removed
        member; the last Organization Admin of it may not leave: ConflictError)."""
        if principal.user_id is None:
            raise NotFoundError("not registered: register first (POST /v2/users)")
        self._organization(org)
        if not secret:
            raise InvalidValueError("the join secret is not valid (unknown or expired)")
        user_id, secret_hash = principal.user_id, hash_key(secret)
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().join_organization(user_id, org, secret_hash))

    def generate_secret(self, org: str, by: str) -> str:
        """A new join secret of ``org``: returned once, stored as its SHA-256 hash; anyone who has it may join
        ``org`` (any number of times) for 7 days."""
        self._organization(org)
        secret = secrets.token_urlsafe(SECRET_BYTES)
        secret_hash = hash_key(secret)
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().generate_secret(org, secret_hash, by))
        return secret

    # -- members and roles --------------------------------------------------------------------------------------------
    def members(self, org: str) -> list[MemberRow]:
        self._organization(org)
        return self.view.members(org)

    def remove_member(self, org: str, username: str, by: str) -> MemberRow:
        """Remove a member; the member as they were. The API keys they issued in ``org`` are revoked in the same
        transaction and those keys' executor sockets closed; their sessions and tokens get no permission from the
        next request on. ConflictError for the last Organization Admin."""
        self._organization(org)
        member = self.view.member(org, username)
        if member is None:
            raise NotFoundError(f"no member '{username}' in '{org}'")
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().remove_member(org, username, by))
        return member

    def grant(self, org: str, username: str, role: str, by: str) -> None:
        """Give a member ``role`` instead of theirs (ConflictError: demoting the last Organization Admin)."""
        self._organization(org)
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().grant_role(org, username, role, by))

    def roles(self, org: str) -> list[RoleRow]:
        """The built-in roles, then the organization's own, by name."""
        self._organization(org)
        return list(self.view.roles(org).values())

    def create_role(self, org: str, name: str, permissions: list[str] | None, by: str) -> RoleRow:
        self._organization(org)
        wanted = list(permissions or [])
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().create_role(org, name, wanted, by))
        return self.view.roles(org)[name]

    def delete_role(self, org: str, name: str, by: str) -> None:
        """ConflictError for a built-in role and for a role a member holds."""
        self._organization(org)
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().delete_role(org, name, by))

    # -- domain claims ------------------------------------------------------------------------------------------------
    def claims(self, org: str) -> list[ClaimRow]:
        self._organization(org)
        return self.view.claims(org)

    def claim_domain(self, org: str, domain: str, by: str) -> ClaimRow:
        """Claim an e-mail domain (exactly: subdomains are claimed separately); it takes effect at once (a
        self-hosted Relay has no one to approve it). ConflictError when another organization holds it."""
        self._organization(org)
        domain = check_domain(domain)
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().claim_domain(org, domain, by))
        return next(c for c in self.view.claims(org) if c["domain"] == domain)

    def release_domain(self, org: str, domain: str, by: str) -> None:
        self._organization(org)
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().release_domain(org, domain.lower(), by))

    # -- the organization ---------------------------------------------------------------------------------------------
    def update_org(self, org: str, retention_days: int | None, new_name: str | None, by: str) -> None:
        """updateOrg: records the audit log retention (7-3650 days). A new name is refused (ConflictError), and
        nothing recorded: Relay names the organization in every application's id, key and event."""
        self._organization(org)
        if new_name is not None and new_name != org:
            check_org_name(new_name)
            raise ConflictError(f"Relay cannot rename an organization: '{org}' is part of the identity of every "
                                "application, key and record in it (newName is not supported)")
        if retention_days is not None:
            days = retention_days
            instance = self._instance()
            run_command(self.rt, lambda: instance.proxy().change_retention(org, days, by))

    def retention_days(self, org: str) -> int | None:
        """The audit log retention updateOrg recorded (None: never set)."""
        return self.view.retention_days(org)

    # -- helpers ------------------------------------------------------------------------------------------------------
    def _organization(self, org: str) -> None:
        if not self.rt.views.applications.organization_exists(org):
            raise NotFoundError(f"no organization '{org}'")

    def _instance(self) -> pykka.ActorRef[InstanceActor]:
        instance = self.rt.instance
        assert instance is not None  # the runtime is started before any request
        return instance
