"""Event versions: every event class of every aggregate declares its version, and older stored shapes are
upcast to today's when read.

eventsourcing stores an event's state with its class's `class_version` (when above 1) and, reading an older
one, calls the class's `upcast_vN_vN+1` static methods in turn. `versioned` declares those on the event
classes the `@event` decorators made, next to the aggregate, and refuses at import an aggregate whose event
classes are not all declared, or a version whose upcasters are missing. To add a field to an event: bump its
version, write the upcaster that gives older states the field, and record a new fixture log (docs/HACKING.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from eventsourcing.domain import Aggregate, CanInitAggregate, CanMutateAggregate

from relay.wire.json_types import JSONObject

A = TypeVar("A", bound=type[Aggregate])
Upcaster = Callable[[JSONObject], None]


def event_classes(aggregate: type[Aggregate]) -> dict[str, type]:
    """The aggregate's own event classes, by name (`Connected`, `Disconnected`, ...): the classes its events
    are recorded as, not the library's bases of them (the aggregate's `Event`, and `Created` when the
    aggregate's first event has a name of its own)."""
    own = {
        name: value for name, value in vars(aggregate).items()
        if isinstance(value, type) and issubclass(value, CanMutateAggregate)
        and value.__qualname__.startswith(f"{aggregate.__qualname__}.")
    }
    own = {name: cls for name, cls in own.items()
           if not any(other is not cls and issubclass(other, cls) for other in own.values())}
    named_first = [n for n, cls in own.items() if n != "Created" and issubclass(cls, CanInitAggregate)]
    if named_first:
        own.pop("Created", None)  # the library's default, unused: the first event has its own name
    return own


def versioned(
    versions: Mapping[str, int], upcasters: Mapping[str, Mapping[int, Upcaster]] | None = None,
) -> Callable[[A], A]:
    """Class decorator: `versions` names every event class of the aggregate with its version; `upcasters`
    gives, per event and per older version N, the function turning version N's state into N+1's."""

    def declare(aggregate: A) -> A:
        classes = event_classes(aggregate)
        if set(classes) != set(versions):
            raise TypeError(f"{aggregate.__qualname__}: versions declared for {sorted(versions)}, "
                            f"event classes are {sorted(classes)}")
        for name, version in versions.items():
            cls = classes[name]
            cls.class_version = version  # type: ignore[attr-defined]
            steps = (upcasters or {}).get(name, {})
            for older in range(1, version):
                if older not in steps:
                    raise TypeError(f"{aggregate.__qualname__}.{name} v{version} lacks its upcaster from v{older}")
                setattr(cls, f"upcast_v{older}_v{older + 1}", staticmethod(steps[older]))
        return aggregate

    return declare
