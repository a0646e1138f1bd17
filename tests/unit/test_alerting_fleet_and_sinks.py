"""Relay's own rule types and the Slack and PagerDuty sinks, without I/O (fake executors, fake registry, fake
system database, a scripted POST), time injected (ManualScheduler):

- RecoveryFlapping counts recovered deaths from the registry alone: no executor is asked, none needs to be
  connected; it fires once per interval through AlertRun and a real event store;
- StrandedVersion: pending workflows per version from the database first, else an executor (aggregates, or
  list_workflows on an SDK without them); versions run by a connected executor, or left less than thresholdSecs
  ago, are not stranded; without any source the rule is not evaluated;
- the Slack message and the PagerDuty event have the shapes the services document, within their limits;
- each sink is retried like the webhook, and its outcome (never its URL or key) is what Delivery records, with no
  executor connected anywhere;
- an executor with a fixed executor_id recovered twice keeps both recoveries in the views (both count);
- the sinks' settings are read from the environment, and bad ones refused by name, never by value.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from relay.actors.adapters.dataplane.client import State
from relay.actors.adapters.sinks import (
    PAGERDUTY,
    SLACK,
    HttpError,
    pagerduty_event,
    send_sink,
    slack_message,
)
from relay.actors.alerting import AlertRun, LiveSources, evaluate, fire_alert
from relay.actors.configuration.alerting import SinkConfig
from relay.actors.configuration.settings import ConfigError, Settings
from relay.actors.delivery import Deliverer, Delivery, alert_payload
from relay.actors.errors import DataPlaneError, DataPlaneUnavailableError
from relay.actors.scheduler import ManualScheduler
from relay.events.alerting import AlertingRule
from relay.events.executor import Executor, ExecutorInfo
from relay.events.refs import executor_ref, rule_ref
from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from relay.projections.views import Views
from relay.wire.errors import CannotAskError
from relay.wire.responses import GetWorkflowAggregatesResponse, ListWorkflowsResponse
from tests.unit.test_alerting_evaluator import Exec, Transport, rule_row, unknown

ORG, APP = "acme", "shop"
SLACK_URL = "https://hooks.slack.example/services/T000/B000/very-secret-token"
ROUTING_KEY = "0123456789abcdef0123456789abcdef"


class Registry:
    """The registry view's reads: executors (rows) and recovered deaths (rows with dispatched_at)."""

    def __init__(self, executors: list[dict[str, Any]] | None = None,
                 deaths: list[tuple[str, datetime]] | None = None) -> None:
        self.rows = executors or []
        self.deaths = deaths or []
        self.since: list[str] = []

    def counts_by_status(self, org: str, app: str) -> dict[str, int]:
        return {"HEALTHY": sum(1 for r in self.rows if r["status"] == "HEALTHY")}

    def executors(self, org: str, app: str, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        assert include_deleted
        return self.rows

    def recovered_deaths(self, org: str, app: str, since: str) -> list[dict[str, Any]]:
        self.since.append(since)
        return [{"executor_id": e, "dispatched_at": t.isoformat()} for e, t in self.deaths if t.isoformat() >= since]


def executor_row(executor_id: str, version: str, status: str = "HEALTHY",
                 disconnected_at: datetime | None = None) -> dict[str, Any]:
    return {"executor_id": executor_id, "app_version": version, "status": status,
            "disconnected_at": disconnected_at.isoformat() if disconnected_at else None,
            "updated_at": disconnected_at.isoformat() if disconnected_at else None}


def sources(transport: Transport, live: list[Exec], registry: Registry, plane: Any = None) -> LiveSources:
    return LiveSources(ORG, APP, registry=registry, live=live, latest=None, transport=transport,
                       request_timeout_s=0.05, probe_timeout_s=0.05, mark_unsupported=lambda e, t: None,
                       data_plane=lambda: plane)


def by_version(counts: dict[str, int]) -> Any:
    return lambda request: GetWorkflowAggregatesResponse(
        type="get_workflow_aggregates", request_id=request.request_id,
        output=[{"group": {"application_version": v}, "count": str(n)} for v, n in counts.items()])


# -- RecoveryFlapping ------------------------------------------------------------------------------------


FLAPPING = rule_row("RecoveryFlapping", {"threshold": 3, "periodSecs": 600})


def test_recovery_flapping_counts_recovered_deaths_in_the_period_without_asking_anyone() -> None:
    now = ManualScheduler().wall()
    transport = Transport()
    registry = Registry(deaths=[("ex-1", now - timedelta(seconds=700)), ("ex-2", now - timedelta(seconds=300)),
                                ("ex-3", now - timedelta(seconds=20))])
    assert evaluate(FLAPPING, sources(transport, [], registry), now) is None  # 2 in the period: under 3
    assert registry.since == [(now - timedelta(seconds=600)).isoformat()]
    registry.deaths.append(("ex-2", now - timedelta(seconds=1)))  # the same executor again: a death of its own
    found = evaluate(FLAPPING, sources(transport, [], registry), now)
    assert found is not None and transport.sent == []
    assert found.metadata == {"application_name": APP, "recovery_count": "3", "threshold": "3",
                              "period_secs": "600", "executor_ids": "ex-2,ex-3"}
    assert "recovered 3 times in the last 600 s" in found.message


def test_recovery_flapping_opens_one_incident_with_no_executor_connected() -> None:
    clock = ManualScheduler()
    clock.advance(30 - clock.wall().timestamp() % 30)
    log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "RecoveryFlapping",
                                                                     {"threshold": 2}, None, None, clock.wall()))
    registry = Registry(deaths=[("ex-1", clock.wall()), ("ex-2", clock.wall())])
    sent: list[Any] = []

    def run() -> list[Any]:
        return AlertRun(ORG, APP, log=log, sources=sources(Transport(), [], registry), instance_id="relay-a",
                        interval_s=30, clock=clock.wall,
                        deliver=lambda n: sent.append(n) or Delivery([], [], None)).run(
                            [dict(FLAPPING, metadata={"threshold": 2, "periodSecs": 600})])

    assert run() == [("r1", "open")]
    clock.advance(5)
    assert run() == []  # still holds: the incident is open, nothing sent again
    clock.advance(30)
    assert run() == []
    registry.deaths.clear()  # the deaths left the period (the fake registry does not filter by time)
    assert run() == [("r1", "resolve")]
    assert [(n.rule_type, n.payload["state"], n.to_executors) for n in sent] == [
        ("RecoveryFlapping", "open", True), ("RecoveryFlapping", "resolved", False)]
    assert sent[0].metadata["recovery_count"] == "2"


# -- StrandedVersion -------------------------------------------------------------------------------------


STRANDED = rule_row("StrandedVersion", {"minPending": 2, "thresholdSecs": 60})


class Plane:
    """A data plane the test scripts: its answer to get_workflow_aggregates, or a DataPlaneError."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.app = APP
        self.writable = False
        self.asked: list[Any] = []

    def client(self) -> Any:
        if isinstance(self.answer, DataPlaneError):
            raise self.answer
        return self

    def state(self) -> State:
        return State("ready", "", None)  # no checked schema version: aggregates folded from list_workflows

    def failure(self, error: Exception) -> DataPlaneError:
        raise AssertionError(f"the scripted database failed unexpectedly: {error!r}")

    def list_workflows(self, **filters: Any) -> list[Any]:
        self.asked.append(filters)
        rows = [type("S", (), {"app_version": v, "status": "PENDING", "created_at": 1})() for v in self.answer]
        offset, limit = filters.get("offset", 0), filters.get("limit")
        return rows[offset:None if limit is None else offset + limit]


def test_stranded_version_reads_the_database_first_and_names_the_versions_nobody_runs() -> None:
    now = ManualScheduler().wall()
    registry = Registry([executor_row("ex-2", "v2"), executor_row("ex-1", "v1", "DEAD", now - timedelta(seconds=90)),
                         executor_row("ex-0", "v0", "DELETED", now - timedelta(seconds=30))])
    plane = Plane(["v1", "v1", "v1", "v2", "v0", "v0", "v9", "v9"])
    transport = Transport()
    found = evaluate(STRANDED, sources(transport, [Exec("ex-2", "v2")], registry, plane), now)
    assert transport.sent == []  # the database answered: the executor is not asked
    assert plane.asked[0]["status"] == ["PENDING", "ENQUEUED"]
    # v1: left 90 s ago (> 60); v9: never seen, stranded at once; v0: left 30 s ago; v2: connected.
    assert found is not None and found.metadata == {
        "application_name": APP, "stranded_versions": '{"v1": 3, "v9": 2}', "stranded_workflow_count": "5",
        "connected_versions": '["v2"]', "min_pending": "2", "threshold_secs": "60", "source": "database"}
    assert "'v1' (3), 'v9' (2)" in found.message


def test_stranded_version_asks_an_executor_without_a_database_and_lists_on_older_sdks() -> None:
    now = ManualScheduler().wall()
    registry = Registry([executor_row("ex-2", "v2"), executor_row("ex-1", "v1", "DEAD", now - timedelta(hours=1))])
    transport = Transport({("ex-2", "get_workflow_aggregates"): by_version({"v1": 2, "v2": 7})})
    unreachable = Plane(DataPlaneUnavailableError("the system database of application 'shop' cannot be reached"))
    found = evaluate(STRANDED, sources(transport, [Exec("ex-2", "v2")], registry, unreachable), now)
    assert found is not None and (found.metadata["stranded_versions"], found.metadata["source"]) == (
        '{"v1": 2}', "executor")
    [(_, asked)] = transport.sent
    assert (asked.body.group_by_application_version, asked.body.status) == (True, ["PENDING", "ENQUEUED"])

    def listing(request: Any) -> Any:
        rows = [{"ApplicationVersion": "v1"}] * (2 if request.body.status == "ENQUEUED" else 1)
        return ListWorkflowsResponse(type="list_workflows", request_id=request.request_id, output=rows)

    older = Transport({("ex-2", "get_workflow_aggregates"): unknown, ("ex-2", "list_workflows"): listing})
    found = evaluate(STRANDED, sources(older, [Exec("ex-2", "v2")], registry), now)
    assert found is not None and found.metadata["stranded_versions"] == '{"v1": 3}'


def test_stranded_version_stays_quiet_under_min_pending_within_the_threshold_or_when_run() -> None:
    now = ManualScheduler().wall()
    recent = Registry([executor_row("ex-1", "v1", "DISCONNECTED", now - timedelta(seconds=10))])
    assert evaluate(STRANDED, sources(Transport(), [], recent, Plane(["v1"] * 5)), now) is None
    running = Registry([executor_row("ex-1", "v1")])
    assert evaluate(STRANDED, sources(Transport(), [], running, Plane(["v1"] * 5)), now) is None
    assert evaluate(STRANDED, sources(Transport(), [], Registry(), Plane(["v1"])), now) is None  # 1 < minPending


def test_stranded_version_without_a_database_or_an_executor_is_not_evaluated() -> None:
    with pytest.raises(CannotAskError, match="no data plane"):
        evaluate(STRANDED, sources(Transport(), [], Registry()), ManualScheduler().wall())


# -- the sinks -------------------------------------------------------------------------------------------


def fired(message: str = "3 workflows <failed> & more", metadata: dict[str, str] | None = None) -> Any:
    clock = ManualScheduler()
    log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "UnresponsiveApplication", {},
                                                                     "pager", None, clock.wall()))
    return fire_alert(log, ORG, APP, "r1", 1, message, metadata or {"application_name": APP}, "relay-a", clock.wall())


def test_the_slack_message_is_text_and_blocks_within_slacks_limits() -> None:
    alert = fired()
    message = slack_message(alert_payload(alert))
    assert set(message) == {"text", "blocks"}
    assert message["text"] == f"[Relay] UnresponsiveApplication on {ORG}/{APP}: 3 workflows &lt;failed&gt; &amp; more"
    header, section, fields, context = message["blocks"]
    assert header == {"type": "header",
                      "text": {"type": "plain_text", "text": f"UnresponsiveApplication on {ORG}/{APP}"}}
    assert section == {"type": "section", "text": {"type": "mrkdwn", "text": "3 workflows &lt;failed&gt; &amp; more"}}
    assert fields == {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*application_name*\n{APP}"}]}
    assert context["type"] == "context" and "rule `r1` · alert 1 · received by pager" in context["elements"][0]["text"]

    # Alert messages stop at 2000 characters; escaped, they may grow past Slack's 3000.
    long = slack_message(alert_payload(fired("&" * 5000, {f"k{i:02d}": "v" * 3000 for i in range(12)})))
    assert len(long["blocks"][1]["text"]["text"]) == 3000 and len(long["text"]) == 3000
    assert len(long["blocks"][2]["fields"]) == 10 and all(len(f["text"]) == 2000 for f in long["blocks"][2]["fields"])


def test_the_pagerduty_event_is_a_trigger_with_the_documented_fields() -> None:
    alert = fired("x" * 2000)
    event = pagerduty_event(alert_payload(alert), ROUTING_KEY)
    assert set(event) == {"routing_key", "event_action", "dedup_key", "client", "payload"}
    assert (event["routing_key"], event["event_action"], event["dedup_key"]) == (
        ROUTING_KEY, "trigger", f"relay/{ORG}/{APP}/r1")
    payload = event["payload"]
    assert set(payload) == {"summary", "source", "severity", "timestamp", "component", "group", "class",
                            "custom_details"}
    assert len(payload["summary"]) == 1024 and payload["summary"].startswith("UnresponsiveApplication on acme/shop: x")
    assert (payload["source"], payload["severity"], payload["class"]) == (f"{ORG}/{APP}", "critical",
                                                                          "UnresponsiveApplication")
    assert payload["custom_details"] == alert_payload(alert) and payload["timestamp"].endswith("Z")
    assert pagerduty_event(alert_payload(fired()) | {"ruleType": "RecoveryFlapping"}, "k")["payload"][
        "severity"] == "warning"


def test_a_sink_is_retried_with_backoff_and_never_reports_its_url_or_key() -> None:
    posted: list[tuple[str, dict[str, Any]]] = []
    script: list[Any] = [HttpError(500), ConnectionError("unreachable (ConnectionRefusedError)"), 202]

    def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
        posted.append((url, json.loads(body)))
        answer = script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    slept: list[float] = []
    config = SinkConfig(PAGERDUTY, "http://127.0.0.1:9/v2/enqueue", routing_key=ROUTING_KEY, attempts=3)
    outcome = send_sink(config, alert_payload(fired()), post=post, sleep=slept.append)
    assert outcome == {"outcome": "delivered", "attempts": 3, "status": 202, "error": None}
    assert slept == [0.5, 1.0] and {url for url, _ in posted} == {config.url}
    assert all(body["routing_key"] == ROUTING_KEY for _, body in posted)
    refused = send_sink(SinkConfig(SLACK, SLACK_URL, attempts=3), alert_payload(fired()),
                        post=lambda *a: (_ for _ in ()).throw(HttpError(403)), sleep=slept.append)
    assert refused == {"outcome": "failed", "attempts": 1, "status": 403, "error": "HTTP 403"}  # 4xx: not retried
    assert SLACK_URL not in repr(SinkConfig(SLACK, SLACK_URL)) and ROUTING_KEY not in repr(config)


def test_the_sinks_get_the_alert_with_no_executor_anywhere() -> None:
    alert = fired()
    seen: list[tuple[str, dict[str, Any]]] = []

    def send(sink: SinkConfig, payload: dict[str, Any]) -> dict[str, Any]:
        seen.append((sink.name, payload))
        if sink.name == SLACK:
            raise RuntimeError(SLACK_URL)  # a fault inside Relay: recorded by its kind, never its text
        return {"outcome": "delivered", "attempts": 1, "status": 202, "error": None}

    deliver = Deliverer(transport=Transport(), peers=lambda org, app: [], timeout_s=0.05, webhook=None,
                        sinks=(SinkConfig(SLACK, SLACK_URL),
                               SinkConfig(PAGERDUTY, "http://x", routing_key=ROUTING_KEY)),
                        send_to_sink=send)
    delivery = deliver(alert)
    assert [name for name, _ in seen] == [SLACK, PAGERDUTY] and seen[0][1] == alert_payload(alert)
    assert delivery.delivered_to == [] and "no executor of 'pager'" in delivery.failed[0]["reason"]
    assert delivery.sinks == {
        SLACK: {"outcome": "failed", "attempts": 0, "status": None, "error": "RuntimeError"},
        PAGERDUTY: {"outcome": "delivered", "attempts": 1, "status": 202, "error": None}}
    assert SLACK_URL not in json.dumps(delivery.sinks) and ROUTING_KEY not in json.dumps(delivery.sinks)


# -- the recoveries behind RecoveryFlapping -----------------------------------------------------------------


def test_an_executor_id_that_dies_and_is_recovered_twice_keeps_both_recoveries(tmp_path: Path) -> None:
    """An executor reporting a fixed executor_id (DBOS__VMID) starts its attempts at 1 again after reconnecting:
    each death keeps rows of its own in the registry and operations views (the same (id, attempt) twice used to
    stop both projectors), and both count as recovered deaths."""
    config = StoreConfig(data_dir=tmp_path)
    log = RelayLog(env=config.event_store_env())
    t0 = ManualScheduler().wall()
    info = ExecutorInfo("v1", "host", "python", "3.2.0", None)
    log.run(executor_ref(ORG, APP, "peer"),
            lambda found: Executor.connect_again(found, ORG, APP, "peer", info, "relay-a", t0))
    for death in range(2):
        base = t0 + timedelta(seconds=100 * death)
        log.run(executor_ref(ORG, APP, "vm-1"),
                lambda found, at=base: Executor.connect_again(found, ORG, APP, "vm-1", info, "relay-a", at))
        steps = [lambda e, b=base: e.disconnect("gone", b + timedelta(seconds=1)),
                 lambda e, b=base: e.declare_dead(1, b + timedelta(seconds=2)),
                 lambda e, b=base: e.dispatch_recovery("peer", "relay-a", b + timedelta(seconds=3)),
                 lambda e, b=base: e.fail_recovery("peer", "no answer", b + timedelta(seconds=4)),
                 lambda e, b=base: e.dispatch_recovery("peer", "relay-a", b + timedelta(seconds=5)),
                 lambda e, b=base: e.acknowledge_recovery("peer", b + timedelta(seconds=6)),
                 lambda e, b=base: e.delete("recovered", b + timedelta(seconds=7))]
        for step in steps:
            log.change(executor_ref(ORG, APP, "vm-1"), step)
    views = Views(config, log)
    try:
        views.catch_up()
        rows = sorted(views.registry.recoveries(ORG, APP), key=lambda r: r["dispatched_at"])
        assert [(r["executor_id"], r["attempt"], r["outcome"]) for r in rows] == [
            ("vm-1", 1, "failed"), ("vm-1", 2, "acknowledged"), ("vm-1", 1, "failed"), ("vm-1", 2, "acknowledged")]
        deaths = views.registry.recovered_deaths(ORG, APP, t0.isoformat())
        assert [d["dispatched_at"] for d in deaths] == [(t0 + timedelta(seconds=s)).isoformat() for s in (3, 103)]
        assert views.registry.recovered_deaths(ORG, APP, (t0 + timedelta(seconds=50)).isoformat()) == deaths[1:]
        assert {(r["outcome"], r["n"]) for r in views.operations.recovery_counts()} == {("failed", 2),
                                                                                         ("acknowledged", 2)}
    finally:
        views.close()
        log.close()


# -- settings ---------------------------------------------------------------------------------------------


def test_the_sinks_settings_are_read_and_bad_ones_refused_by_name_never_by_value() -> None:
    settings = Settings.from_env({"RELAY_ALERT_SLACK_WEBHOOK_URL": SLACK_URL,
                                  "RELAY_ALERT_PAGERDUTY_ROUTING_KEY": ROUTING_KEY})
    assert (settings.alert_slack_webhook_url, settings.alert_pagerduty_routing_key, settings.alert_pagerduty_url) == (
        SLACK_URL, ROUTING_KEY, "https://events.pagerduty.com/v2/enqueue")
    assert SLACK_URL not in repr(settings) and ROUTING_KEY not in repr(settings)
    assert Settings.from_env({}).alert_slack_webhook_url is None
    for name, value in (("RELAY_ALERT_SLACK_WEBHOOK_URL", "hooks.slack.example/services/secret-token"),
                        ("RELAY_ALERT_PAGERDUTY_URL", "ftp://secret-host/v2/enqueue"),
                        ("RELAY_ALERT_PAGERDUTY_ROUTING_KEY", "secret\nkey")):
        with pytest.raises(ConfigError, match=name) as refused:
            Settings.from_env({name: value})
        assert "secret" not in str(refused.value)
