"""Alerting: the rules of an application (`AlertingRule`) and the alerts they fire (`Alert`).

Conductor's three rule types (API.md, "Alerting"):

- ``WorkflowFailure``: at least ``threshold`` workflows (optionally named ``workflowName``) failed within the
  last ``periodSecs`` seconds;
- ``SlowQueue``: workflows enqueued longer than ``thresholdSecs`` (optionally on queue ``queueName``);
- ``UnresponsiveApplication``: no connected executor, or connected ones that do not answer. The receiving
  application must then be another one (an unresponsive application cannot be told about itself).

And two of Relay's own, read from what Relay itself knows of the fleet:

- ``RecoveryFlapping``: the application's executors died and were recovered at least ``threshold`` times within
  the last ``periodSecs`` seconds (each death whose recovery Relay dispatched counts once, however many peers
  that recovery took);
- ``StrandedVersion``: at least ``minPending`` workflows are PENDING or ENQUEUED on an application version that
  no connected executor runs, and none has for ``thresholdSecs`` seconds (the SDKs recover and dequeue only
  their own version's workflows, so nothing will run them).

Each firing of a rule is an `Alert` aggregate of its own, numbered 1, 2, ... per rule. Its id comes from
(org, app, rule, number), so two Relay instances firing the same rule at once both try to create the same
aggregate: the event store's version check lets one of them append it, the other gets a conflict and, on
reading the winner, a domain error (already fired in this interval, or too soon after it). Aggregates stay
small however long a rule keeps firing. An alert is recorded `Fired` before it is sent; where it went is
recorded afterwards (`Delivered`).

Pure: no I/O, no clock (`at` comes in), no randomness (ids come in).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate, event

from relay.events.errors import IllegalTransitionError, InvalidValueError
from relay.events.names import check_app_name, check_org_name
from relay.events.versions import versioned
from relay.wire.json_types import JSONObject

WORKFLOW_FAILURE = "WorkflowFailure"
SLOW_QUEUE = "SlowQueue"
UNRESPONSIVE_APPLICATION = "UnresponsiveApplication"
RECOVERY_FLAPPING = "RecoveryFlapping"
STRANDED_VERSION = "StrandedVersion"
CONDUCTOR_RULE_TYPES = (WORKFLOW_FAILURE, SLOW_QUEUE, UNRESPONSIVE_APPLICATION)
RELAY_RULE_TYPES = (RECOVERY_FLAPPING, STRANDED_VERSION)  # Relay's own: Conductor has no such types
RULE_TYPES = CONDUCTOR_RULE_TYPES + RELAY_RULE_TYPES

INT32_MAX = 2**31 - 1
MAX_ID_CHARS = 128
MAX_MESSAGE_CHARS = 2000

# Rule metadata, per type: canonical (camelCase, as the v2 API) key → (snake_case alias, default, kind).
# "name" values are optional strings ("*" or null means every workflow / queue); "count" and "secs" are
# integers of at least 1.
_METADATA: dict[str, dict[str, tuple[str, Any, str]]] = {
    WORKFLOW_FAILURE: {
        "workflowName": ("workflow_name", None, "name"),
        "threshold": ("threshold", 1, "count"),
        "periodSecs": ("period_secs", 60, "secs"),
    },
    SLOW_QUEUE: {
        "queueName": ("queue_name", None, "name"),
        "thresholdSecs": ("threshold_secs", 60, "secs"),
    },
    UNRESPONSIVE_APPLICATION: {},
    RECOVERY_FLAPPING: {
        "threshold": ("threshold", 3, "count"),
        "periodSecs": ("period_secs", 600, "secs"),
    },
    STRANDED_VERSION: {
        "minPending": ("min_pending", 1, "count"),
        "thresholdSecs": ("threshold_secs", 60, "secs"),
    },
}


def metadata_fields(rule_type: str) -> list[tuple[str, Any, str]]:
    """The settings a rule of `rule_type` takes: (camelCase key, default, kind: "name", "count" or "secs")."""
    return [(key, default, kind) for key, (_, default, kind) in _METADATA[rule_type].items()]


class AlertAlreadyFiredError(IllegalTransitionError):
    """The rule fired in this evaluation interval already (another evaluator got there first)."""


class AlertTooSoonError(IllegalTransitionError):
    """The rule fired less than its minIntervalSecs ago."""


def rule_aggregate_id(org: str, app: str, rule_id: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:alerting-rule:{org}/{app}/{rule_id}")


def alert_aggregate_id(org: str, app: str, rule_id: str, sequence: int) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:alert:{org}/{app}/{rule_id}/{sequence}")


def check_rule_metadata(rule_type: str, metadata: object) -> JSONObject:
    """The rule's metadata with every key of its type, in canonical (camelCase) form, defaults filled in.
    snake_case aliases are accepted; unknown keys and bad values raise InvalidValueError naming the key."""
    if rule_type not in RULE_TYPES:
        raise InvalidValueError(f"ruleType must be one of {', '.join(RULE_TYPES)}")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InvalidValueError("ruleMetadata must be an object")
    spec = _METADATA[rule_type]
    aliases = {alias: key for key, (alias, _, _) in spec.items()}
    out: JSONObject = {key: default for key, (_, default, _) in spec.items()}
    seen: set[str] = set()
    for raw_key, value in metadata.items():
        key = raw_key if raw_key in spec else aliases.get(raw_key)
        if key is None:
            known = ", ".join(spec) or "none"
            raise InvalidValueError(f"ruleMetadata.{raw_key} is not a setting of {rule_type} (known: {known})")
        if key in seen:
            raise InvalidValueError(f"ruleMetadata.{key} is given twice")
        seen.add(key)
        out[key] = _metadata_value(key, spec[key][2], value)
    return out


def _metadata_value(key: str, kind: str, value: object) -> Any:
    if kind == "name":
        if value is None or value == "*":
            return None
        if not isinstance(value, str) or not value.strip() or len(value) > 256:
            raise InvalidValueError(f"ruleMetadata.{key} must be a non-empty string (or '*' for all)")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT32_MAX:
        raise InvalidValueError(f"ruleMetadata.{key} must be a positive integer")
    return value


def check_min_interval(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
        raise InvalidValueError("minIntervalSecs must be an integer >= 0")
    return value


def check_renotify_interval(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT32_MAX:
        raise InvalidValueError("renotifyIntervalSecs must be an integer >= 1")
    return value


@versioned({"Created": 1, "Deleted": 1, "RenotifySet": 1})
class AlertingRule(Aggregate):
    """One alerting rule of an application. Deleted rules keep their history and never fire again.

    ``renotify_interval_secs``: how often an open incident of the rule is notified again (events/incidents.py);
    None (the default) never. Its own event, written only when given, so that a rule without it is recorded as
    release 0.1.0 recorded rules (events/releases.py)."""

    @staticmethod
    def create_id(org: str, app: str, rule_id: str, **_: object) -> UUID:
        return rule_aggregate_id(org, app, rule_id)

    @event("Created")
    def __init__(
        self,
        org: str,
        app: str,
        rule_id: str,
        rule_type: str,
        metadata: JSONObject,
        receiving_app: str,
        min_interval_secs: int | None,
        at: datetime,
        by: str = "relay",
    ) -> None:
        self.org = org
        self.app = app
        self.rule_id = rule_id
        self.rule_type = rule_type
        self.metadata = dict(metadata)
        self.receiving_app = receiving_app
        self.min_interval_secs = min_interval_secs
        self.created_at = at
        self.deleted = False
        self.deleted_at: datetime | None = None
        self.renotify_interval_secs: int | None = None

    @classmethod
    def create(
        cls,
        org: str,
        app: str,
        rule_id: str,
        rule_type: str,
        metadata: object,
        receiving_app: str | None,
        min_interval_secs: object,
        at: datetime,
        by: str = "relay",
    ) -> AlertingRule:
        """Validate and create a rule. ``receiving_app`` None means the application itself."""
        check_org_name(org)
        check_app_name(app)
        if not isinstance(rule_id, str) or not rule_id or len(rule_id) > MAX_ID_CHARS:
            raise InvalidValueError("a rule id must be a non-empty string")
        canonical = check_rule_metadata(rule_type, metadata)
        receiver = app if receiving_app is None else check_app_name(receiving_app)
        if rule_type == UNRESPONSIVE_APPLICATION and receiver == app:
            raise InvalidValueError(
                "an UnresponsiveApplication rule must name another application to receive its alerts"
            )
        return cls(
            org=org, app=app, rule_id=rule_id, rule_type=rule_type, metadata=canonical, receiving_app=receiver,
            min_interval_secs=check_min_interval(min_interval_secs), at=at, by=by,
        )

    def delete(self, at: datetime, by: str = "relay") -> None:
        if self.deleted:
            raise IllegalTransitionError(f"alerting rule '{self.rule_id}'", "deleted", "delete it")
        self._deleted(at=at, by=by)

    @event("Deleted")
    def _deleted(self, at: datetime, by: str) -> None:
        self.deleted = True
        self.deleted_at = at

    def set_renotify(self, interval_secs: object, at: datetime, by: str = "relay") -> None:
        """Repeat an open incident's notification every ``interval_secs`` (at least 1), unless acknowledged."""
        if self.deleted:
            raise IllegalTransitionError(f"alerting rule '{self.rule_id}'", "deleted", "change it")
        self._renotify_set(interval_secs=check_renotify_interval(interval_secs), at=at, by=by)

    @event("RenotifySet")
    def _renotify_set(self, interval_secs: int, at: datetime, by: str) -> None:
        self.renotify_interval_secs = interval_secs


def _no_sinks(state: JSONObject) -> None:
    """Delivered v1 (before the Slack and PagerDuty sinks) went to no sink but the webhook."""
    state["sinks"] = {}


@versioned({"Fired": 1, "Delivered": 2}, upcasters={"Delivered": {1: _no_sinks}})
class Alert(Aggregate):
    """One firing of a rule: number `sequence` of that rule, in evaluation interval `slot`."""

    @staticmethod
    def create_id(org: str, app: str, rule_id: str, sequence: int, **_: object) -> UUID:
        return alert_aggregate_id(org, app, rule_id, sequence)

    @event("Fired")
    def __init__(
        self,
        org: str,
        app: str,
        rule_id: str,
        sequence: int,
        rule_type: str,
        slot: int,
        message: str,
        metadata: dict[str, str],
        receiving_app: str,
        instance: str,
        at: datetime,
    ) -> None:
        self.org = org
        self.app = app
        self.rule_id = rule_id
        self.sequence = sequence
        self.rule_type = rule_type
        self.slot = slot
        self.message = message
        self.metadata = dict(metadata)
        self.receiving_app = receiving_app
        self.instance = instance
        self.fired_at = at
        self.delivered = False

    @classmethod
    def fire(
        cls,
        rule: AlertingRule,
        previous: Alert | None,
        slot: int,
        message: str,
        metadata: dict[str, str],
        instance: str,
        at: datetime,
    ) -> Alert:
        """The next firing of ``rule`` after ``previous`` (its latest firing, None for the first), in
        evaluation interval ``slot``. Refused when the rule is deleted, fired in this interval already, or
        fired less than its minIntervalSecs before ``at``."""
        what = f"alerting rule '{rule.rule_id}'"
        if rule.deleted:
            raise IllegalTransitionError(what, "deleted", "fire it")
        if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
            raise InvalidValueError("slot must be an integer >= 0")
        if previous is not None:
            if previous.rule_id != rule.rule_id or (previous.org, previous.app) != (rule.org, rule.app):
                raise InvalidValueError("the previous alert belongs to another rule")
            if previous.slot >= slot:
                raise AlertAlreadyFiredError(what, f"fired in interval {previous.slot}", f"fire in interval {slot}")
            elapsed = (at - previous.fired_at).total_seconds()
            if rule.min_interval_secs and elapsed < rule.min_interval_secs:
                raise AlertTooSoonError(
                    what, f"fired {elapsed:.0f} s ago", f"fire again before {rule.min_interval_secs} s have passed"
                )
        if not isinstance(message, str) or not message.strip():
            raise InvalidValueError("an alert needs a message")
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise InvalidValueError("alert metadata must map strings to strings")
        return cls(
            org=rule.org, app=rule.app, rule_id=rule.rule_id,
            sequence=1 if previous is None else previous.sequence + 1, rule_type=rule.rule_type, slot=slot,
            message=message[:MAX_MESSAGE_CHARS], metadata=dict(metadata), receiving_app=rule.receiving_app,
            instance=instance, at=at,
        )

    def deliver(
        self,
        delivered_to: list[str],
        failed: list[dict[str, str]],
        webhook: JSONObject | None,
        at: datetime,
        sinks: dict[str, JSONObject] | None = None,
    ) -> None:
        """Where the alert went: executors that acknowledged it, those that failed (with a reason), the
        webhook's outcome and each other sink's (``{"slack": {...}, "pagerduty": {...}}``), never a sink's URL
        or key. Once per alert."""
        if self.delivered:
            raise IllegalTransitionError(f"alert {self.sequence} of rule '{self.rule_id}'", "delivered",
                                         "record its delivery again")
        if not all(isinstance(e, str) for e in delivered_to):
            raise InvalidValueError("delivered_to must list executor ids")
        if not all(isinstance(f, dict) and isinstance(f.get("executorId"), str) for f in failed):
            raise InvalidValueError("failed must list {executorId, reason} objects")
        if sinks is not None and not (isinstance(sinks, dict) and all(
                isinstance(k, str) and isinstance(v, dict) for k, v in sinks.items())):
            raise InvalidValueError("sinks must map sink names to their outcomes")
        self._delivered(delivered_to=sorted(delivered_to), failed=list(failed), webhook=webhook,
                        sinks=dict(sinks or {}), at=at)

    @event("Delivered")
    def _delivered(
        self, delivered_to: list[str], failed: list[dict[str, str]], webhook: JSONObject | None,
        sinks: dict[str, JSONObject], at: datetime,
    ) -> None:
        self.delivered = True
        self.delivered_at = at
