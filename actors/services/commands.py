"""A command to an actor, as the services run one: wait for its answer (the aggregate's domain error, if it
refuses), then for the views, so the caller's next read sees what it did."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pykka

from relay.actors.errors import TimedOutError

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

T = TypeVar("T")

COMMAND_TIMEOUT_S = 15.0


def run_command(rt: Runtime, call: Callable[[], pykka.Future[T]], timeout: float = COMMAND_TIMEOUT_S) -> T:
    """``call()``'s answer; TimedOutError when the actor does not finish in time."""
    try:
        result = call().get(timeout=timeout)
    except pykka.Timeout:
        raise TimedOutError("Relay did not finish the command in time") from None
    rt.wait_for_views()
    return result
