"""Rebuild views from the event log, and check that a rebuild equals the live views."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from relay.projections.views import REPLAY_BATCH_SIZE, Views

_VERIFY_ATTEMPTS = 5


@dataclass
class ReplayReport:
    events: int
    position: int
    verified: bool | None = None
    differences: list[str] = field(default_factory=list)


def rebuild(config: StoreConfig, relay_log: RelayLog, progress: Callable[[int], None]) -> ReplayReport:
    """Empty the live views and fold the whole log into them again; `progress` gets, after each batch, the log
    position every view has reached (events, not events times views). A running server's projector may race us
    and tracking makes sure each event still lands once, but until the rebuild is done that server serves
    from emptied views (no apps, no keys: handshakes refused): the CLI refuses to rebuild beside one."""
    views = Views(config, relay_log)
    try:
        for projector in views.projectors:
            projector.view.reset(relay_log.name)
        events = views.catch_up(reached=progress, batch_size=REPLAY_BATCH_SIZE)
        return ReplayReport(events=events, position=views.position())
    finally:
        views.close()


def verify(config: StoreConfig, relay_log: RelayLog, progress: Callable[[int], None]) -> ReplayReport:
    """Rebuild into scratch views and compare them with the live ones at the same position (`progress`: as for
    `rebuild`). The live views are only read, so this is safe beside a running server."""
    live = Views(config, relay_log)
    scratch_dir = None if config.is_postgres else tempfile.mkdtemp(prefix="relay-replay-")
    location = scratch_dir or f"relay_replay_{uuid.uuid4().hex[:12]}"
    scratch = Views(config, relay_log, location=location)
    try:
        events = 0
        for _ in range(_VERIFY_ATTEMPTS):
            before = [p.position() for p in live.projectors]
            dumps = [store.dump() for store in live.stores]
            if [p.position() for p in live.projectors] != before:
                continue  # the live views moved while we read them: read again
            differences: list[str] = []
            events += scratch.catch_up(stops=before, reached=progress, batch_size=REPLAY_BATCH_SIZE)
            for projector, stop, expected in zip(scratch.projectors, before, dumps, strict=True):
                if projector.position() != stop:
                    differences.append(f"{projector.name}: rebuilt to {projector.position()}, live at {stop}")
                    continue
                rebuilt = projector.view.dump()
                differences.extend(_describe(projector.name, table, expected[table], rebuilt[table])
                                   for table in expected if rebuilt[table] != expected[table])
            return ReplayReport(events=events, position=min(before), verified=not differences,
                                differences=differences)
        return ReplayReport(events=events, position=0, verified=False,
                            differences=["the live views kept moving; try again when the server is quieter"])
    finally:
        for store in scratch.stores:
            store.drop_location()
        scratch.close()
        live.close()
        if scratch_dir:
            shutil.rmtree(scratch_dir, ignore_errors=True)


def _describe(view: str, table: str, live: list[dict[str, object]], rebuilt: list[dict[str, object]]) -> str:
    missing = [r for r in live if r not in rebuilt]
    extra = [r for r in rebuilt if r not in live]
    return (f"{view}.{table}: live has {len(live)} rows, rebuilt {len(rebuilt)}; "
            f"{len(missing)} only live, {len(extra)} only rebuilt")
