"""Every event class declares its version, and an older stored shape is upcast to today's when read."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

import relay.events
from relay.events.versions import event_classes, versioned


def _aggregates() -> list[type[Aggregate]]:
    found = []
    for module_info in pkgutil.iter_modules(relay.events.__path__):
        module = importlib.import_module(f"relay.events.{module_info.name}")
        found += [value for value in vars(module).values()
                  if isinstance(value, type) and issubclass(value, Aggregate) and value is not Aggregate
                  and value.__module__ == module.__name__]
    return found


def test_every_event_class_of_every_aggregate_declares_its_version() -> None:
    aggregates = _aggregates()
    assert {a.__name__ for a in aggregates} >= {"Executor", "App", "Organization", "RelayInstance",
                                                 "AlertingRule", "Alert", "RetentionRun"}
    for aggregate in aggregates:
        classes = event_classes(aggregate)
        assert classes, aggregate
        for name, cls in classes.items():
            assert "class_version" in vars(cls), f"{aggregate.__name__}.{name} declares no version"
            assert cls.class_version >= 1


def test_an_undeclared_event_class_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="versions declared for"):
        @versioned({"Opened": 1})
        class _Door(Aggregate):
            @event("Opened")
            def __init__(self, at: datetime) -> None:
                self.at = at

            @event("Closed")
            def close(self, at: datetime) -> None:
                self.at = at


def test_a_version_without_its_upcaster_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="lacks its upcaster from v1"):
        @versioned({"Opened": 2})
        class _Door(Aggregate):
            @event("Opened")
            def __init__(self, at: datetime) -> None:
                self.at = at


# The same aggregate, as it was (v1: Renamed has a name) and as it is (v2: Renamed also has a reason).
@versioned({"Created": 1, "Renamed": 1})
class _ShopV1(Aggregate):
    @event("Created")
    def __init__(self, name: str) -> None:
        self.name = name

    @event("Renamed")
    def rename(self, name: str) -> None:
        self.name = name


def _add_reason(state: dict[str, Any]) -> None:
    state["reason"] = "unknown (recorded before v2)"


@versioned({"Created": 1, "Renamed": 2}, upcasters={"Renamed": {1: _add_reason}})
class _ShopV2(Aggregate):
    @event("Created")
    def __init__(self, name: str) -> None:
        self.name = name
        self.reason: str | None = None

    @event("Renamed")
    def rename(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason


def test_a_v1_event_in_the_store_reads_as_todays_v2() -> None:
    then = Application[UUID](env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    shop = _ShopV1(name="corner shop")
    shop.rename("big shop")
    then.save(shop)
    stored = then.recorder.select_events(shop.id)
    assert b"reason" not in stored[1].state and b"class_version" not in stored[1].state

    # Today the class reads those rows at v2 (the same rows, their topics naming today's class).
    now = Application[UUID](env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    now.recorder.insert_events([replace(e, topic=e.topic.replace("_ShopV1", "_ShopV2"),
                                        state=e.state.replace(b"_ShopV1", b"_ShopV2")) for e in stored])
    today = now.repository.get(shop.id)
    assert isinstance(today, _ShopV2)
    assert (today.name, today.reason) == ("big shop", "unknown (recorded before v2)")

    # New events are written at v2, with their version in the stored state.
    today.rename("bigger shop", reason="growth")
    now.save(today)
    assert b'"class_version":2' in now.recorder.select_events(shop.id)[-1].state.replace(b" ", b"")
