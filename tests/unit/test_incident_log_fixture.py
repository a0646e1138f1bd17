"""The incidents log recorded with an earlier day's code (tests/fixtures/incident-event-log-*.jsonl) replays with
today's: into the views the same commands build today, every aggregate loading with today's classes. It holds every
event class issue 32 added (each also listed in events/releases.py INTRODUCED_IN, the rolling upgrade's gate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.events.alerting import AlertingRule
from relay.events.incidents import Incident
from relay.events.releases import INTRODUCED_IN
from relay.events.versions import event_classes
from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from tests.support.incident_log_fixture import record_incidents
from tests.unit.test_event_log_fixture import _stored, _views_of

FIXTURES = sorted((Path(__file__).resolve().parents[1] / "fixtures").glob("incident-event-log-*.jsonl"))
ADDED = {f"Incident.{name}" for name in event_classes(Incident)} | {"AlertingRule.RenotifySet"}


def test_every_event_class_of_incidents_is_in_the_fixture_and_gated() -> None:
    assert FIXTURES, "tests/fixtures/incident-event-log-*.jsonl is missing"
    assert "RenotifySet" in event_classes(AlertingRule)
    topics = {json.loads(line)["topic"].rpartition(":")[2] for line in FIXTURES[-1].read_text().splitlines()}
    assert topics >= ADDED, ADDED - topics
    assert {key: INTRODUCED_IN.get(key) for key in ADDED} == dict.fromkeys(ADDED, "0.2.0")


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_an_older_incidents_log_replays_into_the_views_todays_code_builds(fixture: Path, tmp_path: Path) -> None:
    lines = fixture.read_text().splitlines()

    def load(relay_log: RelayLog) -> None:
        relay_log.recorder.insert_events([_stored(line) for line in lines])

    replayed = _views_of(tmp_path / "old", load)
    assert replayed == _views_of(tmp_path / "today", record_incidents)
    incidents = replayed["alerting"]["relay_alerting_incidents"]
    assert [(i["number"], i["resolved_quietly"], i["acknowledged_by"]) for i in incidents] == [
        (1, 1, "bob"), (2, 0, None)]


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_every_aggregate_of_an_older_incidents_log_loads_with_todays_classes(fixture: Path, tmp_path: Path) -> None:
    relay_log = RelayLog(env=StoreConfig(data_dir=tmp_path).event_store_env())
    try:
        stored = [_stored(line) for line in fixture.read_text().splitlines()]
        relay_log.recorder.insert_events(stored)
        for originator_id in {event.originator_id for event in stored}:
            aggregate = relay_log.repository.get(originator_id)
            assert aggregate.version == max(e.originator_version for e in stored if e.originator_id == originator_id)
            if isinstance(aggregate, Incident) and aggregate.number == 1:
                assert aggregate.resolved_quietly and aggregate.renotified == 1
    finally:
        relay_log.close()
