"""Releases (events/releases.py, docs/adr/0050): the version in step everywhere, every event class placed in a
release, and the gate RelayLog keeps while releases are mixed."""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from eventsourcing.domain import Aggregate, event

import relay.events
from relay.events import releases
from relay.events.releases import (
    FIRST_RELEASE,
    FIRST_RELEASE_READS,
    INTRODUCED_IN,
    RELEASE,
    ClusterUpgradingError,
    needs,
    oldest,
    release_key,
    unreadable,
)
from relay.events.versions import event_classes, versioned
from relay.projections.store.log import RelayLog

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 12, 6, tzinfo=UTC)


def _today() -> dict[str, int]:
    """Every event class of today's aggregates: "Aggregate.Event" -> version."""
    found: dict[str, int] = {}
    for info in pkgutil.iter_modules(relay.events.__path__):
        module = importlib.import_module(f"relay.events.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Aggregate) and value.__module__ == module.__name__:
                for name, cls in event_classes(value).items():
                    found[f"{value.__name__}.{name}"] = cls.class_version
    return found


def test_the_release_is_the_same_in_pyproject_the_changelog_and_the_code() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == RELEASE
    entries = re.findall(r"^## (\S+) ", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert entries[0] == RELEASE, entries
    assert FIRST_RELEASE in entries
    # Every released entry names its commit (the rolling-upgrade test builds the previous one from it).
    commits = re.findall(r"^Commit: ([0-9a-f]{40})$", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert len(commits) == len(entries) - 1


def test_every_event_class_of_today_is_read_by_the_first_release_or_has_the_release_that_reads_it() -> None:
    unplaced = []
    for name, version in _today().items():
        aggregate, _, event_name = name.partition(".")
        keys = releases.event_key(aggregate, event_name, version)
        if keys[1] not in FIRST_RELEASE_READS and not any(k in INTRODUCED_IN for k in keys):
            unplaced.append(f"{name} v{version}")
    assert not unplaced, f"add these to events/releases.py INTRODUCED_IN: {unplaced}"
    for key, release in INTRODUCED_IN.items():
        assert release_key(FIRST_RELEASE) < release_key(release) <= release_key(RELEASE), key
        assert key.split(" ")[0] in _today(), f"INTRODUCED_IN lists {key}, which no aggregate has"


def test_releases_compare_by_number_and_an_unknown_one_counts_as_the_first() -> None:
    assert release_key("0.10.0") > release_key("0.9.3") > release_key("0.1.0")
    assert release_key("garbage") == release_key(None) == release_key(FIRST_RELEASE)
    assert oldest(["0.2.0", "0.10.1", "0.2.0"]) == "0.2.0"
    assert oldest(["0.2.0", None]) == FIRST_RELEASE
    assert oldest([]) == RELEASE


def test_what_a_release_cannot_read() -> None:
    assert needs("Executor", "Connected", 1) is None
    assert needs("Alert", "Delivered", 2) is None
    assert needs("Alert", "Delivered", 3) == RELEASE  # a version nobody declared: the cautious answer
    assert needs("Nowhere", "Happened", 1) == RELEASE
    events = [("Executor", "Connected", 1), ("Nowhere", "Happened", 1)]
    assert unreadable(events, FIRST_RELEASE) == [("Nowhere.Happened v1", RELEASE)]
    assert unreadable(events, RELEASE) == []


@versioned({"Rang": 1, "Answered": 1})
class Bell(Aggregate):
    """An aggregate of this test only: `Rang` every release reads (as if listed), `Answered` only this one."""

    @event("Rang")
    def __init__(self, at: datetime) -> None:
        self.at = at
        self.answered = False

    def answer(self) -> None:
        self._answered()

    @event("Answered")
    def _answered(self) -> None:
        self.answered = True


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[RelayLog]:
    monkeypatch.setattr(releases, "FIRST_RELEASE_READS", FIRST_RELEASE_READS | {"Bell.Rang v1"})
    monkeypatch.setitem(INTRODUCED_IN, "Bell.Answered", RELEASE)
    needs.cache_clear()
    relay_log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                              "SQLITE_DBNAME": str(tmp_path / "events.db")})
    yield relay_log
    needs.cache_clear()
    relay_log.close()


def test_the_log_refuses_what_the_oldest_live_instance_cannot_read_until_it_is_gone(gated: RelayLog) -> None:
    floor = [FIRST_RELEASE]
    asked: list[str] = []

    def release_floor() -> str:
        asked.append(floor[0])
        return floor[0]

    gated.release_floor = release_floor
    bell = Bell(at=AT)
    gated.save(bell)  # read by every release: the floor is not even asked
    assert asked == []
    assert not gated.can_write(RELEASE)
    loaded = gated.repository.get(bell.id)
    loaded.answer()
    with pytest.raises(ClusterUpgradingError) as refused:
        gated.save(loaded)
    assert f"release {FIRST_RELEASE} is still running" in str(refused.value)
    assert "Bell.Answered v1" in str(refused.value)
    assert gated.repository.get(bell.id).answered is False  # nothing appended

    floor[0] = RELEASE  # the last older instance stopped
    assert gated.can_write(RELEASE)
    again = gated.repository.get(bell.id)
    again.answer()
    gated.save(again)
    assert gated.repository.get(bell.id).answered is True


def test_without_a_cluster_nothing_is_gated(gated: RelayLog) -> None:
    bell = Bell(at=AT)
    bell.answer()
    gated.save(bell)
    assert gated.repository.get(bell.id).answered is True
    assert gated.can_write("99.0.0")
