"""The people view folded from a log: persons by id, subject, name and e-mail; memberships and roles (built-in ones
global); join secrets and domain claims; retention; each step of `people_history` seen at its position; and a
rebuild (`relay replay --verify`) equal to the live view, also after a member was removed."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent

from relay.events.access import ORG_ADMIN, ORG_MEMBER
from relay.events.ids import user_id
from relay.projections import replay
from relay.projections.backend import StoreConfig
from relay.projections.identity import person_principal
from relay.projections.store.log import RelayLog
from relay.projections.views import Views
from tests.unit.store_cases import (
    HISTORY_EVENTS,
    JOIN_SECRET_HASH,
    PEOPLE_HISTORY_EVENTS,
    at,
    history,
    notification_ids,
    people_history,
    topics,
)

IDP = "https://idp.example"
# `people_history` as the code of 2026-12-06 stored it (tests/support/event_log_fixture.py `export`): a change to an
# identity event's fields, name or module that today's code cannot read, or reads differently, fails here.
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "identity-event-log-2026-12-06.jsonl"


@pytest.fixture
def config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(data_dir=tmp_path)


@pytest.fixture
def relay_log(config: StoreConfig) -> Iterator[RelayLog]:
    log = RelayLog(env=config.event_store_env())
    try:
        yield log
    finally:
        log.close()


@pytest.fixture
def views(config: StoreConfig, relay_log: RelayLog) -> Iterator[Views]:
    live = Views(config, relay_log)
    try:
        yield live
    finally:
        live.close()


def test_the_history_records_the_people_events_it_says(relay_log: RelayLog) -> None:
    history(relay_log)
    people_history(relay_log)
    assert topics(relay_log) == [*HISTORY_EVENTS, *PEOPLE_HISTORY_EVENTS]


def test_persons_memberships_roles_secrets_and_claims_step_by_step(relay_log: RelayLog, views: Views) -> None:
    history(relay_log)
    people_history(relay_log)
    ids = notification_ids(relay_log)
    n = len(HISTORY_EVENTS)
    people = views.people
    ann, bob = str(user_id(IDP, "ann-sub")), str(user_id(IDP, "bob-sub"))

    views.catch_up(stop=ids[n + 3])  # ann registered, her organization made
    row = people.user(ann)
    assert row is not None and row["username"] == "ann" and row["email"] == "ann@anns.example"
    assert people.user_by_subject(IDP, "ann-sub") == people.user_by_name("ann") == people.user_by_email(
        "ANN@anns.example") == row
    assert people.user_by_subject("https://other", "ann-sub") is None
    assert people.membership(ann) == ("anns", ORG_ADMIN)
    principal = person_principal(people, row)
    assert (principal.org, principal.role, principal.person, principal.user_id) == (
        "anns", ORG_ADMIN, "ann@anns.example", ann)
    assert principal.display == "ann@anns.example" and not principal.admin
    assert principal.allows("organization.write", "anns") and not principal.allows("application.read", "acme")

    views.catch_up(stop=ids[n + 6])  # viewer role, a secret, a domain claim
    roles = people.roles("anns")
    assert list(roles) == [ORG_ADMIN, ORG_MEMBER, "viewer"]
    assert roles["viewer"] == {"name": "viewer", "permissions": ["application.read"], "is_global": False}
    assert roles[ORG_ADMIN]["is_global"] and people.roles("acme")[ORG_MEMBER]["is_global"]
    assert "viewer" not in people.roles("acme")
    assert people.role_permissions("anns", "viewer") == {"application.read"}
    assert people.role_permissions("acme", "viewer") == frozenset()
    found = people.secret_org(JOIN_SECRET_HASH)
    assert found is not None and found.org == "anns" and found.expires_at > at(52)
    assert people.claim_org("anns.example") == "anns" and people.claim_org("sub.anns.example") is None
    [claim] = people.claims("anns")
    assert claim["status"] == "approved" and claim["requested_by"] == "ann@anns.example"

    views.catch_up(stop=ids[n + 10])  # bob joined with the secret and was given viewer
    assert people.membership(bob) == ("anns", "viewer")
    member = people.member("anns", "bob")
    assert member is not None and member["via"] == "secret" and member["email"] == "bob@else.example"
    assert [m["username"] for m in people.members("anns")] == ["ann", "bob"]
    bob_row = people.user(bob)
    assert bob_row is not None
    assert person_principal(people, bob_row).permissions == {"application.read"}

    views.catch_up()  # bob removed, retention set, the claim released, viewer deleted
    assert people.membership(bob) is None and people.user(bob) is not None
    bob_now = person_principal(people, bob_row)
    assert bob_now.org is None and bob_now.permissions == frozenset() and not bob_now.allows("application.read", "anns")
    assert [m["username"] for m in people.members("anns")] == ["ann"]
    assert people.retention_days("anns") == 30 and people.retention_days("acme") is None
    assert people.claims("anns") == [] and people.claim_org("anns.example") is None
    assert "viewer" not in people.roles("anns")


def test_a_rebuild_verifies_against_the_live_view(config: StoreConfig, relay_log: RelayLog, views: Views) -> None:
    history(relay_log)
    people_history(relay_log)
    views.catch_up()
    report = replay.verify(config, relay_log, lambda _: None)
    assert report.verified, report.differences
    assert report.position == notification_ids(relay_log)[-1]
    # A live view that lost a row no longer verifies: the people view is one of those compared.
    with views.stores[-1].transaction(commit=True) as sql:
        sql.execute("DELETE FROM {s}relay_members")
    report = replay.verify(config, relay_log, lambda _: None)
    assert not report.verified
    assert any(d.startswith("people.relay_members") for d in report.differences)


def test_the_audit_view_names_the_organization_and_the_acting_person(relay_log: RelayLog, views: Views) -> None:
    history(relay_log)
    people_history(relay_log)
    views.catch_up()
    entries = views.audit.entries(org="anns", limit=100)
    events = [e["event"] for e in entries]
    assert events == [e for e in PEOPLE_HISTORY_EVENTS if e != "User.Registered"]
    joined = [e for e in entries if e["event"] == "OrganizationAccess.MemberJoined"]
    assert [(e["subject"], e["details"]["username"], e["details"]["by"]) for e in joined] == [
        ("anns", "ann", "ann@anns.example"), ("anns", "bob", "bob@else.example")]
    assert all("secret_hash" not in e["details"] for e in entries)
    registered = views.audit.entries(event="User.Registered", limit=10)
    assert [(e["org"], e["subject"]) for e in registered] == [(None, "ann"), (None, "bob")]


def _folded(data_dir: Path, fill: Callable[[RelayLog], None]) -> dict[str, object]:
    config = StoreConfig(data_dir=data_dir)
    relay_log = RelayLog(env=config.event_store_env())
    try:
        fill(relay_log)
        views = Views(config, relay_log)
        try:
            views.catch_up()
            # `recorded_at` is when the event was stored: no replay reproduces it.
            return {p.name: {t: [{k: v for k, v in row.items() if k != "recorded_at"} for row in rows]
                             for t, rows in p.view.dump().items()} for p in views.projectors}
        finally:
            views.close()
    finally:
        relay_log.close()


def test_an_identity_log_of_the_day_they_were_made_replays_into_todays_views(tmp_path: Path) -> None:
    def load(relay_log: RelayLog) -> None:
        rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
        relay_log.recorder.insert_events([StoredEvent(
            originator_id=UUID(r["originator_id"]), originator_version=r["originator_version"], topic=r["topic"],
            state=json.dumps(r["state"], separators=(",", ":")).encode() if "state" in r
            else base64.b64decode(r["state_b64"])) for r in rows])

    replayed = _folded(tmp_path / "old", load)
    assert replayed == _folded(tmp_path / "today", people_history)
    assert replayed["people"]["relay_members"]
