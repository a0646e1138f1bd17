"""Where an executor's recovery stands, in the console's words (pure: rows of the registry view in, `now` in)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from relay.projections.registry import HEALTHY
from relay.wire.json_types import JSONObject


def recovery_wait(row: JSONObject, latest: JSONObject | None, healthy_versions: Collection[str],
                  grace_secs: float, now: datetime) -> str:
    """Where an executor's recovery stands, in words, from the registry alone (pure; `now` comes in):
    its grace period while DISCONNECTED; while DEAD, the dispatch in flight or why none is (no executor of
    its version connected, the last attempt's failure); once recovered, by whom."""
    status = row["status"]
    if status == HEALTHY:
        return ""
    if status == "DISCONNECTED":
        since = _when(row["disconnected_at"])
        elapsed = max(0, int((now - since).total_seconds())) if since else 0
        return f"grace period: {min(elapsed, int(grace_secs))} s of {int(grace_secs)} s"
    if row["recovered"] or (latest and latest["outcome"] == "acknowledged"):
        return f"recovered by {latest['peer']} (attempt {latest['attempt']})" if latest else "recovered"
    return "deleted" if status == "DELETED" else _dead_wait(row, latest, healthy_versions)


def _dead_wait(row: JSONObject, latest: JSONObject | None, healthy_versions: Collection[str]) -> str:
    if row["recovery_peer"]:
        return (f"recovery dispatched to {row['recovery_peer']} (attempt {row['recovery_attempts']}), "
                "awaiting its answer")
    version = row["app_version"]
    failed = f"; last attempt failed: {latest['reason']}" if latest and latest["outcome"] == "failed" else ""
    if not healthy_versions:
        why = "no executor connected"
    elif version and version not in healthy_versions:
        why = f"no executor of version {version} connected"
    else:
        why = "waiting for the next recovery round"
    return why + failed


def _when(value: object) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
