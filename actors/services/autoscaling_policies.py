"""Setting and clearing an application's autoscaling policy (issue 17): the one way the HTTP API
(web/api/autoscaling.py) and the console's editor (web/console/autoscaling.py) change it.

The body is checked by the domain (events/autoscaling.py `check_policy`); the named queue is then asked of the
application (an executor, else the data plane): one that does not exist, is partitioned or has no
worker_concurrency cannot drive a policy (InvalidFieldError on ``body.queue``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from relay.actors.autoscale import RECOMMENDATIONS
from relay.actors.errors import InvalidFieldError
from relay.actors.policies.autoscaling import queue_problem
from relay.actors.services.commands import run_command
from relay.events.autoscaling import AutoscalingPolicy, PolicyError, check_policy
from relay.wire.catalog_requests import GetQueueRequest

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime
    from relay.actors.services.executor_calls import ExecutorCalls


class AutoscalingPolicies:
    """An application's autoscaling policy, changed through its actor; `calls` asks the queue."""

    def __init__(self, rt: Runtime, calls: ExecutorCalls) -> None:
        self.rt, self.calls = rt, calls

    def set(self, org: str, app: str, body: object, by: str) -> AutoscalingPolicy:
        """Store the policy of `body` (an ``AutoscalePolicy``); the policy as stored."""
        try:
            policy = check_policy(body)
        except PolicyError as error:
            raise InvalidFieldError(error.location, error.message, error.value) from None
        queue = self.calls.call(org, app, GetQueueRequest(name=policy["queue"])).output
        problem = queue_problem(policy["queue"], queue)
        if problem is not None:
            raise InvalidFieldError("body.queue", problem, policy["queue"])
        actor = self.rt.directory.application_proxy(org, app)
        run_command(self.rt, lambda: actor.set_autoscaling_policy(dict(policy), by))
        return policy

    def clear(self, org: str, app: str, by: str) -> None:
        """Clear the policy (none stored: nothing to do) and withdraw its last recommendation."""
        actor = self.rt.directory.application_proxy(org, app)
        run_command(self.rt, lambda: actor.set_autoscaling_policy(None, by))
        RECOMMENDATIONS.withdraw(org, app)
