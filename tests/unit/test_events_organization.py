"""Organization aggregate: creation, API keys issued and revoked (hashes only), name rules, rebuild."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from relay.events.errors import AlreadyExistsError, DomainError, InvalidValueError, NotFoundError
from relay.events.ids import organization_id
from relay.events.names import check_org_name, check_token_name
from relay.events.organization import PERMISSIONS, Organization
from relay.projections.store.log import RelayLog

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
T2 = T0 + timedelta(seconds=2)
T3 = T0 + timedelta(seconds=3)

HASH_A = hashlib.sha256(b"relay-key-a").hexdigest()
HASH_B = hashlib.sha256(b"relay-key-b").hexdigest()

_ENVELOPE = {"originator_id", "originator_version", "timestamp", "originator_topic"}


def payload(event: object) -> dict:
    """The attributes an event carries beyond the library's envelope."""
    return {k: v for k, v in vars(event).items() if k not in _ENVELOPE}


def single_event(aggregate: Organization, kind: type) -> object:
    events = aggregate.collect_events()
    assert [type(e) for e in events] == [kind]
    return events[0]


def fresh(name: str = "acme", at: datetime = T0) -> Organization:
    org = Organization.create(name, at)
    org.collect_events()
    return org


def with_key(key_name: str = "ci", at: datetime = T1) -> Organization:
    org = fresh()
    org.issue_key(key_name, HASH_A, ["shop"], ["application.read"], at)
    org.collect_events()
    return org


def replay(events: list) -> Organization:
    aggregate = None
    for e in events:
        aggregate = e.mutate(aggregate)
    assert isinstance(aggregate, Organization)
    return aggregate


# -- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["abc", "a" * 30, "acme_corp", "org_42", "123", "___"])
def test_valid_org_names_are_returned_unchanged(name):
    assert check_org_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "ab",
        "a" * 31,
        "Acme",
        "ACME",
        "my-org",
        "my org",
        "acme.corp",
        "acme/corp",
        "acmé",
        "abc\n",
        "\nabc",
        " abc",
        "abc ",
        None,
        123,
        b"acme",
    ],
)
def test_invalid_org_names_are_refused(name):
    with pytest.raises(InvalidValueError, match=r"organization name must be 3-30 characters of \[a-z0-9_\]"):
        check_org_name(name)


@pytest.mark.parametrize("name", ["a", "A", "K" * 64, "ci-key.v2_PROD", "0", "...", "a-b_c.d"])
def test_valid_token_names_are_returned_unchanged(name):
    assert check_token_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "k" * 65, "ci key", "ci/key", "ci:key", "clé", "ci\n", "\nci", "ci\t", None, 7]
)
def test_invalid_token_names_are_refused(name):
    with pytest.raises(InvalidValueError, match=r"token name must be 1-64 characters"):
        check_token_name(name)


def test_invalid_value_error_is_a_domain_error():
    with pytest.raises(DomainError):
        check_token_name("")


# -- creation ----------------------------------------------------------------------------------


def test_create_records_created_with_name_and_time():
    org = Organization.create("acme", T0)

    event = single_event(org, Organization.Created)
    assert payload(event) == {"name": "acme", "at": T0}
    assert event.originator_id == organization_id("acme")
    assert event.originator_version == 1

    assert org.id == organization_id("acme")
    assert org.version == 1
    assert org.name == "acme"
    assert org.created_at == T0
    assert org.keys == {}


def test_the_same_name_always_gives_the_same_id():
    assert Organization.create("acme", T0).id == Organization.create("acme", T3).id
    assert Organization.create("acme", T0).id != Organization.create("acme_2", T0).id


@pytest.mark.parametrize("name", ["ab", "Acme", "my-org", "acme\n", ""])
def test_create_refuses_an_invalid_name(name):
    with pytest.raises(InvalidValueError, match="organization name"):
        Organization.create(name, T0)


# -- issuing keys ------------------------------------------------------------------------------


def test_issue_key_records_the_hash_and_sorted_unique_scopes():
    org = fresh()
    org.issue_key(
        "ci",
        HASH_A,
        ["shop", "billing", "shop"],
        ["metric.read", "application.read", "metric.read"],
        T1,
    )

    event = single_event(org, Organization.ApiKeyIssued)
    assert payload(event) == {
        "key_name": "ci",
        "key_hash": HASH_A,
        "apps": ["billing", "shop"],
        "permissions": ["application.read", "metric.read"],
        "at": T1,
        "by": "relay",
    }
    assert event.originator_id == org.id
    assert event.originator_version == 2

    assert org.version == 2
    assert org.keys == {
        "ci": {
            "key_hash": HASH_A,
            "apps": ["billing", "shop"],
            "permissions": ["application.read", "metric.read"],
            "issued_at": T1,
            "revoked_at": None,
        }
    }
    assert org.active_key("ci") == org.keys["ci"]
    assert org.created_at == T0


def test_issue_key_accepts_every_known_permission():
    org = fresh()
    org.issue_key("admin", HASH_A, [], list(PERMISSIONS), T1)

    event = single_event(org, Organization.ApiKeyIssued)
    assert event.permissions == sorted(PERMISSIONS)
    assert org.keys["admin"]["permissions"] == sorted(PERMISSIONS)


def test_issue_key_accepts_no_apps_and_no_permissions():
    org = fresh()
    org.issue_key("empty", HASH_A, [], [], T1)

    event = single_event(org, Organization.ApiKeyIssued)
    assert event.apps == []
    assert event.permissions == []


def test_several_keys_are_kept_by_name():
    org = fresh()
    org.issue_key("one", HASH_A, ["a_app"], ["metric.read"], T1)
    org.issue_key("two", HASH_B, ["b_app"], ["token.read"], T2)

    events = org.collect_events()
    assert [type(e) for e in events] == [Organization.ApiKeyIssued, Organization.ApiKeyIssued]
    assert [e.key_name for e in events] == ["one", "two"]
    assert [e.originator_version for e in events] == [2, 3]
    assert set(org.keys) == {"one", "two"}
    assert org.keys["two"]["key_hash"] == HASH_B


def test_the_key_itself_never_enters_the_event():
    org = fresh()
    secret = "relay_sk_0123456789abcdef"
    key_hash = hashlib.sha256(secret.encode()).hexdigest()
    org.issue_key("ci", key_hash, ["shop"], ["application.read"], T1)

    event = single_event(org, Organization.ApiKeyIssued)
    assert secret not in repr(vars(event))
    assert set(payload(event)) == {"key_name", "key_hash", "apps", "permissions", "at", "by"}


@pytest.mark.parametrize("key_name", ["", "ci key", "k" * 65, "ci\n"])
def test_issue_key_refuses_an_invalid_token_name(key_name):
    org = fresh()
    with pytest.raises(InvalidValueError, match="token name"):
        org.issue_key(key_name, HASH_A, [], [], T1)
    assert org.collect_events() == []
    assert org.keys == {}


def test_issue_key_refuses_a_second_active_key_with_the_same_name():
    org = with_key("ci")
    before = dict(org.keys["ci"])

    with pytest.raises(AlreadyExistsError, match="an API key named 'ci' exists in 'acme'"):
        org.issue_key("ci", HASH_B, ["other"], ["metric.read"], T2)

    assert org.collect_events() == []
    assert org.keys["ci"] == before
    assert org.version == 2


def test_issue_key_refuses_unknown_permissions_naming_them_sorted():
    org = fresh()
    with pytest.raises(InvalidValueError, match=r"unknown permission\(s\): app\.admin, root$"):
        org.issue_key("ci", HASH_A, [], ["root", "metric.read", "app.admin"], T1)
    assert org.collect_events() == []
    assert org.keys == {}


@pytest.mark.parametrize("key_hash", ["", HASH_A[:63], HASH_A + "0", "secret"])
def test_issue_key_refuses_something_that_is_not_a_sha256_hex_digest(key_hash):
    org = fresh()
    with pytest.raises(InvalidValueError, match="key_hash must be a SHA-256 hex digest"):
        org.issue_key("ci", key_hash, [], [], T1)
    assert org.collect_events() == []
    assert org.keys == {}


def test_a_revoked_key_name_can_be_issued_again():
    org = with_key("ci")
    org.revoke_key("ci", T2)
    org.collect_events()

    org.issue_key("ci", HASH_B, ["billing"], ["token.write"], T3)

    event = single_event(org, Organization.ApiKeyIssued)
    assert payload(event) == {
        "key_name": "ci",
        "key_hash": HASH_B,
        "apps": ["billing"],
        "permissions": ["token.write"],
        "at": T3,
        "by": "relay",
    }
    assert org.active_key("ci") == {
        "key_hash": HASH_B,
        "apps": ["billing"],
        "permissions": ["token.write"],
        "issued_at": T3,
        "revoked_at": None,
    }


# -- revoking keys -----------------------------------------------------------------------------


def test_revoke_key_records_the_revocation_and_keeps_the_record():
    org = with_key("ci")

    org.revoke_key("ci", T2)

    event = single_event(org, Organization.ApiKeyRevoked)
    assert payload(event) == {"key_name": "ci", "at": T2, "by": "relay"}
    assert event.originator_version == 3

    assert org.active_key("ci") is None
    assert org.keys["ci"] == {
        "key_hash": HASH_A,
        "apps": ["shop"],
        "permissions": ["application.read"],
        "issued_at": T1,
        "revoked_at": T2,
    }


def test_revoke_key_refuses_an_unknown_key():
    org = with_key("ci")
    with pytest.raises(NotFoundError, match="no active API key named 'nope' in 'acme'"):
        org.revoke_key("nope", T2)
    assert org.collect_events() == []
    assert org.active_key("ci") is not None


def test_revoke_key_refuses_a_key_revoked_already():
    org = with_key("ci")
    org.revoke_key("ci", T2)
    org.collect_events()

    with pytest.raises(NotFoundError, match="no active API key named 'ci' in 'acme'"):
        org.revoke_key("ci", T3)

    assert org.collect_events() == []
    assert org.keys["ci"]["revoked_at"] == T2


def test_active_key_of_an_unknown_name_is_none():
    assert fresh().active_key("ci") is None


# -- rebuild -----------------------------------------------------------------------------------


def _history() -> Organization:
    org = Organization.create("acme", T0)
    org.issue_key("ci", HASH_A, ["shop", "billing"], ["application.read", "metric.read"], T1)
    org.issue_key("deploy", HASH_B, [], ["application.write"], T1)
    org.revoke_key("ci", T2)
    org.issue_key("ci", HASH_B, ["shop"], ["token.read"], T3)
    return org


def test_replaying_the_events_rebuilds_the_same_organization():
    org = _history()
    events = org.collect_events()
    assert [type(e).__name__ for e in events] == [
        "Created",
        "ApiKeyIssued",
        "ApiKeyIssued",
        "ApiKeyRevoked",
        "ApiKeyIssued",
    ]

    rebuilt = replay(events)

    assert rebuilt == org
    assert rebuilt.keys == org.keys
    assert rebuilt.version == 5


@pytest.mark.parametrize("module", ["eventsourcing.popo", "eventsourcing.sqlite"])
def test_an_organization_saved_and_loaded_is_identical(module, tmp_path):
    env = {"PERSISTENCE_MODULE": module}
    if module == "eventsourcing.sqlite":
        env["SQLITE_DBNAME"] = str(tmp_path / "relay.db")
    log = RelayLog(env=env)
    org = _history()
    log.save(org)

    loaded = log.repository.get(organization_id("acme"))

    assert loaded == org
    assert loaded is not org
    assert loaded.keys["ci"]["issued_at"] == T3
    assert loaded.keys["deploy"]["issued_at"].tzinfo is not None
