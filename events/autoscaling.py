"""The queue-based autoscaling policy an application stores (issue 17), as Conductor's reference defines it: the value
the App aggregate's AutoscalingPolicySet event carries, checked. The recommendation computed from it is
actors/policies/autoscaling.py's.

``AutoscalePolicy``: ``{queue, rollout?: {maxOldApplicationVersions?, maxExecutorsForOldApplicationVersions?}}``; no
other field (the reference's ``additionalProperties: false``), integers >= 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Required, TypedDict

from relay.events.errors import InvalidValueError

POLICY_FIELDS = ("queue", "rollout")
ROLLOUT_FIELDS = ("maxOldApplicationVersions", "maxExecutorsForOldApplicationVersions")
MAX_QUEUE_NAME = 1024


class Rollout(TypedDict, total=False):
    maxOldApplicationVersions: int
    maxExecutorsForOldApplicationVersions: int


class AutoscalingPolicy(TypedDict, total=False):
    """A policy as stored (and as the API answers it)."""

    queue: Required[str]
    rollout: Rollout


class PolicyError(InvalidValueError):
    """A policy the reference refuses; ``location`` names the field (``body.rollout.x``), ``value`` what was given."""

    def __init__(self, location: str, message: str, value: object = None) -> None:
        super().__init__(f"{location}: {message}")
        self.location, self.message, self.value = location, message, value


def check_policy(body: object) -> AutoscalingPolicy:
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
    policy: AutoscalingPolicy = {"queue": queue}
    rollout = body.get("rollout")
    if rollout is not None:
        if not isinstance(rollout, Mapping):
            raise PolicyError("body.rollout", "must be a RolloutPolicy object", rollout)
        _known(rollout, ROLLOUT_FIELDS, "body.rollout")
        checked: Rollout = {}
        for name in ROLLOUT_FIELDS:
            value = rollout.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise PolicyError(f"body.rollout.{name}", "must be an integer >= 0", value)
            checked[name] = value  # type: ignore[literal-required]  # name is one of ROLLOUT_FIELDS, Rollout's keys
        policy["rollout"] = checked
    return policy


def _known(body: Mapping[object, object], fields: Sequence[str], where: str) -> None:
    for key in body:
        if key not in fields and not (where == "body" and key == "$schema"):
            raise PolicyError(f"{where}.{key}", f"unknown field (fields: {', '.join(fields)})", body[key])
