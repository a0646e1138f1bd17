"""RelayInstance aggregate: start, leases taken, adopted and released, stop, restart, rebuild."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from relay.events.errors import IllegalTransitionError, NotFoundError
from relay.events.ids import instance_id
from relay.events.instance import RUNNING, STOPPED, RelayInstance, lease_key
from relay.events.refs import instance_ref
from relay.projections.store.log import RelayLog

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
T2 = T0 + timedelta(seconds=2)
T3 = T0 + timedelta(seconds=3)
T4 = T0 + timedelta(seconds=4)
T5 = T0 + timedelta(seconds=5)

L1 = lease_key("acme", "shop", "exec-1")
L2 = lease_key("acme", "shop", "exec-2")
L3 = lease_key("acme", "cart", "exec-9")

_ENVELOPE = {"originator_id", "originator_version", "timestamp", "originator_topic"}


def payload(event: object) -> dict:
    return {k: v for k, v in vars(event).items() if k not in _ENVELOPE}


def single_event(aggregate: RelayInstance, kind: type) -> object:
    events = aggregate.collect_events()
    assert [type(e) for e in events] == [kind]
    return events[0]


def start(at: datetime = T0) -> RelayInstance:
    inst = RelayInstance(instance="relay-a", address="10.0.0.1", port=8080, version="0.1.0", at=at)
    inst.collect_events()
    return inst


def running_with(*leases: str) -> RelayInstance:
    inst = start()
    for lease in leases:
        inst.take_lease(lease, T1)
    inst.collect_events()
    return inst


def stopped() -> RelayInstance:
    inst = running_with(L1)
    inst.stop(T2)
    inst.collect_events()
    return inst


def replay(events: list) -> RelayInstance:
    aggregate = None
    for e in events:
        aggregate = e.mutate(aggregate)
    assert isinstance(aggregate, RelayInstance)
    return aggregate


def assert_refused(
    inst: RelayInstance, command: Callable[[RelayInstance], None], state: str, phrase: str
) -> None:
    before = copy.deepcopy(inst)
    with pytest.raises(IllegalTransitionError) as caught:
        command(inst)
    assert str(caught.value) == f"instance 'relay-a' is {state}: cannot {phrase}"
    assert caught.value.what == "instance 'relay-a'"
    assert caught.value.state == state
    assert caught.value.command == phrase
    assert inst.collect_events() == []
    assert inst == before


def test_lease_key_names_the_executor():
    assert lease_key("acme", "shop", "exec-1") == "acme/shop/exec-1"


# -- start -------------------------------------------------------------------------------------


def test_start_records_started_and_runs_without_leases():
    inst = RelayInstance(instance="relay-a", address="10.0.0.1", port=8080, version="0.1.0", at=T0)

    event = single_event(inst, RelayInstance.Started)
    assert payload(event) == {
        "instance": "relay-a",
        "address": "10.0.0.1",
        "port": 8080,
        "version": "0.1.0",
        "at": T0,
    }
    assert event.originator_id == instance_id("relay-a")
    assert event.originator_version == 1

    assert inst.id == instance_id("relay-a")
    assert inst.instance == "relay-a"
    assert inst.address == "10.0.0.1"
    assert inst.port == 8080
    assert inst.relay_version == "0.1.0"
    assert inst.status == RUNNING
    assert inst.started_at == T0
    assert inst.stopped_at is None
    assert inst.leases == {}


def test_the_software_version_does_not_overwrite_the_aggregate_version():
    # Regression: `self.version = version` used to replace the aggregate's own version number with
    # the Relay version string, so the next command failed with a TypeError.
    inst = start()
    assert inst.version == 1
    inst.take_lease(L1, T1)
    assert inst.version == 2
    inst.restart("10.0.0.2", 9090, "0.2.0", T2)
    assert inst.version == 3
    assert inst.relay_version == "0.2.0"


def test_the_same_name_always_gives_the_same_id():
    a = RelayInstance(instance="relay-a", address="h", port=1, version="v", at=T0)
    b = RelayInstance(instance="relay-a", address="other", port=2, version="w", at=T3)
    c = RelayInstance(instance="relay-b", address="h", port=1, version="v", at=T0)
    assert a.id == b.id
    assert a.id != c.id


# -- leases taken ------------------------------------------------------------------------------


def test_take_lease_records_it_with_its_time():
    inst = start()

    inst.take_lease(L1, T1)

    event = single_event(inst, RelayInstance.LeaseTaken)
    assert payload(event) == {"lease": L1, "at": T1}
    assert event.originator_version == 2
    assert inst.leases == {L1: T1}


def test_take_lease_of_a_lease_held_already_records_nothing():
    inst = running_with(L1)

    inst.take_lease(L1, T3)

    assert inst.collect_events() == []
    assert inst.leases == {L1: T1}


def test_several_leases_are_held_at_once():
    inst = start()
    inst.take_lease(L1, T1)
    inst.take_lease(L2, T2)

    events = inst.collect_events()
    assert [payload(e) for e in events] == [{"lease": L1, "at": T1}, {"lease": L2, "at": T2}]
    assert inst.leases == {L1: T1, L2: T2}


def test_take_lease_when_stopped_is_an_illegal_transition():
    assert_refused(stopped(), lambda i: i.take_lease(L2, T3), STOPPED, "take a lease")


# -- leases adopted ----------------------------------------------------------------------------


def test_adopt_lease_of_another_instance():
    inst = running_with(L1)

    inst.adopt_lease(L2, "relay-b", T3)

    event = single_event(inst, RelayInstance.LeaseAdopted)
    assert payload(event) == {"lease": L2, "from_instance": "relay-b", "to_instance": "relay-a", "at": T3}
    assert event.originator_version == 3
    assert inst.leases == {L1: T1, L2: T3}


def test_adopt_its_own_lease_is_an_illegal_transition():
    inst = running_with(L1)
    assert_refused(inst, lambda i: i.adopt_lease(L2, "relay-a", T3), "the holder", "adopt its own lease")


def test_adopt_lease_when_stopped_is_an_illegal_transition():
    assert_refused(stopped(), lambda i: i.adopt_lease(L2, "relay-b", T3), STOPPED, "adopt a lease")


# -- leases released ---------------------------------------------------------------------------


def test_release_lease_records_it_and_drops_it():
    inst = running_with(L1, L2)

    inst.release_lease(L1, T2)

    event = single_event(inst, RelayInstance.LeaseReleased)
    assert payload(event) == {"lease": L1, "at": T2}
    assert inst.leases == {L2: T1}


def test_an_adopted_lease_can_be_released():
    inst = start()
    inst.adopt_lease(L3, "relay-b", T1)
    inst.release_lease(L3, T2)
    assert [type(e) for e in inst.collect_events()] == [
        RelayInstance.LeaseAdopted,
        RelayInstance.LeaseReleased,
    ]
    assert inst.leases == {}


def test_release_a_lease_not_held_is_not_found():
    inst = running_with(L1)
    before = copy.deepcopy(inst)

    with pytest.raises(NotFoundError, match=r"instance 'relay-a' holds no lease on 'acme/shop/exec-2'"):
        inst.release_lease(L2, T2)

    assert inst.collect_events() == []
    assert inst == before


def test_release_a_lease_twice_is_not_found():
    inst = running_with(L1)
    inst.release_lease(L1, T2)
    inst.collect_events()
    with pytest.raises(NotFoundError, match="holds no lease"):
        inst.release_lease(L1, T3)
    assert inst.collect_events() == []


def test_a_stopped_instance_holds_no_lease_to_release():
    inst = stopped()
    with pytest.raises(NotFoundError, match="holds no lease"):
        inst.release_lease(L1, T3)
    assert inst.collect_events() == []


# -- stop --------------------------------------------------------------------------------------


def test_stop_records_the_leases_it_releases():
    inst = running_with(L2, L1)

    inst.stop(T2)

    event = single_event(inst, RelayInstance.Stopped)
    assert payload(event) == {"released": sorted([L1, L2]), "at": T2}
    assert inst.status == STOPPED
    assert inst.stopped_at == T2
    assert inst.leases == {}
    assert inst.started_at == T0


def test_stop_without_leases():
    inst = start()
    inst.stop(T1)
    assert single_event(inst, RelayInstance.Stopped).released == []


def test_stop_twice_is_an_illegal_transition():
    assert_refused(stopped(), lambda i: i.stop(T3), STOPPED, "stop it")


# -- restart -----------------------------------------------------------------------------------


def test_restart_of_a_running_instance_releases_the_previous_run_leases():
    inst = running_with(L2, L1)

    inst.restart("10.0.0.2", 9090, "0.2.0", T3)

    event = single_event(inst, RelayInstance.Restarted)
    assert payload(event) == {
        "previous_leases": sorted([L1, L2]),
        "address": "10.0.0.2",
        "port": 9090,
        "version": "0.2.0",
        "at": T3,
    }
    assert inst.status == RUNNING
    assert inst.address == "10.0.0.2"
    assert inst.port == 9090
    assert inst.relay_version == "0.2.0"
    assert inst.started_at == T3
    assert inst.stopped_at is None
    assert inst.leases == {}


def test_restart_of_a_stopped_instance():
    inst = stopped()

    inst.restart("10.0.0.1", 8080, "0.1.1", T3)

    event = single_event(inst, RelayInstance.Restarted)
    assert event.previous_leases == []
    assert inst.status == RUNNING
    assert inst.stopped_at is None
    assert inst.started_at == T3


def test_a_restarted_instance_takes_leases_again():
    inst = stopped()
    inst.restart("10.0.0.1", 8080, "0.1.1", T3)
    inst.take_lease(L1, T4)
    inst.adopt_lease(L2, "relay-b", T4)
    inst.stop(T5)
    events = inst.collect_events()
    assert [type(e).__name__ for e in events] == ["Restarted", "LeaseTaken", "LeaseAdopted", "Stopped"]
    assert events[-1].released == [L1, L2]


# -- rebuild -----------------------------------------------------------------------------------


def _history() -> RelayInstance:
    inst = RelayInstance(instance="relay-a", address="10.0.0.1", port=8080, version="0.1.0", at=T0)
    inst.take_lease(L1, T1)
    inst.take_lease(L2, T1)
    inst.adopt_lease(L3, "relay-b", T2)
    inst.release_lease(L2, T2)
    inst.stop(T3)
    inst.restart("10.0.0.2", 9090, "0.2.0", T4)
    inst.take_lease(L2, T5)
    return inst


def test_replaying_the_events_rebuilds_the_same_instance():
    inst = _history()
    events = inst.collect_events()
    assert [type(e).__name__ for e in events] == [
        "Started",
        "LeaseTaken",
        "LeaseTaken",
        "LeaseAdopted",
        "LeaseReleased",
        "Stopped",
        "Restarted",
        "LeaseTaken",
    ]
    assert events[5].released == sorted([L1, L3])

    rebuilt = replay(events)

    assert rebuilt == inst
    assert rebuilt.version == 8
    assert rebuilt.relay_version == "0.2.0"
    assert rebuilt.leases == {L2: T5}


@pytest.mark.parametrize("module", ["eventsourcing.popo", "eventsourcing.sqlite"])
def test_an_instance_saved_and_loaded_is_identical(module, tmp_path):
    env = {"PERSISTENCE_MODULE": module}
    if module == "eventsourcing.sqlite":
        env["SQLITE_DBNAME"] = str(tmp_path / "relay.db")
    log = RelayLog(env=env)
    inst = _history()
    log.save(inst)

    loaded = log.repository.get(instance_id("relay-a"))

    assert loaded == inst
    assert loaded is not inst
    assert loaded.version == 8
    assert loaded.leases == {L2: T5}

    before_stop = log.repository.get(instance_id("relay-a"), version=5)
    assert before_stop.status == RUNNING
    assert before_stop.leases == {L1: T1, L3: T2}


def test_a_peer_expires_a_silent_instance_and_takes_its_leases():
    from relay.events.instance import EXPIRED

    inst = RelayInstance(instance="i-1", address="127.0.0.1", port=1, version="0.1.0", at=T0)
    inst.take_lease("local/app/e1", T0)
    inst.collect_events()
    inst.expire(by="i-2", at=T1)
    (event,) = inst.collect_events()
    assert type(event).__name__ == "Expired"
    assert event.by == "i-2" and event.leases == ["local/app/e1"]
    assert inst.status == EXPIRED and inst.leases == {}


def test_an_expired_instance_cannot_be_expired_twice_or_by_itself():
    inst = RelayInstance(instance="i-1", address="127.0.0.1", port=1, version="0.1.0", at=T0)
    with pytest.raises(IllegalTransitionError, match="itself"):
        inst.expire(by="i-1", at=T1)
    inst.expire(by="i-2", at=T1)
    with pytest.raises(IllegalTransitionError, match="EXPIRED"):
        inst.expire(by="i-3", at=T2)


def test_two_peers_racing_to_expire_an_instance_conflict_in_the_store(tmp_path):
    from eventsourcing.persistence import IntegrityError

    from relay.projections.store.log import RelayLog

    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.sqlite")}
    a, b = RelayLog(env=env), RelayLog(env=env)
    a.run(instance_ref("i-1"), lambda found: RelayInstance.start_again(found, "i-1", "127.0.0.1", 1, "0.1.0", T0))
    first, second = a.get(instance_ref("i-1")), b.get(instance_ref("i-1"))
    first.expire(by="i-2", at=T1)
    second.expire(by="i-3", at=T1)
    a.save(first)
    with pytest.raises(IntegrityError):
        b.save(second)
    assert a.get(instance_ref("i-1")).status == "EXPIRED"
