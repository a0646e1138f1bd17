"""ApplicationActor: one per application; knows its live executors and runs its lifecycle commands.

It also owns the application's executor lifecycle on this instance (actors/recovery.py): grace timers
of disconnected executors and recovery dispatches of dead ones, to its own live executors only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pykka

from actors import protocol
from actors.context import ActorContext
from actors.recovery import MESSAGE_KEY, AppLifecycle
from events.app import DEFAULT_SETTINGS, App

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
        self.lifecycle = AppLifecycle(
            org,
            app,
            log=ctx.log,
            instance_id=ctx.instance_id,
            clock=ctx.clock,
            scheduler=ctx.scheduler,
            grace_secs=self._grace_secs,
            recovery_timeout_s=ctx.limits.recovery_timeout_s,
            peers=lambda: list(self.live.values()),
            latest_version=lambda: self.latest_version,
            send=self._send_recovery,
            forget=self._forget_request,
            post=self._post,
        )

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, dict) and MESSAGE_KEY in message:
            try:
                self.lifecycle.handle(message)
            except Exception:
                # A told message has no caller to fail: an escaping error would stop this actor.
                log.exception("lifecycle of %s/%s failed handling %s", self.org, self.app, message[MESSAGE_KEY])
        return None

    def on_stop(self) -> None:
        self.lifecycle.stop()

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
        self.lifecycle.returned(executor.executor_id)  # back within its grace period, or after it
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

    # -- the executor lifecycle (actors/recovery.py) ----------------------------------------------
    def executor_connected(self, executor_id: str) -> None:
        """Its Connected/Reconnected is recorded: a dead executor waiting for a peer may have one now."""
        if executor_id in self.live:
            self.lifecycle.peer_connected()

    def executor_disconnected(self, executor_id: str, at: datetime) -> None:
        """Its Disconnected is recorded (at `at`): its grace period starts."""
        if executor_id not in self.live:
            self.lifecycle.disconnected(executor_id, at)

    def rewatch(self, executor_id: str) -> None:
        """A connection of this executor was refused after its claim: watch its record as it stands."""
        self.lifecycle.rewatch(executor_id)

    def adopt(self, rows: list[dict[str, Any]], started_at: datetime) -> None:
        """Take over registry rows (HEALTHY, DISCONNECTED, DEAD) after a restart: see AppLifecycle.adopt."""
        self.lifecycle.adopt(rows, started_at)

    def lifecycle_snapshot(self) -> dict[str, Any]:
        return self.lifecycle.snapshot()

    def _grace_secs(self) -> float:
        row = self.ctx.views.applications.app(self.org, self.app)
        value = row["settings"].get("executorTimeoutSecs") if row else None
        return float(value or DEFAULT_SETTINGS["executorTimeoutSecs"])

    def _post(self, message: dict[str, Any]) -> None:
        try:
            self.actor_ref.tell(message)
        except pykka.ActorDeadError:
            log.debug("application actor %s/%s stopped; timer message dropped", self.org, self.app)

    def _send_recovery(
        self, peer: LiveExecutor, request: protocol.RecoveryRequest, on_answer: Callable[[Any], None]
    ) -> None:
        # Not waited for: the answer (or the peer's disconnect) comes back through `on_answer`.
        try:
            peer.ref.proxy().request_then(request, on_answer)
        except pykka.ActorDeadError as error:
            on_answer(error)

    def _forget_request(self, peer: LiveExecutor, request_id: str) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            peer.ref.proxy().forget(request_id)
