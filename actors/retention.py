"""Managed retention: send `retention` to one executor of an application every RELAY_RETENTION_INTERVAL_S.

The application's settings (``PATCH /v2/orgs/{org}/apps/{app}``) say what to keep:

- ``gcTimeThresholdMs``: delete finished workflows older than that (``gc_cutoff_epoch_ms`` = now - it);
- ``gcRowsThreshold``: keep at most that many finished workflows (``gc_rows_threshold``);
- ``globalTimeoutMs``: cancel workflows still running after that long (``timeout_cutoff_epoch_ms`` = now - it).

With none of them set nothing is sent. Each run is recorded (`RetentionRun.Started`, events/retention.py)
before the frame goes out, and once per interval across a cluster: an instance that finds the interval's
run recorded already sends nothing. The outcome (the executor's answer, or why there was none) is recorded
as `RetentionRun.Finished`. The SDKs answer at once and collect in the background.

`AppRetention` belongs to the ApplicationActor; the run itself (`RetentionRunner`) happens in a worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from relay.actors import metrics
from relay.actors.alerting import slot_of
from relay.actors.configuration.jobs import JobsConfig
from relay.actors.executor_requests import Transport, rank, request_all
from relay.actors.periodic import AppJob
from relay.events.errors import DomainError
from relay.events.refs import retention_ref
from relay.events.retention import FAILED, SUCCEEDED, RetentionRun
from relay.wire.messages import MessageType
from relay.wire.requests import RetentionBody, RetentionRequest

if TYPE_CHECKING:
    from relay.projections.store.log import RelayLog

log = logging.getLogger("relay.actors.retention")

MESSAGE_KEY = "retention"  # messages for AppRetention.handle carry this key
SETTINGS = ("gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs")


def retention_policy(settings: dict[str, Any], now: datetime) -> dict[str, int | None] | None:
    """The retention body for an application's settings at ``now``, or None when none is set."""
    rows, age_ms, timeout_ms = (settings.get(name) for name in SETTINGS)
    if rows is None and age_ms is None and timeout_ms is None:
        return None
    now_ms = int(now.timestamp() * 1000)
    return {
        "gc_cutoff_epoch_ms": max(0, now_ms - int(age_ms)) if age_ms is not None else None,
        "gc_rows_threshold": int(rows) if rows is not None else None,
        "gc_batch_size": None,
        "timeout_cutoff_epoch_ms": max(0, now_ms - int(timeout_ms)) if timeout_ms is not None else None,
    }


@dataclass(kw_only=True, eq=False)
class RetentionRunner:
    """One retention run of an application at ``now`` (synchronous: the worker's, or a test's)."""

    org: str = field(kw_only=False)
    app: str = field(kw_only=False)
    log: RelayLog
    instance_id: str
    interval_s: float
    transport: Transport
    timeout_s: float
    mark_unsupported: Callable[[str, str], None]
    clock: Callable[[], datetime]

    def run(self, settings: dict[str, Any], live: list[object], latest: str | None) -> str | None:
        """Send this interval's run to the best executor here; return its outcome, or None when there was
        nothing to do (no setting, no executor here, or another instance ran this interval)."""
        now = self.clock()
        policy = retention_policy(settings, now)
        if policy is None:
            return None
        candidates = rank(live, MessageType.RETENTION.value, latest)
        if not candidates:
            return None
        executor = candidates[0]
        chosen = {name: settings.get(name) for name in SETTINGS}
        slot = slot_of(now, self.interval_s)
        try:
            self.log.create(retention_ref(self.org, self.app, slot), lambda: RetentionRun.start(
                self.org, self.app, slot, executor.executor_id, policy, chosen, self.instance_id, now))
        except DomainError as error:
            log.debug("retention of %s/%s not run here: %s", self.org, self.app, error)
            return None
        request = RetentionRequest(body=RetentionBody(**policy))
        [answer] = request_all(self.org, self.app, self.transport, [(executor, request)], self.timeout_s)
        if answer.outcome == metrics.OK and getattr(answer.response, "success", None) is not False:
            outcome, reason = SUCCEEDED, None
        else:
            outcome, reason = FAILED, answer.reason or "executor answered success: false"
            if answer.outcome == metrics.UNSUPPORTED:
                self.mark_unsupported(executor.executor_id, MessageType.RETENTION.value)
        try:
            finished_at = self.clock()
            self.log.change(retention_ref(self.org, self.app, slot),
                            lambda run: run.finish(outcome, reason, finished_at))
        except Exception:
            log.exception("recording the outcome of the retention run of %s/%s failed", self.org, self.app)
        metrics.RETENTION_RUNS.labels(self.org, self.app, outcome).inc()
        log.info("retention of %s/%s sent to %s: %s%s", self.org, self.app, executor.executor_id, outcome,
                 f" ({reason})" if reason else "")
        return outcome


class AppRetention(AppJob):
    """The managed retention of one application (org, app), owned by its ApplicationActor."""

    key = MESSAGE_KEY

    def interval_of(self, jobs: JobsConfig) -> float:
        return jobs.retention_interval_s

    def prepare_run(self, jobs: JobsConfig) -> Callable[[], object] | None:
        live, latest = self.snapshot()
        if not live:
            return None  # nobody here to send it to (an instance holding one of its executors will)
        runner = RetentionRunner(
            self.org, self.app, log=self.ctx.log, instance_id=self.ctx.instance_id,
            interval_s=jobs.retention_interval_s, transport=self.transport, timeout_s=jobs.request_timeout_s,
            mark_unsupported=self.mark_unsupported, clock=self.ctx.clock,
        )

        def work() -> str | None:
            row = self.ctx.views.applications.app(self.org, self.app)
            return runner.run(row["settings"], live, latest) if row is not None else None

        return work
