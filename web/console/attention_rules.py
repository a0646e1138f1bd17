"""What "Needs attention" counts as needing it (issue 33, point 3), pure: the answers of an application's executors
or data plane, rows of Relay's views and `now` come in; what the page lists comes out. web/console/attention.py asks
the questions and renders the page."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from relay.actors.policies.alerting import connected_versions
from relay.web.console.overview import iso
from relay.web.console.recovery_state import recovery_wait
from relay.web.shapes.values import view_time
from relay.wire.json_types import JSONObject

FAILED_WINDOW = timedelta(hours=1)
FAILED_SHOWN = 5  # the newest failed workflows listed per application (the count covers them all)
STUCK_AFTER_S = 300  # a queue whose oldest ENQUEUED workflow waited longer than this has stuck work
MAX_STUCK_AFTER_S = 7 * 24 * 3600
WAITING = ("PENDING", "ENQUEUED")
DEAD_SHOWN = 50  # DEAD executors read per application (at fleet size an application may have thousands)
# The data plane states that need no one: open, or not opened yet (it opens on first use).
DATA_PLANE_FINE = frozenset({"ready", "unchecked"})


def questions(now: datetime) -> dict[str, JSONObject]:
    """What each application is asked, as v2 bodies by name: `failed_count` and `waiting` are workflow aggregates
    (one GROUP BY through the data plane, never a read of every workflow), `failed_newest` a search of a few."""
    since = failed_since(now)
    return {
        "failed_count": {"groupByStatus": True, "selectCount": True, "status": ["ERROR"], "startTime": since},
        "failed_newest": {"status": ["ERROR"], "startTime": since, "limit": FAILED_SHOWN, "sortDesc": True,
                          "loadInput": False, "loadOutput": False},
        # One question for both stuck queues and stranded versions: waiting work by queue, version and status.
        "waiting": {"groupByQueueName": True, "groupByAppVersion": True, "groupByStatus": True, "selectCount": True,
                    "selectMinCreatedAt": True, "status": list(WAITING)},
    }


def failed_since(now: datetime) -> str:
    return iso(now - FAILED_WINDOW)


def stuck_after(raw: str | None) -> int:
    """The `stuckAfterSecs` query parameter: whole seconds from 1 to a week; the default otherwise."""
    try:
        return max(1, min(int(raw or STUCK_AFTER_S), MAX_STUCK_AFTER_S))
    except ValueError:
        return STUCK_AFTER_S


@dataclass
class Failed:
    app: str
    count: int
    newest: list[JSONObject]


@dataclass
class StuckQueue:
    app: str
    queue: str
    enqueued: int
    oldest: str  # when its oldest ENQUEUED workflow was created (RFC 3339)
    waited_s: int


@dataclass
class Stranded:
    app: str
    version: str
    pending: int
    enqueued: int
    last_seen: str  # when an executor of the version was last connected; "" when none ever was


@dataclass
class DeadExecutor:
    app: str
    executor_id: str
    version: str
    hostname: str
    dead_at: str
    why: str


@dataclass
class DataPlaneDown:
    app: str
    status: str
    detail: str


@dataclass
class Attention:
    """Every section of the page; `problems` are the applications that could not be asked, and why."""

    failed: list[Failed] = field(default_factory=list)
    stuck: list[StuckQueue] = field(default_factory=list)
    stranded: list[Stranded] = field(default_factory=list)
    dead: list[DeadExecutor] = field(default_factory=list)
    dead_unlisted: dict[str, int] = field(default_factory=dict)  # app → DEAD executors past DEAD_SHOWN
    incidents: list[JSONObject] = field(default_factory=list)
    data_planes: list[DataPlaneDown] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # app → which path answered: executor or database


def _count(rows: Sequence[Mapping[str, Any]]) -> int:
    return sum(int(r.get("count") or 0) for r in rows)


def _group(row: Mapping[str, Any]) -> Mapping[str, Any]:
    group = row.get("group")
    return group if isinstance(group, Mapping) else {}


def failed(app: str, counted: Sequence[Mapping[str, Any]], newest: list[JSONObject]) -> Failed | None:
    """The application's failures of the last hour; None when there are none."""
    count = max(_count(counted), len(newest))  # an executor may have counted before the newest one ended
    return Failed(app, count, newest[:FAILED_SHOWN]) if count else None


def _when(value: object) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def stuck_queues(app: str, waiting: Sequence[Mapping[str, Any]], now: datetime, after_s: int) -> list[StuckQueue]:
    """Queues whose oldest ENQUEUED workflow was created more than `after_s` seconds before `now`, longest
    waiting first (`waiting` answers questions()["waiting"]: rows by queue, version and status)."""
    queues: dict[str, tuple[int, datetime | None]] = {}
    for row in waiting:
        group = _group(row)
        name = group.get("queueName")
        if not name or group.get("status") != "ENQUEUED":
            continue
        count, oldest = queues.get(str(name), (0, None))
        created = _when(row.get("minCreatedAt"))
        if created is not None and (oldest is None or created < oldest):
            oldest = created
        queues[str(name)] = (count + int(row.get("count") or 0), oldest)
    stuck = [
        StuckQueue(app, name, count, iso(oldest), int((now - oldest).total_seconds()))
        for name, (count, oldest) in queues.items()
        if count and oldest is not None and (now - oldest).total_seconds() > after_s
    ]
    return sorted(stuck, key=lambda q: (-q.waited_s, q.queue))


def stranded_versions(app: str, waiting: Sequence[Mapping[str, Any]], healthy: Collection[str],
                      down: Sequence[Mapping[str, Any]]) -> list[Stranded]:
    """Versions with PENDING or ENQUEUED workflows that no HEALTHY executor runs (`healthy`: the registry's
    versions of them): nothing will run or recover that work until an executor of the version connects (DBOS
    dequeues and recovers a workflow only on its own version). `down` (the registry's DISCONNECTED and DEAD
    executors) says when an executor of a version was last connected."""
    _, last_seen = connected_versions(down)
    counts: dict[str, dict[str, int]] = {}
    for row in waiting:
        group = _group(row)
        version = group.get("appVersion")
        if not version or str(version) in healthy:
            continue
        by_status = counts.setdefault(str(version), {"PENDING": 0, "ENQUEUED": 0})
        status = str(group.get("status"))
        if status in by_status:
            by_status[status] += int(row.get("count") or 0)
    return [
        Stranded(app, version, c["PENDING"], c["ENQUEUED"],
                 iso(last_seen[version]) if version in last_seen else "")
        for version, c in sorted(counts.items()) if c["PENDING"] or c["ENQUEUED"]
    ]


def dead_executors(app: str, dead: Sequence[JSONObject], latest: Mapping[str, JSONObject], healthy: Collection[str],
                   grace_secs: float, now: datetime) -> list[DeadExecutor]:
    """The DEAD executors of `dead` (registry rows) whose workflows no one has recovered yet, each with why
    (recovery_state.recovery_wait; `healthy`: the versions HEALTHY executors run)."""
    found = []
    for row in dead:
        if row["status"] != "DEAD":
            continue
        last = latest.get(str(row["executor_id"]))
        if row["recovered"] or (last is not None and last["outcome"] == "acknowledged"):
            continue
        found.append(DeadExecutor(app, str(row["executor_id"]), str(row["app_version"] or ""),
                                  str(row["hostname"] or ""), view_time(row["dead_at"]) or "",
                                  recovery_wait(row, last, healthy, grace_secs, now)))
    return found


def data_plane_down(app: str, state: Mapping[str, Any] | None) -> DataPlaneDown | None:
    """The application's data plane when it cannot be used (unreachable, refused, unresolved, unavailable)."""
    if state is None or state.get("status") in DATA_PLANE_FINE:
        return None
    return DataPlaneDown(app, str(state.get("status")), str(state.get("detail") or ""))
