"""A log recorded with an earlier day's code (tests/fixtures/event-log-*.jsonl) replays with today's.

Each fixture was written by tests/support/event_log_fixture.py with the code of its day. Loaded into a fresh
store as stored, it must fold into exactly the views that the same commands give when run today: a change to an
event's fields, name or module that is not upcast fails here."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent

from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from relay.projections.views import Views
from tests.support.event_log_fixture import record

FIXTURES = sorted((Path(__file__).resolve().parents[1] / "fixtures").glob("event-log-*.jsonl"))


def _stored(line: str) -> StoredEvent:
    row = json.loads(line)
    state = (json.dumps(row["state"], separators=(",", ":")).encode() if "state" in row
             else base64.b64decode(row["state_b64"]))
    return StoredEvent(originator_id=UUID(row["originator_id"]), originator_version=row["originator_version"],
                       topic=row["topic"], state=state)


def _views_of(data_dir: Path, fill: object) -> dict[str, dict[str, list[dict]]]:
    config = StoreConfig(data_dir=data_dir)
    relay_log = RelayLog(env=config.event_store_env())
    try:
        fill(relay_log)
        views = Views(config, relay_log)
        try:
            views.catch_up()
            return {projector.name: {table: [_without_recording_time(row) for row in rows]
                                     for table, rows in projector.view.dump().items()}
                    for projector in views.projectors}
        finally:
            views.close()
    finally:
        relay_log.close()


def _without_recording_time(row: dict) -> dict:
    """`recorded_at` is when the event was stored (the library's clock), which no replay reproduces."""
    return {key: value for key, value in row.items() if key != "recorded_at"}


def test_there_is_a_fixture_log() -> None:
    assert FIXTURES, "tests/fixtures/event-log-*.jsonl is missing"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_an_older_log_replays_into_the_views_todays_code_builds(fixture: Path, tmp_path: Path) -> None:
    lines = fixture.read_text().splitlines()

    def load(relay_log: RelayLog) -> None:
        relay_log.recorder.insert_events([_stored(line) for line in lines])

    replayed = _views_of(tmp_path / "old", load)
    today = _views_of(tmp_path / "today", record)
    assert replayed == today
    assert sum(len(rows) for tables in replayed.values() for rows in tables.values()) > len(lines)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_every_aggregate_of_an_older_log_loads_with_todays_classes(fixture: Path, tmp_path: Path) -> None:
    config = StoreConfig(data_dir=tmp_path)
    relay_log = RelayLog(env=config.event_store_env())
    try:
        stored = [_stored(line) for line in fixture.read_text().splitlines()]
        relay_log.recorder.insert_events(stored)
        for originator_id in {event.originator_id for event in stored}:
            aggregate = relay_log.repository.get(originator_id)
            assert type(aggregate).__module__.startswith("relay.events.")
            assert aggregate.version == max(e.originator_version for e in stored if e.originator_id == originator_id)
    finally:
        relay_log.close()
