"""The autoscaling recommendation (issue 17), as Conductor's reference defines it: whether a queue can drive an
application's policy (events/autoscaling.py) and the executors each version needs for its backlog. Pure: the queue's
definition, the versions, the backlog and the time come in.

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

BACKLOG = ("ENQUEUED", "PENDING")  # the statuses counted as a queue's backlog


def queue_problem(name: str, queue: Mapping[str, object] | None) -> str | None:
    """Why the queue (an executor's get_queue record, None when it has none) cannot drive a policy; None when it can."""
    if queue is None:
        return f"queue '{name}' does not exist in the application"
    if queue.get("partition_queue"):
        return f"queue '{name}' is partitioned: a partitioned queue cannot drive autoscaling"
    if worker_concurrency(queue) is None:
        return f"queue '{name}' has no worker_concurrency: set it so the executors a backlog needs can be counted"
    return None


def worker_concurrency(queue: Mapping[str, object] | None) -> int | None:
    value = (queue or {}).get("worker_concurrency")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        return None
    return int(value)


def desired_executors(depth: int, concurrency: int | None, *, latest: bool, old_cap: int | None) -> int:
    """``ceil(depth / concurrency)``, at least 1 (1 when the queue is no longer usable); an old version capped."""
    wanted = max(1, math.ceil(depth / concurrency)) if concurrency else 1
    if not latest and old_cap is not None:
        wanted = min(wanted, old_cap)
    return wanted


def recommend(
    policy: Mapping[str, Any], versions: Sequence[str], backlog: Mapping[str, int], queue: Mapping[str, Any] | None,
    observed_at_ms: int,
) -> list[dict[str, object]]:
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
        entry: dict[str, object] = {
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
