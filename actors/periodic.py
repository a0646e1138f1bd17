"""PeriodicWork: a job an actor runs on a timer, off its own thread, one run at a time (alerting, retention)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from relay.actors.executor_requests import ActorTransport, Transport
from relay.actors.scheduler import Cancellable, Scheduler

if TYPE_CHECKING:
    from relay.actors.configuration.jobs import JobsConfig
    from relay.actors.context import ActorContext

log = logging.getLogger("relay.actors.periodic")


def spawn(work: Callable[[], None]) -> None:
    """Run ``work`` in a daemon thread (a greenlet under gevent)."""
    threading.Thread(target=work, name="relay-periodic", daemon=True).start()


@dataclass(kw_only=True, eq=False)
class PeriodicWork:
    """A job an actor runs every ``interval()`` seconds, one run at a time, off the actor's thread.

    The timer posts ``{key: "tick"}``; on it (inside the actor) ``prepare()`` returns the work to do with what
    it read from the actor's state, or None; ``spawn`` runs it elsewhere; its result comes back as
    ``{key: "done"}`` and goes to ``finish`` (inside the actor), which arms the next tick."""

    key: str = field(kw_only=False)
    scheduler: Scheduler
    post: Callable[[dict[str, object]], None]
    interval: Callable[[], float | None]
    prepare: Callable[[], Callable[[], object] | None]
    finish: Callable[[object], None] = lambda _: None
    run: Callable[[Callable[[], None]], None] = spawn
    _timer: Cancellable | None = field(default=None, init=False)
    _token: int = field(default=0, init=False)
    _busy: bool = field(default=False, init=False)
    _stopped: bool = field(default=False, init=False)

    def start(self) -> None:
        """Arm the first tick (no-op while armed, running, stopped, or without an interval)."""
        delay = self.interval()
        if delay is None or self._stopped or self._busy or self._timer is not None:
            return
        self._token += 1
        message = {self.key: "tick", "token": self._token}
        self._timer = self.scheduler.call_later(delay, lambda: self.post(message))

    def handle(self, message: Mapping[str, object]) -> None:
        kind = message.get(self.key)
        if kind == "start":
            self.start()
        elif kind == "tick" and message.get("token") == self._token and self._timer is not None:
            self._timer = None
            self._tick()
        elif kind == "done" and self._busy:
            self._busy = False
            try:
                self.finish(message.get("result"))
            finally:
                self.start()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        if self._stopped:
            return
        try:
            work = self.prepare()
        except Exception:
            log.exception("preparing periodic %s failed", self.key)
            work = None
        if work is None:
            self.start()
            return
        self._busy = True
        key, post = self.key, self.post

        def job() -> None:
            result = None
            try:
                result = work()
            except Exception:
                log.exception("periodic %s failed", key)
            finally:
                post({key: "done", "result": result})

        self.run(job)


class AppJob:
    """A periodic job of one application (org, app), owned by its ApplicationActor: alerting, retention.
    A subclass names its message `key`, says its interval (`interval_of` the jobs' config) and prepares each run
    (`prepare_run`); both only while the jobs are configured. `_finish` gets the result back inside the actor."""

    key: ClassVar[str]

    def __init__(
        self,
        org: str,
        app: str,
        *,
        ctx: ActorContext,
        snapshot: Callable[[], tuple[list[Any], str | None]],
        post: Callable[[dict[str, Any]], None],
        mark_unsupported: Callable[[str, str], None],
        transport: Transport | None = None,
        run: Callable[[Callable[[], None]], None] = spawn,
    ) -> None:
        self.org, self.app = org, app
        self.ctx = ctx
        self.snapshot = snapshot
        self.mark_unsupported = mark_unsupported
        self.transport = transport or ActorTransport()
        self.periodic = PeriodicWork(self.key, scheduler=ctx.scheduler, post=post, run=run,
                                     interval=self.interval, prepare=self._prepare, finish=self._finish)

    def interval(self) -> float | None:
        return self.interval_of(jobs) if (jobs := self.ctx.jobs) else None

    def interval_of(self, jobs: JobsConfig) -> float:
        raise NotImplementedError

    def _prepare(self) -> Callable[[], object] | None:
        return self.prepare_run(jobs) if (jobs := self.ctx.jobs) else None

    def prepare_run(self, jobs: JobsConfig) -> Callable[[], object] | None:
        raise NotImplementedError

    def _finish(self, result: object) -> None:
        del result

    def start(self) -> None:
        self.periodic.start()

    def handle(self, message: Mapping[str, object]) -> None:
        self.periodic.handle(message)

    def stop(self) -> None:
        self.periodic.stop()
