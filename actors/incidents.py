"""Alerts as incidents (issue 32, docs/adr/0049): what one evaluation does with a rule's incident, recorded first,
then sent, then where it went recorded.

`IncidentSteps.step` is called by actors/alerting.py `AlertRun` for every rule it could evaluate, with its finding
(None: the condition does not hold). What to do is actors/policies/incidents.py's; the incident is
events/incidents.py's aggregate. Each step is claimed in the event store before anything is sent (`Opened`,
`Renotified`, `Resolved`): of two instances evaluating at once, the second's save conflicts, it reads the first's
and the domain refuses its own, so exactly one sends. A rule that could not be evaluated (no executor to ask) is
never resolved by that: AlertRun does not call `step` for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from relay.actors import metrics
from relay.actors.delivery import Delivery, Notice, incident_payload
from relay.actors.policies.alerting import Finding
from relay.actors.policies.incidents import next_step, sent_to
from relay.events.errors import DomainError, NotFoundError
from relay.events.incidents import OPEN, RENOTIFY, RESOLVE, Incident
from relay.events.refs import incident_ref, rule_ref

if TYPE_CHECKING:
    from relay.projections.store.log import RelayLog

log = logging.getLogger("relay.actors.incidents")


def latest_incident(relay_log: RelayLog, org: str, app: str, rule_id: str, known: int = 0) -> Incident | None:
    """The rule's latest incident. ``known``: the latest number the caller has seen (the view's), where the walk
    along the numbered incidents starts."""
    return relay_log.latest_numbered(lambda number: incident_ref(org, app, rule_id, number), known)


def open_incident(relay_log: RelayLog, org: str, app: str, rule_id: str, message: str, metadata: dict[str, str],
                  instance: str, at: datetime, known: int = 0) -> Incident:
    """Record the rule's next incident, or raise a domain error (deleted rule, an incident still open, too soon).
    Another instance opening the same incident first makes our save conflict; on reading its incident the domain
    refuses ours."""
    rule_at = rule_ref(org, app, rule_id)

    def decide() -> list[Incident]:
        rule = relay_log.get(rule_at)
        if rule is None:
            raise NotFoundError(rule_at.missing)
        previous = latest_incident(relay_log, org, app, rule_id, known)
        return [Incident.open(rule, previous, message, metadata, instance, at)]

    [incident] = relay_log.run_together(decide)
    assert isinstance(incident, Incident)
    return incident


class IncidentSteps:
    """One evaluation's incident steps for one application (synchronous: in the alerting worker, or a test)."""

    def __init__(self, org: str, app: str, *, log: RelayLog, instance_id: str, clock: Callable[[], datetime],
                 send: Callable[[Notice], Delivery], known: Mapping[str, int] | None = None) -> None:
        self.org, self.app = org, app
        self.log = log
        self.instance_id = instance_id
        self.clock = clock
        self.send = send
        self.known = dict(known or {})  # rule id → the latest incident number the view has seen

    def step(self, rule: Mapping[str, Any], finding: Finding | None, now: datetime) -> str | None:
        """Open, renotify or resolve the rule's incident as the policy says, then send it. The kind sent, if any."""
        rule_id = str(rule["rule_id"])
        renotify_secs = rule.get("renotify_interval_secs")
        latest = latest_incident(self.log, self.org, self.app, rule_id, self.known.get(rule_id, 0))
        kind = next_step(finding is not None, latest, renotify_secs, now)
        if kind is None:
            return None
        try:
            incident = self._claim(kind, rule_id, latest, finding, renotify_secs, now)
        except DomainError as error:
            # Another instance got there first, the rule was deleted meanwhile, or minIntervalSecs holds it back.
            log.info("rule %s of %s/%s: no %s notification from here: %s", rule_id, self.org, self.app, kind, error)
            return None
        if kind != RESOLVE:
            metrics.ALERTS_FIRED.labels(self.org, self.app, incident.rule_type).inc()
        log.info("incident %d of rule %s (%s) of %s/%s: %s", incident.number, rule_id, incident.rule_type, self.org,
                 self.app, kind)
        self._send(incident, kind, now)
        return kind

    def _claim(self, kind: str, rule_id: str, latest: Incident | None, finding: Finding | None,
               renotify_secs: int | None, now: datetime) -> Incident:
        if kind == OPEN:
            assert finding is not None
            return open_incident(self.log, self.org, self.app, rule_id, finding.message, finding.metadata,
                                 self.instance_id, now, latest.number if latest else 0)
        assert latest is not None
        ref = incident_ref(self.org, self.app, rule_id, latest.number)
        if kind == RENOTIFY:
            assert finding is not None
            return self.log.change(ref, lambda i: i.renotify(renotify_secs, finding.message, finding.metadata,
                                                             self.instance_id, now))
        return self.log.change(ref, lambda i: i.resolve(self.instance_id, now))

    def _send(self, incident: Incident, kind: str, now: datetime) -> None:
        to_executors, sinks = sent_to(kind, quiet=kind == RESOLVE and incident.resolved_quietly)
        notice = Notice(incident.org, incident.app, incident.receiving_app, incident.rule_type, incident.message,
                        dict(incident.metadata), incident_payload(incident, kind, now), to_executors, sinks)
        try:
            delivery = self.send(notice)
        except Exception:
            log.exception("sending the %s notification of incident %d of rule %s failed", kind, incident.number,
                          incident.rule_id)
            delivery = Delivery([], [{"executorId": "*", "reason": "delivery failed inside Relay"}], None)
        try:
            at = self.clock()
            self.log.change(incident_ref(incident.org, incident.app, incident.rule_id, incident.number),
                            lambda i: i.record_notified(kind, delivery.delivered_to, delivery.failed, delivery.webhook,
                                                        dict(delivery.sinks), at))
        except Exception:
            log.exception("recording where incident %d of rule %s went failed", incident.number, incident.rule_id)
