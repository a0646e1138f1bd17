"""A log holding every event class of every aggregate of relay.events, and the list of those classes.

`record_every_event` runs the fixture log's commands (tests/support/event_log_fixture.py), the people's
(tests/unit/store_cases.py `people_history`), the incidents' (tests/support/incident_log_fixture.py) and those none
has. `every_event_class` is derived from the
aggregates themselves, so an event class added later is missed here until a command of it is added below, and a
test comparing the two (tests/integration/test_store_transfer.py) says which.
"""

from __future__ import annotations

import importlib
import pkgutil
from datetime import UTC, datetime, timedelta
from uuid import UUID

from eventsourcing.domain import Aggregate

import relay.events
from relay.events.operation import Operation
from relay.events.refs import app_ref
from relay.events.versions import event_classes
from relay.projections.store.log import RelayLog
from tests.support.event_log_fixture import record
from tests.support.incident_log_fixture import record_incidents
from tests.unit.store_cases import people_history

T1 = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def every_event_class() -> set[str]:
    """'Aggregate.Event' for every event class of every aggregate defined in relay.events."""
    found = set()
    for module_info in pkgutil.iter_modules(relay.events.__path__):
        module = importlib.import_module(f"relay.events.{module_info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Aggregate) and value is not Aggregate
                    and value.__module__ == module.__name__):
                found |= {f"{value.__name__}.{name}" for name in event_classes(value)}
    return found


def recorded_event_classes(relay_log: RelayLog) -> set[str]:
    last = relay_log.recorder.max_notification_id() or 0
    return {n.topic.split(":", 1)[1] for n in relay_log.recorder.select_notifications(start=1, limit=last + 1)}


def record_every_event(relay_log: RelayLog) -> None:
    """Every command of the domain: the fixture log's, the people's, and the rest."""
    record(relay_log)
    people_history(relay_log)
    at = [T1 + timedelta(seconds=s) for s in range(6)]
    shop = app_ref("acme", "shop")
    relay_log.change(shop, lambda app: app.set_autoscaling_policy({"queue": "orders"}, at[0], "admin"))
    relay_log.change(shop, lambda app: app.clear_autoscaling_policy(at[1], "admin"))
    relay_log.change(shop, lambda app: app.configure_data_plane({"systemDatabaseUrlFrom": "env:SHOP_DB"}, at[2],
                                                                "admin"))
    relay_log.change(shop, lambda app: app.remove_data_plane(at[3], "admin"))
    relay_log.record(Operation.perform(
        UUID("8d4f1c2e-5b6a-4e7f-9a0b-1c2d3e4f5a6b"), org="acme", app="shop", operation="cancelWorkflow", via="api",
        targets=["wf-1"], status=204, detail=None, by="api_key:ops", source="10.0.0.7", at=at[4]))
    record_incidents(relay_log)  # issue 32: Incident.* and AlertingRule.RenotifySet
