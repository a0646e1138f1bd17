"""Alerts as incidents (issue 32): the pure `Incident` aggregate and the evaluation policy; `AlertRun` with incidents
against a real event store (one notification per incident, the resolution sent, repeats only when opted in, two
instances at once, acknowledgement and silence); the sinks' shapes (PagerDuty trigger then resolve with one dedup
key, Slack's "Resolved"); the release gate (no incident event while a release 0.1.0 instance is live); the view."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from relay.actors.adapters.sinks import pagerduty_event, slack_message
from relay.actors.alerting import AlertRun
from relay.actors.configuration.alerting import SinkConfig
from relay.actors.delivery import Deliverer, Delivery, Notice, incident_payload
from relay.actors.incidents import latest_incident, open_incident
from relay.actors.policies.incidents import next_step, sent_to
from relay.actors.scheduler import ManualScheduler
from relay.events.alerting import AlertingRule
from relay.events.errors import IllegalTransitionError, InvalidValueError
from relay.events.incidents import (
    OPEN,
    RENOTIFY,
    RESOLVE,
    Incident,
    IncidentResolvedError,
    IncidentStillOpenError,
    IncidentTooSoonError,
)
from relay.events.refs import incident_ref, rule_ref
from relay.events.releases import ClusterUpgradingError
from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from relay.projections.views import Views
from tests.unit.test_alerting_evaluator import FAILURE, Exec, Transport, aggregates, sources

ORG, APP = "acme", "shop"
T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
META = {"failed_workflow_count": "1"}


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _rule(min_interval: int | None = None, renotify: int | None = None) -> AlertingRule:
    rule = AlertingRule.create(ORG, APP, "r1", "WorkflowFailure", {"threshold": 1, "periodSecs": 300}, "pager",
                               min_interval, T0)
    if renotify is not None:
        rule.set_renotify(renotify, T0)
    return rule


# -- the aggregate ---------------------------------------------------------------------------------------------------


def test_an_incident_opens_resolves_and_the_next_opens_only_after() -> None:
    rule = _rule()
    first = Incident.open(rule, None, "1 failed", META, "relay-a", _at(1))
    assert (first.number, first.receiving_app, first.resolved, first.state(_at(1))) == (1, "pager", False, "open")
    assert first.id == incident_ref(ORG, APP, "r1", 1).id
    with pytest.raises(IncidentStillOpenError):
        Incident.open(rule, first, "1 failed", META, "relay-a", _at(2))
    first.resolve("relay-a", _at(30))
    assert first.resolved and not first.resolved_quietly and first.state(_at(31)) == "resolved"
    with pytest.raises(IncidentResolvedError):
        first.resolve("relay-a", _at(31))
    second = Incident.open(rule, first, "2 failed", META, "relay-b", _at(40))
    assert second.number == 2 and second.instance == "relay-b"
    with pytest.raises(InvalidValueError):
        Incident.open(rule, None, " ", META, "relay-a", _at(1))
    rule.delete(_at(50))
    second.resolve("relay-a", _at(51))
    with pytest.raises(IllegalTransitionError, match="deleted"):
        Incident.open(rule, second, "x", META, "relay-a", _at(52))


def test_min_interval_spaces_incidents_of_a_flapping_rule() -> None:
    rule = _rule(min_interval=300)
    first = Incident.open(rule, None, "m", META, "a", _at(0))
    first.resolve("a", _at(30))
    with pytest.raises(IncidentTooSoonError):
        Incident.open(rule, first, "m", META, "a", _at(60))
    assert Incident.open(rule, first, "m", META, "a", _at(300)).number == 2


def test_renotify_is_due_only_when_opted_in_and_nobody_is_on_it() -> None:
    incident = Incident.open(_rule(), None, "m", META, "a", _at(0))
    assert not incident.renotify_due(None, _at(10_000))  # never by default
    assert not incident.renotify_due(60, _at(59)) and incident.renotify_due(60, _at(60))
    incident.renotify(60, "m2", {"failed_workflow_count": "2"}, "a", _at(60))
    assert (incident.renotified, incident.message, incident.last_sent_at) == (1, "m2", _at(60))
    with pytest.raises(IllegalTransitionError, match="not due"):
        incident.renotify(60, "m", META, "a", _at(100))  # the other instance read it after: not due any more
    incident.silence(_at(500), "ann", _at(130))
    assert incident.state(_at(130)) == "silenced" and not incident.renotify_due(60, _at(400))
    assert incident.renotify_due(60, _at(500))  # the silence is over
    assert incident.unsilence("ann", _at(200)) and not incident.unsilence("ann", _at(201))
    assert incident.acknowledge("bob", _at(210)) and not incident.acknowledge("bob", _at(211))
    assert incident.state(_at(220)) == "acknowledged" and not incident.renotify_due(60, _at(10_000))
    with pytest.raises(InvalidValueError):
        incident.silence(_at(210), "ann", _at(220))  # in the past
    incident.silence(_at(1000), "ann", _at(230))
    incident.resolve("a", _at(240))
    assert incident.resolved_quietly  # resolved while silenced
    for command in (lambda: incident.acknowledge("x", _at(250)), lambda: incident.silence(_at(900), "x", _at(250)),
                    lambda: incident.unsilence("x", _at(250))):
        with pytest.raises(IncidentResolvedError):
            command()


def test_the_policy_opens_once_renotifies_when_due_and_resolves() -> None:
    assert next_step(True, None, None, _at(0)) == OPEN
    assert next_step(False, None, None, _at(0)) is None
    incident = Incident.open(_rule(), None, "m", META, "a", _at(0))
    assert next_step(True, incident, None, _at(9_000)) is None  # holds, open: nothing without renotify
    assert next_step(True, incident, 60, _at(30)) is None
    assert next_step(True, incident, 60, _at(60)) == RENOTIFY
    assert next_step(False, incident, 60, _at(60)) == RESOLVE
    incident.resolve("a", _at(61))
    assert next_step(False, incident, 60, _at(70)) is None
    assert next_step(True, incident, 60, _at(70)) == OPEN
    assert sent_to(OPEN, quiet=False) == (True, None) and sent_to(RENOTIFY, quiet=False) == (True, None)
    assert sent_to(RESOLVE, quiet=False) == (False, None)  # the executors' handlers never get a resolution
    assert sent_to(RESOLVE, quiet=True) == (False, frozenset({"pagerduty"}))


# -- AlertRun with incidents against a store ------------------------------------------------------------------------


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[RelayLog, RelayLog]]:
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db")}
    a, b = RelayLog(env=env), RelayLog(env=env)
    yield a, b
    a.close()
    b.close()


class Sent:
    def __init__(self) -> None:
        self.notices: list[Notice] = []

    def __call__(self, notice: Any) -> Delivery:
        self.notices.append(notice)
        return Delivery(["sink-1"] if notice.to_executors else [], [], {"outcome": "delivered", "attempts": 1,
                                                                        "status": 200, "error": None})

    def kinds(self) -> list[str]:
        return [n.payload["notification"] for n in self.notices]


def evaluate(log: RelayLog, clock: ManualScheduler, sent: Sent, failures: int, row: dict[str, Any] | None = None,
             instance: str = "relay-a") -> list[object]:
    transport = Transport({("e1", "get_workflow_aggregates"): aggregates(failures)})
    return AlertRun(ORG, APP, log=log, sources=sources(transport, [Exec("e1")]), instance_id=instance,
                    interval_s=30, clock=clock.wall, deliver=sent, notify=sent).run([row or FAILURE])


def _create(log: RelayLog, clock: ManualScheduler, renotify: int | None = None) -> None:
    def make() -> AlertingRule:
        rule = AlertingRule.create(ORG, APP, "r1", "WorkflowFailure", FAILURE["metadata"], None, None, clock.wall())
        if renotify is not None:
            rule.set_renotify(renotify, clock.wall())
        return rule

    log.create(rule_ref(ORG, APP, "r1"), make)


def test_one_notification_per_incident_over_many_intervals_then_the_resolution(
        logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    _create(log, clock)
    sent = Sent()
    assert evaluate(log, clock, sent, failures=5) == [("r1", OPEN)]
    for _ in range(9):  # the 9 alerts, one every 30 s: now none
        clock.advance(30)
        assert evaluate(log, clock, sent, failures=5) == []
    clock.advance(30)
    assert evaluate(log, clock, sent, failures=0) == [("r1", RESOLVE)]
    assert evaluate(log, clock, sent, failures=0) == []
    assert sent.kinds() == ["open", "resolve"]
    opened, resolved = sent.notices
    assert opened.to_executors and not resolved.to_executors and resolved.sinks is None
    assert opened.payload["incidentId"] == resolved.payload["incidentId"]
    assert (opened.payload["state"], resolved.payload["state"]) == ("open", "resolved")
    incident = latest_incident(log, ORG, APP, "r1")
    assert incident is not None and incident.resolved and incident.notified == ["open", "resolve"]
    clock.advance(30)
    assert evaluate(log, clock, sent, failures=5) == [("r1", OPEN)]  # it holds again: incident 2
    assert sent.notices[-1].payload["sequence"] == 2


def test_a_rule_that_cannot_be_evaluated_keeps_its_incident_open(logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    _create(log, clock)
    sent = Sent()
    evaluate(log, clock, sent, failures=5)
    run = AlertRun(ORG, APP, log=log, sources=sources(Transport(), []), instance_id="relay-a", interval_s=30,
                   clock=clock.wall, deliver=sent)
    assert run.run([FAILURE]) == []  # nobody to ask: not "it stopped holding"
    assert sent.kinds() == ["open"]


def test_renotify_only_when_opted_in_and_not_acknowledged(logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    _create(log, clock, renotify=60)
    row = dict(FAILURE, renotify_interval_secs=60)
    sent = Sent()
    evaluate(log, clock, sent, 5, row)
    clock.advance(30)
    assert evaluate(log, clock, sent, 5, row) == []
    clock.advance(30)
    assert evaluate(log, clock, sent, 6, row) == [("r1", RENOTIFY)]
    assert sent.notices[-1].to_executors and sent.notices[-1].metadata["failed_workflow_count"] == "6"
    log.change(incident_ref(ORG, APP, "r1", 1), lambda i: i.acknowledge("ann", clock.wall()))
    clock.advance(600)
    assert evaluate(log, clock, sent, 5, row) == []
    assert sent.kinds() == ["open", "renotify"]


def test_a_silenced_incident_sends_nothing_and_its_resolution_only_to_pagerduty(
        logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    _create(log, clock, renotify=30)
    row = dict(FAILURE, renotify_interval_secs=30)
    sent = Sent()
    evaluate(log, clock, sent, 5, row)
    log.change(incident_ref(ORG, APP, "r1", 1), lambda i: i.silence(clock.wall() + timedelta(hours=1), "ann",
                                                                       clock.wall()))
    for _ in range(4):
        clock.advance(30)
        assert evaluate(log, clock, sent, 5, row) == []
    assert evaluate(log, clock, sent, 0, row) == [("r1", RESOLVE)]
    quiet = sent.notices[-1]
    assert (quiet.to_executors, quiet.sinks) == (False, frozenset({"pagerduty"}))


def test_two_instances_at_once_open_and_resolve_once(logs: tuple[RelayLog, RelayLog]) -> None:
    a, b = logs
    clock = ManualScheduler()
    _create(a, clock)
    sent_a, sent_b = Sent(), Sent()
    opened = evaluate(a, clock, sent_a, 5, instance="relay-a") + evaluate(b, clock, sent_b, 5, instance="relay-b")
    assert opened == [("r1", OPEN)]
    clock.advance(30)  # both resolve it in turn: the second reads it resolved and does nothing
    resolved = evaluate(a, clock, sent_a, 0) + evaluate(b, clock, sent_b, 0)
    assert resolved == [("r1", RESOLVE)]
    assert len(sent_a.notices) + len(sent_b.notices) == 2
    # A lost race to open: the other instance opened incident 2 between our read and our save.
    clock.advance(30)
    open_incident(b, ORG, APP, "r1", "m", META, "relay-b", clock.wall(), known=1)
    with pytest.raises(IncidentStillOpenError):
        open_incident(a, ORG, APP, "r1", "m", META, "relay-a", clock.wall(), known=1)


def test_while_a_release_0_1_0_instance_is_live_no_incident_event_is_written(logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    _create(log, clock)
    log.release_floor = lambda: "0.1.0"
    sent = Sent()
    fired = evaluate(log, clock, sent, 5)
    assert [type(a).__name__ for a in fired] == ["Alert"]  # as release 0.1.0 fires
    assert latest_incident(log, ORG, APP, "r1") is None
    with pytest.raises(ClusterUpgradingError, match=r"Incident\.Opened"):
        open_incident(log, ORG, APP, "r1", "m", META, "relay-a", clock.wall())
    with pytest.raises(ClusterUpgradingError, match=r"AlertingRule\.RenotifySet"):
        log.change(rule_ref(ORG, APP, "r1"), lambda r: r.set_renotify(60, clock.wall()))
    log.release_floor = lambda: "0.2.0"
    clock.advance(30)
    assert evaluate(log, clock, sent, 5) == [("r1", OPEN)]


def test_the_view_lists_incidents_with_their_notifications(tmp_path: Path) -> None:
    config = StoreConfig(data_dir=tmp_path)
    log = RelayLog(env=config.event_store_env())
    views = Views(config, log)
    try:
        clock = ManualScheduler()
        _create(log, clock, renotify=120)
        sent = Sent()
        evaluate(log, clock, sent, 5)
        views.catch_up()
        assert views.alerting.rule(ORG, APP, "r1")["renotify_interval_secs"] == 120  # type: ignore[index]
        assert views.alerting.incident_numbers(ORG, APP) == {"r1": 1}
        [row] = views.alerting.incidents(ORG, APP, "open")
        assert (row["number"], row["resolved_at"], row["metadata"]) == (1, None, {
            "workflow_name": "checkout", "failed_workflow_count": "5", "threshold": "3", "period_secs": "60"})
        clock.advance(30)
        evaluate(log, clock, sent, 0)
        views.catch_up()
        assert views.alerting.incidents(ORG, APP, "open") == []
        detail = views.alerting.incident(ORG, APP, row["id"])
        assert detail is not None and detail["resolved_at"] is not None
        assert [(n["kind"], n["delivered_to"]) for n in detail["notifications"]] == [
            ("open", ["sink-1"]), ("resolve", [])]
    finally:
        views.close()
        log.close()


# -- what the sinks get ---------------------------------------------------------------------------------------------


def test_pagerduty_triggers_then_resolves_one_dedup_key_and_slack_says_resolved() -> None:
    incident = Incident.open(_rule(), None, "1 workflow failed", META, "relay-a", _at(0))
    opened = incident_payload(incident, OPEN, _at(0))
    incident.resolve("relay-a", _at(90))
    resolved = incident_payload(incident, RESOLVE, _at(90))
    trigger, resolve = pagerduty_event(opened, "rk-secret"), pagerduty_event(resolved, "rk-secret")
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert trigger["dedup_key"] == resolve["dedup_key"] == f"relay/incident/{incident.id}"
    assert set(resolve) == {"routing_key", "event_action", "dedup_key"}
    assert resolved["resolvedAt"] == "2026-12-06T12:01:30.000Z" and resolved["state"] == "resolved"
    header = slack_message(resolved)["blocks"][0]["text"]["text"]
    assert header.startswith("Resolved: WorkflowFailure") and "Resolved" not in slack_message(opened)["text"]
    assert "incident 1" in json.dumps(slack_message(resolved))


def test_a_quiet_resolution_reaches_pagerduty_alone() -> None:
    posted: list[str] = []

    def sink(config: SinkConfig, payload: Any) -> dict[str, Any]:
        posted.append(config.name)
        return {"outcome": "delivered", "attempts": 1, "status": 202, "error": None}

    hooks: list[Any] = []
    deliverer = Deliverer(transport=Transport(), peers=lambda o, a: [Exec("e1")], timeout_s=0.05,
                          webhook=object(), send_hook=lambda c, p: hooks.append(p) or {"outcome": "delivered"},  # type: ignore[arg-type]
                          sinks=(SinkConfig("slack", "https://hooks.example/x"),
                                 SinkConfig("pagerduty", "https://events.example", routing_key="rk")),
                          send_to_sink=sink)
    incident = Incident.open(_rule(), None, "m", META, "a", _at(0))
    payload = incident_payload(incident, RESOLVE, _at(9))
    quiet = deliverer.send(Notice(ORG, APP, "pager", "WorkflowFailure", "m", META, payload, False,
                                  frozenset({"pagerduty"})))
    assert posted == ["pagerduty"] and hooks == [] and quiet.delivered_to == [] and set(quiet.sinks) == {"pagerduty"}
    loud = deliverer.send(Notice(ORG, APP, "pager", "WorkflowFailure", "m", META, payload))
    assert posted == ["pagerduty", "slack", "pagerduty"] and len(hooks) == 1 and loud.delivered_to == ["e1"]


def test_a_deleted_rules_open_incident_is_resolved_and_the_resolution_sent(logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    _create(log, clock)
    sent = Sent()
    evaluate(log, clock, sent, 5)
    log.change(rule_ref(ORG, APP, "r1"), lambda rule: rule.delete(clock.wall()))
    clock.advance(30)
    assert evaluate(log, clock, sent, 5, dict(FAILURE, deleted=True)) == [("r1", RESOLVE)]
    assert evaluate(log, clock, sent, 5, dict(FAILURE, deleted=True)) == []
    assert sent.kinds() == ["open", "resolve"]
