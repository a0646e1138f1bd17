"""RelayLog.apply_config on a real SQLite event store shared by two logs (two HA instances): a plan is recorded in
one transaction, all of it or nothing; a change made meanwhile refuses it; a concurrent append that leaves the
plan's expectations true is retried."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from relay.actors.application import register_app
from relay.actors.config_apply import apply_config
from relay.actors.policies.config import parse_config
from relay.actors.policies.config_plan import AppState, State, plan
from relay.events.application import DEFAULT_SETTINGS, App
from relay.events.errors import ConcurrentChangeError
from relay.events.organization import Organization
from relay.events.refs import app_ref, org_ref, rule_ref
from relay.projections.store.log import RelayLog

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
ORG = "local"
HASH = hashlib.sha256(b"secret").hexdigest()


@pytest.fixture
def pair(tmp_path) -> Iterator[tuple[RelayLog, RelayLog]]:
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db")}
    a, b = RelayLog(env=env), RelayLog(env=env)
    a.ensure(org_ref(ORG), lambda: Organization.create(ORG, AT))
    yield a, b
    a.close()
    b.close()


def positions(log: RelayLog) -> int:
    return log.recorder.max_notification_id() or 0


def rule_ids() -> Any:
    counter = itertools.count()
    return lambda: f"rule-{next(counter)}"


DOCUMENT = {
    "apiVersion": "relay/v1", "kind": "Config",
    "apps": [{"name": "orders", "settings": {"executorTimeoutSecs": 30},
              "alertRules": [{"type": "SlowQueue"}, {"type": "WorkflowFailure"}]},
             {"name": "billing", "settings": {"privateMode": True}}],
    "keys": [{"name": "ci"}],
}


def test_a_plan_is_one_transaction(pair: tuple[RelayLog, RelayLog]) -> None:
    a, _ = pair
    made = plan(parse_config(DOCUMENT), State(), org=ORG, prune=False)
    before, batches = positions(a), a.committer.batches
    apply_config(a, ORG, made.changes, {"ci": HASH}, rule_ids(), AT, "admin")
    assert a.committer.batches == batches + 1  # every event of the plan in one append transaction
    events = a.recorder.select_notifications(before + 1, 100)
    topics = [n.topic.rsplit(".", 1)[-1].replace(":", ".") for n in events]
    # 2 apps Registered, their 2 SettingsChanged, 2 rules Created, 1 ApiKeyIssued
    assert sorted(topics) == sorted(["Registered", "SettingsChanged"] * 2 + ["Created"] * 2 + ["ApiKeyIssued"])
    orders = a.get(app_ref(ORG, "orders"))
    assert orders is not None and orders.settings["executorTimeoutSecs"] == 30
    assert a.get(rule_ref(ORG, "orders", "rule-0")) is not None
    assert a.get(org_ref(ORG)).active_key("ci")["key_hash"] == HASH  # type: ignore[union-attr]


def test_a_stale_change_records_nothing_at_all(pair: tuple[RelayLog, RelayLog]) -> None:
    a, b = pair
    register_app(a, ORG, "orders", AT)
    state = State({"orders": AppState(dict(DEFAULT_SETTINGS))})
    made = plan(parse_config(DOCUMENT), state, org=ORG, prune=False)
    # Another instance changes a setting the plan expects to find at its default.
    b.change(app_ref(ORG, "orders"), lambda application: application.change_settings({"executorTimeoutSecs": 90}, AT))
    before = positions(a)
    with pytest.raises(ConcurrentChangeError, match="settings:orders"):
        apply_config(a, ORG, made.changes, {"ci": HASH}, rule_ids(), AT, "admin")
    assert positions(a) == before  # not the billing app, not the key, not the rules: nothing
    assert a.get(app_ref(ORG, "billing")) is None
    assert a.get(org_ref(ORG)).active_key("ci") is None  # type: ignore[union-attr]


def test_an_append_between_load_and_save_is_retried_against_the_expectations(
        pair: tuple[RelayLog, RelayLog], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair
    register_app(a, ORG, "orders", AT)
    state = State({"orders": AppState(dict(DEFAULT_SETTINGS))})
    document = {"apiVersion": "relay/v1", "kind": "Config",
                "apps": [{"name": "orders", "settings": {"executorTimeoutSecs": 30}}]}
    made = plan(parse_config(document), state, org=ORG, prune=False)
    loads = {"n": 0}
    original = a.load

    def racing_get(aggregate_id: Any, kind: type) -> Any:
        found = original(aggregate_id, kind)
        if kind is App and loads["n"] == 0:  # the first load: a peer appends to the same app right after it
            b.change(app_ref(ORG, "orders"),
                     lambda application: application.change_settings({"gcRowsThreshold": 500}, AT))
        loads["n"] += 1
        return found

    monkeypatch.setattr(a, "load", racing_get)
    apply_config(a, ORG, made.changes, {}, rule_ids(), AT, "admin")
    assert loads["n"] == 2  # the version conflict made it load again; the peer's change was not the plan's
    orders = a.get(app_ref(ORG, "orders"))
    assert orders is not None
    assert (orders.settings["executorTimeoutSecs"], orders.settings["gcRowsThreshold"]) == (30, 500)


def test_an_append_that_breaks_the_expectations_refuses_the_plan(
        pair: tuple[RelayLog, RelayLog], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair
    register_app(a, ORG, "orders", AT)
    state = State({"orders": AppState(dict(DEFAULT_SETTINGS))})
    document = {"apiVersion": "relay/v1", "kind": "Config", "keys": [{"name": "ci"}],
                "apps": [{"name": "orders", "settings": {"executorTimeoutSecs": 30}}]}
    made = plan(parse_config(document), state, org=ORG, prune=False)
    original = a.load
    raced = {"done": False}

    def racing_get(aggregate_id: Any, kind: type) -> Any:
        found = original(aggregate_id, kind)
        if kind is App and not raced["done"]:
            raced["done"] = True
            b.change(app_ref(ORG, "orders"),
                     lambda application: application.change_settings({"executorTimeoutSecs": 45}, AT))
        return found

    monkeypatch.setattr(a, "load", racing_get)
    before = positions(a)
    with pytest.raises(ConcurrentChangeError):
        apply_config(a, ORG, made.changes, {"ci": HASH}, rule_ids(), AT, "admin")
    assert positions(a) == before + 1  # only the peer's own change
    assert a.get(org_ref(ORG)).active_key("ci") is None  # type: ignore[union-attr]
