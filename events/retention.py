"""Managed retention: one `RetentionRun` per application per retention interval.

When an application has ``gcRowsThreshold``, ``gcTimeThresholdMs`` or ``globalTimeoutMs`` set, Relay sends
``retention`` to one of its executors every RELAY_RETENTION_INTERVAL_S. The run's id comes from (org, app,
interval number), so of two instances starting the run of the same interval the event store lets exactly
one record it: the other gets a conflict and sends nothing. A run is `Started` before the frame is sent and
`Finished` with its outcome when the executor answers (or does not).

Pure: no I/O, no clock (`at` comes in).
"""

from __future__ import annotations

from datetime import datetime
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate, event

from relay.events.errors import IllegalTransitionError, InvalidValueError
from relay.events.names import check_app_name, check_org_name
from relay.events.versions import versioned

SUCCEEDED = "succeeded"
FAILED = "failed"
OUTCOMES = (SUCCEEDED, FAILED)
_REASON_CHARS = 500
# The retention request's fields (PROTOCOL.md, type 7): epoch milliseconds and counts, or None.
POLICY_FIELDS = ("gc_cutoff_epoch_ms", "gc_rows_threshold", "gc_batch_size", "timeout_cutoff_epoch_ms")


def retention_run_id(org: str, app: str, slot: int) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:retention:{org}/{app}/{slot}")


@versioned({"Started": 1, "Finished": 1})
class RetentionRun(Aggregate):
    """One retention run: which executor got which policy, and what came of it."""

    @staticmethod
    def create_id(org: str, app: str, slot: int, **_: object) -> UUID:
        return retention_run_id(org, app, slot)

    @event("Started")
    def __init__(
        self,
        org: str,
        app: str,
        slot: int,
        executor: str,
        policy: dict[str, int | None],
        settings: dict[str, int | None],
        instance: str,
        at: datetime,
    ) -> None:
        self.org = org
        self.app = app
        self.slot = slot
        self.executor = executor
        self.policy = dict(policy)
        self.settings = dict(settings)
        self.instance = instance
        self.started_at = at
        self.outcome: str | None = None
        self.reason: str | None = None
        self.finished_at: datetime | None = None

    @classmethod
    def start(
        cls,
        org: str,
        app: str,
        slot: int,
        executor: str,
        policy: dict[str, int | None],
        settings: dict[str, int | None],
        instance: str,
        at: datetime,
    ) -> RetentionRun:
        """``policy``: the retention body sent (cutoffs already computed); ``settings``: the application
        settings it came from (gcRowsThreshold, gcTimeThresholdMs, globalTimeoutMs)."""
        check_org_name(org)
        check_app_name(app)
        if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
            raise InvalidValueError("slot must be an integer >= 0")
        if not isinstance(executor, str) or not executor:
            raise InvalidValueError("a retention run needs the executor it is sent to")
        unknown = sorted(set(policy) - set(POLICY_FIELDS))
        if unknown:
            raise InvalidValueError(f"unknown retention field(s): {', '.join(unknown)}")
        values = {name: policy.get(name) for name in POLICY_FIELDS}
        for name, value in values.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidValueError(f"retention field '{name}' must be an integer >= 0")
        if all(values[name] is None for name in ("gc_cutoff_epoch_ms", "gc_rows_threshold",
                                                 "timeout_cutoff_epoch_ms")):
            raise InvalidValueError("a retention run needs a cutoff, a rows threshold or a timeout cutoff")
        return cls(org=org, app=app, slot=slot, executor=executor, policy=values, settings=dict(settings),
                   instance=instance, at=at)

    def finish(self, outcome: str, reason: str | None, at: datetime) -> None:
        if self.outcome is not None:
            raise IllegalTransitionError(f"retention run {self.slot} of '{self.app}'", self.outcome, "finish it again")
        if outcome not in OUTCOMES:
            raise InvalidValueError(f"a retention outcome is one of {', '.join(OUTCOMES)}")
        if outcome == FAILED and not reason:
            raise InvalidValueError("a failed retention run needs a reason")
        self._finished(outcome=outcome, reason=(reason or None) and reason[:_REASON_CHARS], at=at)

    @event("Finished")
    def _finished(self, outcome: str, reason: str | None, at: datetime) -> None:
        self.outcome = outcome
        self.reason = reason
        self.finished_at = at
