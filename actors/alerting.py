"""Alerting: evaluate an application's rules every RELAY_ALERT_INTERVAL_S and fire what trips.

`AppAlerting` belongs to the ApplicationActor and runs inside it: a timer posts a tick, the tick starts one
evaluation (never two at once) in a worker greenlet with a snapshot of the live executors, and the worker
posts back when it is done, which arms the next tick. The worker blocks on executors and on the event store,
never the actor.

An evaluation (`AlertRun`) reads the rules from the view and, per rule, what the executors report
(`get_workflow_aggregates`, falling back to `list_workflows` on SDKs without it) or Relay's own registry
(connected executors, and whether they answer); Relay's own rule types (RecoveryFlapping, StrandedVersion) are
evaluated by actors/alerting_fleet.py. A rule whose condition starts to hold opens an incident, notified once; it
is resolved (and the resolution sent) when the condition stops holding; repeats only when the rule opts in
(actors/incidents.py, events/incidents.py, docs/adr/0049). Each step is recorded first, through the event store's
version check, and only then sent: to the receiving application's executors as an `alert` frame (name = rule type,
message, string metadata with the keys Conductor documents; the opening and repeats only) and to the sinks
configured (the webhook of RELAY_ALERT_WEBHOOK_URL, Slack, PagerDuty: actors/adapters/sinks.py). So of two instances
evaluating at once exactly one sends. Where it went is recorded as `Incident.Notified`.

While an instance of release 0.1.0 shares the store (a rolling upgrade, events/releases.py), the rules fire as that
release fired them: an `Alert` (`Alert.Fired`, then `Alert.Delivered`) every evaluation interval the rule trips.

Alerts reach every executor of the receiving application: those connected to this instance directly, those
connected to another instance (HA) through a signed forward to it (actors/delivery.py).

Beside it: actors/executor_requests.py (asking executors), actors/delivery.py (alert frames and the webhook),
actors/periodic.py (the timer-driven worker), actors/retention.py (managed retention, on the same machinery).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from relay.actors import metrics
from relay.actors.adapters.dataplane import answers as dataplane_answers
from relay.actors.alerting_fleet import FleetSources, evaluate_recovery_flapping, evaluate_stranded_version
from relay.actors.clock import Clock
from relay.actors.configuration.alerting import AlertingConfig
from relay.actors.configuration.jobs import JobsConfig
from relay.actors.delivery import Deliverer, Delivery, Notice
from relay.actors.errors import DataPlaneError
from relay.actors.executor_requests import Transport, rank, request_all
from relay.actors.incidents import IncidentSteps
from relay.actors.periodic import AppJob
from relay.actors.policies import alerting as judge
from relay.actors.policies.alerting import Finding, count_rows
from relay.events.alerting import (
    RECOVERY_FLAPPING,
    SLOW_QUEUE,
    STRANDED_VERSION,
    UNRESPONSIVE_APPLICATION,
    WORKFLOW_FAILURE,
    Alert,
)
from relay.events.errors import DomainError, NotFoundError
from relay.events.refs import alert_ref, rule_ref
from relay.wire.catalog_requests import GetMetricsRequest
from relay.wire.errors import CannotAskError
from relay.wire.json_types import JSONObject
from relay.wire.messages import new_request_id
from relay.wire.requests import ExecutorInfoRequest
from relay.wire.workflow_requests import (
    GetWorkflowAggregatesBody,
    GetWorkflowAggregatesRequest,
    ListQueuedWorkflowsRequest,
    ListWorkflowsBody,
    ListWorkflowsRequest,
)

if TYPE_CHECKING:
    from relay.projections.store.log import RelayLog

log = logging.getLogger("relay.actors.alerting")

MESSAGE_KEY = "alerting"  # messages for AppAlerting.handle carry this key
LIST_LIMIT = 10_000  # list_workflows fallback: counted up to this many rows
METRICS_LAG_S = 2.0  # per-app workflow/step counts: how far behind the clock each window ends
INCIDENTS_RELEASE = "0.2.0"  # the release whose events incidents are (events/releases.py INTRODUCED_IN)


def latest_alert(relay_log: RelayLog, org: str, app: str, rule_id: str, known: int = 0) -> Alert | None:
    """The rule's latest alert. ``known``: how many the caller has seen (the view's count), where the walk along
    the numbered alerts starts."""
    return relay_log.latest_numbered(lambda sequence: alert_ref(org, app, rule_id, sequence), known)


def fire_alert(relay_log: RelayLog, org: str, app: str, rule_id: str, slot: int, message: str,
               metadata: dict[str, str], instance: str, at: datetime, known: int = 0) -> Alert:
    """Record the rule's next alert, or raise a domain error (deleted rule, fired in this interval or too soon).
    Another instance recording the same alert first makes our save conflict: we then read its alert and the
    domain refuses ours, so exactly one of them fires."""
    rule_at = rule_ref(org, app, rule_id)

    def fire() -> list[Alert]:
        rule = relay_log.get(rule_at)
        if rule is None:
            raise NotFoundError(rule_at.missing)
        previous = latest_alert(relay_log, org, app, rule_id, known)
        return [Alert.fire(rule, previous, slot, message, metadata, instance, at)]

    [alert] = relay_log.run_together(fire)
    assert isinstance(alert, Alert)
    return alert


def slot_of(at: datetime, interval_s: float) -> int:
    """The evaluation interval `at` falls in, counted on the wall clock, so every instance agrees on it."""
    return int(at.timestamp() // interval_s)


def wire_time(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


# ------------------------------------------------------------------------------------------- evaluation


class Sources(FleetSources, Protocol):
    """What an evaluation reads: Relay's registry, the application's executors connected here (`ask`), and its
    system database (`ask_database`); the fleet's reads are FleetSources' (actors/alerting_fleet.py)."""

    def healthy_count(self) -> int:
        """HEALTHY executors of the application in the registry (any instance)."""
        ...

    def local_count(self) -> int:
        """Executors of the application connected to this instance."""
        ...

    def responsive_count(self) -> int:
        """How many local executors answer a probe in time."""
        ...


def _ask_count(sources: Sources, aggregate: object, listing: object) -> int:
    """Count workflows with get_workflow_aggregates, or list_workflows on an SDK that lacks it."""
    try:
        return count_rows(sources.ask(aggregate).output)
    except CannotAskError as error:
        if not error.unsupported:
            raise
    return len(sources.ask(listing).output or [])


def evaluate_workflow_failure(app: str, metadata: dict[str, Any], sources: Sources, now: datetime) -> Finding | None:
    name = metadata.get("workflowName")
    since = wire_time(now - timedelta(seconds=int(metadata["periodSecs"])))
    aggregate = GetWorkflowAggregatesRequest(body=GetWorkflowAggregatesBody(
        group_by_status=True, select_count=True, status=["ERROR"], completed_after=since,
        name=[name] if name else None,
    ))
    # Older SDKs: failed workflows created in the period (they may not filter on completion times).
    listing = ListWorkflowsRequest(body=ListWorkflowsBody(
        status="ERROR", start_time=since, workflow_name=name, limit=LIST_LIMIT,
    ))
    return judge.workflow_failure(app, metadata, _ask_count(sources, aggregate, listing))


def evaluate_slow_queue(app: str, metadata: dict[str, Any], sources: Sources, now: datetime) -> Finding | None:
    queue = metadata.get("queueName")
    cutoff = wire_time(now - timedelta(seconds=int(metadata["thresholdSecs"])))
    aggregate = GetWorkflowAggregatesRequest(body=GetWorkflowAggregatesBody(
        group_by_queue_name=True, select_count=True, status=["ENQUEUED"], end_time=cutoff,
        queue_name=[queue] if queue else None,
    ))
    listing = ListQueuedWorkflowsRequest(body=ListWorkflowsBody(
        status="ENQUEUED", end_time=cutoff, queue_name=queue, limit=LIST_LIMIT,
    ))
    return judge.slow_queue(app, metadata, _ask_count(sources, aggregate, listing))


def evaluate_unresponsive(app: str, _metadata: dict[str, Any], sources: Sources, _now: datetime) -> Finding | None:
    healthy, local = sources.healthy_count(), sources.local_count()
    responsive = sources.responsive_count() if judge.probe_needed(healthy, local) else 0
    return judge.unresponsive(app, healthy, local, responsive)


Evaluator = Callable[[str, dict[str, Any], "Sources", datetime], "Finding | None"]

# Each rule type's read of its sources; what trips it is actors/policies/alerting.py. A new rule type is a row.
EVALUATORS: dict[str, Evaluator] = {
    WORKFLOW_FAILURE: evaluate_workflow_failure,
    SLOW_QUEUE: evaluate_slow_queue,
    UNRESPONSIVE_APPLICATION: evaluate_unresponsive,
    RECOVERY_FLAPPING: evaluate_recovery_flapping,
    STRANDED_VERSION: evaluate_stranded_version,
}


def evaluate(rule: dict[str, Any], sources: Sources, now: datetime) -> Finding | None:
    """Whether ``rule`` (a row of the alerts view) trips now. CannotAskError: no executor here could say."""
    evaluator = EVALUATORS.get(rule["rule_type"])
    return evaluator(rule["app"], rule["metadata"], sources, now) if evaluator else None


@dataclass(eq=False, repr=False)
class LiveSources:
    """Sources over the registry view and a snapshot of the application's live executors."""

    org: str
    app: str
    _: KW_ONLY
    registry: Any
    live: list[object]
    latest: str | None
    transport: Transport
    request_timeout_s: float
    probe_timeout_s: float
    mark_unsupported: Callable[[str, str], None]
    data_plane: Callable[[], Any] = field(default=lambda: None)
    _responsive: int | None = field(default=None, init=False, repr=False)

    def healthy_count(self) -> int:
        return int(self.registry.counts_by_status(self.org, self.app).get("HEALTHY", 0))

    def local_count(self) -> int:
        return len(self.live)

    def ask(self, request: Any) -> Any:
        message_type = str(request.type)
        candidates = rank(self.live, message_type, self.latest)
        if not self.live:
            raise CannotAskError(f"no executor of '{self.app}' is connected here")
        if not candidates:
            raise CannotAskError(f"no executor of '{self.app}' supports {message_type}", unsupported=True)
        last, lacking = "no answer", 0
        for executor in candidates:
            attempt = dataclasses.replace(request, request_id=new_request_id())
            [answer] = request_all(self.org, self.app, self.transport, [(executor, attempt)], self.request_timeout_s)
            if answer.outcome == metrics.OK:
                return answer.response
            if answer.outcome == metrics.UNSUPPORTED:
                lacking += 1
                self.mark_unsupported(executor.executor_id, message_type)
                continue
            last = answer.reason
        if lacking == len(candidates):
            raise CannotAskError(f"no executor of '{self.app}' supports {message_type}", unsupported=True)
        raise CannotAskError(last)

    def recovered_deaths(self, since: datetime) -> list[JSONObject]:
        return self.registry.recovered_deaths(self.org, self.app, since.isoformat())

    def executors(self) -> list[JSONObject]:
        return self.registry.executors(self.org, self.app, include_deleted=True)

    def ask_database(self, request: Any) -> Any:
        plane = self.data_plane()
        if plane is None:
            raise CannotAskError(f"application '{self.app}' has no data plane")
        try:
            return dataplane_answers.answer(plane, request)
        except DataPlaneError as error:
            raise CannotAskError(error.detail) from None
        except NotFoundError as error:  # a workflow, schedule or version the database does not have
            raise CannotAskError(str(error)) from None

    def responsive_count(self) -> int:
        if self._responsive is None:
            targets = [(e, ExecutorInfoRequest()) for e in self.live]
            answers = request_all(self.org, self.app, self.transport, targets, self.probe_timeout_s)
            # Any answer counts, an error too: the executor is there and talking. No answer (gone, too slow, or
            # refused by its actor with too many requests in flight) does not.
            self._responsive = sum(1 for a in answers if a.response is not None)
        return self._responsive


# ---------------------------------------------------------------------------------------- firing


def _too_soon(rule: dict[str, Any], now: datetime) -> bool:
    """The view says the rule fired less than minIntervalSecs ago: not worth asking executors (the
    aggregate decides for sure when it fires)."""
    last, gap = rule.get("last_fired_at"), rule.get("min_interval_secs")
    if not last or not gap:
        return False
    try:
        fired = datetime.fromisoformat(str(last))
    except ValueError:
        return False
    return (now - fired).total_seconds() < gap


class AlertRun:
    """One evaluation of an application's rules (synchronous: runs in the worker, or in a test)."""

    def __init__(
        self,
        org: str,
        app: str,
        *,
        log: RelayLog,
        sources: Sources,
        instance_id: str,
        interval_s: float,
        clock: Clock,
        deliver: Callable[[object], Delivery],
        notify: Callable[[Notice], Delivery] | None = None,
        known_incidents: Mapping[str, int] | None = None,
    ) -> None:
        """``deliver`` sends an `Alert` (release 0.1.0), ``notify`` an incident's `Notice` (by default
        ``deliver.send``: a Deliverer); ``known_incidents``: each rule's latest incident number in the view."""
        self.org, self.app = org, app
        self.log = log
        self.sources = sources
        self.instance_id = instance_id
        self.interval_s = interval_s
        self.clock = clock
        self.deliver = deliver
        send: Callable[[Notice], Delivery] = notify if notify is not None else getattr(deliver, "send", deliver)
        self.incidents = IncidentSteps(org, app, log=log, instance_id=instance_id, clock=clock, send=send,
                                       known=known_incidents)

    def run(self, rules: Iterable[JSONObject]) -> list[object]:
        """Evaluate each live rule and act on it: with incidents, open, renotify or resolve the rule's incident
        (actors/incidents.py); while an instance of release 0.1.0 shares the store (events/releases.py), fire an
        `Alert` for each rule that trips, as that release does. Returns the alerts fired or the incident
        notifications sent ((rule id, kind) pairs)."""
        incidents = self.log.can_write(INCIDENTS_RELEASE)
        fired: list[object] = []
        for rule in rules:
            if rule.get("deleted"):
                if incidents:  # deleted with its incident open: resolve it, and say so
                    self._step(rule, None, self.clock(), fired)
                continue
            now = self.clock()
            if not incidents and _too_soon(rule, now):
                continue
            try:
                finding = evaluate(rule, self.sources, now)
            except CannotAskError as error:
                log.debug("rule %s of %s/%s not evaluated here: %s", rule["rule_id"], self.org, self.app, error)
                continue
            except Exception:
                log.exception("evaluating rule %s of %s/%s failed", rule["rule_id"], self.org, self.app)
                continue
            if incidents:
                self._step(rule, finding, now, fired)
            elif finding is not None:
                alert = self._fire(rule, finding, now)
                if alert is not None:
                    fired.append(alert)
        return fired

    def _step(self, rule: dict[str, Any], finding: Finding | None, now: datetime, done: list[object]) -> None:
        try:
            kind = self.incidents.step(rule, finding, now)
        except Exception:
            log.exception("the incident of rule %s of %s/%s failed", rule["rule_id"], self.org, self.app)
            return
        if kind is not None:
            done.append((rule["rule_id"], kind))

    def _fire(self, rule: dict[str, Any], finding: Finding, now: datetime) -> Any:
        rule_id = rule["rule_id"]
        try:
            alert = fire_alert(self.log, self.org, self.app, rule_id, slot_of(now, self.interval_s), finding.message,
                               finding.metadata, self.instance_id, now, int(rule.get("alerts") or 0))
        except DomainError as error:
            # Fired in this interval by another instance, too soon, or deleted meanwhile: not ours to send.
            log.info("rule %s of %s/%s tripped but does not fire: %s", rule_id, self.org, self.app, error)
            return None
        metrics.ALERTS_FIRED.labels(self.org, self.app, alert.rule_type).inc()
        log.info("alert %d of rule %s (%s) of %s/%s fired: %s", alert.sequence, rule_id, alert.rule_type,
                 self.org, self.app, alert.message)
        try:
            delivery = self.deliver(alert)
        except Exception:
            log.exception("delivering alert %d of rule %s failed", alert.sequence, rule_id)
            delivery = Delivery([], [{"executorId": "*", "reason": "delivery failed inside Relay"}], None)
        try:
            delivered_at = self.clock()
            self.log.change(alert_ref(self.org, self.app, rule_id, alert.sequence), lambda fired: fired.deliver(
                delivery.delivered_to, delivery.failed, delivery.webhook, delivered_at, delivery.sinks))
        except Exception:
            log.exception("recording the delivery of alert %d of rule %s failed", alert.sequence, rule_id)
        return alert


# -------------------------------------------------------------------------------------- the actor side


class AppAlerting(AppJob):
    """The alerting of one application (org, app), owned by its ApplicationActor."""

    key = MESSAGE_KEY

    def __init__(self, org: str, app: str, **parts: Any) -> None:
        # Per-app workflow/step counters count get_metrics windows back to back, from here on.
        self.metrics_since: datetime | None = None
        super().__init__(org, app, **parts)

    def interval(self) -> float | None:
        return jobs.alert_interval_s if (jobs := self.ctx.jobs) and self.ctx.alerting else None

    def start(self) -> None:
        if self.metrics_since is None and self.ctx.jobs is not None and self.ctx.alerting is not None:
            self.metrics_since = self.ctx.clock()
        self.periodic.start()

    def handle(self, message: Mapping[str, object]) -> None:
        if message.get(MESSAGE_KEY) == "start":
            self.start()
        else:
            self.periodic.handle(message)

    def _prepare(self) -> Callable[[], Any] | None:
        jobs, config = self.ctx.jobs, self.ctx.alerting
        if jobs is None or config is None:
            return None
        live, latest = self.snapshot()
        since = self.metrics_since or self.ctx.clock()
        return lambda: self._evaluate(jobs, config, live, latest, since)

    def _finish(self, result: object) -> None:
        if isinstance(result, datetime):
            self.metrics_since = result

    def _evaluate(self, jobs: JobsConfig, config: AlertingConfig, live: list[object], latest: str | None,
                  since: datetime) -> datetime:
        """In the worker: evaluate the rules, then count this window's workflows and steps. Returns where
        the next metrics window starts."""
        ctx, org, app = self.ctx, self.org, self.app
        if ctx.views.applications.app(org, app) is None:
            return since  # not registered (deleted): nothing to watch
        sources = LiveSources(
            org, app, registry=ctx.views.registry, live=live, latest=latest, transport=self.transport,
            request_timeout_s=jobs.request_timeout_s, probe_timeout_s=jobs.probe_timeout_s,
            mark_unsupported=self.mark_unsupported, data_plane=lambda: config.data_plane(org, app),
        )
        rules = ctx.views.alerting.rules(org, app) + ctx.views.alerting.deleted_rules_with_open_incidents(org, app)
        if rules:
            deliver = Deliverer(transport=self.transport, peers=config.peers, timeout_s=jobs.request_timeout_s,
                                webhook=config.webhook, remote=config.remote, sinks=config.sinks)
            AlertRun(org, app, log=ctx.log, sources=sources, instance_id=ctx.instance_id,
                     interval_s=jobs.alert_interval_s, clock=ctx.clock, deliver=deliver,
                     known_incidents=ctx.views.alerting.incident_numbers(org, app)).run(rules)
        # The window ends a little in the past: SDKs store times coarsely (the SQLite system database, to the
        # second), so a row created just now may carry a time already behind us.
        now = ctx.clock() - timedelta(seconds=METRICS_LAG_S)
        if not live or now <= since:
            return since
        try:
            response = sources.ask(GetMetricsRequest(start_time=wire_time(since), end_time=wire_time(now)))
        except CannotAskError as error:
            log.debug("no workflow counts for %s/%s this time: %s", org, app, error)
            return now if error.unsupported else since
        metrics.count_app_metrics(org, app, response.metrics or [])
        return now
