"""Alert rules judged: whether what was read (counts, the registry's rows, pending workflows per version) trips a rule
(events/alerting.py's types), and the alert's message and metadata when it does. Pure: actors/alerting.py and
actors/alerting_fleet.py read the executors, the system database and the registry, and pass the answers in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from relay.actors.policies.dataplane_aggregates import row_count

MAX_IDS_CHARS = 500  # the executor ids named in a RecoveryFlapping alert


@dataclass(frozen=True)
class Finding:
    """A rule that tripped: the alert's message and metadata (string values)."""

    message: str
    metadata: dict[str, str]


def count_rows(rows: Any) -> int:
    """The sum of the ``count`` of aggregate rows."""
    return sum(row_count(row) for row in rows or [])


# -- rules on what the executors report -------------------------------------------------------------------------------
def workflow_failure(app: str, metadata: Mapping[str, Any], failed: int) -> Finding | None:
    """WorkflowFailure: ``failed`` workflows (of ``workflowName``, when set) in the last ``periodSecs``."""
    name = metadata.get("workflowName")
    threshold, period = int(metadata["threshold"]), int(metadata["periodSecs"])
    if failed < threshold:
        return None
    which = f"workflows named '{name}'" if name else "workflows"
    return Finding(
        message=(f"{failed} {which} of application '{app}' failed in the last {period} s "
                 f"(threshold: {threshold})"),
        metadata={"workflow_name": name or "*", "failed_workflow_count": str(failed), "threshold": str(threshold),
                  "period_secs": str(period)},
    )


def slow_queue(app: str, metadata: Mapping[str, Any], stuck: int) -> Finding | None:
    """SlowQueue: ``stuck`` workflows enqueued for longer than ``thresholdSecs``."""
    queue = metadata.get("queueName")
    threshold = int(metadata["thresholdSecs"])
    if stuck == 0:
        return None
    where = f"queue '{queue}'" if queue else "its queues"
    return Finding(
        message=(f"{stuck} workflows of application '{app}' have been enqueued on {where} for more than "
                 f"{threshold} s"),
        metadata={"queue_name": queue or "*", "stuck_workflow_count": str(stuck), "threshold_secs": str(threshold)},
    )


def probe_needed(healthy: int, local: int) -> bool:
    """Whether UnresponsiveApplication must probe the executors connected here: some are connected, all of them
    here (executors connected to another instance are not ours to probe)."""
    return max(healthy, local) > 0 and local > 0 and healthy <= local


def unresponsive(app: str, healthy: int, local: int, responsive: int) -> Finding | None:
    """UnresponsiveApplication: ``healthy`` executors in the registry, ``local`` connected here, ``responsive`` of
    them answered a probe (asked only when `probe_needed`)."""
    connected = max(healthy, local)
    if connected == 0:
        return Finding(
            message=f"Application '{app}' is unresponsive: no executor is connected",
            metadata={"application_name": app, "connected_executor_count": "0"},
        )
    if not probe_needed(healthy, local) or responsive > 0:
        return None
    return Finding(
        message=f"Application '{app}' is unresponsive: none of its {connected} connected executors answers",
        metadata={"application_name": app, "connected_executor_count": str(connected)},
    )


# -- Relay's own rules, on what Relay knows of the fleet --------------------------------------------------------------
def recovery_window_start(metadata: Mapping[str, Any], now: datetime) -> datetime:
    """Since when RecoveryFlapping counts recoveries."""
    return now - timedelta(seconds=int(metadata["periodSecs"]))


def recovery_flapping(app: str, metadata: Mapping[str, Any], deaths: Sequence[Mapping[str, Any]]) -> Finding | None:
    """RecoveryFlapping: ``deaths`` (the registry's recovered deaths since `recovery_window_start`)."""
    threshold, period = int(metadata["threshold"]), int(metadata["periodSecs"])
    if len(deaths) < threshold:
        return None
    ids = ",".join(sorted({str(d["executor_id"]) for d in deaths}))
    return Finding(
        message=(f"Executors of application '{app}' died and were recovered {len(deaths)} times in the last "
                 f"{period} s (threshold: {threshold})"),
        metadata={"application_name": app, "recovery_count": str(len(deaths)), "threshold": str(threshold),
                  "period_secs": str(period), "executor_ids": ids[:MAX_IDS_CHARS]},
    )


def _time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def connected_versions(executors: Sequence[Mapping[str, Any]]) -> tuple[set[str], dict[str, datetime]]:
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


def stranded_version(app: str, metadata: Mapping[str, Any], executors: Sequence[Mapping[str, Any]],
                     pending: Mapping[str, int], source: str, now: datetime) -> Finding | None:
    """StrandedVersion: ``pending`` workflows per version (said by ``source``: "database" or "executor") on
    versions no HEALTHY executor of ``executors`` (the registry's rows) runs, past the grace."""
    min_pending, grace = int(metadata["minPending"]), int(metadata["thresholdSecs"])
    connected, last_seen = connected_versions(executors)
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
