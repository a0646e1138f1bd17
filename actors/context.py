"""What every actor needs from its process: the event log, the views, the clock, the settings."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relay.actors.clock import Clock, system_clock
from relay.actors.configuration.limits import Limits
from relay.actors.scheduler import Scheduler, ThreadingScheduler
from relay.projections.store.log import RelayLog

if TYPE_CHECKING:
    from relay.actors.configuration.alerting import AlertingConfig
    from relay.actors.configuration.jobs import JobsConfig
    from relay.projections.views import ProjectionRunner, Views


@dataclass
class ActorContext:
    log: RelayLog
    views: Views
    runner: ProjectionRunner
    instance_id: str
    limits: Limits = field(default_factory=Limits)
    clock: Clock = system_clock
    scheduler: Scheduler = field(default_factory=ThreadingScheduler)
    _locks: dict[Any, threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)
    # The periodic jobs' intervals and timeouts, and where alerts go; None (unit tests of other parts): application
    # actors run no periodic job.
    jobs: JobsConfig | None = None
    alerting: AlertingConfig | None = None

    def lock_for(self, key: object) -> threading.Lock:
        """A lock per natural key (e.g. one executor): serialises 'check who is current, then record'."""
        with self._locks_guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
            return lock
