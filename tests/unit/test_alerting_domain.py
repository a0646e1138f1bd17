"""Alerting and retention in the domain: AlertingRule, Alert and RetentionRun (pure, times passed in), and the
RelayLog commands that record them, including two instances racing for the same firing or run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import Application

from relay.actors import alerting
from relay.actors.alerting import fire_alert, latest_alert
from relay.events.alerting import (
    Alert,
    AlertAlreadyFiredError,
    AlertingRule,
    AlertTooSoonError,
    alert_aggregate_id,
    check_rule_metadata,
)
from relay.events.errors import AlreadyExistsError, IllegalTransitionError, InvalidValueError, NotFoundError
from relay.events.refs import alert_ref, retention_ref, rule_ref
from relay.events.retention import FAILED, SUCCEEDED, RetentionRun
from relay.projections.store.log import RelayLog

T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
META = {"workflow_name": "*", "failed_workflow_count": "3", "threshold": "3", "period_secs": "60"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rule(min_interval: int | None = None, rule_type: str = "WorkflowFailure", receiving: str | None = None,
         metadata: dict | None = None) -> AlertingRule:
    made = AlertingRule.create("acme", "shop", "r1", rule_type, metadata or {}, receiving, min_interval, T0, "admin")
    made.collect_events()
    return made


def fire(r: AlertingRule, previous: Alert | None, slot: int, when: float) -> Alert:
    return Alert.fire(r, previous, slot, "3 workflows failed", dict(META), "relay-1", at(when))


def replay(events: list) -> object:
    aggregate = None
    for e in events:
        aggregate = e.mutate(aggregate)
    return aggregate


# -- rule metadata ------------------------------------------------------------------------------------


def test_rule_metadata_gets_its_defaults_and_canonical_keys() -> None:
    assert check_rule_metadata("WorkflowFailure", {}) == {"workflowName": None, "threshold": 1, "periodSecs": 60}
    assert check_rule_metadata("WorkflowFailure", {"workflow_name": "checkout", "period_secs": 300}) == {
        "workflowName": "checkout", "threshold": 1, "periodSecs": 300}
    assert check_rule_metadata("WorkflowFailure", {"workflowName": "*"})["workflowName"] is None
    assert check_rule_metadata("SlowQueue", None) == {"queueName": None, "thresholdSecs": 60}
    assert check_rule_metadata("SlowQueue", {"queue_name": "q", "thresholdSecs": 5}) == {
        "queueName": "q", "thresholdSecs": 5}
    assert check_rule_metadata("UnresponsiveApplication", {}) == {}
    assert check_rule_metadata("RecoveryFlapping", {}) == {"threshold": 3, "periodSecs": 600}
    assert check_rule_metadata("RecoveryFlapping", {"period_secs": 60, "threshold": 2}) == {
        "threshold": 2, "periodSecs": 60}
    assert check_rule_metadata("StrandedVersion", None) == {"minPending": 1, "thresholdSecs": 60}
    assert check_rule_metadata("StrandedVersion", {"min_pending": 5, "thresholdSecs": 1}) == {
        "minPending": 5, "thresholdSecs": 1}


@pytest.mark.parametrize(("rule_type", "metadata", "named"), [
    ("Nope", {}, "ruleType"),
    ("WorkflowFailure", [], "must be an object"),
    ("WorkflowFailure", {"threshold": 0}, "ruleMetadata.threshold"),
    ("WorkflowFailure", {"threshold": True}, "ruleMetadata.threshold"),
    ("WorkflowFailure", {"periodSecs": "60"}, "ruleMetadata.periodSecs"),
    ("WorkflowFailure", {"workflowName": ""}, "ruleMetadata.workflowName"),
    ("WorkflowFailure", {"threshold": 2, "thresholdSecs": 3}, "ruleMetadata.thresholdSecs"),
    ("WorkflowFailure", {"period_secs": 5, "periodSecs": 6}, "twice"),
    ("SlowQueue", {"queueName": 7}, "ruleMetadata.queueName"),
    ("UnresponsiveApplication", {"thresholdSecs": 5}, "known: none"),
    ("RecoveryFlapping", {"threshold": 0}, "ruleMetadata.threshold must be a positive integer"),
    ("RecoveryFlapping", {"periodSecs": 2.5}, "ruleMetadata.periodSecs"),
    ("RecoveryFlapping", {"workflowName": "x"}, "known: threshold, periodSecs"),
    ("StrandedVersion", {"minPending": -1}, "ruleMetadata.minPending"),
    ("StrandedVersion", {"thresholdSecs": "60"}, "ruleMetadata.thresholdSecs"),
    ("StrandedVersion", {"version": "v1"}, "known: minPending, thresholdSecs"),
])
def test_bad_rule_metadata_is_refused_naming_the_key(rule_type: str, metadata: object, named: str) -> None:
    with pytest.raises(InvalidValueError, match=named):
        check_rule_metadata(rule_type, metadata)


# -- AlertingRule -------------------------------------------------------------------------------------


def test_a_rule_is_created_with_who_asked_and_received_by_its_own_app_by_default() -> None:
    made = AlertingRule.create("acme", "shop", "r1", "SlowQueue", {"queueName": "q"}, None, 30, T0, "admin")
    [created] = made.collect_events()
    assert type(created).__name__ == "Created"
    assert (created.rule_type, created.receiving_app, created.min_interval_secs, created.by) == (
        "SlowQueue", "shop", 30, "admin")
    assert created.metadata == {"queueName": "q", "thresholdSecs": 60}
    assert (made.receiving_app, made.deleted) == ("shop", False)


def test_an_unresponsive_application_rule_must_alert_another_app() -> None:
    for receiving in (None, "shop"):
        with pytest.raises(InvalidValueError, match="another application"):
            AlertingRule.create("acme", "shop", "r1", "UnresponsiveApplication", {}, receiving, None, T0)
    assert rule(rule_type="UnresponsiveApplication", receiving="pager").receiving_app == "pager"


@pytest.mark.parametrize(("args", "named"), [
    ({"rule_id": ""}, "rule id"),
    ({"min_interval_secs": -1}, "minIntervalSecs"),
    ({"min_interval_secs": 1.5}, "minIntervalSecs"),
    ({"receiving_app": "Bad Name"}, "application name"),
    ({"org": "X"}, "organization name"),
])
def test_bad_rules_are_refused(args: dict, named: str) -> None:
    fields = {"org": "acme", "app": "shop", "rule_id": "r1", "rule_type": "SlowQueue", "metadata": {},
              "receiving_app": None, "min_interval_secs": None, "at": T0} | args
    with pytest.raises(InvalidValueError, match=named):
        AlertingRule.create(**fields)


def test_a_rule_is_deleted_once_and_rebuilds_from_its_events() -> None:
    made = AlertingRule.create("acme", "shop", "r1", "SlowQueue", {}, None, None, T0)
    made.delete(at(5), "api_key:ops")
    events = made.collect_events()
    with pytest.raises(IllegalTransitionError, match="deleted: cannot delete it"):
        made.delete(at(6))
    rebuilt = replay(events)
    assert isinstance(rebuilt, AlertingRule)
    assert (rebuilt.deleted, rebuilt.deleted_at, rebuilt.version) == (True, at(5), 2)


# -- Alert ----------------------------------------------------------------------------------------------


def test_alerts_are_numbered_and_fire_once_per_interval() -> None:
    r = rule()
    first = fire(r, None, slot=10, when=0)
    assert (first.sequence, first.slot, first.receiving_app, first.rule_type) == (1, 10, "shop", "WorkflowFailure")
    assert first.id == alert_aggregate_id("acme", "shop", "r1", 1)
    with pytest.raises(AlertAlreadyFiredError):
        fire(r, first, slot=10, when=1)
    with pytest.raises(AlertAlreadyFiredError):
        fire(r, first, slot=9, when=1)  # an older interval (a late evaluator) neither
    second = fire(r, first, slot=11, when=30)
    assert (second.sequence, second.id) == (2, alert_aggregate_id("acme", "shop", "r1", 2))


def test_min_interval_secs_holds_between_firings() -> None:
    r = rule(min_interval=300)
    first = fire(r, None, slot=1, when=0)
    with pytest.raises(AlertTooSoonError, match="300 s"):
        fire(r, first, slot=2, when=299.9)
    assert fire(r, first, slot=11, when=300).sequence == 2


def test_deleted_rules_do_not_fire_and_alerts_need_string_metadata() -> None:
    r = rule()
    with pytest.raises(InvalidValueError, match="strings"):
        Alert.fire(r, None, 1, "m", {"count": 3}, "relay-1", T0)  # type: ignore[dict-item]
    with pytest.raises(InvalidValueError, match="message"):
        Alert.fire(r, None, 1, " ", {}, "relay-1", T0)
    other = AlertingRule.create("acme", "shop", "r2", "SlowQueue", {}, None, None, T0)
    with pytest.raises(InvalidValueError, match="another rule"):
        fire(other, fire(r, None, 1, 0), slot=2, when=60)
    r.delete(at(1))
    with pytest.raises(IllegalTransitionError, match="deleted: cannot fire it"):
        fire(r, None, slot=2, when=2)


def test_an_alert_records_where_it_went_once() -> None:
    alert = fire(rule(), None, slot=1, when=0)
    alert.deliver(["exec-b", "exec-a"], [{"executorId": "exec-c", "reason": "executor did not answer in time"}],
                  {"outcome": "delivered", "attempts": 2, "status": 200, "error": None}, at(1))
    events = alert.collect_events()
    assert [type(e).__name__ for e in events] == ["Fired", "Delivered"]
    assert events[1].delivered_to == ["exec-a", "exec-b"]
    with pytest.raises(IllegalTransitionError, match="delivered"):
        alert.deliver([], [], None, at(2))
    rebuilt = replay(events)
    assert isinstance(rebuilt, Alert) and rebuilt.delivered and rebuilt.metadata == META
    with pytest.raises(InvalidValueError):
        fire(rule(), None, 1, 0).deliver([], [{"reason": "no id"}], None, at(1))


def test_relay_rule_types_may_alert_their_own_app() -> None:
    for rule_type in ("RecoveryFlapping", "StrandedVersion"):
        made = rule(rule_type=rule_type)
        assert (made.rule_type, made.receiving_app) == (rule_type, "shop")
    assert rule(rule_type="StrandedVersion", metadata={"minPending": 2}).metadata == {
        "minPending": 2, "thresholdSecs": 60}


def test_an_alert_records_each_sinks_outcome_and_nothing_else() -> None:
    outcome = {"outcome": "failed", "attempts": 3, "status": 500, "error": "HTTP 500"}
    alert = fire(rule(), None, slot=1, when=0)
    alert.deliver([], [], None, at(1), {"slack": outcome, "pagerduty": {**outcome, "outcome": "delivered"}})
    delivered = alert.collect_events()[1]
    assert delivered.sinks == {"slack": outcome, "pagerduty": {**outcome, "outcome": "delivered"}}
    assert type(delivered).class_version == 2
    with pytest.raises(InvalidValueError, match="sinks"):
        fire(rule(), None, 1, 0).deliver([], [], None, at(1), {"slack": "https://hooks.example/secret"})


def test_a_delivery_recorded_before_the_sinks_reads_with_none() -> None:
    """Alert.Delivered v1 (no ``sinks``) in a store reads as today's v2, with no sink."""
    then = Application[UUID](env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    alert = fire(rule(), None, slot=1, when=0)
    alert.deliver(["exec-a"], [], None, at(1), {"slack": {"outcome": "delivered"}})
    then.save(alert)
    fired, delivered = then.recorder.select_events(alert.id)
    state = json.loads(delivered.state)
    del state["sinks"], state["class_version"]
    older = replace(delivered, state=json.dumps(state).encode())
    now = Application[UUID](env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    now.recorder.insert_events([fired, older])
    event = now.mapper.to_domain_event(now.recorder.select_events(alert.id)[1])
    assert (event.delivered_to, event.sinks) == (["exec-a"], {})
    assert now.repository.get(alert.id).delivered


# -- RetentionRun -------------------------------------------------------------------------------------


POLICY = {"gc_cutoff_epoch_ms": 1_000, "gc_rows_threshold": None, "gc_batch_size": None,
          "timeout_cutoff_epoch_ms": None}


def test_a_retention_run_starts_and_finishes_once() -> None:
    run = RetentionRun.start("acme", "shop", 7, "exec-1", POLICY, {"gcTimeThresholdMs": 5}, "relay-1", T0)
    run.finish(SUCCEEDED, None, at(1))
    events = run.collect_events()
    assert [type(e).__name__ for e in events] == ["Started", "Finished"]
    assert events[0].policy == POLICY and events[0].executor == "exec-1"
    with pytest.raises(IllegalTransitionError, match="succeeded: cannot finish it again"):
        run.finish(FAILED, "again", at(2))
    rebuilt = replay(events)
    assert isinstance(rebuilt, RetentionRun) and (rebuilt.outcome, rebuilt.finished_at) == (SUCCEEDED, at(1))


@pytest.mark.parametrize(("policy", "named"), [
    ({"gc_rows_threshold": None}, "needs a cutoff"),
    ({"gc_rows_threshold": -1}, "gc_rows_threshold"),
    ({"gc_rows_threshold": 5, "keep": 1}, "unknown retention field"),
])
def test_bad_retention_runs_are_refused(policy: dict, named: str) -> None:
    with pytest.raises(InvalidValueError, match=named):
        RetentionRun.start("acme", "shop", 1, "exec-1", policy, {}, "relay-1", T0)
    with pytest.raises(InvalidValueError, match="executor"):
        RetentionRun.start("acme", "shop", 1, "", POLICY, {}, "relay-1", T0)
    run = RetentionRun.start("acme", "shop", 1, "exec-1", POLICY, {}, "relay-1", T0)
    with pytest.raises(InvalidValueError, match="reason"):
        run.finish(FAILED, None, T0)
    with pytest.raises(InvalidValueError, match="outcome"):
        run.finish("maybe", None, T0)


# -- through the event store ----------------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path) -> Iterator[tuple[RelayLog, RelayLog]]:
    """Two RelayLogs (two Relay instances) sharing one SQLite event store."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db")}
    a, b = RelayLog(env=env), RelayLog(env=env)
    yield a, b
    a.close()
    b.close()


def create(log: RelayLog, min_interval: int | None = None) -> AlertingRule:
    return log.create(rule_ref("acme", "shop", "r1"),
                      lambda: AlertingRule.create(
                          "acme", "shop", "r1", "WorkflowFailure", {"threshold": 3}, "pager", min_interval, T0,
                          "admin"))


def test_rules_are_created_and_deleted_through_the_log(pair: tuple[RelayLog, RelayLog]) -> None:
    a, b = pair
    create(a)
    with pytest.raises(AlreadyExistsError):
        create(b)
    assert b.get(rule_ref("acme", "shop", "r1")).metadata["threshold"] == 3  # type: ignore[union-attr]
    b.change(rule_ref("acme", "shop", "r1"), lambda rule: rule.delete(at(1)))
    with pytest.raises(NotFoundError):
        a.change(rule_ref("acme", "shop", "r1"), lambda rule: rule.delete(at(2)))
    with pytest.raises(NotFoundError):
        fire_alert(a, "acme", "shop", "nope", 1, "m", {}, "relay-1", at(3))
    with pytest.raises(IllegalTransitionError, match="deleted"):
        fire_alert(a, "acme", "shop", "r1", 1, "m", {}, "relay-1", at(3))


def test_two_instances_firing_the_same_interval_fire_once(pair: tuple[RelayLog, RelayLog]) -> None:
    a, b = pair
    create(a)
    alert = fire_alert(a, "acme", "shop", "r1", 5, "m", dict(META), "relay-a", at(0))
    assert alert.sequence == 1
    with pytest.raises(AlertAlreadyFiredError):
        fire_alert(b, "acme", "shop", "r1", 5, "m", dict(META), "relay-b", at(0.5))
    assert fire_alert(b, "acme", "shop", "r1", 6, "m", dict(META), "relay-b", at(30)).sequence == 2


def test_an_instance_that_read_before_the_other_saved_loses_the_race(
    pair: tuple[RelayLog, RelayLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """b reads the rule's latest alert (none), a saves alert 1, then b saves its alert 1: the store refuses b's
    (same aggregate, version taken); b reads again, finds a's, and the domain refuses to fire twice."""
    a, b = pair
    create(a)
    reads: list[int] = []

    def stale_first(relay_log: RelayLog, *args: Any, **kwargs: Any) -> Alert | None:
        if relay_log is b:
            reads.append(1)
            if len(reads) == 1:
                fire_alert(a, "acme", "shop", "r1", 5, "m", dict(META), "relay-a", at(0))
                return None
        return latest_alert(relay_log, *args, **kwargs)

    monkeypatch.setattr(alerting, "latest_alert", stale_first)
    with pytest.raises(AlertAlreadyFiredError):
        fire_alert(b, "acme", "shop", "r1", 5, "m", dict(META), "relay-b", at(0))
    assert len(reads) == 2
    assert latest_alert(a, "acme", "shop", "r1").instance == "relay-a"  # type: ignore[union-attr]


def test_min_interval_holds_across_instances_and_the_hint_may_lag(pair: tuple[RelayLog, RelayLog]) -> None:
    a, b = pair
    create(a, min_interval=120)
    fire_alert(a, "acme", "shop", "r1", 1, "m", dict(META), "relay-a", at(0))
    with pytest.raises(AlertTooSoonError):
        fire_alert(b, "acme", "shop", "r1", 2, "m", dict(META), "relay-b", at(60), 0)
    second = fire_alert(b, "acme", "shop", "r1", 5, "m", dict(META), "relay-b", at(120), 0)
    third = fire_alert(a, "acme", "shop", "r1", 9, "m", dict(META), "relay-a", at(240), 7)  # hint ahead
    assert (second.sequence, third.sequence) == (2, 3)
    assert latest_alert(a, "acme", "shop", "r1", 1).sequence == 3  # type: ignore[union-attr]
    delivered = b.change(alert_ref("acme", "shop", "r1", 3), lambda alert: alert.deliver(["exec-1"], [], None, at(241)))
    assert delivered.delivered
    with pytest.raises(IllegalTransitionError):
        a.change(alert_ref("acme", "shop", "r1", 3), lambda alert: alert.deliver(["exec-1"], [], None, at(242)))
    with pytest.raises(NotFoundError):
        a.change(alert_ref("acme", "shop", "r1", 4), lambda alert: alert.deliver([], [], None, at(242)))


def test_one_retention_run_per_interval_across_instances(pair: tuple[RelayLog, RelayLog]) -> None:
    a, b = pair
    a.create(retention_ref("acme", "shop", 3), lambda: RetentionRun.start("acme", "shop", 3, "exec-1", POLICY,
                                                                          {"gcTimeThresholdMs": 5}, "relay-a", T0))
    with pytest.raises(AlreadyExistsError):
        b.create(retention_ref("acme", "shop", 3), lambda: RetentionRun.start("acme", "shop", 3, "exec-2", POLICY, {},
                                                                              "relay-b", T0))
    finished = b.change(retention_ref("acme", "shop", 3),
                        lambda run: run.finish(FAILED, "executor did not answer in time", at(1)))
    assert (finished.outcome, finished.reason, finished.executor) == (FAILED, "executor did not answer in time",
                                                                      "exec-1")
    with pytest.raises(NotFoundError):
        a.change(retention_ref("acme", "shop", 4), lambda run: run.finish(SUCCEEDED, None, at(1)))
