"""Relay's own alert rules (events/alerting.py RELAY_RULE_TYPES), evaluated from what Relay knows of the fleet.

- ``RecoveryFlapping`` reads Relay's registry alone (its recoveries history: `registry.recovered_deaths`), so it
  is evaluated whether or not any executor of the application is connected. What counts is an executor death
  whose recovery Relay dispatched (the first dispatch of that death): the retries of one recovery on other
  peers are one recovery, and a death with no peer to recover it is not a recovery (UnresponsiveApplication
  is the rule for an application with nobody left).
- ``StrandedVersion`` needs the pending workflows per application version, from the application's system
  database when a data plane is configured (the routing rule: aggregates prefer the database, and it is the
  only source left when every executor is down), else from a connected executor (`get_workflow_aggregates`
  grouped by application version, or `list_workflows` on an SDK without it). Without either it cannot be
  evaluated and is skipped (CannotAskError), as the other executor-read rules are. Which versions connected
  executors run comes from Relay's registry (any instance).

Used by actors/alerting.py `evaluate`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from relay.wire import protocol
from relay.wire.errors import CannotAskError

LIST_LIMIT = 10_000  # list_workflows fallback: counted up to this many rows per status
PENDING_STATUSES = ("PENDING", "ENQUEUED")
MAX_IDS_CHARS = 500  # the executor ids named in a RecoveryFlapping alert


@dataclass(frozen=True)
class Finding:
    """A rule that tripped: the alert's message and metadata (string values)."""

    message: str
    metadata: dict[str, str]


def count_rows(rows: Any) -> int:
    """The sum of the ``count`` of aggregate rows (executors send it as a string or a number)."""
    return sum(_row_count(row) for row in rows or [])


def _row_count(row: Any) -> int:
    try:
        return int(float(str(row.get("count") or 0)))
    except (AttributeError, ValueError):
        return 0


class FleetSources(Protocol):
    def recovered_deaths(self, since: datetime) -> list[dict[str, Any]]:
        """Deaths of the application's executors whose recovery was first dispatched at or after ``since``."""
        ...

    def executors(self) -> list[dict[str, Any]]:
        """The registry's rows of the application's executors (every instance, the deleted ones too)."""
        ...

    def ask_database(self, request: Any) -> Any:
        """The system database's answer (CannotAskError without a data plane, or when it cannot answer)."""
        ...

    def ask(self, request: Any) -> Any:
        """The answer of the best local executor (CannotAskError when none gave one)."""
        ...


# ------------------------------------------------------------------------------------- RecoveryFlapping


def evaluate_recovery_flapping(app: str, metadata: dict[str, Any], sources: FleetSources,
                               now: datetime) -> Finding | None:
    threshold, period = int(metadata["threshold"]), int(metadata["periodSecs"])
    deaths = sources.recovered_deaths(now - timedelta(seconds=period))
    if len(deaths) < threshold:
        return None
    ids = ",".join(sorted({str(d["executor_id"]) for d in deaths}))
    return Finding(
        message=(f"Executors of application '{app}' died and were recovered {len(deaths)} times in the last "
                 f"{period} s (threshold: {threshold})"),
        metadata={"application_name": app, "recovery_count": str(len(deaths)), "threshold": str(threshold),
                  "period_secs": str(period), "executor_ids": ids[:MAX_IDS_CHARS]},
    )


# -------------------------------------------------------------------------------------- StrandedVersion


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def connected_versions(executors: list[dict[str, Any]]) -> tuple[set[str], dict[str, datetime]]:
    """The versions HEALTHY executors run, and for every other version when one of its executors was last
    seen connected (its latest disconnection)."""
    connected = {str(e["app_version"]) for e in executors if e.get("status") == "HEALTHY" and e.get("app_version")}
    last_seen: dict[str, datetime] = {}
    for e in executors:
        version = e.get("app_version")
        seen = _time(e.get("disconnected_at")) or _time(e.get("updated_at"))
        if not version or version in connected or seen is None:
            continue
        last_seen[version] = max(seen, last_seen.get(version, seen))
    return connected, last_seen


def pending_by_version(sources: FleetSources) -> tuple[dict[str, int], str]:
    """PENDING and ENQUEUED workflows per application version, and which source said so ("database" or
    "executor"). CannotAskError when neither can."""
    aggregate = protocol.GetWorkflowAggregatesRequest(body=protocol.GetWorkflowAggregatesBody(
        group_by_application_version=True, select_count=True, status=list(PENDING_STATUSES),
    ))
    try:
        return _by_version(sources.ask_database(aggregate).output), "database"
    except CannotAskError as no_database:
        database_reason = str(no_database)
    try:
        return _by_version(sources.ask(aggregate).output), "executor"
    except CannotAskError as error:
        if not error.unsupported:
            raise CannotAskError(f"{error}; the database: {database_reason}") from None
    counts: dict[str, int] = {}
    for status in PENDING_STATUSES:  # an SDK without aggregates: list them (the version is in every row)
        listing = protocol.ListWorkflowsRequest(body=protocol.ListWorkflowsBody(status=status, limit=LIST_LIMIT))
        for row in sources.ask(listing).output or []:
            version = row.get("ApplicationVersion") if isinstance(row, dict) else None
            if version:
                counts[str(version)] = counts.get(str(version), 0) + 1
    return counts, "executor"


def _by_version(rows: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows or []:
        group = row.get("group") if isinstance(row, dict) else None
        version = group.get("application_version") if isinstance(group, dict) else None
        if version:  # a workflow without a version is not pinned to one: any executor may run it
            counts[str(version)] = counts.get(str(version), 0) + _row_count(row)
    return counts


def evaluate_stranded_version(app: str, metadata: dict[str, Any], sources: FleetSources,
                              now: datetime) -> Finding | None:
    min_pending, grace = int(metadata["minPending"]), int(metadata["thresholdSecs"])
    connected, last_seen = connected_versions(sources.executors())
    pending, source = pending_by_version(sources)
    stranded = {
        version: count for version, count in sorted(pending.items())
        if version not in connected and count >= min_pending
        and (version not in last_seen or (now - last_seen[version]).total_seconds() >= grace)
    }
    if not stranded:
        return None
    total = sum(stranded.values())
    listed = ", ".join(f"'{v}' ({n})" for v, n in stranded.items())
    return Finding(
        message=(f"{total} pending workflows of application '{app}' are on application versions no connected "
                 f"executor runs: {listed}"),
        metadata={"application_name": app, "stranded_versions": json.dumps(stranded, sort_keys=True),
                  "stranded_workflow_count": str(total), "connected_versions": json.dumps(sorted(connected)),
                  "min_pending": str(min_pending), "threshold_secs": str(grace), "source": source},
    )
