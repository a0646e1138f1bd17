"""Autoscaling (issue 17): ask an application's executors what its recommendation needs, and keep the latest one
for `GET /metrics` and the console.

What is asked (the same three questions for `GET .../autoscale` and for the periodic refresh):
- ``get_queue``: the policy queue's definition now (its ``worker_concurrency``, whether it is partitioned);
- ``list_application_versions``: the versions, newest registered (largest version timestamp) first: the first is
  the latest, as the SDKs say;
- ``get_workflow_aggregates`` grouped by application version, status ENQUEUED or PENDING, on the policy queue: the
  backlog per version.
The arithmetic is pure (events/autoscaling.py).

`AppAutoscale` belongs to the ApplicationActor: every RELAY_AUTOSCALE_INTERVAL_S, for an application with a policy
and an executor connected to this instance, a worker asks them and publishes the result to `RECOMMENDATIONS`, which
the scrape reads: a scrape never waits on an executor. Without a policy (or an executor here) the application's
series are withdrawn, so a stale recommendation is never shown.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from relay.actors import metrics
from relay.actors.alerting import LiveSources
from relay.actors.configuration.jobs import JobsConfig
from relay.actors.periodic import AppJob
from relay.actors.policies.autoscaling import BACKLOG, recommend
from relay.actors.policies.dataplane_aggregates import count_by_version
from relay.wire.catalog_requests import GetQueueRequest, ListApplicationVersionsRequest
from relay.wire.errors import CannotAskError
from relay.wire.workflow_requests import GetWorkflowAggregatesBody, GetWorkflowAggregatesRequest

log = logging.getLogger("relay.actors.autoscale")

MESSAGE_KEY = "autoscale"  # messages for AppAutoscale.handle carry this key
POLICY_SETTING = "autoscalingPolicy"  # where the applications view holds the policy (projections/applications.py)


def _timestamp(record: Mapping[str, object]) -> int:
    try:
        return int(float(str(record.get("version_timestamp") or 0)))
    except ValueError:
        return 0


def versions_newest_first(records: list[object]) -> list[str]:
    """list_application_versions records as names, the latest first (as web/shapes/wire_to_api.py orders them)."""
    named = [r for r in records or [] if isinstance(r, Mapping) and isinstance(r.get("version_name"), str)]
    return [str(r["version_name"]) for r in sorted(named, key=_timestamp, reverse=True)]


def backlog_request(queue: str) -> GetWorkflowAggregatesRequest:
    return GetWorkflowAggregatesRequest(body=GetWorkflowAggregatesBody(
        group_by_application_version=True, select_count=True, status=list(BACKLOG), queue_name=[queue],
    ))


def gather(policy: Mapping[str, object], ask: Callable[[Any], Any],
           clock: Callable[[], datetime]) -> list[dict[str, object]]:
    """The ``QueueAutoscale`` entries, with ``ask(request)`` returning an executor's successful response (raising
    otherwise). ``observedAt`` is when the backlog's answer came."""
    queue = ask(GetQueueRequest(name=str(policy["queue"]))).output
    versions = versions_newest_first(ask(ListApplicationVersionsRequest()).output or [])
    rows = ask(backlog_request(str(policy["queue"]))).output or []
    observed_ms = int(clock().timestamp() * 1000)
    return recommend(policy, versions, count_by_version(rows), queue, observed_ms)


@dataclass(frozen=True)
class Recommendation:
    queue: str
    entries: list[dict[str, Any]]


class Recommendations:
    """The latest recommendation per application on this instance, rendered by the scrape as two gauges
    (labels org, app, version, queue). Written by workers and web requests, read by scrapes: whole values are
    swapped under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_app: dict[tuple[str, str], Recommendation] = {}

    def publish(self, org: str, app: str, queue: str, entries: list[dict[str, object]]) -> None:
        with self._lock:
            self._by_app[(org, app)] = Recommendation(queue, [dict(e) for e in entries])

    def withdraw(self, org: str, app: str) -> None:
        with self._lock:
            self._by_app.pop((org, app), None)

    def get(self, org: str, app: str) -> Recommendation | None:
        with self._lock:
            return self._by_app.get((org, app))

    def collect(self) -> Iterator[Metric]:
        desired = GaugeMetricFamily(
            "relay_autoscale_desired_executors",
            "Executors each application version needs for its autoscaling policy's queue backlog "
            "(ceil(backlog / worker_concurrency), at least 1 unless the rollout caps old versions lower).",
            labels=["org", "app", "version", "queue"])
        depth = GaugeMetricFamily(
            "relay_autoscale_queue_depth",
            "ENQUEUED+PENDING workflows of each application version on its autoscaling policy's queue.",
            labels=["org", "app", "version", "queue"])
        with self._lock:
            current = sorted(self._by_app.items())
        for (org, app), recommendation in current:
            for entry in recommendation.entries:
                labels = [org, app, str(entry["applicationVersion"]), recommendation.queue]
                desired.add_metric(labels, entry["desiredExecutors"])
                depth.add_metric(labels, entry["queueDepth"])
        yield desired
        yield depth


RECOMMENDATIONS = Recommendations()
metrics.REGISTRY.register(RECOMMENDATIONS)


class AppAutoscale(AppJob):
    """The periodic autoscaling refresh of one application (org, app), owned by its ApplicationActor."""

    key = MESSAGE_KEY

    def interval_of(self, jobs: JobsConfig) -> float:
        return jobs.autoscale_interval_s

    def prepare_run(self, jobs: JobsConfig) -> Callable[[], object] | None:
        policy = self.ctx.views.applications.app_setting(self.org, self.app, POLICY_SETTING)
        live, latest = self.snapshot()
        if policy is None or not live:
            RECOMMENDATIONS.withdraw(self.org, self.app)  # none, or an instance holding its executors has it
            return None
        sources = LiveSources(
            self.org, self.app, registry=self.ctx.views.registry, live=live, latest=latest, transport=self.transport,
            request_timeout_s=jobs.request_timeout_s, probe_timeout_s=jobs.probe_timeout_s,
            mark_unsupported=self.mark_unsupported,
        )

        def work() -> None:
            try:
                entries = gather(policy, sources.ask, self.ctx.clock)
            except CannotAskError as error:
                log.info("no autoscaling recommendation for %s/%s this time: %s", self.org, self.app, error)
                RECOMMENDATIONS.withdraw(self.org, self.app)
                return
            # Not if the policy changed meanwhile (deleted, another queue): the next run publishes the current one.
            if self.ctx.views.applications.app_setting(self.org, self.app, POLICY_SETTING) == policy:
                RECOMMENDATIONS.publish(self.org, self.app, str(policy["queue"]), entries)

        return work
