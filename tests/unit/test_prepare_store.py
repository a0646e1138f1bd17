"""`relay serve --workers N` makes every table before its workers start (web/cli/workers.py prepare_store): two
workers creating one at once on a new PostgreSQL database collide in its catalog (issue 32's fleet bench lost a
worker to `tracking_edge_state`). So a Runtime made afterwards finds every table it uses there already."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relay.actors.configuration.settings import Settings
from relay.actors.runtime import Runtime
from relay.web.cli.workers import prepare_store


def _tables(data_dir: Path) -> set[tuple[str, str]]:
    found = set()
    for path in sorted(data_dir.glob("*.sqlite")):
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            found |= {(path.name, name) for (name,) in rows}
    return found


def test_a_runtime_finds_every_table_it_uses_made_by_prepare_store(tmp_path: Path) -> None:
    settings = Settings.from_env({"RELAY_DATA_DIR": str(tmp_path)})
    prepare_store(settings)
    prepared = _tables(tmp_path)
    assert ("view_edge_state.sqlite", "relay_ended_sessions") in prepared, sorted(prepared)
    rt = Runtime(settings)
    try:
        made_by_runtime = _tables(tmp_path) - prepared
    finally:
        rt.close()
    assert not made_by_runtime, f"prepare_store (OfflineStore.create_tables) misses {sorted(made_by_runtime)}"
