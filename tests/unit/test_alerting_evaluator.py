"""The alerting and retention actors' logic, with time injected (ManualScheduler) and fake executors: no sleeps.

- rule evaluation (`evaluate`): what is asked of the executors, thresholds, fallbacks for older SDKs, and the
  unresponsive-application cases from the registry and probes;
- `AlertRun` against a real event store while a release 0.1.0 instance shares it (`Alert`s, as that release fires
  them): once per interval, minIntervalSecs, two instances at once, delivery;
- delivery to executors and the webhook (retries, backoff, signature, no secret in the payload);
- `PeriodicWork` (one run at a time, re-armed when done, stopped) and the retention runner.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pykka
import pytest

from relay.actors.adapters.sinks import HttpError
from relay.actors.alerting import AlertRun, LiveSources, evaluate, fire_alert, latest_alert, slot_of
from relay.actors.configuration.alerting import WebhookConfig
from relay.actors.delivery import Deliverer, Delivery, alert_payload, send_webhook
from relay.actors.periodic import PeriodicWork
from relay.actors.retention import RetentionRunner, retention_policy
from relay.actors.scheduler import ManualScheduler
from relay.events.alerting import AlertingRule
from relay.events.refs import rule_ref
from relay.projections.store.log import RelayLog
from relay.wire.errors import CannotAskError, ExecutorGoneError
from relay.wire.requests import encode_request
from relay.wire.responses import GetWorkflowAggregatesResponse, ListWorkflowsResponse, Response, SuccessResponse
from relay.wire.workflow_requests import GetWorkflowAggregatesRequest

ORG, APP = "acme", "shop"


# -- fakes ----------------------------------------------------------------------------------------------


@dataclass
class Exec:
    """What the actors know of a live executor (as LiveExecutor)."""

    executor_id: str
    application_version: str = "v1"
    language: str = "python"
    dbos_version: str = "3.2.0"
    connected_at: float = 0.0
    unsupported: set[str] = field(default_factory=set)


class Transport:
    """Answers requests from a script: ``answers[(executor_id, type)]`` is a response, an exception to raise
    when waited for, or ``"hang"`` (never answers: the wait times out)."""

    def __init__(self, answers: dict[tuple[str, str], Any] | None = None) -> None:
        self.answers = answers or {}
        self.sent: list[tuple[str, Any]] = []
        self.forgotten: list[str] = []

    def send(self, executor: Any, request: Any) -> pykka.Future[Any]:
        self.sent.append((executor.executor_id, request))
        future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
        answer = self.answers.get((executor.executor_id, str(request.type)), "ok")
        if answer == "ok":
            future.set(SuccessResponse(type=str(request.type), request_id=request.request_id, success=True))
        elif isinstance(answer, BaseException):
            future.set_exception((type(answer), answer, None))
        elif answer != "hang":
            future.set(answer(request) if callable(answer) else answer)
        return future

    def forget(self, executor: Any, request_id: str) -> None:
        self.forgotten.append(request_id)


def aggregates(*counts: int) -> Any:
    return lambda request: GetWorkflowAggregatesResponse(
        type="get_workflow_aggregates", request_id=request.request_id,
        output=[{"group": {"status": "ERROR"}, "count": str(c)} for c in counts])


def unknown(request: Any) -> Response:
    return SuccessResponse(type=str(request.type), request_id=request.request_id,
                                    error_message="Unknown message type")


class Registry:
    def __init__(self, healthy: int) -> None:
        self.healthy = healthy

    def counts_by_status(self, org: str, app: str) -> dict[str, int]:
        return {"HEALTHY": self.healthy} if self.healthy else {}


def sources(transport: Transport, live: list[Exec], healthy: int | None = None,
            marked: list[tuple[str, str]] | None = None) -> LiveSources:
    return LiveSources(ORG, APP, registry=Registry(len(live) if healthy is None else healthy), live=live,
                       latest=None, transport=transport, request_timeout_s=0.05, probe_timeout_s=0.05,
                       mark_unsupported=lambda e, t: (marked if marked is not None else []).append((e, t)))


def rule_row(rule_type: str, metadata: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"rule_id": "r1", "org": ORG, "app": APP, "rule_type": rule_type, "metadata": metadata,
            "min_interval_secs": None, "last_fired_at": None, "alerts": 0, "deleted": False, **extra}


FAILURE = rule_row("WorkflowFailure", {"workflowName": "checkout", "threshold": 3, "periodSecs": 60})


# -- evaluation -------------------------------------------------------------------------------------------


def test_workflow_failure_counts_failures_in_the_period() -> None:
    clock = ManualScheduler()
    transport = Transport({("e1", "get_workflow_aggregates"): aggregates(2)})
    assert evaluate(FAILURE, sources(transport, [Exec("e1")]), clock.wall()) is None
    [(_, request)] = transport.sent
    body = request.body
    assert (body.status, body.name, body.select_count) == (["ERROR"], ["checkout"], True)
    assert body.completed_after == (clock.wall() - timedelta(seconds=60)).isoformat()

    transport.answers[("e1", "get_workflow_aggregates")] = aggregates(2, 1)
    found = evaluate(FAILURE, sources(transport, [Exec("e1")]), clock.wall())
    assert found is not None
    assert found.metadata == {"workflow_name": "checkout", "failed_workflow_count": "3", "threshold": "3",
                              "period_secs": "60"}
    assert "3 workflows named 'checkout' of application 'shop' failed in the last 60 s" in found.message


def test_older_sdks_are_asked_with_list_workflows_and_marked() -> None:
    listing = lambda request: ListWorkflowsResponse(  # noqa: E731
        type="list_workflows", request_id=request.request_id, output=[{"WorkflowUUID": str(i)} for i in range(4)])
    transport = Transport({("e1", "get_workflow_aggregates"): unknown, ("e1", "list_workflows"): listing})
    marked: list[tuple[str, str]] = []
    every = rule_row("WorkflowFailure", {"workflowName": None, "threshold": 4, "periodSecs": 60})
    found = evaluate(every, sources(transport, [Exec("e1")], marked=marked), ManualScheduler().wall())
    assert found is not None
    assert (found.metadata["workflow_name"], found.metadata["failed_workflow_count"]) == ("*", "4")
    assert marked == [("e1", "get_workflow_aggregates")]
    assert transport.sent[1][1].body.status == "ERROR"
    # A release Relay knows lacks the type is not even asked.
    old = Exec("old", dbos_version="1.0.0")
    with pytest.raises(CannotAskError) as refused:
        sources(Transport(), [old]).ask(GetWorkflowAggregatesRequest())
    assert refused.value.unsupported


def test_no_answer_means_no_verdict() -> None:
    with pytest.raises(CannotAskError, match="no executor"):
        evaluate(FAILURE, sources(Transport(), []), ManualScheduler().wall())
    transport = Transport({("e1", "get_workflow_aggregates"): "hang", ("e2", "get_workflow_aggregates"): aggregates(9)})
    found = evaluate(FAILURE, sources(transport, [Exec("e1", connected_at=2), Exec("e2", connected_at=1)]),
                     ManualScheduler().wall())
    assert found is not None and transport.forgotten  # the hung one was forgotten, the next one answered
    error = GetWorkflowAggregatesResponse(type="get_workflow_aggregates", request_id="x",
                                                   error_message="database is locked")
    with pytest.raises(CannotAskError, match="database is locked"):
        evaluate(FAILURE, sources(Transport({("e1", "get_workflow_aggregates"): error}), [Exec("e1")]),
                 ManualScheduler().wall())


def test_slow_queue_counts_workflows_enqueued_before_the_threshold() -> None:
    clock = ManualScheduler()
    slow = rule_row("SlowQueue", {"queueName": "emails", "thresholdSecs": 30})
    transport = Transport({("e1", "get_workflow_aggregates"): aggregates(0)})
    assert evaluate(slow, sources(transport, [Exec("e1")]), clock.wall()) is None
    body = transport.sent[0][1].body
    assert (body.status, body.queue_name, body.end_time) == (
        ["ENQUEUED"], ["emails"], (clock.wall() - timedelta(seconds=30)).isoformat())
    transport.answers[("e1", "get_workflow_aggregates")] = aggregates(2)
    found = evaluate(slow, sources(transport, [Exec("e1")]), clock.wall())
    assert found is not None and found.metadata == {"queue_name": "emails", "stuck_workflow_count": "2",
                                                    "threshold_secs": "30"}


def test_an_application_is_unresponsive_without_executors_or_answers() -> None:
    rule = rule_row("UnresponsiveApplication", {}, receiving_app="pager")
    found = evaluate(rule, sources(Transport(), [], healthy=0), ManualScheduler().wall())
    assert found is not None
    assert found.metadata == {"application_name": "shop", "connected_executor_count": "0"}
    # Its executors are connected to another instance: not ours to judge.
    assert evaluate(rule, sources(Transport(), [], healthy=2), ManualScheduler().wall()) is None
    # Connected here and answering (even an error is an answer) / not answering at all.
    answering = Transport({("e1", "executor_info"): unknown})
    assert evaluate(rule, sources(answering, [Exec("e1")]), ManualScheduler().wall()) is None
    silent = Transport({("e1", "executor_info"): "hang", ("e2", "executor_info"): ExecutorGoneError("gone"),
                        ("e3", "executor_info"): RuntimeError("InFlightLimitError")})
    found = evaluate(rule, sources(silent, [Exec("e1"), Exec("e2"), Exec("e3")]), ManualScheduler().wall())
    assert found is not None and found.metadata["connected_executor_count"] == "3"
    assert "none of its 3 connected executors answers" in found.message


# -- AlertRun against the event store -------------------------------------------------------------------


@pytest.fixture
def logs(tmp_path: Any) -> Iterator[tuple[RelayLog, RelayLog]]:
    """Two instances' logs on one store, with an instance of release 0.1.0 still live (events/releases.py): alerting
    fires `Alert`s as that release does (incidents: tests/unit/test_incidents.py)."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db")}
    a, b = RelayLog(env=env), RelayLog(env=env)
    a.release_floor = b.release_floor = lambda: "0.1.0"
    yield a, b
    a.close()
    b.close()


class Recorder:
    def __init__(self) -> None:
        self.alerts: list[Any] = []

    def __call__(self, alert: Any) -> Delivery:
        self.alerts.append(alert)
        return Delivery(["sink-1"], [], None)


def run_once(log: RelayLog, clock: ManualScheduler, row: dict[str, Any], deliver: Recorder,
             failures: int = 5, instance: str = "relay-a") -> list[Any]:
    transport = Transport({("e1", "get_workflow_aggregates"): aggregates(failures)})
    return AlertRun(ORG, APP, log=log, sources=sources(transport, [Exec("e1")]), instance_id=instance,
                    interval_s=30, clock=clock.wall, deliver=deliver).run([row])


def test_a_tripped_rule_fires_once_per_interval_and_records_its_delivery(logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    clock.advance(30 - clock.wall().timestamp() % 30)  # the start of an interval
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "WorkflowFailure",
                                                                     FAILURE["metadata"], "pager", None, clock.wall()))
    sent = Recorder()
    [first] = run_once(log, clock, FAILURE, sent)
    assert (first.sequence, first.slot, first.receiving_app) == (1, slot_of(clock.wall(), 30), "pager")
    clock.advance(10)
    assert run_once(log, clock, FAILURE, sent) == []  # the same interval: not again
    clock.advance(25)
    assert [a.sequence for a in run_once(log, clock, FAILURE, sent)] == [2]  # the next one
    assert run_once(log, clock, FAILURE, sent, failures=1) == []  # under the threshold
    assert [a.sequence for a in sent.alerts] == [1, 2]
    latest = latest_alert(log, ORG, APP, "r1")
    assert latest is not None and latest.delivered


def test_min_interval_secs_suppresses_until_it_has_passed(logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "WorkflowFailure",
                                                                     FAILURE["metadata"], None, 300, clock.wall()))
    sent = Recorder()
    row = dict(FAILURE, min_interval_secs=300)
    assert len(run_once(log, clock, row, sent)) == 1
    fired_at = clock.wall().isoformat()
    for _ in range(9):
        clock.advance(30)
        # The view may lag (no last_fired_at yet) or not: either way the domain refuses.
        assert run_once(log, clock, row, sent) == []
        assert run_once(log, clock, dict(row, last_fired_at=fired_at, alerts=1), sent) == []
    clock.advance(30)
    assert len(run_once(log, clock, dict(row, last_fired_at=fired_at, alerts=1), sent)) == 1
    assert len(sent.alerts) == 2


def test_two_instances_evaluating_at_once_send_once(logs: tuple[RelayLog, RelayLog]) -> None:
    a, b = logs
    clock = ManualScheduler()
    a.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "WorkflowFailure",
                                                                   FAILURE["metadata"], None, None, clock.wall()))
    sent_a, sent_b = Recorder(), Recorder()
    fired = run_once(a, clock, FAILURE, sent_a, instance="relay-a") + run_once(b, clock, FAILURE, sent_b,
                                                                                 instance="relay-b")
    assert len(fired) == 1 and len(sent_a.alerts) + len(sent_b.alerts) == 1


def test_deleted_rules_and_rules_that_cannot_be_evaluated_do_not_fire(logs: tuple[RelayLog, RelayLog]) -> None:
    log, _ = logs
    clock = ManualScheduler()
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "WorkflowFailure",
                                                                     FAILURE["metadata"], None, None, clock.wall()))
    log.change(rule_ref(ORG, APP, "r1"), lambda rule: rule.delete(clock.wall()))
    sent = Recorder()
    assert run_once(log, clock, FAILURE, sent) == []  # the view has not seen the deletion yet: the domain has
    assert run_once(log, clock, dict(FAILURE, deleted=True), sent) == []
    run = AlertRun(ORG, APP, log=log, sources=sources(Transport(), []), instance_id="relay-a", interval_s=30,
                   clock=clock.wall, deliver=sent)
    assert run.run([FAILURE]) == [] and sent.alerts == []


# -- delivery -----------------------------------------------------------------------------------------------


def test_alerts_go_to_every_executor_of_the_receiving_app() -> None:
    clock = ManualScheduler()
    log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "WorkflowFailure", {}, "pager",
                                                                     None, clock.wall()))
    alert = fire_alert(log, ORG, APP, "r1", 1, "3 workflows failed", {"workflow_name": "*"}, "relay-a", clock.wall())
    refusing = SuccessResponse(type="alert", request_id="x", success=False, error_message="handler raised")
    transport = Transport({("p2", "alert"): refusing, ("p3", "alert"): "hang"})
    deliver = Deliverer(transport=transport, peers=lambda org, app: [Exec("p1"), Exec("p2"), Exec("p3")]
                        if (org, app) == (ORG, "pager") else [], timeout_s=0.05, webhook=None)
    delivery = deliver(alert)
    assert delivery.delivered_to == ["p1"]
    assert delivery.failed == [{"executorId": "p2", "reason": "executor answered an error: handler raised"},
                               {"executorId": "p3", "reason": "executor did not answer in time"}]
    frame = transport.sent[0][1]
    assert (frame.name, frame.message, frame.metadata) == ("WorkflowFailure", "3 workflows failed",
                                                           {"workflow_name": "*"})
    assert json.loads(encode_request(frame))["type"] == "alert"
    nobody = Deliverer(transport=Transport(), peers=lambda org, app: [], timeout_s=0.05, webhook=None)(alert)
    assert nobody.delivered_to == [] and "no executor of 'pager'" in nobody.failed[0]["reason"]


class Elsewhere:
    """Executors of the receiving app on other instances (the Forwarder's part): scripted answers per id."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str, str, Any, float]] = []

    def executors(self, org: str, app: str) -> list[Exec]:
        return [Exec(executor_id) for executor_id in self.answers] if app == "pager" else []

    def send(self, executor: Exec, org: str, app: str, request: Any, timeout: float) -> Any:
        self.sent.append((executor.executor_id, org, app, request, timeout))
        answer = self.answers[executor.executor_id]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_alerts_reach_the_receiving_apps_executors_on_other_instances() -> None:
    clock = ManualScheduler()
    log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "WorkflowFailure", {}, "pager",
                                                                     None, clock.wall()))
    alert = fire_alert(log, ORG, APP, "r1", 1, "3 workflows failed", {"workflow_name": "*"}, "relay-a", clock.wall())
    ok = SuccessResponse(type="alert", request_id="x", success=True)
    refused = SuccessResponse(type="alert", request_id="x", success=False, error_message="handler raised")
    elsewhere = Elsewhere({"here": ok, "r1": ok, "r2": refused, "r3": OSError("peer instance unreachable")})
    deliver = Deliverer(transport=Transport(), peers=lambda org, app: [Exec("here")] if app == "pager" else [],
                        timeout_s=0.05, webhook=None, remote=elsewhere)
    delivery = deliver(alert)
    assert delivery.delivered_to == ["here", "r1"]  # "here" once: the local frame, not a forward as well
    assert delivery.failed == [{"executorId": "r2", "reason": "executor answered an error: handler raised"},
                               {"executorId": "r3", "reason": "peer instance unreachable"}]
    assert [sent[0] for sent in elsewhere.sent] == ["r1", "r2", "r3"]
    frames = [sent[3] for sent in elsewhere.sent]
    assert {(f.name, f.message) for f in frames} == {("WorkflowFailure", "3 workflows failed")}
    assert len({f.request_id for f in frames}) == 3  # each forward signed over a request id of its own
    only_remote = Deliverer(transport=Transport(), peers=lambda org, app: [], timeout_s=0.05, webhook=None,
                            remote=Elsewhere({"r1": ok}))(alert)
    assert only_remote.delivered_to == ["r1"] and only_remote.failed == []


def test_the_webhook_is_retried_with_backoff_and_signed_without_sending_the_secret() -> None:
    config = WebhookConfig(url="http://127.0.0.1:9/hook", secret="s3cret", timeout_s=2, attempts=3, backoff_s=0.5)
    calls: list[tuple[bytes, dict[str, str], float]] = []
    statuses: list[Any] = [HttpError(503), OSError("refused"), 204]

    def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
        calls.append((body, headers, timeout))
        outcome = statuses.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    slept: list[float] = []
    result = send_webhook(config, {"message": "m", "ruleId": "r1"}, post=post, sleep=slept.append, now=lambda: 1000)
    assert result == {"outcome": "delivered", "attempts": 3, "status": 204, "error": None}
    assert slept == [0.5, 1.0]
    body, headers, timeout = calls[-1]
    assert b"s3cret" not in body and json.loads(body) == {"message": "m", "ruleId": "r1"} and timeout == 2
    assert headers["X-Relay-Timestamp"] == "1000"
    assert headers["X-Relay-Signature"] == "sha256=" + hmac.new(b"s3cret", b"1000." + body, hashlib.sha256).hexdigest()

    statuses[:] = [HttpError(400)]
    assert send_webhook(config, {}, post=post, sleep=slept.append) == {
        "outcome": "failed", "attempts": 1, "status": 400, "error": "HTTP 400"}  # a 4xx is not retried
    statuses[:] = [OSError(), OSError(), OSError()]
    assert send_webhook(config, {}, post=post, sleep=slept.append)["attempts"] == 3


def test_the_webhook_payload_names_what_fired() -> None:
    clock = ManualScheduler()
    log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    log.create(rule_ref(ORG, APP, "r1"), lambda: AlertingRule.create(ORG, APP, "r1", "SlowQueue", {}, None, None,
                                                                     clock.wall()))
    alert = fire_alert(log, ORG, APP, "r1", 1, "stuck", {"queue_name": "*"}, "relay-a", clock.wall())
    payload = alert_payload(alert)
    assert payload == {"alertId": str(alert.id), "org": ORG, "app": APP, "ruleId": "r1", "ruleType": "SlowQueue",
                       "sequence": 1, "receivingApp": APP, "message": "stuck", "metadata": {"queue_name": "*"},
                       "firedAt": "2025-01-01T00:00:00.000Z", "instance": "relay-a"}
    hooks: list[dict[str, Any]] = []
    deliver = Deliverer(transport=Transport(), peers=lambda org, app: [], timeout_s=0.05,
                        webhook=WebhookConfig(url="http://x"), send_hook=lambda cfg, body: hooks.append(body) or {
                            "outcome": "delivered", "attempts": 1, "status": 200, "error": None})
    assert deliver(alert).webhook == {"outcome": "delivered", "attempts": 1, "status": 200, "error": None}
    assert hooks == [payload]


# -- the actor side ----------------------------------------------------------------------------------------


def test_periodic_work_runs_one_at_a_time_and_rearms_when_done() -> None:
    clock = ManualScheduler()
    mailbox: list[dict[str, Any]] = []
    jobs: list[Any] = []
    finished: list[Any] = []
    work = PeriodicWork("job", scheduler=clock, post=mailbox.append, interval=lambda: 10.0,
                        prepare=lambda: (lambda: "result"), finish=finished.append, run=jobs.append)
    work.start()
    work.start()  # armed already: one timer
    assert clock.pending() == [10.0]
    clock.advance(10)
    work.handle(mailbox.pop())  # the tick: the job is handed to the runner, nothing armed meanwhile
    assert len(jobs) == 1 and clock.pending() == []
    work.handle({"job": "tick", "token": 1})  # a stale tick does nothing
    jobs.pop()()  # the job runs (elsewhere) and posts its result
    work.handle(mailbox.pop())
    assert finished == ["result"] and clock.pending() == [10.0]
    work.stop()
    assert clock.pending() == []
    work.start()
    assert clock.pending() == []  # stopped for good


def test_periodic_work_survives_a_failing_job_and_waits_without_an_interval() -> None:
    clock = ManualScheduler()
    mailbox: list[dict[str, Any]] = []

    def boom() -> None:
        raise RuntimeError("boom")

    work = PeriodicWork("job", scheduler=clock, post=mailbox.append, interval=lambda: 5.0,
                        prepare=lambda: boom, run=lambda job: job())
    work.start()
    clock.advance(5)
    work.handle(mailbox.pop())  # runs at once (synchronous runner), fails, posts done
    work.handle(mailbox.pop())
    assert clock.pending() == [5.0]
    idle = PeriodicWork("idle", scheduler=clock, post=mailbox.append, interval=lambda: None, prepare=lambda: None)
    idle.start()
    assert clock.pending() == [5.0]


def test_retention_policies_follow_the_app_settings() -> None:
    now = ManualScheduler().wall()
    now_ms = int(now.timestamp() * 1000)
    assert retention_policy({"gcRowsThreshold": None}, now) is None
    assert retention_policy({"gcRowsThreshold": 100, "gcTimeThresholdMs": 60_000, "globalTimeoutMs": 5_000}, now) == {
        "gc_cutoff_epoch_ms": now_ms - 60_000, "gc_rows_threshold": 100, "gc_batch_size": None,
        "timeout_cutoff_epoch_ms": now_ms - 5_000}


def test_a_retention_run_is_recorded_sent_and_finished_once_per_interval(logs: tuple[RelayLog, RelayLog]) -> None:
    a, b = logs
    clock = ManualScheduler()
    marked: list[tuple[str, str]] = []
    transport = Transport()

    def runner(log: RelayLog, instance: str) -> RetentionRunner:
        return RetentionRunner(ORG, APP, log=log, instance_id=instance, interval_s=60, transport=transport,
                               timeout_s=0.05, mark_unsupported=lambda e, t: marked.append((e, t)), clock=clock.wall)

    settings = {"gcRowsThreshold": 10, "gcTimeThresholdMs": None, "globalTimeoutMs": None}
    live = [Exec("old", connected_at=1), Exec("new", connected_at=2)]
    assert runner(a, "relay-a").run(settings, live, None) == "succeeded"
    assert runner(b, "relay-b").run(settings, live, None) is None  # this interval's run is a's
    [(executor, request)] = transport.sent
    assert executor == "new" and request.body.gc_rows_threshold == 10
    assert runner(a, "relay-a").run({"gcRowsThreshold": None}, live, None) is None
    clock.advance(60)
    transport.answers[("new", "retention")] = unknown
    assert runner(b, "relay-b").run(settings, live, None) == "failed"
    assert marked == [("new", "retention")]
    clock.advance(60)
    assert runner(b, "relay-b").run(settings, [], None) is None  # nobody connected here
