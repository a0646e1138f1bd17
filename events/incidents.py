"""Incidents: one per stretch of time an alerting rule's condition holds (issue 32, docs/adr/0049).

A rule's condition starting to hold opens incident n (`Opened`), which is notified once; while it holds nothing is
sent again unless the rule opts in to repeats (`AlertingRule.RenotifySet`: every ``renotifyIntervalSecs``,
`Renotified`); when it stops holding the incident is `Resolved`, and the resolution is sent too. Incident n+1 may
open only once n is resolved. People can acknowledge an incident (no repeats any more) and silence it for a while
(nothing sent meanwhile but PagerDuty's `resolve`, which pages nobody and closes what was opened).

Ids come from (org, app, rule, number), like `Alert`'s, so two Relay instances opening the same incident at once
both try to create the same aggregate: the event store's version check lets one append it, the other reads the
winner's and the domain refuses its own (`IncidentStillOpenError`). `Opened`, `Renotified` and `Resolved` are each
recorded before anything is sent (the claim that exactly one instance sends it); `Notified` records afterwards where
that notification went (executors, failures, each sink's outcome: never a URL or a key).

Pure: no I/O, no clock (`at` comes in).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate, event

from relay.events.alerting import MAX_MESSAGE_CHARS, AlertingRule
from relay.events.errors import IllegalTransitionError, InvalidValueError
from relay.events.versions import versioned
from relay.wire.json_types import JSONObject

OPEN, RENOTIFY, RESOLVE = "open", "renotify", "resolve"  # the kinds of notification
NOTIFICATION_KINDS = (OPEN, RENOTIFY, RESOLVE)
MAX_SILENCE_SECS = 366 * 24 * 3600  # a silence longer than a year is a deleted rule


class IncidentStillOpenError(IllegalTransitionError):
    """The rule's latest incident is not resolved: another cannot open (another evaluator opened it first)."""


class IncidentTooSoonError(IllegalTransitionError):
    """The rule's previous incident opened less than its minIntervalSecs ago."""


class IncidentResolvedError(IllegalTransitionError):
    """The incident is resolved: acknowledging, silencing or notifying it again is over."""


def incident_aggregate_id(org: str, app: str, rule_id: str, number: int) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:incident:{org}/{app}/{rule_id}/{number}")


def _check_finding(message: object, metadata: object) -> None:
    if not isinstance(message, str) or not message.strip():
        raise InvalidValueError("an incident needs a message")
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise InvalidValueError("incident metadata must map strings to strings")


@versioned({"Opened": 1, "Renotified": 1, "Notified": 1, "Acknowledged": 1, "Silenced": 1, "Unsilenced": 1,
            "Resolved": 1})
class Incident(Aggregate):
    """Incident ``number`` of a rule: open from `Opened` to `Resolved`."""

    @staticmethod
    def create_id(org: str, app: str, rule_id: str, number: int, **_: object) -> UUID:
        return incident_aggregate_id(org, app, rule_id, number)

    @event("Opened")
    def __init__(
        self, org: str, app: str, rule_id: str, number: int, rule_type: str, message: str,
        metadata: dict[str, str], receiving_app: str, instance: str, at: datetime,
    ) -> None:
        self.org, self.app, self.rule_id, self.number = org, app, rule_id, number
        self.rule_type = rule_type
        self.message = message
        self.metadata = dict(metadata)
        self.receiving_app = receiving_app
        self.instance = instance
        self.opened_at = at
        self.last_sent_at = at  # the latest open or renotify notification: when the next repeat is due from
        self.renotified = 0
        self.resolved_at: datetime | None = None
        self.resolved_quietly = False
        self.acknowledged_at: datetime | None = None
        self.acknowledged_by: str | None = None
        self.silenced_until: datetime | None = None
        self.silenced_by: str | None = None
        self.notified: list[str] = []  # the kinds whose outcome is recorded

    @classmethod
    def open(cls, rule: AlertingRule, previous: Incident | None, message: str, metadata: dict[str, str],
             instance: str, at: datetime) -> Incident:
        """The rule's next incident after ``previous`` (its latest, None for the first). Refused when the rule is
        deleted, the previous incident is still open, or opened less than the rule's minIntervalSecs ago."""
        what = f"alerting rule '{rule.rule_id}'"
        if rule.deleted:
            raise IllegalTransitionError(what, "deleted", "open an incident")
        _check_finding(message, metadata)
        if previous is not None:
            if (previous.org, previous.app, previous.rule_id) != (rule.org, rule.app, rule.rule_id):
                raise InvalidValueError("the previous incident belongs to another rule")
            if previous.resolved_at is None:
                raise IncidentStillOpenError(what, f"in incident {previous.number}", "open another")
            elapsed = (at - previous.opened_at).total_seconds()
            if rule.min_interval_secs and elapsed < rule.min_interval_secs:
                raise IncidentTooSoonError(what, f"opened incident {previous.number} {elapsed:.0f} s ago",
                                           f"open another before {rule.min_interval_secs} s have passed")
        return cls(
            org=rule.org, app=rule.app, rule_id=rule.rule_id, number=1 if previous is None else previous.number + 1,
            rule_type=rule.rule_type, message=message[:MAX_MESSAGE_CHARS], metadata=dict(metadata),
            receiving_app=rule.receiving_app, instance=instance, at=at,
        )

    # -- what the evaluator asks -------------------------------------------------------------------------------------
    @property
    def resolved(self) -> bool:
        return self.resolved_at is not None

    def silenced(self, at: datetime) -> bool:
        return self.silenced_until is not None and at < self.silenced_until

    def renotify_due(self, every_secs: int | None, at: datetime) -> bool:
        """Whether a repeat is due at ``at``: the rule opted in (``every_secs``), the incident is open, nobody
        acknowledged it, it is not silenced, and ``every_secs`` passed since the last notification."""
        if not every_secs or self.resolved or self.acknowledged_at is not None or self.silenced(at):
            return False
        return at >= self.last_sent_at + timedelta(seconds=every_secs)

    def state(self, at: datetime) -> str:
        """open, acknowledged, silenced or resolved (what a list shows)."""
        if self.resolved:
            return "resolved"
        if self.silenced(at):
            return "silenced"
        return "acknowledged" if self.acknowledged_at is not None else "open"

    # -- commands ---------------------------------------------------------------------------------------------------
    def _refuse_if_resolved(self, command: str) -> None:
        if self.resolved:
            raise IncidentResolvedError(f"incident {self.number} of rule '{self.rule_id}'", "resolved", command)

    def renotify(self, every_secs: int | None, message: str, metadata: dict[str, str], instance: str,
                 at: datetime) -> None:
        """Claim a repeat of the open notification, with what the rule finds now (recorded before it is sent: one
        instance sends it)."""
        self._refuse_if_resolved("notify it again")
        if not self.renotify_due(every_secs, at):
            raise IllegalTransitionError(f"incident {self.number} of rule '{self.rule_id}'", "not due a repeat",
                                         "notify it again")
        _check_finding(message, metadata)
        self._renotified(message=message[:MAX_MESSAGE_CHARS], metadata=dict(metadata), instance=instance, at=at)

    @event("Renotified")
    def _renotified(self, message: str, metadata: dict[str, str], instance: str, at: datetime) -> None:
        self.renotified += 1
        self.last_sent_at = at
        self.message, self.metadata = message, dict(metadata)

    def resolve(self, instance: str, at: datetime) -> None:
        """The condition stopped holding. ``quiet``: the resolution is sent only where leaving it would keep
        something open (PagerDuty), because the incident was silenced then."""
        self._refuse_if_resolved("resolve it again")
        self._resolved(instance=instance, quiet=self.silenced(at), at=at)

    @event("Resolved")
    def _resolved(self, instance: str, quiet: bool, at: datetime) -> None:
        self.resolved_at = at
        self.resolved_quietly = quiet

    def record_notified(self, kind: str, delivered_to: list[str], failed: list[dict[str, str]],
                        webhook: JSONObject | None, sinks: dict[str, JSONObject], at: datetime) -> None:
        """Where a notification went: executors that took it, those that failed (with a reason), the webhook's
        and each other sink's outcome, never a URL or a key."""
        if kind not in NOTIFICATION_KINDS:
            raise InvalidValueError(f"a notification is one of {', '.join(NOTIFICATION_KINDS)}")
        if not all(isinstance(e, str) for e in delivered_to):
            raise InvalidValueError("delivered_to must list executor ids")
        if not all(isinstance(f, dict) and isinstance(f.get("executorId"), str) for f in failed):
            raise InvalidValueError("failed must list {executorId, reason} objects")
        if not all(isinstance(k, str) and isinstance(v, dict) for k, v in sinks.items()):
            raise InvalidValueError("sinks must map sink names to their outcomes")
        self._notified(kind=kind, delivered_to=sorted(delivered_to), failed=list(failed), webhook=webhook,
                       sinks=dict(sinks), at=at)

    @event("Notified")
    def _notified(self, kind: str, delivered_to: list[str], failed: list[dict[str, str]],
                  webhook: JSONObject | None, sinks: dict[str, JSONObject], at: datetime) -> None:
        self.notified.append(kind)

    def acknowledge(self, by: str, at: datetime) -> bool:
        """Someone is on it: no repeats from now on. False (nothing recorded) when acknowledged already."""
        self._refuse_if_resolved("acknowledge it")
        if self.acknowledged_at is not None:
            return False
        self._acknowledged(by=by, at=at)
        return True

    @event("Acknowledged")
    def _acknowledged(self, by: str, at: datetime) -> None:
        self.acknowledged_at, self.acknowledged_by = at, by

    def silence(self, until: datetime, by: str, at: datetime) -> None:
        """Send nothing about it until ``until`` (a later time, at most MAX_SILENCE_SECS away)."""
        self._refuse_if_resolved("silence it")
        seconds = (until - at).total_seconds()
        if not 0 < seconds <= MAX_SILENCE_SECS:
            raise InvalidValueError(f"a silence lasts between 1 and {MAX_SILENCE_SECS} seconds")
        self._silenced(until=until, by=by, at=at)

    @event("Silenced")
    def _silenced(self, until: datetime, by: str, at: datetime) -> None:
        self.silenced_until, self.silenced_by = until, by

    def unsilence(self, by: str, at: datetime) -> bool:
        """End the silence now. False (nothing recorded) when it is not silenced."""
        self._refuse_if_resolved("unsilence it")
        if not self.silenced(at):
            return False
        self._unsilenced(by=by, at=at)
        return True

    @event("Unsilenced")
    def _unsilenced(self, by: str, at: datetime) -> None:
        self.silenced_until, self.silenced_by = None, None

