"""The People service over a started (not served) runtime with a real store: where a registering person lands
(admin e-mails, a join secret, a claimed domain, a groups claim, their own organization), the 409s of
registration, moving between organizations, removing a member (their keys revoked in the same transaction, their
keys' sockets closed, their principal without permission at once), roles, secrets, domain claims, updateOrg, and
a rebuild of every view equal to the live ones afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from relay.actors.adapters.oidc.verifier import VerifiedClaims
from relay.actors.configuration.settings import Settings
from relay.actors.runtime import Runtime
from relay.actors.services.configuration_changes import ConfigurationChanges
from relay.actors.services.people import People
from relay.events.access import ORG_ADMIN, ORG_MEMBER
from relay.events.errors import AlreadyExistsError, ConflictError, InvalidValueError, NotFoundError
from relay.events.ids import user_id
from relay.projections import replay
from relay.projections.identity import Principal, hash_key, new_api_key

IDP = "https://idp.example"
ROOT = "root@corp.example"


def claims(subject: str, email: str | None, *, verified: bool | None = None,
           groups: tuple[str, ...] = ()) -> VerifiedClaims:
    return VerifiedClaims(issuer=IDP, subject=subject, email=email, email_verified=verified, name=None,
                          given_name="Given", family_name="Family", groups=groups, expires_at=0.0, raw={})


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    settings = Settings(data_dir=tmp_path, admin_token="people-admin-token", instance_id="relay-unit", port=18092,
                        oidc_admin_emails=frozenset({ROOT}), oidc_role_map={"viewers": "viewer", "ops": "nosuch"})
    runtime = Runtime(settings)
    runtime.start()
    try:
        assert runtime.wait_for_views()
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture
def people(rt: Runtime) -> People:
    return People(rt)


def me(people: People, subject: str) -> Principal:
    principal = people.sign_in(claims(subject, None))
    assert principal.user_id == str(user_id(IDP, subject))
    return principal


def test_registering_makes_an_organization_named_after_the_person(people: People, rt: Runtime) -> None:
    assert people.sign_in(claims("ann", "Ann@Ann.Example")) == Principal(admin=False, person="ann@ann.example")
    uid = people.register(claims("ann", "Ann@Ann.Example"), "ann", company="Ann Inc")
    assert uid == str(user_id(IDP, "ann"))
    ann = people.sign_in(claims("ann", "ann@ann.example"))
    assert (ann.org, ann.role, ann.person, ann.user_id) == ("ann", ORG_ADMIN, "ann@ann.example", uid)
    assert ann.allows("organization.write", "ann") and not ann.allows("application.read", "local")
    assert rt.views.applications.organization_exists("ann")
    profile = people.profile(uid)
    assert profile is not None and profile.org == "ann" and profile.role is not None
    assert profile.role["name"] == ORG_ADMIN and profile.role["is_global"]
    assert (profile.user["given_name"], profile.user["company"]) == ("Given", "Ann Inc")
    assert people.principal_of(uid) == ann and people.principal_of("nobody") is None

    with pytest.raises(AlreadyExistsError, match="registered already"):
        people.register(claims("ann", "ann@ann.example"), "ann2")
    with pytest.raises(ConflictError, match="user name 'ann' is taken"):
        people.register(claims("other", "other@x.example"), "ann")
    with pytest.raises(ConflictError, match=r"ann@ann\.example is registered already"):
        people.register(claims("other", "ANN@ann.example"), "other")
    with pytest.raises(ConflictError, match="organization named 'local' exists"):
        people.register(claims("other", "other@x.example"), "local")
    with pytest.raises(InvalidValueError, match="e-mail"):
        people.register(claims("other", None), "other")
    with pytest.raises(InvalidValueError, match="user name"):
        people.register(claims("other", "other@x.example"), "Other")
    assert people.view.user(str(user_id(IDP, "other"))) is None


def test_admin_emails_make_organization_admins_of_the_default_organization(people: People) -> None:
    people.register(claims("root", "Root@Corp.Example"), "root")
    root = me(people, "root")
    assert (root.org, root.role) == ("local", ORG_ADMIN)
    assert people.view.member("local", "root")["via"] == "admin_emails"
    with pytest.raises(ConflictError, match="registered already"):
        people.register(claims("again", ROOT), "again")  # one person per e-mail


def test_an_admin_email_marked_unverified_does_not_count(people: People) -> None:
    people.register(claims("fake", "ROOT@corp.example", verified=False), "fake")
    fake = me(people, "fake")
    assert (fake.org, fake.role) == ("fake", ORG_ADMIN)


def test_a_join_secret_and_a_claimed_domain_lead_into_their_organization(people: People, rt: Runtime) -> None:
    people.register(claims("root", ROOT), "root")
    secret = people.generate_secret("local", ROOT)
    assert len(secret) >= 40 and people.view.secret_org(hash_key(secret)).org == "local"
    people.register(claims("bob", "bob@else.example"), "bob", secret=secret)
    people.register(claims("cid", "cid@else.example"), "cid", secret=secret)  # reusable until it expires
    assert [(me(people, s).org, me(people, s).role) for s in ("bob", "cid")] == [("local", ORG_MEMBER)] * 2
    with pytest.raises(InvalidValueError, match="join secret is not valid"):
        people.register(claims("dan", "dan@else.example"), "dan", secret="guessed")
    # The secret itself is in no event.
    stored = rt.log.recorder.select_notifications(start=1, limit=10_000)
    assert all(secret.encode() not in n.state for n in stored)

    claim = people.claim_domain("local", "Corp.Example", ROOT)
    assert (claim["domain"], claim["status"], claim["org"]) == ("corp.example", "approved", "local")
    people.register(claims("eve", "eve@eve.example"), "eve")
    with pytest.raises(ConflictError, match="one organization per domain"):
        people.claim_domain("eve", "corp.example", "eve@eve.example")
    people.register(claims("fay", "fay@corp.example", verified=True), "fay")
    assert (me(people, "fay").org, people.view.member("local", "fay")["via"]) == ("local", "domain")
    people.register(claims("gus", "gus@sub.corp.example"), "gus")  # subdomains are not matched
    people.register(claims("hal", "hal@corp.example", verified=False), "hal")  # nor unverified e-mails
    assert (me(people, "gus").org, me(people, "hal").org) == ("gus", "hal")
    people.release_domain("local", "corp.example", ROOT)
    assert people.claims("local") == []
    with pytest.raises(NotFoundError):
        people.release_domain("local", "corp.example", ROOT)


def test_a_groups_claim_gives_its_mapped_role_in_the_default_organization(people: People) -> None:
    people.register(claims("root", ROOT), "root")
    viewer = people.create_role("local", "viewer", ["application.read", "metric.read"], ROOT)
    assert viewer == {"name": "viewer", "permissions": ["application.read", "metric.read"], "is_global": False}
    people.register(claims("vic", "vic@else.example", groups=("staff", "viewers")), "vic")
    vic = me(people, "vic")
    assert (vic.org, vic.role, vic.permissions) == ("local", "viewer", {"application.read", "metric.read"})
    assert people.view.member("local", "vic")["via"] == "roles_claim"
    people.register(claims("ops", "ops@else.example", groups=("ops",)), "opsy")  # mapped to a role local lacks
    assert me(people, "ops").org == "opsy"
    # With a secret into the default organization, the mapped role replaces Organization Member.
    secret = people.generate_secret("local", ROOT)
    people.register(claims("val", "val@else.example", groups=("viewers",)), "val", secret=secret)
    assert (me(people, "val").role, people.view.member("local", "val")["via"]) == ("viewer", "secret")


@dataclass
class FakeSocket:
    told: list[Any] = field(default_factory=list)

    def tell(self, message: Any) -> None:
        self.told.append(message)


def test_removing_a_member_revokes_their_keys_closes_their_sockets_and_their_access(
        people: People, rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    people.register(claims("root", ROOT), "root")
    secret = people.generate_secret("local", ROOT)
    people.register(claims("bob", "bob@else.example"), "bob", secret=secret)
    bob = me(people, "bob")
    assert bob.allows("token.write", "local") and not bob.allows("organization.write", "local")
    keys = ConfigurationChanges(rt)
    bobs_key, roots_key = new_api_key(), new_api_key()
    keys.issue_key("local", "bob-ci", hash_key(bobs_key), [], ["websocket.connect"], by=bob.display)
    keys.issue_key("local", "root-ci", hash_key(roots_key), [], ["websocket.connect"], by=ROOT)
    assert rt.auth.principal_for(bobs_key) is not None
    sockets: dict[str, FakeSocket] = {"bob-ci": FakeSocket(), "root-ci": FakeSocket()}
    monkeypatch.setattr(rt.directory, "connections_of_key", lambda org, name: [sockets[name]])

    with pytest.raises(ConflictError, match="last Organization Admin"):
        people.remove_member("local", "root", "bob@else.example")
    removed = people.remove_member("local", "bob", ROOT)
    assert (removed["username"], removed["email"], removed["role"]) == ("bob", "bob@else.example", ORG_MEMBER)
    assert rt.auth.principal_for(bobs_key) is None and rt.auth.principal_for(roots_key) is not None
    assert sockets["bob-ci"].told == [{"close": "API key revoked"}] and sockets["root-ci"].told == []
    bob_now = people.sign_in(claims("bob", "bob@else.example"))
    assert (bob_now.org, bob_now.permissions, bob_now.user_id) == (None, frozenset(), bob.user_id)
    assert not bob_now.allows("application.read", "local")
    # Recorded together (one run_together save): the removal, then the revocation.
    stored = rt.log.recorder.select_notifications(start=1, limit=10_000)
    tail = [n.topic.rsplit(".", 1)[-1] for n in stored[-2:]]
    assert tail == ["MemberRemoved", "ApiKeyRevoked"]
    with pytest.raises(NotFoundError, match="no member 'bob'"):
        people.remove_member("local", "bob", ROOT)


def test_joining_another_organization_moves_the_person(people: People, rt: Runtime) -> None:
    people.register(claims("root", ROOT), "root")
    people.register(claims("bob", "bob@else.example"), "bob", secret=people.generate_secret("local", ROOT))
    people.register(claims("ann", "ann@ann.example"), "ann")  # her own organization, its last admin
    bob, ann = me(people, "bob"), me(people, "ann")
    key = new_api_key()
    ConfigurationChanges(rt).issue_key("local", "bob-key", hash_key(key), [], [], by=bob.display)

    anns_secret = people.generate_secret("ann", ann.display)
    people.join(bob, "ann", anns_secret)
    bob = me(people, "bob")
    assert (bob.org, bob.role) == ("ann", ORG_MEMBER)
    assert people.view.member("local", "bob") is None and rt.auth.principal_for(key) is None
    with pytest.raises(ConflictError, match="member of 'ann' already"):
        people.join(bob, "ann", anns_secret)
    with pytest.raises(ConflictError, match="last Organization Admin of 'ann'"):
        people.join(ann, "local", people.generate_secret("local", ROOT))
    with pytest.raises(InvalidValueError, match="not valid"):
        people.join(me(people, "root"), "ann", "guessed")
    with pytest.raises(NotFoundError, match="not registered"):
        people.join(people.sign_in(claims("nobody", "n@x.example")), "ann", anns_secret)
    with pytest.raises(NotFoundError, match="no organization"):
        people.join(bob, "nosuchorg", anns_secret)


def test_roles_are_granted_and_deleted_only_when_unused(people: People) -> None:
    people.register(claims("root", ROOT), "root")
    people.register(claims("bob", "bob@else.example"), "bob", secret=people.generate_secret("local", ROOT))
    assert [r["name"] for r in people.roles("local")] == [ORG_ADMIN, ORG_MEMBER]
    people.create_role("local", "deployer", ["application.write"], ROOT)
    with pytest.raises(AlreadyExistsError):
        people.create_role("local", "deployer", None, ROOT)
    with pytest.raises(InvalidValueError):
        people.create_role("local", "bad", ["no.such"], ROOT)
    people.grant("local", "bob", "deployer", ROOT)
    assert me(people, "bob").permissions == {"application.write"}
    with pytest.raises(ConflictError, match="held by 1 member"):
        people.delete_role("local", "deployer", ROOT)
    with pytest.raises(ConflictError, match="built-in"):
        people.delete_role("local", ORG_ADMIN, ROOT)
    with pytest.raises(ConflictError, match="last Organization Admin"):
        people.grant("local", "root", ORG_MEMBER, ROOT)
    with pytest.raises(NotFoundError, match="no role 'boss'"):
        people.grant("local", "bob", "boss", ROOT)
    with pytest.raises(NotFoundError, match="no member 'zed'"):
        people.grant("local", "zed", ORG_MEMBER, ROOT)
    people.grant("local", "bob", ORG_ADMIN, ROOT)
    people.grant("local", "root", ORG_MEMBER, "bob@else.example")  # another admin now: allowed
    people.delete_role("local", "deployer", ROOT)
    assert [r["name"] for r in people.roles("local")] == [ORG_ADMIN, ORG_MEMBER]
    assert [(m["username"], m["role"]) for m in people.members("local")] == [("bob", ORG_ADMIN), ("root", ORG_MEMBER)]
    with pytest.raises(NotFoundError):
        people.members("nosuchorg")


def test_update_org_records_retention_and_refuses_a_new_name(people: People, rt: Runtime) -> None:
    assert people.retention_days("local") is None
    people.update_org("local", 90, None, ROOT)
    assert people.retention_days("local") == 90
    people.update_org("local", None, "local", ROOT)  # its own name: nothing to do
    with pytest.raises(ConflictError, match="cannot rename"):
        people.update_org("local", 30, "renamed", ROOT)
    assert people.retention_days("local") == 90  # nothing recorded
    with pytest.raises(InvalidValueError, match="auditLogRetentionDays"):
        people.update_org("local", 3, None, ROOT)
    with pytest.raises(NotFoundError):
        people.update_org("nosuchorg", 30, None, ROOT)


def test_every_view_rebuilds_equal_after_people_changes(people: People, rt: Runtime) -> None:
    people.register(claims("root", ROOT), "root")
    secret = people.generate_secret("local", ROOT)
    people.register(claims("bob", "bob@else.example"), "bob", secret=secret)
    people.create_role("local", "viewer", ["application.read"], ROOT)
    people.grant("local", "bob", "viewer", ROOT)
    people.claim_domain("local", "corp.example", ROOT)
    people.remove_member("local", "bob", ROOT)
    people.update_org("local", 60, None, ROOT)
    report = replay.verify(rt.settings.store, rt.log, lambda _: None)
    assert report.verified, report.differences
