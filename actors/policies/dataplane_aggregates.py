"""Workflow aggregates folded from a system database's workflow list (issue 15), the fallback of the data plane's
GROUP BY (actors/adapters/dataplane/sql.py, issue 34) on a schema version that query is not tested on: the public client
lists workflows but does not group them, so Relay pages through the list (without inputs or outputs) and folds
it here as it comes, the way an executor's get_workflow_aggregates answers: groups by the requested fields (and
a time bucket of the creation time), with the selected measures. Also the readers of such rows (from an executor or
the data plane) that the policies share: a row's count and the counts per application version. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# The request's group_by flags, each with the WorkflowStatus field it groups by and the key executors send.
GROUPS = (
    ("group_by_status", "status", "status"),
    ("group_by_name", "name", "name"),
    ("group_by_queue_name", "queue_name", "queue_name"),
    ("group_by_executor_id", "executor_id", "executor_id"),
    ("group_by_application_version", "app_version", "application_version"),
    ("group_by_application_name", "application_name", "application_name"),
)


class AggregateRequestError(ValueError):
    """The request selects no group or no measure (an executor refuses it the same way)."""


def aggregate(statuses: Iterable[object], body: Any) -> list[dict[str, Any]]:
    """Rows ``{group: {...}, count?, min_created_at?, max_queue_wait_ms?, max_total_latency_ms?}``."""
    groups = [(attr, key) for flag, attr, key in GROUPS if getattr(body, flag, False)]
    bucket = body.time_bucket_size_ms
    if not groups and bucket is None:
        raise AggregateRequestError("at least one group_by flag (or a time bucket) must be set")
    measures = [m for m in ("count", "min_created_at", "max_queue_wait_ms", "max_total_latency_ms")
                if getattr(body, f"select_{m}", False)]
    if not measures:
        raise AggregateRequestError("at least one select_ flag must be set")
    folded: dict[tuple[object, ...], dict[str, Any]] = {}
    for status in statuses:
        created = getattr(status, "created_at", None)
        group = {key: getattr(status, attr, None) for attr, key in groups}
        if bucket is not None:
            group["time_bucket"] = None if created is None else str(int(created) // bucket * bucket)
        row = folded.setdefault(tuple(group.values()), {"group": group, "count": 0, "min_created_at": None,
                                                         "max_queue_wait_ms": None, "max_total_latency_ms": None})
        row["count"] += 1
        row["min_created_at"] = _min(row["min_created_at"], created)
        row["max_queue_wait_ms"] = _max(row["max_queue_wait_ms"], _minus(getattr(status, "dequeued_at", None), created))
        row["max_total_latency_ms"] = _max(row["max_total_latency_ms"],
                                           _minus(getattr(status, "completed_at", None), created))
    return [{"group": row["group"], **{m: _wire(row[m]) for m in measures}} for row in folded.values()]


def row_count(row: Any) -> int:
    """An aggregate row's ``count`` (executors send it as a string or a number); 0 when it has none."""
    try:
        return int(float(str(row.get("count") or 0)))
    except (AttributeError, ValueError):
        return 0


def count_by_version(rows: Iterable[object] | None) -> dict[str, int]:
    """Rows grouped by application version (``{group: {application_version}, count}``) as counts per version; rows
    without a version or a count are skipped (a workflow without a version is not pinned to one: any executor may
    run it)."""
    counts: dict[str, int] = {}
    for row in rows or ():
        group = row.get("group") if isinstance(row, Mapping) else None
        version = group.get("application_version") if isinstance(group, Mapping) else None
        count = row_count(row)
        if isinstance(version, str) and version and count > 0:
            counts[version] = counts.get(version, 0) + count
    return counts


def _minus(later: Any, earlier: Any) -> int | None:
    return None if later is None or earlier is None else int(later) - int(earlier)


def _min(a: int | None, b: Any) -> int | None:
    return b if a is None else a if b is None else min(a, int(b))


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _wire(value: Any) -> object:
    return None if value is None else value if isinstance(value, int) else int(value)
