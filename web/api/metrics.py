"""GET /metrics (and /v1/metrics, where Conductor serves it): Prometheus / OpenMetrics text.

What it shows: the counters and histograms code increments as it acts (actors/metrics.py), and what is read
from the views at scrape time: executors by application, state and version; recovery dispatches by outcome;
alerting rules; instances by state; the event store's position and each view's lag behind it.

Access: the admin token, or an API key with ``metric.read``; a key sees the series of its own organization
(and of its applications, when it is scoped to some) and the instance-wide ones (no ``org`` label).
Clients asking for ``application/openmetrics-text`` get OpenMetrics, others the Prometheus text format.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from flask import Blueprint, Response, request
from prometheus_client import exposition
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics

from relay.actors import metrics
from relay.projections.identity import Principal
from relay.web.context import principal, runtime
from relay.web.operations import operation
from relay.web.problems import ApiError
from relay.web.shapes.values import format_time
from relay.wire.json_types import JSONObject

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

bp = Blueprint("metrics", __name__)


def recovery_metrics(org: str, app: str, app_id: str, window: tuple[datetime, datetime]) -> list[JSONObject]:
    """Relay's own rows of ``GET .../metrics``: recovery dispatches made in the window, by outcome
    (``metricType`` recovery_count, ``metricName`` pending|failed|acknowledged), one bucket for the window."""
    start, end = window
    counts = runtime().views.operations.recovery_counts_between(org, app, start.astimezone(UTC).isoformat(),
                                                             end.astimezone(UTC).isoformat())
    return [
        {"appId": app_id, "metricType": "recovery_count", "metricName": outcome,
         "granularity": min(2**31 - 1, max(0, int((end - start).total_seconds()))), "timeBucket": format_time(start),
         "value": count}
        for outcome, count in sorted(counts.items())
    ]


# -- what the views say, at scrape time


def view_families(rt: Runtime) -> Iterator[Metric]:
    views = rt.views
    executors = GaugeMetricFamily("relay_executors", "Executors Relay knows of, by state and application version.",
                                  labels=["org", "app", "status", "app_version"])
    for entry in views.operations.apps():
        counts: dict[tuple[str, str], int] = {}
        for row in views.registry.executors(entry["org"], entry["app"]):
            key = (str(row["status"]), str(row["app_version"] or ""))
            counts[key] = counts.get(key, 0) + 1
        for (status, version), count in sorted(counts.items()):
            executors.add_metric([entry["org"], entry["app"], status, version], count)
    yield executors

    recoveries = CounterMetricFamily("relay_recoveries", "Recovery dispatches of dead executors, by outcome.",
                                     labels=["org", "app", "outcome"])
    for row in views.operations.recovery_counts():
        recoveries.add_metric([row["org"], row["app"], row["outcome"]], int(row["n"]))
    yield recoveries

    rules = GaugeMetricFamily("relay_alerting_rules", "Alerting rules, by type.", labels=["org", "app", "rule_type"])
    for row in views.alerting.rule_counts():
        rules.add_metric([row["org"], row["app"], row["rule_type"]], int(row["n"]))
    yield rules

    instances = GaugeMetricFamily("relay_instances", "Relay instances, by state.", labels=["status"])
    for status, count in sorted(views.instances.counts().items()):
        instances.add_metric([status], count)
    yield instances

    position = int(rt.log.recorder.max_notification_id() or 0)
    yield GaugeMetricFamily("relay_event_store_position", "The event log's highest position.", value=position)
    lag = GaugeMetricFamily("relay_projection_lag_events", "Events of the log a view has not applied yet.",
                            labels=["view"])
    for projector in views.projectors:
        lag.add_metric([projector.name], max(0, position - projector.reached()))
    yield lag

    info = GaugeMetricFamily("relay_instance_info", "This instance.", labels=["instance"])
    info.add_metric([rt.settings.instance_id], 1)
    yield info


class _Scrape:
    """The families of one scrape, as a collector ``generate_latest`` can render, filtered for ``who``."""

    def __init__(self, rt: Runtime, who: Principal) -> None:
        self.rt = rt
        self.who = who

    def collect(self) -> Iterator[Metric]:
        for family in (*metrics.REGISTRY.collect(), *view_families(self.rt)):
            if self.who.admin:
                yield family
                continue
            visible = Metric(family.name, family.documentation, family.type, family.unit)
            visible.samples = [s for s in family.samples if self._visible(s.labels)]
            yield visible

    def _visible(self, labels: dict[str, str]) -> bool:
        org = labels.get("org")
        app = labels.get("app")
        if self.who.app_scoped:  # its applications' samples only: not the org's nor Relay's own (issue 34)
            return org is not None and self.who.sees_app(app) and self.who.allows("metric.read", org, app)
        if org is None:
            return True
        return self.who.allows("metric.read", org, app)


def _scrape() -> Response:
    who = principal()
    if not who.admin and "metric.read" not in who.permissions:
        raise ApiError(403, "this token lacks 'metric.read'")
    collector = _Scrape(runtime(), who)
    accept = request.headers.get("Accept", "")
    if "application/openmetrics-text" in accept:
        return Response(openmetrics.generate_latest(collector), content_type=openmetrics.CONTENT_TYPE_LATEST)
    return Response(exposition.generate_latest(collector), content_type=exposition.CONTENT_TYPE_LATEST)


_TEXT = {"type": "string"}


@bp.get("/metrics")
@operation("getRelayMetrics", summary="Prometheus/OpenMetrics scrape (metric.read)", tag="Relay", returns=_TEXT,
           content_type="text/plain")
def scrape() -> Response:
    return _scrape()


@bp.get("/v1/metrics")
@operation("getRelayMetricsV1", summary="The Prometheus scrape, where Conductor serves it (metric.read)",
           tag="Relay", returns=_TEXT, content_type="text/plain")
def scrape_v1() -> Response:
    return _scrape()
