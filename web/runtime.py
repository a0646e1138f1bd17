"""The assembled process: event log, views and their runner, actors. Built once by `relay serve`."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import pykka

from actors.application import ApplicationActor
from actors.context import ActorContext
from actors.directory import Directory
from actors.instance import InstanceActor
from events.instance import RUNNING
from events.log import RelayLog
from projections.views import ProjectionRunner, Views
from web.auth import Authenticator
from web.config import Settings

log = logging.getLogger("relay.runtime")

VERSION = "0.1.0"


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        admin_token, _ = settings.ensure_admin_token()
        self.log = RelayLog(env=settings.store.event_store_env())
        self.views = Views(settings.store, self.log)
        self.runner = ProjectionRunner(self.views)
        self.ctx = ActorContext(
            log=self.log,
            views=self.views,
            runner=self.runner,
            instance_id=settings.instance_id,
            limits=settings.limits,
        )
        self.directory = Directory(self._start_application)
        self.auth = Authenticator(admin_token, self.views.applications)
        self.instance: pykka.ActorRef[Any] | None = None

    def _start_application(self, org: str, app: str) -> pykka.ActorRef[Any]:
        return ApplicationActor.start(self.ctx, org, app)

    def start(self) -> None:
        # Catch the views up before serving, so the first reads see the whole log.
        self.views.catch_up()
        self.runner.start()
        self.instance = InstanceActor.start(
            self.ctx, self.directory, self.settings.advertise_address, self.settings.port, VERSION,
            self.settings.default_org,
        )
        self.wait_for_views()
        self.resume_lifecycles()

    def resume_lifecycles(self, timeout: float = 120.0) -> int:
        """Restart safety: rebuild grace timers and recoveries from the registry view, before any executor
        can connect. HEALTHY and DISCONNECTED records that do not come back are declared DEAD after their
        grace period; DEAD ones get their recovery (again). Returns how many records were taken over."""
        started_at = self.ctx.clock()
        by_app: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        resumable: dict[str | None, bool] = {}
        for row in self.views.registry.unfinished():
            owner = row.get("instance")
            if owner not in resumable:
                resumable[owner] = self._resumable(owner)
            if resumable[owner]:
                by_app[(row["org"], row["app"])].append(row)
        for (org, app), rows in by_app.items():
            self.directory.application(org, app).proxy().adopt(rows, started_at).get(timeout=timeout)
        count = sum(len(rows) for rows in by_app.values())
        if count:
            log.info("resumed the lifecycle of %d executor record(s) in %d application(s)", count, len(by_app))
        return count

    def _resumable(self, owner: str | None) -> bool:
        """Records of this instance, or of an instance that is not running (stopped or expired): a
        running peer keeps its own (HA lease adoption takes them over if it dies)."""
        if owner is None or owner == self.ctx.instance_id:
            return True
        record = self.log.instance(owner)
        return record is None or record.status != RUNNING

    def wait_for_views(self, timeout: float = 5.0) -> bool:
        """Read-your-writes: wait until the views include everything this process appended."""
        return self.runner.wait_for(self.log.position, timeout)

    def ready(self) -> tuple[bool, str]:
        try:
            self.log.recorder.max_notification_id()
        except Exception as error:
            return False, f"event store unreachable ({type(error).__name__})"
        if self.runner.last_error:
            return False, self.runner.last_error
        return True, "ok"

    def stop(self) -> None:
        if self.instance is not None:
            self.instance.stop(timeout=10)
        pykka.ActorRegistry.stop_all(timeout=10)
        self.runner.stop()
        self.views.close()
        self.log.close()
