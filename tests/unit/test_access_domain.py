"""The identity aggregates, pure: User (registration, its checks), OrganizationAccess (members, the last
Organization Admin, custom and built-in roles, join secrets that expire, domain claims), Organization's
RetentionChanged and the keys it knows by creator; the events carry hashes, never a secret; rebuilt from a log."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from relay.events.access import (
    BUILT_IN_ROLES,
    ORG_ADMIN,
    ORG_MEMBER,
    SECRET_LIFETIME,
    OrganizationAccess,
)
from relay.events.errors import AlreadyExistsError, ConflictError, InvalidValueError, NotFoundError
from relay.events.ids import organization_access_id, user_id
from relay.events.names import check_domain, check_role_name, check_user_name
from relay.events.organization import PERMISSIONS, Organization
from relay.events.user import User
from relay.projections.store.log import RelayLog

T0 = datetime(2026, 1, 5, 9, 0, 0, tzinfo=UTC)
SECRET = hashlib.sha256(b"join me").hexdigest()
KEY = hashlib.sha256(b"dbos_key").hexdigest()


def access(*members: tuple[str, str, str]) -> OrganizationAccess:
    """An organization "acme" with members (user id, username, role)."""
    a = OrganizationAccess.create("acme", T0)
    for uid, name, role in members:
        a.join(uid, name, f"{name}@acme.example", role, "register", "test", T0)
    a.collect_events()
    return a


def names(aggregate: OrganizationAccess | Organization | User) -> list[str]:
    return [type(e).__name__ for e in aggregate.collect_events()]


def test_built_in_roles_are_every_permission_and_all_but_organization_write() -> None:
    assert BUILT_IN_ROLES[ORG_ADMIN] == frozenset(PERMISSIONS)
    assert BUILT_IN_ROLES[ORG_MEMBER] == frozenset(PERMISSIONS) - {"organization.write"}


def test_a_user_is_registered_once_by_issuer_and_subject_with_a_lower_cased_email() -> None:
    user = User.register("ann_1", "Ann@Acme.Example", "https://idp", "sub-1", T0, given_name="Ann")
    assert user.id == user_id("https://idp", "sub-1") != user_id("https://other-idp", "sub-1")
    assert (user.username, user.email, user.given_name, user.registered_at) == ("ann_1", "ann@acme.example", "Ann", T0)
    assert names(user) == ["Registered"]
    with pytest.raises(InvalidValueError, match="user name"):
        User.register("Ann", "ann@acme.example", "https://idp", "sub-1", T0)
    with pytest.raises(InvalidValueError, match="e-mail"):
        User.register("ann", None, "https://idp", "sub-1", T0)
    with pytest.raises(InvalidValueError, match="e-mail"):
        User.register("ann", "not-an-address", "https://idp", "sub-1", T0)
    with pytest.raises(InvalidValueError, match="givenName"):
        User.register("ann", "ann@acme.example", "https://idp", "sub-1", T0, given_name="x" * 201)


@pytest.mark.parametrize(("check", "good", "bad"), [
    (check_user_name, ["ann", "a_1" * 10], ["an", "Ann", "a-b", "a" * 31]),
    (check_role_name, ["viewer", "Ops_Team"], ["ab", "Organization Admin", "a-b", "a" * 31]),
])
def test_name_rules(check, good, bad) -> None:
    for name in good:
        assert check(name) == name
    for name in bad:
        with pytest.raises(InvalidValueError):
            check(name)


def test_domains_are_checked_and_lower_cased() -> None:
    assert check_domain("Example.COM") == "example.com"
    for bad in ("a.b", "localhost", "exa mple.com", "-x.com", "x@y.com", "x" * 250 + ".com"):
        with pytest.raises(InvalidValueError):
            check_domain(bad)


def test_members_join_once_with_a_role_the_organization_has() -> None:
    a = access()
    assert a.id == organization_access_id("acme")
    a.join("u1", "ann", "ann@acme.example", ORG_ADMIN, "register", "ann@acme.example", T0)
    assert names(a) == ["MemberJoined"]
    assert a.members["u1"]["role"] == ORG_ADMIN and a.member_named("ann") == "u1"
    with pytest.raises(ConflictError, match="member of 'acme' already"):
        a.join("u1", "ann", "ann@acme.example", ORG_MEMBER, "secret", "x", T0)
    with pytest.raises(NotFoundError, match="no role 'boss'"):
        a.join("u2", "bob", "bob@acme.example", "boss", "secret", "x", T0)
    with pytest.raises(InvalidValueError):
        a.join("u2", "bob", "bob@acme.example", ORG_MEMBER, "magic", "x", T0)
    assert names(a) == []


def test_the_last_organization_admin_can_be_neither_removed_nor_demoted() -> None:
    a = access(("u1", "ann", ORG_ADMIN), ("u2", "bob", ORG_MEMBER))
    with pytest.raises(ConflictError, match="last Organization Admin"):
        a.remove("u1", "ann", T0)
    with pytest.raises(ConflictError, match="last Organization Admin"):
        a.grant("u1", ORG_MEMBER, "ann", T0)
    assert names(a) == []
    assert a.grant("u2", ORG_ADMIN, "ann", T0) is True
    assert a.grant("u2", ORG_ADMIN, "ann", T0) is False  # holds it already: nothing recorded
    assert a.grant("u1", ORG_MEMBER, "bob", T0) is True  # another admin now
    removed = a.remove("u1", "bob", T0)
    assert removed["username"] == "ann" and "u1" not in a.members
    assert names(a) == ["RoleGranted", "RoleGranted", "MemberRemoved"]
    with pytest.raises(NotFoundError):
        a.remove("u1", "bob", T0)


def test_custom_roles_from_the_permission_list_deleted_only_when_unused() -> None:
    a = access(("u1", "ann", ORG_ADMIN), ("u2", "bob", ORG_MEMBER))
    a.create_role("viewer", ["application.read", "metric.read", "application.read"], "ann", T0)
    assert a.roles["viewer"] == ["application.read", "metric.read"]
    assert a.permissions_of("viewer") == {"application.read", "metric.read"}
    with pytest.raises(AlreadyExistsError):
        a.create_role("viewer", [], "ann", T0)
    with pytest.raises(InvalidValueError, match="unknown permission"):
        a.create_role("hacker", ["root.everything"], "ann", T0)
    with pytest.raises(InvalidValueError, match="role name"):
        a.create_role("no spaces", [], "ann", T0)
    a.grant("u2", "viewer", "ann", T0)
    with pytest.raises(ConflictError, match="held by 1 member"):
        a.delete_role("viewer", "ann", T0)
    for built_in in BUILT_IN_ROLES:
        with pytest.raises(ConflictError, match="built-in"):
            a.delete_role(built_in, "ann", T0)
    with pytest.raises(NotFoundError):
        a.delete_role("nosuch", "ann", T0)
    a.grant("u2", ORG_MEMBER, "ann", T0)
    a.delete_role("viewer", "ann", T0)
    assert "viewer" not in a.roles and a.permissions_of("viewer") is None
    assert names(a) == ["RoleCreated", "RoleGranted", "RoleGranted", "RoleDeleted"]


def test_join_secrets_are_hashes_reusable_until_they_expire_after_seven_days() -> None:
    a = access(("u1", "ann", ORG_ADMIN))
    expires = a.generate_secret(SECRET, "ann", T0)
    assert expires == T0 + SECRET_LIFETIME == T0 + timedelta(days=7)
    [generated] = a.collect_events()
    assert generated.secret_hash == SECRET and not hasattr(generated, "secret")
    a.use_secret(SECRET, "u2", T0 + timedelta(days=1))
    a.use_secret(SECRET, "u3", T0 + timedelta(days=6, hours=23))  # reusable
    with pytest.raises(InvalidValueError, match="not valid"):
        a.use_secret(SECRET, "u4", expires)
    with pytest.raises(InvalidValueError, match="not valid"):
        a.use_secret(hashlib.sha256(b"guess").hexdigest(), "u4", T0)
    with pytest.raises(InvalidValueError, match="SHA-256"):
        a.generate_secret("join me", "ann", T0)
    # A new secret made after the old one expired forgets it.
    other = hashlib.sha256(b"another").hexdigest()
    a.generate_secret(other, "ann", expires + timedelta(seconds=1))
    assert set(a.secrets) == {other}


def test_domains_are_claimed_once_and_released() -> None:
    a = access(("u1", "ann", ORG_ADMIN))
    assert a.claim_domain("Acme.Example", "ann", T0) == "acme.example"
    with pytest.raises(AlreadyExistsError):
        a.claim_domain("acme.example", "ann", T0)
    a.release_domain("ACME.example", "ann", T0)
    with pytest.raises(NotFoundError):
        a.release_domain("acme.example", "ann", T0)
    assert names(a) == ["DomainClaimed", "DomainReleased"]


def test_retention_is_recorded_within_the_references_bounds() -> None:
    org = Organization.create("acme", T0)
    org.collect_events()
    assert org.audit_log_retention_days is None
    assert org.change_retention(30, T0, "ann@acme.example") is True
    assert org.change_retention(30, T0, "ann@acme.example") is False
    [changed] = org.collect_events()
    assert (changed.audit_log_retention_days, changed.by) == (30, "ann@acme.example")
    for bad in (6, 3651, True, "30"):
        with pytest.raises(InvalidValueError, match="auditLogRetentionDays"):
            org.change_retention(bad, T0)


def test_the_organization_knows_which_active_keys_each_creator_issued() -> None:
    org = Organization.create("acme", T0)
    org.issue_key("ann-ci", KEY, [], ["application.read"], T0, by="ann@acme.example")
    org.issue_key("ann-old", hashlib.sha256(b"k2").hexdigest(), [], [], T0, by="ann@acme.example")
    org.issue_key("admins", hashlib.sha256(b"k3").hexdigest(), [], [], T0, by="admin")
    org.revoke_key("ann-old", T0, by="admin")
    assert org.active_keys_created_by("ann@acme.example") == ["ann-ci"]
    assert org.active_keys_created_by("bob@acme.example") == []


def test_rebuilt_from_the_log(tmp_path: Path) -> None:
    relay_log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                              "SQLITE_DBNAME": str(tmp_path / "events.db")})
    try:
        a = OrganizationAccess.create("acme", T0)
        a.join("u1", "ann", "ann@acme.example", ORG_ADMIN, "register", "ann", T0)
        a.create_role("viewer", ["application.read"], "ann", T0)
        a.generate_secret(SECRET, "ann", T0)
        a.claim_domain("acme.example", "ann", T0)
        relay_log.save(a)
        again = relay_log.repository.get(a.id)
        assert isinstance(again, OrganizationAccess)
        assert (again.members, again.roles, again.secrets, again.claims) == (a.members, a.roles, a.secrets, a.claims)
    finally:
        relay_log.close()
