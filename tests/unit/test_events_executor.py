"""Executor aggregate: HEALTHY -> DISCONNECTED -> DEAD -> DELETED, recovery dispatch/failure/acknowledgement,
reconnection from any state, every illegal transition, and rebuild from events."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from relay.events.errors import IllegalTransitionError, InvalidValueError
from relay.events.executor import (
    DEAD,
    DELETED,
    DISCONNECTED,
    HEALTHY,
    Executor,
    ExecutorInfo,
    check_info,
)
from relay.events.ids import executor_id
from relay.projections.store.log import RelayLog

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=10)
T2 = T0 + timedelta(seconds=70)
T3 = T0 + timedelta(seconds=80)
T4 = T0 + timedelta(seconds=90)
T5 = T0 + timedelta(seconds=100)
T6 = T0 + timedelta(seconds=110)

ORG, APP, EXE = "acme", "shop", "exec-1"
INFO = ExecutorInfo(
    application_version="1.0.0",
    hostname="host-a",
    language="python",
    dbos_version="2.4.0",
    metadata={"region": "eu", "tags": ["a", "b"]},
)
INFO_2 = ExecutorInfo(
    application_version="1.1.0", hostname=None, language="typescript", dbos_version="3.0.1", metadata=None
)

_ENVELOPE = {"originator_id", "originator_version", "timestamp", "originator_topic"}


def payload(event: object) -> dict:
    return {k: v for k, v in vars(event).items() if k not in _ENVELOPE}


def single_event(aggregate: Executor, kind: type) -> object:
    events = aggregate.collect_events()
    assert [type(e) for e in events] == [kind]
    return events[0]


def executor_in(state: str) -> Executor:
    """An executor brought to `state` by its legal path, with its events collected."""
    ex = Executor.connect(ORG, APP, EXE, INFO, "relay-a", T0)
    if state in (DISCONNECTED, DEAD, DELETED):
        ex.disconnect("socket closed", T1)
    if state in (DEAD, DELETED):
        ex.declare_dead(60, T2)
    if state == DELETED:
        ex.delete("recovered", T4)
    ex.collect_events()
    assert ex.status == state
    return ex


def dead_with_pending(peer: str = "exec-2") -> Executor:
    ex = executor_in(DEAD)
    ex.dispatch_recovery(peer, "relay-a", T3)
    ex.collect_events()
    return ex


def dead_recovered(peer: str = "exec-2") -> Executor:
    ex = dead_with_pending(peer)
    ex.acknowledge_recovery(peer, T4)
    ex.collect_events()
    return ex


def replay(events: list) -> Executor:
    aggregate = None
    for e in events:
        aggregate = e.mutate(aggregate)
    assert isinstance(aggregate, Executor)
    return aggregate


def assert_refused(
    ex: Executor, command: Callable[[Executor], None], state: str, phrase: str
) -> IllegalTransitionError:
    before = copy.deepcopy(ex)
    with pytest.raises(IllegalTransitionError) as caught:
        command(ex)
    assert str(caught.value) == f"executor '{EXE}' is {state}: cannot {phrase}"
    assert caught.value.what == f"executor '{EXE}'"
    assert caught.value.state == state
    assert caught.value.command == phrase
    assert ex.collect_events() == []
    assert ex == before
    return caught.value


# -- executor info -----------------------------------------------------------------------------


def test_executor_info_as_dict():
    assert INFO.as_dict() == {
        "application_version": "1.0.0",
        "hostname": "host-a",
        "language": "python",
        "dbos_version": "2.4.0",
        "metadata": {"region": "eu", "tags": ["a", "b"]},
    }


def test_executor_info_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        INFO.language = "go"  # type: ignore[misc]


def test_check_info_accepts_and_returns_a_complete_info():
    info = INFO_2.as_dict()
    assert check_info(info) is info


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"application_version": None}, "executor info needs an application_version string"),
        ({"application_version": 1}, "executor info needs an application_version string"),
        ({"language": ""}, "executor info needs a language string"),
        ({"language": None}, "executor info needs a language string"),
        ({"language": 3}, "executor info needs a language string"),
        ({"dbos_version": None}, "executor info needs a dbos_version string"),
        ({"dbos_version": 2.4}, "executor info needs a dbos_version string"),
    ],
)
def test_check_info_refuses_incomplete_info(override, message):
    with pytest.raises(InvalidValueError) as caught:
        check_info({**INFO.as_dict(), **override})
    assert str(caught.value) == message


@pytest.mark.parametrize("missing", ["application_version", "language", "dbos_version"])
def test_check_info_refuses_missing_fields(missing):
    info = INFO.as_dict()
    del info[missing]
    with pytest.raises(InvalidValueError, match=missing.split("_")[0]):
        check_info(info)


# -- connection --------------------------------------------------------------------------------


def test_connect_records_connected_and_starts_healthy():
    ex = Executor.connect(ORG, APP, EXE, INFO, "relay-a", T0)

    event = single_event(ex, Executor.Connected)
    assert payload(event) == {
        "org": ORG,
        "app": APP,
        "executor": EXE,
        "info": INFO.as_dict(),
        "instance": "relay-a",
        "at": T0,
    }
    assert event.originator_id == executor_id(ORG, APP, EXE)
    assert event.originator_version == 1

    assert ex.id == executor_id(ORG, APP, EXE)
    assert ex.version == 1
    assert (ex.org, ex.app, ex.executor) == (ORG, APP, EXE)
    assert ex.status == HEALTHY
    assert ex.info == INFO.as_dict()
    assert ex.instance == "relay-a"
    assert ex.created_at == T0
    assert ex.connected_at == T0
    assert ex.updated_at == T0
    assert ex.disconnected_at is None
    assert ex.dead_at is None
    assert ex.recovery is None
    assert ex.recovered is False
    assert ex.attempts == 0


def test_executor_ids_are_scoped_by_org_and_app():
    a = Executor.connect(ORG, APP, EXE, INFO, "relay-a", T0)
    assert a.id == Executor.connect(ORG, APP, EXE, INFO_2, "relay-b", T1).id
    assert a.id != Executor.connect(ORG, "cart", EXE, INFO, "relay-a", T0).id
    assert a.id != Executor.connect("other", APP, EXE, INFO, "relay-a", T0).id
    assert a.id != Executor.connect(ORG, APP, "exec-2", INFO, "relay-a", T0).id


def test_connect_refuses_an_empty_executor_id():
    with pytest.raises(InvalidValueError, match="executor_id must not be empty"):
        Executor.connect(ORG, APP, "", INFO, "relay-a", T0)


@pytest.mark.parametrize(
    "info",
    [
        dataclasses.replace(INFO, application_version=None),
        dataclasses.replace(INFO, language=""),
        dataclasses.replace(INFO, dbos_version=None),
    ],
)
def test_connect_refuses_incomplete_info(info):
    with pytest.raises(InvalidValueError, match="executor info needs"):
        Executor.connect(ORG, APP, EXE, info, "relay-a", T0)


def test_the_info_in_the_state_is_a_copy_of_the_event_info():
    ex = Executor.connect(ORG, APP, EXE, INFO, "relay-a", T0)
    event = single_event(ex, Executor.Connected)
    ex.info["hostname"] = "changed"
    assert event.info["hostname"] == "host-a"


# -- disconnection -----------------------------------------------------------------------------


def test_disconnect_a_healthy_executor():
    ex = executor_in(HEALTHY)

    ex.disconnect("pong deadline missed", T1)

    event = single_event(ex, Executor.Disconnected)
    assert payload(event) == {"reason": "pong deadline missed", "at": T1}
    assert event.originator_version == 2
    assert ex.status == DISCONNECTED
    assert ex.disconnected_at == T1
    assert ex.updated_at == T1
    assert ex.connected_at == T0
    assert ex.instance == "relay-a"


# -- death -------------------------------------------------------------------------------------


def test_declare_a_disconnected_executor_dead():
    ex = executor_in(DISCONNECTED)

    ex.declare_dead(60, T2)

    event = single_event(ex, Executor.DeclaredDead)
    assert payload(event) == {"grace_secs": 60, "at": T2}
    assert event.originator_version == 3
    assert ex.status == DEAD
    assert ex.dead_at == T2
    assert ex.updated_at == T2
    assert ex.disconnected_at == T1
    assert ex.recovery is None
    assert ex.attempts == 0


def test_declare_dead_keeps_a_fractional_grace_period():
    ex = executor_in(DISCONNECTED)
    ex.declare_dead(2.5, T2)
    assert single_event(ex, Executor.DeclaredDead).grace_secs == 2.5


# -- recovery dispatch -------------------------------------------------------------------------


def test_dispatch_recovery_of_a_dead_executor():
    ex = executor_in(DEAD)

    ex.dispatch_recovery("exec-2", "relay-b", T3)

    event = single_event(ex, Executor.RecoveryDispatched)
    assert payload(event) == {"peer": "exec-2", "attempt": 1, "instance": "relay-b", "at": T3}
    assert event.originator_version == 4
    assert ex.status == DEAD
    assert ex.attempts == 1
    assert ex.recovery == {"peer": "exec-2", "attempt": 1, "dispatched_at": T3}
    assert ex.updated_at == T3
    assert ex.recovered is False
    assert ex.instance == "relay-a"


def test_dispatch_again_while_pending_is_allowed_and_counts_the_attempt():
    ex = dead_with_pending("exec-2")

    ex.dispatch_recovery("exec-3", "relay-a", T4)

    event = single_event(ex, Executor.RecoveryDispatched)
    assert payload(event) == {"peer": "exec-3", "attempt": 2, "instance": "relay-a", "at": T4}
    assert ex.attempts == 2
    assert ex.recovery == {"peer": "exec-3", "attempt": 2, "dispatched_at": T4}


def test_dispatch_again_to_the_same_peer_is_allowed():
    ex = dead_with_pending("exec-2")
    ex.dispatch_recovery("exec-2", "relay-a", T4)
    assert single_event(ex, Executor.RecoveryDispatched).attempt == 2
    assert ex.recovery == {"peer": "exec-2", "attempt": 2, "dispatched_at": T4}


def test_an_executor_cannot_recover_itself():
    ex = executor_in(DEAD)
    before = copy.deepcopy(ex)
    with pytest.raises(InvalidValueError, match="an executor cannot recover itself"):
        ex.dispatch_recovery(EXE, "relay-a", T3)
    assert ex.collect_events() == []
    assert ex == before


def test_dispatch_after_recovery_was_acknowledged_is_an_illegal_transition():
    ex = dead_recovered("exec-2")
    assert_refused(ex, lambda e: e.dispatch_recovery("exec-3", "relay-a", T5), "recovered", "dispatch again")


# -- recovery failure --------------------------------------------------------------------------


def test_fail_recovery_of_the_pending_peer():
    ex = dead_with_pending("exec-2")

    ex.fail_recovery("exec-2", "peer disconnected", T4)

    event = single_event(ex, Executor.RecoveryFailed)
    assert payload(event) == {"peer": "exec-2", "attempt": 1, "reason": "peer disconnected", "at": T4}
    assert event.originator_version == 5
    assert ex.recovery is None
    assert ex.attempts == 1
    assert ex.recovered is False
    assert ex.status == DEAD
    assert ex.updated_at == T4


def test_after_a_failure_the_next_dispatch_is_the_next_attempt():
    ex = dead_with_pending("exec-2")
    ex.fail_recovery("exec-2", "deadline", T4)
    ex.dispatch_recovery("exec-3", "relay-a", T5)
    ex.fail_recovery("exec-3", "deadline", T6)

    events = ex.collect_events()
    assert [type(e) for e in events] == [
        Executor.RecoveryFailed,
        Executor.RecoveryDispatched,
        Executor.RecoveryFailed,
    ]
    assert [e.attempt for e in events] == [1, 2, 2]
    assert ex.attempts == 2
    assert ex.recovery is None


def test_fail_recovery_without_a_pending_dispatch_is_an_illegal_transition():
    ex = executor_in(DEAD)
    assert_refused(
        ex,
        lambda e: e.fail_recovery("exec-2", "deadline", T4),
        "DEAD without a pending recovery on 'exec-2'",
        "record a failed recovery",
    )


def test_fail_recovery_of_another_peer_is_an_illegal_transition():
    ex = dead_with_pending("exec-2")
    assert_refused(
        ex,
        lambda e: e.fail_recovery("exec-9", "deadline", T4),
        "DEAD without a pending recovery on 'exec-9'",
        "record a failed recovery",
    )
    assert ex.recovery["peer"] == "exec-2"


def test_fail_recovery_of_a_superseded_peer_is_an_illegal_transition():
    ex = dead_with_pending("exec-2")
    ex.dispatch_recovery("exec-3", "relay-a", T4)
    ex.collect_events()
    assert_refused(
        ex,
        lambda e: e.fail_recovery("exec-2", "late", T5),
        "DEAD without a pending recovery on 'exec-2'",
        "record a failed recovery",
    )


def test_fail_recovery_twice_is_an_illegal_transition():
    ex = dead_with_pending("exec-2")
    ex.fail_recovery("exec-2", "deadline", T4)
    ex.collect_events()
    assert_refused(
        ex,
        lambda e: e.fail_recovery("exec-2", "deadline", T5),
        "DEAD without a pending recovery on 'exec-2'",
        "record a failed recovery",
    )


# -- recovery acknowledgement ------------------------------------------------------------------


def test_acknowledge_recovery_of_the_pending_peer():
    ex = dead_with_pending("exec-2")

    ex.acknowledge_recovery("exec-2", T4)

    event = single_event(ex, Executor.RecoveryAcknowledged)
    assert payload(event) == {"peer": "exec-2", "attempt": 1, "at": T4}
    assert event.originator_version == 5
    assert ex.recovery is None
    assert ex.recovered is True
    assert ex.status == DEAD
    assert ex.attempts == 1
    assert ex.updated_at == T4


def test_acknowledge_records_the_attempt_that_succeeded():
    ex = dead_with_pending("exec-2")
    ex.fail_recovery("exec-2", "deadline", T4)
    ex.dispatch_recovery("exec-3", "relay-a", T5)
    ex.collect_events()

    ex.acknowledge_recovery("exec-3", T6)

    assert single_event(ex, Executor.RecoveryAcknowledged).attempt == 2


def test_acknowledge_without_a_pending_dispatch_is_an_illegal_transition():
    ex = executor_in(DEAD)
    assert_refused(
        ex,
        lambda e: e.acknowledge_recovery("exec-2", T4),
        "DEAD without a pending recovery on 'exec-2'",
        "acknowledge a recovery",
    )


def test_acknowledge_from_another_peer_is_an_illegal_transition():
    ex = dead_with_pending("exec-2")
    assert_refused(
        ex,
        lambda e: e.acknowledge_recovery("exec-9", T4),
        "DEAD without a pending recovery on 'exec-9'",
        "acknowledge a recovery",
    )


def test_acknowledge_after_a_failure_is_an_illegal_transition():
    ex = dead_with_pending("exec-2")
    ex.fail_recovery("exec-2", "deadline", T4)
    ex.collect_events()
    assert_refused(
        ex,
        lambda e: e.acknowledge_recovery("exec-2", T5),
        "DEAD without a pending recovery on 'exec-2'",
        "acknowledge a recovery",
    )


def test_acknowledge_twice_is_an_illegal_transition():
    ex = dead_recovered("exec-2")
    assert_refused(
        ex,
        lambda e: e.acknowledge_recovery("exec-2", T5),
        "DEAD without a pending recovery on 'exec-2'",
        "acknowledge a recovery",
    )
    assert ex.recovered is True


# -- deletion ----------------------------------------------------------------------------------


def test_delete_a_recovered_dead_executor():
    ex = dead_recovered("exec-2")

    ex.delete("recovered by exec-2", T5)

    event = single_event(ex, Executor.Deleted)
    assert payload(event) == {"reason": "recovered by exec-2", "at": T5}
    assert event.originator_version == 6
    assert ex.status == DELETED
    assert ex.recovery is None
    assert ex.recovered is True
    assert ex.updated_at == T5
    assert ex.dead_at == T2


def test_delete_a_dead_executor_with_a_pending_recovery_clears_it():
    ex = dead_with_pending("exec-2")

    ex.delete("application deleted", T4)

    event = single_event(ex, Executor.Deleted)
    assert payload(event) == {"reason": "application deleted", "at": T4}
    assert ex.status == DELETED
    assert ex.recovery is None


def test_delete_a_dead_executor_never_dispatched():
    ex = executor_in(DEAD)
    ex.delete("operator", T3)
    assert single_event(ex, Executor.Deleted).reason == "operator"
    assert ex.status == DELETED


# -- the illegal-transition matrix -------------------------------------------------------------

# command name -> (call, phrase in the error, states in which the lifecycle allows it)
COMMANDS: dict[str, tuple[Callable[[Executor], None], str, tuple[str, ...]]] = {
    "disconnect": (lambda e: e.disconnect("socket closed", T6), "disconnect it", (HEALTHY,)),
    "declare_dead": (lambda e: e.declare_dead(60, T6), "declare it dead", (DISCONNECTED,)),
    "dispatch_recovery": (
        lambda e: e.dispatch_recovery("exec-2", "relay-a", T6),
        "dispatch its recovery",
        (DEAD,),
    ),
    "fail_recovery": (
        lambda e: e.fail_recovery("exec-2", "deadline", T6),
        "record a failed recovery",
        (DEAD,),
    ),
    "acknowledge_recovery": (
        lambda e: e.acknowledge_recovery("exec-2", T6),
        "acknowledge a recovery",
        (DEAD,),
    ),
    "delete": (lambda e: e.delete("recovered", T6), "delete it", (DEAD,)),
}

ILLEGAL = [
    (state, name)
    for name, (_, _, allowed) in COMMANDS.items()
    for state in (HEALTHY, DISCONNECTED, DEAD, DELETED)
    if state not in allowed
]


@pytest.mark.parametrize(("state", "name"), ILLEGAL)
def test_commands_outside_their_states_are_illegal_transitions(state, name):
    call, phrase, _ = COMMANDS[name]
    assert_refused(executor_in(state), call, state, phrase)


def test_the_matrix_covers_every_state_and_command():
    assert len(ILLEGAL) == 6 * 4 - 6
    assert {s for s, _ in ILLEGAL} == {HEALTHY, DISCONNECTED, DEAD, DELETED}


@pytest.mark.parametrize("state", [HEALTHY, DISCONNECTED, DELETED])
def test_a_live_or_deleted_executor_with_a_stale_pending_peer_refuses_recovery_outcomes(state):
    # A reconnection wipes the pending recovery: a late answer from the old peer is refused.
    ex = dead_with_pending("exec-2")
    ex.reconnect(INFO, "relay-a", T4)
    if state in (DISCONNECTED, DELETED):
        ex.disconnect("socket closed", T4)
    if state == DELETED:
        ex.declare_dead(60, T5)
        ex.delete("operator", T5)
    ex.collect_events()
    assert_refused(ex, lambda e: e.acknowledge_recovery("exec-2", T6), state, "acknowledge a recovery")
    assert_refused(ex, lambda e: e.fail_recovery("exec-2", "x", T6), state, "record a failed recovery")


# -- reconnection from any state ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "previous"),
    [
        (lambda: executor_in(HEALTHY), HEALTHY),
        (lambda: executor_in(DISCONNECTED), DISCONNECTED),
        (lambda: executor_in(DEAD), DEAD),
        (lambda: dead_with_pending("exec-2"), DEAD),
        (lambda: dead_recovered("exec-2"), DEAD),
        (lambda: executor_in(DELETED), DELETED),
    ],
    ids=["healthy", "disconnected", "dead", "dead-pending", "dead-recovered", "deleted"],
)
def test_reconnect_from_any_state_returns_to_a_fresh_healthy_record(make, previous):
    ex = make()
    version = ex.version

    ex.reconnect(INFO_2, "relay-b", T6)

    event = single_event(ex, Executor.Reconnected)
    assert payload(event) == {"previous": previous, "info": INFO_2.as_dict(), "instance": "relay-b", "at": T6}
    assert event.originator_version == version + 1
    assert ex.status == HEALTHY
    assert ex.info == INFO_2.as_dict()
    assert ex.instance == "relay-b"
    assert ex.connected_at == T6
    assert ex.updated_at == T6
    assert ex.disconnected_at is None
    assert ex.dead_at is None
    assert ex.recovery is None
    assert ex.recovered is False
    assert ex.attempts == 0
    assert ex.created_at == T0
    assert (ex.org, ex.app, ex.executor) == (ORG, APP, EXE)


def test_a_reconnected_executor_goes_through_the_lifecycle_again():
    ex = dead_recovered("exec-2")
    ex.reconnect(INFO, "relay-a", T5)
    ex.disconnect("socket closed", T5)
    ex.declare_dead(60, T6)
    ex.dispatch_recovery("exec-3", "relay-a", T6)

    events = ex.collect_events()
    assert [type(e).__name__ for e in events] == [
        "Reconnected",
        "Disconnected",
        "DeclaredDead",
        "RecoveryDispatched",
    ]
    assert events[-1].attempt == 1
    assert ex.recovery == {"peer": "exec-3", "attempt": 1, "dispatched_at": T6}


def test_reconnect_refuses_incomplete_info():
    ex = executor_in(DISCONNECTED)
    before = copy.deepcopy(ex)
    with pytest.raises(InvalidValueError, match="executor info needs a language string"):
        ex.reconnect(dataclasses.replace(INFO, language=""), "relay-b", T2)
    assert ex.collect_events() == []
    assert ex == before


# -- rebuild -----------------------------------------------------------------------------------


def _history() -> Executor:
    ex = Executor.connect(ORG, APP, EXE, INFO, "relay-a", T0)
    ex.disconnect("socket closed", T1)
    ex.reconnect(INFO_2, "relay-b", T1)
    ex.disconnect("pong deadline missed", T2)
    ex.declare_dead(60, T3)
    ex.dispatch_recovery("exec-2", "relay-b", T3)
    ex.fail_recovery("exec-2", "peer disconnected", T4)
    ex.dispatch_recovery("exec-3", "relay-b", T4)
    ex.acknowledge_recovery("exec-3", T5)
    ex.delete("recovered by exec-3", T6)
    return ex


def test_replaying_the_events_rebuilds_the_same_executor():
    ex = _history()
    events = ex.collect_events()
    assert [type(e).__name__ for e in events] == [
        "Connected",
        "Disconnected",
        "Reconnected",
        "Disconnected",
        "DeclaredDead",
        "RecoveryDispatched",
        "RecoveryFailed",
        "RecoveryDispatched",
        "RecoveryAcknowledged",
        "Deleted",
    ]
    assert [e.originator_version for e in events] == list(range(1, 11))

    rebuilt = replay(events)

    assert rebuilt == ex
    assert rebuilt.status == DELETED
    assert rebuilt.attempts == 2
    assert rebuilt.recovered is True


def test_replaying_a_prefix_rebuilds_the_state_at_that_point():
    events = _history().collect_events()

    pending = replay(events[:8])

    assert pending.status == DEAD
    assert pending.recovery == {"peer": "exec-3", "attempt": 2, "dispatched_at": T4}
    assert pending.info == INFO_2.as_dict()
    assert pending.instance == "relay-b"


@pytest.mark.parametrize("module", ["eventsourcing.popo", "eventsourcing.sqlite"])
def test_an_executor_saved_and_loaded_is_identical(module, tmp_path):
    env = {"PERSISTENCE_MODULE": module}
    if module == "eventsourcing.sqlite":
        env["SQLITE_DBNAME"] = str(tmp_path / "relay.db")
    log = RelayLog(env=env)
    ex = _history()
    log.save(ex)

    loaded = log.repository.get(executor_id(ORG, APP, EXE))

    assert loaded == ex
    assert loaded is not ex
    assert loaded.info == INFO_2.as_dict()

    midway = log.repository.get(executor_id(ORG, APP, EXE), version=8)
    assert midway.recovery == {"peer": "exec-3", "attempt": 2, "dispatched_at": T4}
