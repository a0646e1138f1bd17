"""An application's overview (issue 36, point 1): totals by status, in flight, queued by queue, failed in the
last hour and 24 h, throughput by terminal status over 24 h / 7 d / 30 d, recent workflows; the same page
whichever path answers. Every question is bounded by what the system database indexes (issue 33, point 6): the
totals by status are those created in the chosen range (the chart's own question: no count of every workflow
ever, a full scan at 1,000,000), in flight and queued come from the in-flight workflows (a partial index), the
failed from the failed ones (another). Every figure is a workflow aggregate (`remote.workflow_aggregates`):
through the data plane it is one read-only GROUP BY in the system database (actors/adapters/dataplane/sql.py,
ADR 0009), never a read of every workflow; with executors connected they answer it. Each figure carries the
workflows list URL whose filter is the figure's own, so a click shows exactly the workflows counted.

`questions` and `figures` are pure (the time comes in): the page asks the questions, at once (each is a
database query or an executor's answer: they run side by side), and the tests give answers of their own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from markupsafe import Markup

from relay.web.console import charts
from relay.wire.json_types import JSONObject

TERMINAL = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
# The throughput windows a person picks (the `range` query parameter): length and bar width.
RANGES: dict[str, tuple[timedelta, timedelta]] = {
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "7d": (timedelta(days=7), timedelta(hours=6)),
    "30d": (timedelta(days=30), timedelta(days=1)),
}
DEFAULT_RANGE = "24h"
RECENT_SHOWN = 10

Link = Callable[..., str]  # the workflows list's URL for filters given as keyword arguments


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def pick_range(raw: str | None) -> str:
    return raw if raw in RANGES else DEFAULT_RANGE


@dataclass
class Figure:
    label: str
    count: int
    href: str
    status: str = ""


@dataclass
class Overview:
    totals: list[Figure]
    total: int
    in_flight: Figure
    queued: Figure
    failed_hour: Figure
    failed_day: Figure
    queues: list[dict[str, Any]]
    throughput: Markup
    range: str
    ranges: tuple[str, ...] = tuple(RANGES)
    terminal_total: int = 0
    total_href: str = ""
    total_label: str = "workflows"
    notes: list[str] = field(default_factory=list)
    series_age_s: int | None = None  # the chart's answer was kept this long (web/console/series_cache.py)


def _count(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        status = str((row.get("group") or {}).get("status") or "UNKNOWN")
        out[status] = out.get(status, 0) + int(row.get("count") or 0)
    return out


def questions(now: datetime, range_key: str) -> dict[str, JSONObject]:
    """The four aggregate questions the overview asks (WorkflowAggregatesBody), by name; none lists workflows,
    none counts every workflow ever."""
    span, bucket = RANGES[range_key]
    return {
        "failed_hour": {"groupByStatus": True, "selectCount": True, "status": ["ERROR"],
                        "startTime": iso(now - timedelta(hours=1))},
        "failed_day": {"groupByStatus": True, "selectCount": True, "status": ["ERROR"],
                       "startTime": iso(now - timedelta(hours=24))},
        "queues": {"groupByQueueName": True, "groupByStatus": True, "selectCount": True,
                   "status": ["ENQUEUED", "PENDING"]},
        # Every status, so the range's totals by status come from the same answer as the chart.
        "series": {"groupByStatus": True, "selectCount": True, "startTime": iso(now - span),
                   "timeBucketSizeMs": int(bucket.total_seconds() * 1000)},
    }


def figures(answers: dict[str, list[dict[str, Any]]], link: Link, now: datetime, range_key: str,
            bar_link: Link | None = None) -> Overview:
    """The overview from the answers to `questions(now, range_key)`, each figure with its list's URL."""
    asked = questions(now, range_key)
    series = answers["series"]
    by_status = _count(series)
    in_flight = _count(answers["queues"])  # every queue's and none's: all ENQUEUED and PENDING workflows
    range_start = str(asked["series"]["startTime"])
    hour_ago, day_ago = str(asked["failed_hour"]["startTime"]), str(asked["failed_day"]["startTime"])
    failed_hour = sum(_count(answers["failed_hour"]).values())
    failed_day = sum(_count(answers["failed_day"]).values())
    queues: dict[str, dict[str, Any]] = {}
    for row in answers["queues"]:
        group = row.get("group") or {}
        name = group.get("queueName")
        if not name:
            continue
        entry = queues.setdefault(str(name), {
            "name": str(name), "queued": 0, "running": 0,
            "queued_href": link(queueName=str(name), status="ENQUEUED"),
            "running_href": link(queueName=str(name), status="PENDING")})
        key = "running" if group.get("status") == "PENDING" else "queued"
        entry[key] += int(row.get("count") or 0)
    span, bucket = RANGES[range_key]
    start = now - span
    ended = [row for row in series if (row.get("group") or {}).get("status") in TERMINAL]
    chart = charts.workflows_by_status(
        ended, int(start.timestamp() * 1000), int(now.timestamp() * 1000), int(bucket.total_seconds() * 1000),
        label_format="%H:%M" if bucket < timedelta(days=1) else "%m-%d", link=bar_link,
        empty=f"no workflow ended in the last {range_key}", label="throughput by terminal status")
    order = [s for s in charts.STATUS_COLOURS if s in by_status] + sorted(set(by_status) - set(charts.STATUS_COLOURS))
    totals = [Figure(s, by_status[s], link(status=s, startTime=range_start), s) for s in order]
    return Overview(
        totals=totals,
        total=sum(by_status.values()),
        total_href=link(startTime=range_start),
        total_label=f"workflows in {range_key}",
        in_flight=Figure("in flight", in_flight.get("PENDING", 0), link(status="PENDING"), "PENDING"),
        queued=Figure("queued", in_flight.get("ENQUEUED", 0), link(status="ENQUEUED"), "ENQUEUED"),
        failed_hour=Figure("failed in the last hour", failed_hour, link(status="ERROR", startTime=hour_ago), "ERROR"),
        failed_day=Figure("failed in the last 24 h", failed_day, link(status="ERROR", startTime=day_ago), "ERROR"),
        queues=sorted(queues.values(), key=lambda q: (-q["queued"] - q["running"], q["name"])),
        throughput=chart,
        range=range_key,
        terminal_total=sum(_count(ended).values()),
    )
