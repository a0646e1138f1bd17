"""The application overview's figures (web/console/overview.py) from aggregate answers, each with the workflows
list URL of exactly what it counts; the throughput chart's bars link to their slice; search hits are marked
(web/console/helpers.py `highlight`) with every text escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from relay.web.console import overview
from relay.web.console.helpers import format_thousands, highlight

NOW = datetime(2026, 12, 6, 12, 30, tzinfo=UTC)


def link(**filters: str) -> str:
    return "/workflows?" + urlencode(sorted(filters.items()))


class Aggregates:
    """Answers aggregate bodies from a list of workflows, as an executor or the system database would."""

    def __init__(self, workflows: list[dict[str, Any]]) -> None:
        self.workflows = workflows
        self.asked: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self.asked.append(body)
        start = body.get("startTime")
        rows: dict[tuple[Any, ...], int] = {}
        for w in self.workflows:
            if "status" in body and w["status"] not in body["status"]:
                continue
            if start and w["created"] < datetime.fromisoformat(start):
                continue
            key: list[Any] = []
            if body.get("groupByStatus"):
                key.append(("status", w["status"]))
            if body.get("groupByQueueName"):
                key.append(("queueName", w.get("queue")))
            if "timeBucketSizeMs" in body:
                ms = int(w["created"].timestamp() * 1000)
                key.append(("timeBucket", str(ms - ms % body["timeBucketSizeMs"])))
            rows[tuple(key)] = rows.get(tuple(key), 0) + 1
        return [{"group": dict(k), "count": n} for k, n in rows.items()]


def workflows() -> list[dict[str, Any]]:
    out = []
    for i in range(40):
        status = ("SUCCESS", "ERROR", "PENDING", "ENQUEUED", "CANCELLED")[i % 5]
        out.append({"status": status, "created": NOW - timedelta(minutes=20 * i),
                    "queue": "orders" if status in ("PENDING", "ENQUEUED") and i % 2 else None})
    return out


def answered(ask: Aggregates, range_key: str) -> dict[str, list[dict[str, Any]]]:
    return {name: ask(body) for name, body in overview.questions(NOW, range_key).items()}


def test_every_figure_counts_what_its_link_lists() -> None:
    ask = Aggregates(workflows())
    shown = overview.figures(answered(ask, "24h"), link, NOW, "24h", bar_link=link)
    assert shown.total == 40 and shown.total_href == link(startTime="2026-12-05T12:30:00Z")
    assert {f.status: f.count for f in shown.totals} == {"SUCCESS": 8, "ERROR": 8, "PENDING": 8, "ENQUEUED": 8,
                                                         "CANCELLED": 8}
    assert shown.totals[0].href == link(status=shown.totals[0].status, startTime="2026-12-05T12:30:00Z")
    assert shown.in_flight.count == 8 and shown.in_flight.href == link(status="PENDING")
    assert shown.queued.count == 8 and shown.queued.href == link(status="ENQUEUED")
    # ERROR at i = 1, 6, 11, ...: created 20, 120, 220, ... minutes ago
    assert shown.failed_hour.count == 1
    assert shown.failed_hour.href == link(status="ERROR", startTime="2026-12-06T11:30:00Z")
    assert shown.failed_day.count == len([i for i in range(1, 40, 5) if 20 * i <= 24 * 60])
    assert shown.failed_day.href == link(status="ERROR", startTime="2026-12-05T12:30:00Z")
    assert shown.queues == [{"name": "orders", "queued": 4, "running": 4,
                             "queued_href": link(queueName="orders", status="ENQUEUED"),
                             "running_href": link(queueName="orders", status="PENDING")}]
    # four questions, none of them a list of workflows, each bounded by an index: a time range or a status
    # that a partial index holds (issue 33, point 6: no count of every workflow ever)
    assert len(ask.asked) == 4 and all("limit" not in body for body in ask.asked)
    assert all("startTime" in body or set(body["status"]) <= {"ENQUEUED", "PENDING"} for body in ask.asked)


def test_the_totals_are_the_ranges_and_in_flight_counts_every_one() -> None:
    old = [{"status": s, "created": NOW - timedelta(days=3), "queue": None} for s in ("SUCCESS", "PENDING")]
    shown = overview.figures(answered(Aggregates(workflows() + old), "24h"), link, NOW, "24h")
    assert shown.total == 40 and shown.total_label == "workflows in 24h"
    assert shown.in_flight.count == 9  # the 3-day-old PENDING one too
    assert overview.figures(answered(Aggregates(workflows() + old), "7d"), link, NOW, "7d").total == 42


def test_the_throughput_counts_ended_workflows_and_links_each_bar() -> None:
    shown = overview.figures(answered(Aggregates(workflows()), "7d"), link, NOW, "7d", bar_link=link)
    ended = [w for w in workflows() if w["status"] in overview.TERMINAL and w["created"] >= NOW - timedelta(days=7)]
    assert shown.terminal_total == len(ended) == 24
    svg = str(shown.throughput)
    assert svg.count("<a href=") == len({(w["status"], int(w["created"].timestamp()) // 21600) for w in ended})
    assert "status=SUCCESS" in svg and "endTime=" in svg and "PENDING" not in svg


def test_an_unknown_range_is_the_default_and_an_empty_app_says_so() -> None:
    assert overview.pick_range("1y") == overview.DEFAULT_RANGE == "24h"
    shown = overview.figures(answered(Aggregates([]), "30d"), link, NOW, "30d")
    assert shown.total == 0 and shown.totals == [] and shown.queues == []
    assert "no workflow ended in the last 30d" in str(shown.throughput)


def test_search_hits_are_marked_and_everything_else_escaped() -> None:
    assert str(highlight("order-Alpha-7", "alpha")) == 'order-<mark class="hit">Alpha</mark>-7'
    assert str(highlight("aaa", "a")).count("<mark") == 3
    assert str(highlight("<b>x</b>", "x")) == '&lt;b&gt;<mark class="hit">x</mark>&lt;/b&gt;'
    assert str(highlight("<i>", "")) == "&lt;i&gt;" and str(highlight(None, "x")) == ""
    assert format_thousands(50942) == "50\u202f942" and format_thousands("n/a") == "n/a"
