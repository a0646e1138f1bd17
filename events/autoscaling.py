"""Queue-based autoscaling (issue 17), as Conductor's reference defines it: the policy an application stores, whether
a queue can drive it, and the recommendation computed from a backlog. Pure: the queue's definition, the versions and
the backlog come in, as does the time.

- ``AutoscalePolicy``: ``{queue, rollout?: {maxOldApplicationVersions?, maxExecutorsForOldApplicationVersions?}}``;
  no other field (the reference's ``additionalProperties: false``), integers >= 0.
- A queue drives a policy when it exists, is not partitioned and has ``worker_concurrency`` set: the executors one
  version needs is then ``ceil(backlog / worker_concurrency)``.
- ``QueueAutoscale``, one per version: the latest first, then old versions newest registered first, up to
  ``maxOldApplicationVersions`` (default 0: the latest only). At least 1 executor each, except that an old version is
  capped by ``maxExecutorsForOldApplicationVersions`` when it is set (0 scales old versions to nothing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from relay.events.errors import InvalidValueError

POLICY_FIELDS = ("queue", "rollout")
ROLLOUT_FIELDS = ("maxOldApplicationVersions", "maxExecutorsForOldApplicationVersions")
MAX_QUEUE_NAME = 1024
BACKLOG = ("ENQUEUED", "PENDING")  # the statuses counted as a queue's backlog


class PolicyError(InvalidValueError):
    """A policy the reference refuses; ``location`` names the field (``body.rollout.x``), ``value`` what was given."""

    def __init__(self, location: str, message: str, value: Any = None) -> None:
        super().__init__(f"{location}: {message}")
        self.location, self.message, self.value = location, message, value


def check_policy(body: Any) -> dict[str, Any]:
    """The policy as stored: ``queue`` and, when given, ``rollout`` with the fields given (``$schema``, the reference's
    read-only echo, is dropped). PolicyError naming the first bad field."""
    if not isinstance(body, Mapping):
        raise PolicyError("body", "must be an AutoscalePolicy object")
    _known(body, POLICY_FIELDS, "body")
    queue = body.get("queue")
    if "queue" not in body:
        raise PolicyError("body.queue", "is required")
    if (not isinstance(queue, str) or not queue or len(queue) > MAX_QUEUE_NAME
            or any(ord(c) < 32 or ord(c) == 127 for c in queue)):
        raise PolicyError("body.queue", f"must be a queue name (1 to {MAX_QUEUE_NAME} printable characters)",
                          queue if isinstance(queue, str | int | float | bool) else None)
    policy: dict[str, Any] = {"queue": queue}
    rollout = body.get("rollout")
    if rollout is not None:
        if not isinstance(rollout, Mapping):
            raise PolicyError("body.rollout", "must be a RolloutPolicy object", rollout)
        _known(rollout, ROLLOUT_FIELDS, "body.rollout")
        checked = {}
        for name in ROLLOUT_FIELDS:
            value = rollout.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise PolicyError(f"body.rollout.{name}", "must be an integer >= 0", value)
            checked[name] = value
        policy["rollout"] = checked
    return policy


def _known(body: Mapping[str, Any], fields: Sequence[str], where: str) -> None:
    for key in body:
        if key not in fields and not (where == "body" and key == "$schema"):
            raise PolicyError(f"{where}.{key}", f"unknown field (fields: {', '.join(fields)})", body[key])


def queue_problem(name: str, queue: Mapping[str, Any] | None) -> str | None:
    """Why the queue (an executor's get_queue record, None when it has none) cannot drive a policy; None when it can."""
    if queue is None:
        return f"queue '{name}' does not exist in the application"
    if queue.get("partition_queue"):
        return f"queue '{name}' is partitioned: a partitioned queue cannot drive autoscaling"
    if worker_concurrency(queue) is None:
        return f"queue '{name}' has no worker_concurrency: set it so the executors a backlog needs can be counted"
    return None


def worker_concurrency(queue: Mapping[str, Any] | None) -> int | None:
    value = (queue or {}).get("worker_concurrency")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        return None
    return int(value)


def backlog_by_version(rows: Sequence[Any]) -> dict[str, int]:
    """get_workflow_aggregates rows grouped by application version (``{group: {application_version}, count}``) as
    counts per version; rows without a version or a count are skipped."""
    counts: dict[str, int] = {}
    for row in rows or ():
        if not isinstance(row, Mapping):
            continue
        version = (row.get("group") or {}).get("application_version")
        try:
            count = int(float(str(row.get("count") or 0)))
        except ValueError:
            continue
        if isinstance(version, str) and count > 0:
            counts[version] = counts.get(version, 0) + count
    return counts


def desired_executors(depth: int, concurrency: int | None, *, latest: bool, old_cap: int | None) -> int:
    """``ceil(depth / concurrency)``, at least 1 (1 when the queue is no longer usable); an old version capped."""
    wanted = max(1, math.ceil(depth / concurrency)) if concurrency else 1
    if not latest and old_cap is not None:
        wanted = min(wanted, old_cap)
    return wanted


def recommend(
    policy: Mapping[str, Any], versions: Sequence[str], backlog: Mapping[str, int], queue: Mapping[str, Any] | None,
    observed_at_ms: int,
) -> list[dict[str, Any]]:
    """The ``QueueAutoscale`` entries: ``versions`` newest registered first (the first is the latest), ``backlog`` the
    ENQUEUED+PENDING workflows per version on the policy's queue, ``queue`` its definition now (None when gone)."""
    rollout = policy.get("rollout") or {}
    max_old = int(rollout.get("maxOldApplicationVersions") or 0)
    old_cap = rollout.get("maxExecutorsForOldApplicationVersions")
    usable = queue_problem(str(policy["queue"]), queue) is None
    concurrency = worker_concurrency(queue) if usable else None
    entries = []
    for index, version in enumerate(list(dict.fromkeys(versions))[: 1 + max_old]):
        depth = int(backlog.get(version, 0))
        entry: dict[str, Any] = {
            "applicationVersion": version,
            "isLatest": index == 0,
            "desiredExecutors": desired_executors(depth, concurrency, latest=index == 0, old_cap=old_cap),
            "queueDepth": depth,
            "observedAt": observed_at_ms,
        }
        if usable:
            entry["queueName"] = policy["queue"]
        entries.append(entry)
    return entries
