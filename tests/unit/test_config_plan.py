"""Declarative configuration, the pure part (actors/policies/config.py, config_plan.py, config_apply.py): the document
checked with paths, the plan against a state, and the changes run on real aggregates (all of them or a
ConcurrentChangeError)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml
from eventsourcing.domain import Aggregate

from relay.actors.alerting import LiveSources, evaluate
from relay.actors.config_apply import apply_changes
from relay.actors.policies.config import ConfigInvalidError, KeySpec, RuleSpec, parse_config
from relay.actors.policies.config_plan import AppState, State, plan
from relay.events.alerting import AlertingRule
from relay.events.application import DEFAULT_SETTINGS, App
from relay.events.errors import ConcurrentChangeError
from relay.events.organization import DEFAULT_KEY_PERMISSIONS, Organization
from relay.wire.errors import CannotAskError

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
ORG = "local"


def doc(**parts: Any) -> dict[str, Any]:
    return {"apiVersion": "relay/v1", "kind": "Config", **parts}


def errors(document: Any) -> list[tuple[str, str]]:
    with pytest.raises(ConfigInvalidError) as refused:
        parse_config(document)
    return refused.value.errors


def lines(document: dict[str, Any], state: State | None = None, *, prune: bool = False) -> list[str]:
    made = plan(parse_config(document), state or State(), org=ORG, prune=prune)
    return [c.text() for c in made.changes]


FULL = doc(
    apps=[
        {"name": "orders", "settings": {"executorTimeoutSecs": 30, "gcRowsThreshold": 1000},
         "dataPlane": {"systemDatabaseUrlFrom": "env:ORDERS_SYSDB"},
         "alertRules": [{"type": "WorkflowFailure", "metadata": {"threshold": 3}, "minIntervalSecs": 600},
                        {"type": "UnresponsiveApplication", "receivingApp": "ops"}]},
        {"name": "ops"},
    ],
    keys=[{"name": "orders-exec", "apps": ["orders"], "permissions": ["websocket.connect"]},
          {"name": "ci"}],
)


# -- the document ------------------------------------------------------------------------------------------------
def test_a_full_document_parses_with_defaults_filled_in() -> None:
    config = parse_config(FULL)
    orders = config.apps[0]
    assert orders.settings == {"executorTimeoutSecs": 30, "gcRowsThreshold": 1000}
    assert orders.data_plane == {"systemDatabaseUrlFrom": "env:ORDERS_SYSDB", "mode": "read",
                                 "statementTimeoutMs": 10_000, "poolSize": 2, "schema": "dbos"}
    assert orders.rules[0].metadata == {"workflowName": None, "threshold": 3, "periodSecs": 60}
    assert config.keys[1].permissions == tuple(sorted(DEFAULT_KEY_PERMISSIONS))
    assert config.org is None and config.prune is False


def test_every_bad_item_is_named_by_its_path() -> None:
    found = errors(doc(
        extra=1,
        apps=[{"name": "good-app"},
              {"name": "b", "settings": {"gcRowsThreshold": 0, "executorTimeoutSecs": None, "privateMode": "no",
                                         "colour": 1},
               "alertRules": [{"type": "Nope"}, {"type": "SlowQueue", "metadata": {"thresholdSecs": -1}},
                              {"type": "WorkflowFailure", "metadata": {"bogus": 1}}],
               "dataPlane": {"systemDatabaseUrlFrom": "postgresql://u:p@h/db"}}],
        keys=[{"name": "k", "permissions": ["root"], "secret": "x"}],
    ))
    paths = dict(found)
    assert paths["extra"].startswith("unknown key")
    assert paths["apps[1].name"] == "must be 3-30 characters of [a-z0-9-_]"
    assert paths["apps[1].settings.gcRowsThreshold"] == "must be an integer >= 1 or null (no limit)"
    assert paths["apps[1].settings.executorTimeoutSecs"].startswith("must be an integer >= 1")
    assert paths["apps[1].settings.privateMode"] == "must be true or false"
    assert paths["apps[1].settings.colour"].startswith("unknown key")
    assert "must be one of" in paths["apps[1].alertRules[0].type"]
    assert paths["apps[1].alertRules[1].metadata.thresholdSecs"] == "must be a positive integer"
    assert "is not a setting of WorkflowFailure" in paths["apps[1].alertRules[2].metadata.bogus"]
    assert "env:NAME" in paths["apps[1].dataPlane.systemDatabaseUrlFrom"]
    assert "u:p@h" not in str(found)  # a URL pasted by mistake is never repeated
    assert paths["keys[0].permissions[0]"].startswith("unknown permission")
    assert paths["keys[0].secret"].startswith("unknown key")


@pytest.mark.parametrize(("document", "path", "message"), [
    (None, "(document)", "must be an object"),
    ({"kind": "Config"}, "apiVersion", "is required"),
    (doc(apiVersion="relay/v2"), "apiVersion", "must be relay/v1"),
    (doc(kind="Other"), "kind", "must be Config"),
    (doc(prune="yes"), "prune", "must be true or false"),
    (doc(apps={"name": "x"}), "apps", "must be a list"),
    (doc(apps=[{"name": "dup"}, {"name": "dup"}]), "apps[1].name", "application 'dup' is listed twice"),
    (doc(keys=[{"name": "k"}, {"name": "k"}]), "keys[1].name", "key 'k' is listed twice"),
    (doc(keys=[{"name": "k", "permissions": []}]), "keys[0].permissions", "must name at least one permission"),
    (doc(apps=[{"name": "abc", "alertRules": [{"type": "SlowQueue"}, {"type": "SlowQueue",
                                                                      "metadata": {"thresholdSecs": 60}}]}]),
     "apps[0].alertRules[1]", "the same rule as alertRules[0]"),
    (doc(apps=[{"name": "abc", "alertRules": [{"type": "SlowQueue", "minIntervalSecs": -5}]}]),
     "apps[0].alertRules[0].minIntervalSecs", "must be an integer >= 0"),
])
def test_one_bad_item(document: Any, path: str, message: str) -> None:
    found = dict(errors(document))
    assert path in found, found
    assert found[path].startswith(message), found[path]


# -- the plan ----------------------------------------------------------------------------------------------------
def test_a_plan_from_nothing_creates_everything() -> None:
    assert lines(FULL) == [
        "+ app orders",
        "~ settings orders: executorTimeoutSecs 60 -> 30, gcRowsThreshold none -> 1000",
        ("+ dataPlane orders: systemDatabaseUrlFrom=env:ORDERS_SYSDB, mode=read, statementTimeoutMs=10000, "
        "poolSize=2, schema=dbos"),
        "+ alertRule orders: WorkflowFailure, periodSecs=60 threshold=3, minIntervalSecs=600",
        "+ alertRule orders: UnresponsiveApplication, receivingApp=ops",
        "+ app ops",
        "+ key orders-exec: apps=orders permissions=websocket.connect",
        "+ key ci: apps=* permissions=application.read,application.write,metric.read,websocket.connect",
    ]


def state_of(document: dict[str, Any]) -> State:
    """The state a successful apply of ``document`` leaves (rule ids r0, r1...)."""
    config = parse_config(document)
    apps, counter = {}, 0
    for app in config.apps:
        rules = []
        for rule in app.rules:
            rules.append((f"r{counter}", rule))
            counter += 1
        apps[app.name] = AppState({**DEFAULT_SETTINGS, **app.settings}, app.data_plane, tuple(rules))
    return State(apps, {k.name: k for k in config.keys})


def test_the_same_document_again_plans_nothing() -> None:
    assert lines(FULL, state_of(FULL)) == []
    assert lines(FULL, state_of(FULL), prune=True) == []


def test_changes_are_shown_as_tilde_and_removals_only_when_pruning() -> None:
    state = state_of(FULL)
    edited = doc(apps=[
        {"name": "orders", "settings": {"executorTimeoutSecs": 45},
         "dataPlane": {"systemDatabaseUrlFrom": "env:ORDERS_SYSDB", "mode": "read-write"},
         "alertRules": [{"type": "WorkflowFailure", "metadata": {"threshold": 5}, "minIntervalSecs": 600}]},
    ], keys=[{"name": "orders-exec", "apps": ["orders"], "permissions": ["websocket.connect", "metric.read"]}])
    assert lines(edited, state) == [
        "~ settings orders: executorTimeoutSecs 30 -> 45",
        "~ dataPlane orders: mode read -> read-write",
        "+ alertRule orders: WorkflowFailure, periodSecs=60 threshold=5, minIntervalSecs=600",
        ("~ key orders-exec: apps=orders permissions=websocket.connect -> apps=orders "
        "permissions=metric.read,websocket.connect (a key cannot change: replaced, with a new secret, only with "
        "--replace-keys)"),
    ]
    pruned = lines(edited, state, prune=True)
    assert pruned == [
        "~ settings orders: executorTimeoutSecs 30 -> 45, gcRowsThreshold 1000 -> none",
        "~ dataPlane orders: mode read -> read-write",
        "- alertRule orders r0: WorkflowFailure, periodSecs=60 threshold=3, minIntervalSecs=600",
        "- alertRule orders r1: UnresponsiveApplication, receivingApp=ops",
        "+ alertRule orders: WorkflowFailure, periodSecs=60 threshold=5, minIntervalSecs=600",
        ("~ key orders-exec: apps=orders permissions=websocket.connect -> apps=orders "
        "permissions=metric.read,websocket.connect (a key cannot change: replaced, with a new secret, only with "
        "--replace-keys)"),
        "- key ci: apps=* permissions=application.read,application.write,metric.read,websocket.connect",
        "- app ops",
    ]
    # The file's own prune: true is the same as --prune.
    assert lines({**edited, "prune": True}, state) == pruned
    made = plan(parse_config(edited), state, org=ORG, prune=False)
    assert made.key_replacements == ["orders-exec"]


def test_a_data_plane_given_as_null_is_removed_without_pruning() -> None:
    document = doc(apps=[{"name": "orders", "dataPlane": None}])
    assert lines(document, state_of(FULL)) == ["- dataPlane orders: env:ORDERS_SYSDB removed"]


def test_references_to_applications_that_will_not_exist_are_refused() -> None:
    document = doc(apps=[{"name": "orders", "alertRules": [{"type": "UnresponsiveApplication",
                                                             "receivingApp": "ops"}]}],
                   keys=[{"name": "k", "apps": ["orders", "ghost"]}])
    with pytest.raises(ConfigInvalidError) as refused:
        plan(parse_config(document), State(), org=ORG, prune=False)
    assert dict(refused.value.errors) == {
        "apps[0].alertRules[0].receivingApp": "no application 'ops' (neither in the file nor registered)",
        "keys[0].apps": "no application 'ghost' (neither in the file nor registered)",
    }
    # ops registered: fine without pruning; with pruning it would be deleted, so it is refused.
    registered = State({"ops": AppState(dict(DEFAULT_SETTINGS))})
    document["keys"] = []
    assert plan(parse_config(document), registered, org=ORG, prune=False).changes
    with pytest.raises(ConfigInvalidError, match="pruning deletes it"):
        plan(parse_config(document), registered, org=ORG, prune=True)


def test_the_rule_aggregate_own_checks_apply_with_the_rule_path() -> None:
    document = doc(apps=[{"name": "orders", "alertRules": [{"type": "UnresponsiveApplication"}]}])
    with pytest.raises(ConfigInvalidError) as refused:
        plan(parse_config(document), State(), org=ORG, prune=False)
    ((path, message),) = refused.value.errors
    assert path == "apps[0].alertRules[0]" and "must name another application" in message


def test_the_basis_moves_with_the_state() -> None:
    state = state_of(FULL)
    moved = State({**state.apps, "ops": AppState({**DEFAULT_SETTINGS, "privateMode": True})}, state.keys)
    assert state.digest() == state_of(FULL).digest() != moved.digest()


# -- running a plan on aggregates --------------------------------------------------------------------------------
class Store:
    """Aggregates by id, as RelayLog.load finds them."""

    def __init__(self, *aggregates: Aggregate) -> None:
        self.found = {a.id: a for a in aggregates}

    def get(self, aggregate_id: UUID, kind: type) -> Any:
        return self.found.get(aggregate_id)


def test_a_plan_runs_on_the_aggregates_it_names() -> None:
    store = Store(Organization.create(ORG, AT))
    made = plan(parse_config(FULL), State(), org=ORG, prune=False)
    ids = iter(["rule-a", "rule-b"])
    changed = apply_changes(ORG, made.changes, store.get, {"orders-exec": "a" * 64, "ci": "b" * 64}, ids, AT,
                            "admin")
    kinds = sorted(type(a).__name__ for a in changed)
    assert kinds == ["AlertingRule", "AlertingRule", "App", "App", "Organization"]
    orders = next(a for a in changed if isinstance(a, App) and a.name == "orders")
    assert orders.settings["executorTimeoutSecs"] == 30
    assert orders.data_plane is not None
    assert [e.__class__.__name__ for e in orders.collect_events()] == ["Registered", "SettingsChanged",
                                                                       "DataPlaneConfigured"]
    rules = [a for a in changed if isinstance(a, AlertingRule)]
    assert {r.rule_id for r in rules} == {"rule-a", "rule-b"}
    assert next(r for r in rules if r.rule_type == "UnresponsiveApplication").receiving_app == "ops"


def test_a_plan_whose_expectations_moved_is_refused_whole() -> None:
    organization = Organization.create(ORG, AT)
    app = App.register(ORG, "orders", AT)
    app.change_settings({"executorTimeoutSecs": 30}, AT)
    state = State({"orders": AppState({**DEFAULT_SETTINGS, "executorTimeoutSecs": 30})})
    document = doc(apps=[{"name": "orders", "settings": {"executorTimeoutSecs": 45}}], keys=[{"name": "k"}])
    made = plan(parse_config(document), state, org=ORG, prune=False)
    app.change_settings({"executorTimeoutSecs": 50}, AT)  # meanwhile
    store = Store(organization, app)
    with pytest.raises(ConcurrentChangeError, match="settings:orders changed since the plan was made"):
        apply_changes(ORG, made.changes, store.get, {"k": "c" * 64}, iter(()), AT, "admin")
    # A key issued meanwhile too.
    organization.issue_key("k", "d" * 64, [], ["metric.read"], AT)
    made = plan(parse_config(doc(keys=[{"name": "k"}])), State(), org=ORG, prune=False)
    with pytest.raises(ConcurrentChangeError, match="key:k"):
        apply_changes(ORG, made.changes, store.get, {"k": "c" * 64}, iter(()), AT, "admin")


def test_a_replaced_key_is_revoked_and_issued_again() -> None:
    organization = Organization.create(ORG, AT)
    organization.issue_key("k", "d" * 64, [], ["metric.read"], AT)
    state = State(keys={"k": KeySpec("k", (), ("metric.read",))})
    made = plan(parse_config(doc(keys=[{"name": "k", "permissions": ["token.read"]}])), state, org=ORG, prune=False)
    apply_changes(ORG, made.changes, Store(organization).get, {"k": "e" * 64}, iter(()), AT, "admin")
    assert organization.keys["k"]["key_hash"] == "e" * 64
    assert organization.keys["k"]["permissions"] == ["token.read"]
    names = [e.__class__.__name__ for e in organization.collect_events()]
    assert names[-2:] == ["ApiKeyRevoked", "ApiKeyIssued"]


def test_rule_specs_compare_by_content() -> None:
    a = RuleSpec("SlowQueue", {"queueName": None, "thresholdSecs": 60}, None, None)
    b = RuleSpec("SlowQueue", {"queueName": None, "thresholdSecs": 60}, "orders", None)
    assert a.identity("orders") == b.identity("orders")  # the receiving app defaults to the rule's own
    assert a.identity("other") != b.identity("other")


# -- the documented examples ------------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[2]


def readme_config() -> Any:
    section = (REPO / "README.md").read_text().split("## Declarative configuration", 1)[1]
    return yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])


@pytest.mark.parametrize("document", [
    pytest.param(yaml.safe_load((REPO / "examples" / "relay.yaml").read_text()), id="examples/relay.yaml"),
    pytest.param(readme_config(), id="README"),
])
def test_the_documented_examples_are_valid_and_plan_from_nothing(document: Any) -> None:
    made = plan(parse_config(document), State(), org=ORG, prune=False)
    texts = [c.text() for c in made.changes]
    assert "+ app orders" in texts and "+ app ops" in texts
    assert any(t.startswith("+ key orders-executor") for t in texts)
    assert plan(parse_config(document), state_of(document), org=ORG, prune=True).changes == ()


class NoExecutorRegistry:
    """The registry of an application that never had an executor: none connected, none died."""

    def counts_by_status(self, org: str, app: str) -> dict[str, int]:
        return {}

    def recovered_deaths(self, org: str, app: str, since: str) -> list[dict[str, Any]]:
        return []

    def executors(self, org: str, app: str, include_deleted: bool = False) -> list[dict[str, Any]]:
        return []


@pytest.mark.parametrize("document", [
    pytest.param(yaml.safe_load((REPO / "examples" / "relay.yaml").read_text()), id="examples/relay.yaml"),
    pytest.param(readme_config(), id="README"),
])
def test_the_documented_examples_page_nobody_for_an_app_with_no_executor(document: Any) -> None:
    """Applied as they are, before any executor runs, their rules fire nothing (the alerting evaluator's own
    sources: nothing connected here or elsewhere, no data plane to ask, no deaths)."""
    config = parse_config(document)
    rules = [(app.name, rule) for app in config.apps for rule in app.rules]
    assert rules
    for app, rule in rules:
        sources = LiveSources(ORG, app, registry=NoExecutorRegistry(), live=[], latest=None, transport=None,
                              request_timeout_s=1, probe_timeout_s=1, mark_unsupported=lambda *_: None)
        row = {"app": app, "rule_type": rule.rule_type, "metadata": rule.metadata}
        try:
            finding = evaluate(row, sources, AT)
        except CannotAskError:
            finding = None  # not evaluated: AlertRun fires nothing for it
        assert finding is None, f"{app}'s {rule.rule_type} rule fires for an app with no executor: {finding}"


def test_a_deleted_application_registered_again_gets_its_rules_back_and_they_count() -> None:
    slow = RuleSpec("SlowQueue", {"queueName": None, "thresholdSecs": 60}, None, None)
    state = State(dormant_rules={"orders": (("old-rule", slow),)})
    document = doc(apps=[{"name": "orders", "alertRules": [{"type": "SlowQueue"}]}])
    assert lines(document, state) == ["+ app orders"]
    assert lines(doc(apps=[{"name": "orders"}]), state, prune=True) == [
        "+ app orders", "- alertRule orders old-rule: SlowQueue, thresholdSecs=60"]
