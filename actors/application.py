"""ApplicationActor: one per application; knows its live executors and runs its lifecycle commands."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pykka

from actors.context import ActorContext
from events.app import App

log = logging.getLogger("relay.actors.application")


@dataclass
class LiveExecutor:
    """An executor connected to this instance, as routing sees it."""

    executor_id: str
    ref: pykka.ActorRef[Any]
    application_version: str
    language: str
    dbos_version: str
    connected_at: float
    unsupported: set[str] = field(default_factory=set)


class ApplicationActor(pykka.ThreadingActor):
    def __init__(self, ctx: ActorContext, org: str, app: str) -> None:
        super().__init__()
        self.ctx = ctx
        self.org = org
        self.app = app
        self.live: dict[str, LiveExecutor] = {}
        # The application version executors reported as latest (list_application_versions);
        # routing prefers executors running it. None until an executor has told us.
        self.latest_version: str | None = None

    # -- lifecycle commands (from the HTTP API) ---------------------------------------------------
    def register(self, by: str = "relay") -> App:
        return self.ctx.log.register_app(self.org, self.app, self.ctx.clock(), by)

    def change_settings(self, changes: dict[str, Any], by: str = "relay") -> App:
        return self.ctx.log.change_app_settings(self.org, self.app, changes, self.ctx.clock(), by)

    def delete(self, by: str = "relay") -> App:
        deleted = self.ctx.log.delete_app(self.org, self.app, self.ctx.clock(), by)
        # A deleted application keeps no executors: close their sockets.
        for executor in list(self.live.values()):
            executor.ref.tell({"close": "application deleted"})
        return deleted

    # -- live executors ---------------------------------------------------------------------------
    def claim(self, executor: LiveExecutor) -> pykka.ActorRef[Any] | None:
        """Make `executor` the current connection for its id; return the one it replaces."""
        previous = self.live.get(executor.executor_id)
        self.live[executor.executor_id] = executor
        return previous.ref if previous is not None and previous.ref != executor.ref else None

    def release(self, executor_id: str, ref: pykka.ActorRef[Any]) -> bool:
        """Forget a closed connection; True when it was the current one for that executor id."""
        current = self.live.get(executor_id)
        if current is None or current.ref != ref:
            return False
        del self.live[executor_id]
        return True

    def mark_unsupported(self, executor_id: str, message_type: str) -> None:
        current = self.live.get(executor_id)
        if current is not None:
            current.unsupported.add(message_type)

    def live_executors(self) -> list[LiveExecutor]:
        return list(self.live.values())

    def note_latest_version(self, version: str | None) -> None:
        self.latest_version = version

    def routing_snapshot(self) -> tuple[list[LiveExecutor], str | None]:
        """What routing needs, read in one message: the live executors and the latest version."""
        return list(self.live.values()), self.latest_version
