"""RelayLog on both real stores (SQLite file, PostgreSQL database): what it records survives a new RelayLog
object (a new process), notifications come in order with increasing ids, `position` and listeners follow
what this object appended, and a concurrent append by another RelayLog object is detected and retried."""

from __future__ import annotations

import threading

import pytest
from eventsourcing.persistence import IntegrityError

from relay.actors.application import register_app
from relay.events.application import DEFAULT_SETTINGS, App
from relay.events.errors import AlreadyExistsError, IllegalTransitionError, NotFoundError
from relay.events.executor import DELETED, HEALTHY, Executor
from relay.events.instance import RUNNING, RelayInstance
from relay.events.organization import Organization
from relay.events.refs import app_ref, executor_ref, instance_ref, org_ref
from relay.projections.backend import StoreConfig
from relay.projections.store import log as log_module
from relay.projections.store.log import RelayLog
from tests.unit.store_cases import (
    HASH_CI,
    HASH_DEPLOY,
    HISTORY_EVENTS,
    INFO_1,
    INFO_2,
    INFO_2B,
    Race,
    at,
    history,
    notification_ids,
    open_log,
    topics,
)


@pytest.fixture
def pair(store_config: StoreConfig):
    """Two RelayLog objects over one store: two processes (HA instances) sharing it."""
    with open_log(store_config) as a, open_log(store_config) as b:
        yield a, b


def test_the_store_is_the_configured_one(store_config):
    with open_log(store_config) as relay_log:
        register_app(relay_log, "acme", "shop", at(0))
        module = type(relay_log.recorder).__module__
    if store_config.is_postgres:
        assert module == "eventsourcing.postgres"
    else:
        assert module == "eventsourcing.sqlite"
        assert (store_config.data_dir / "events.sqlite").is_file()


# -- persistence across RelayLog objects -------------------------------------------------------


def test_commands_persist_and_reload_from_a_new_log(store_config):
    with open_log(store_config) as writer:
        history(writer)
        written = {
            "org": writer.get(org_ref("acme")),
            "shop": writer.get(app_ref("acme", "shop")),
            "billing": writer.get(app_ref("acme", "billing")),
            "exec-1": writer.get(executor_ref("acme", "shop", "exec-1")),
            "exec-2": writer.get(executor_ref("acme", "shop", "exec-2")),
            "relay-a": writer.get(instance_ref("relay-a")),
        }

    with open_log(store_config) as reader:  # the writer is closed: only the store remains
        assert reader.position == 0  # it appended nothing itself
        assert topics(reader) == list(HISTORY_EVENTS)
        assert reader.get(org_ref("acme")) == written["org"]
        assert reader.get(app_ref("acme", "shop")) == written["shop"]
        assert reader.get(app_ref("acme", "billing")) == written["billing"]
        assert reader.get(executor_ref("acme", "shop", "exec-1")) == written["exec-1"]
        assert reader.get(executor_ref("acme", "shop", "exec-2")) == written["exec-2"]
        assert reader.get(instance_ref("relay-a")) == written["relay-a"]

        org = reader.get(org_ref("acme"))
        assert isinstance(org, Organization)
        assert org.created_at == at(1)
        assert org.keys["ci"] == {
            "key_hash": HASH_CI,
            "apps": ["shop"],
            "permissions": ["application.read", "websocket.connect"],
            "issued_at": at(3),
            "revoked_at": at(30),
        }
        assert org.keys["deploy"]["key_hash"] == HASH_DEPLOY
        assert org.active_key("deploy") is not None

        shop = reader.get(app_ref("acme", "shop"))
        assert shop.settings == {**DEFAULT_SETTINGS, "executorTimeoutSecs": 5}
        assert not shop.deleted
        assert reader.get(app_ref("acme", "billing")).deleted

        dead = reader.get(executor_ref("acme", "shop", "exec-1"))
        assert isinstance(dead, Executor)
        assert (dead.status, dead.recovered, dead.attempts) == (DELETED, True, 2)
        assert (dead.disconnected_at, dead.dead_at, dead.updated_at) == (at(20), at(25), at(28))
        assert dead.dead_at.tzinfo is not None  # aware datetimes survive the round trip

        back = reader.get(executor_ref("acme", "shop", "exec-2"))
        assert back.status == HEALTHY
        assert back.info == INFO_2B.as_dict()
        assert (back.created_at, back.connected_at, back.disconnected_at) == (at(11), at(29), None)
        assert back.version == 3  # Connected, Disconnected, Reconnected

        assert reader.get(instance_ref("relay-a")).status == RUNNING
        assert reader.get(executor_ref("acme", "shop", "nobody")) is None

        # The new object carries on where the old one stopped: versions continue.
        reader.change(executor_ref("acme", "shop", "exec-2"), lambda e: e.disconnect("socket closed", at(40)))
        assert reader.position == len(HISTORY_EVENTS) + 1

    with open_log(store_config) as third:
        assert third.get(executor_ref("acme", "shop", "exec-2")).version == 4
        assert topics(third) == [*HISTORY_EVENTS, "Executor.Disconnected"]


def test_a_refused_command_leaves_the_store_unchanged_for_the_next_process(store_config):
    with open_log(store_config) as first:
        register_app(first, "acme", "shop", at(0))
        with pytest.raises(AlreadyExistsError):
            register_app(first, "acme", "shop", at(1))
        first.run(executor_ref("acme", "shop", "exec-1"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO_1, "relay-a", at(2)))
        with pytest.raises(IllegalTransitionError):
            first.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.declare_dead(5, at(3)))

    with open_log(store_config) as second:
        assert topics(second) == ["Organization.Created", "App.Registered", "Executor.Connected"]
        assert second.get(app_ref("acme", "shop")).created_at == at(0)
        assert second.get(executor_ref("acme", "shop", "exec-1")).status == HEALTHY


# -- notifications -------------------------------------------------------------------------------


def test_notifications_are_ordered_with_increasing_ids(store_config):
    with open_log(store_config) as relay_log:
        heard: list[int] = []
        relay_log.listeners.append(heard.append)
        history(relay_log)

        notifications = relay_log.recorder.select_notifications(start=1, limit=1000)
        ids = [n.id for n in notifications]
        assert len(ids) == len(HISTORY_EVENTS)
        assert ids == sorted(set(ids))  # strictly increasing
        assert ids == heard  # each append's position, in the order the commands ran
        assert [n.topic.split(":", 1)[1] for n in notifications] == list(HISTORY_EVENTS)
        assert relay_log.recorder.max_notification_id() == ids[-1] == relay_log.position

        # The paging the projector uses: exclusive start, limit, inclusive stop.
        page = relay_log.recorder.select_notifications(start=ids[3], limit=4, inclusive_of_start=False)
        assert [n.id for n in page] == ids[4:8]
        page = relay_log.recorder.select_notifications(
            start=ids[3], limit=100, stop=ids[6], inclusive_of_start=False
        )
        assert [n.id for n in page] == ids[4:7]
        assert relay_log.recorder.select_notifications(start=ids[-1], limit=10, inclusive_of_start=False) == []

        # Each notification decodes back to the domain event that was recorded.
        events = [relay_log.mapper.to_domain_event(n) for n in notifications]
        assert [type(e).__qualname__ for e in events] == list(HISTORY_EVENTS)
        assert events[7].executor == "exec-1"
        assert events[7].at == at(10)


def test_two_logs_appending_in_turn_share_one_ordered_sequence(pair):
    a, b = pair
    register_app(a, "acme", "shop", at(0))
    b.run(executor_ref("acme", "shop", "exec-1"),
          lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO_1, "relay-b", at(1)))
    a.run(executor_ref("acme", "shop", "exec-2"),
          lambda found: Executor.connect_again(found, "acme", "shop", "exec-2", INFO_2, "relay-a", at(2)))
    b.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("socket closed", at(3)))

    expected = ["Organization.Created", "App.Registered", "Executor.Connected", "Executor.Connected",
                "Executor.Disconnected"]
    assert topics(a) == topics(b) == expected
    ids = notification_ids(a)
    assert ids == notification_ids(b) == sorted(set(ids))
    assert a.position == ids[3]
    assert b.position == ids[4]
    # Each sees what the other recorded.
    assert a.get(executor_ref("acme", "shop", "exec-1")).status == "DISCONNECTED"
    assert b.get(executor_ref("acme", "shop", "exec-2")).instance == "relay-a"


def test_concurrent_appends_to_different_aggregates_all_land_in_order(pair):
    """Two processes appending at the same time (no conflict): nothing is lost, ids stay unique and ordered."""
    a, b = pair
    register_app(a, "acme", "shop", at(0))
    per_log = 15
    heard: dict[str, list[int]] = {"a": [], "b": []}
    a.listeners.append(heard["a"].append)
    b.listeners.append(heard["b"].append)
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def connect_many(relay_log: RelayLog, name: str) -> None:
        try:
            start.wait(timeout=10)
            for i in range(per_log):
                relay_log.run(executor_ref("acme", "shop", f"{name}-{i}"),
                              lambda found, n=i: Executor.connect_again(
                                  found, "acme", "shop", f"{name}-{n}", INFO_1, f"relay-{name}", at(n)))
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=connect_many, args=(log_, name)) for log_, name in ((a, "a"), (b, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert not any(thread.is_alive() for thread in threads)

    ids = notification_ids(a)
    assert len(ids) == 2 + 2 * per_log
    assert ids == sorted(set(ids))
    assert sorted(heard["a"] + heard["b"]) == ids[2:]
    assert heard["a"] == sorted(heard["a"])
    assert heard["b"] == sorted(heard["b"])
    for name in ("a", "b"):
        for i in range(per_log):
            assert b.get(executor_ref("acme", "shop", f"{name}-{i}")).instance == f"relay-{name}"


# -- position and listeners ----------------------------------------------------------------------


def test_position_is_what_this_object_appended_and_listeners_hear_each_append(store_config, pair):
    a, b = pair
    heard_a: list[int] = []
    also_a: list[int] = []
    heard_b: list[int] = []
    a.listeners.extend([heard_a.append, also_a.append])
    b.listeners.append(heard_b.append)
    assert (a.position, b.position) == (0, 0)

    register_app(a, "acme", "shop", at(0))  # two saves: the organization, then the app
    first_two = notification_ids(a)
    assert a.position == first_two[-1]
    assert heard_a == also_a == first_two

    # Commands that record nothing move nothing and call no listener.
    a.ensure(org_ref("acme"), lambda: Organization.create("acme", at(1)))
    a.change(app_ref("acme", "shop"),
             lambda application: application.change_settings({"executorTimeoutSecs": 60}, at(1)))  # no effective change
    with pytest.raises(AlreadyExistsError):
        register_app(a, "acme", "shop", at(1))
    assert a.position == first_two[-1]
    assert heard_a == first_two

    # Another object's append is its position, not ours; our listeners do not hear it.
    b.change(org_ref("acme"),
             lambda organization: organization.issue_key(
                 "ci", HASH_CI, [], ["application.read"], at(2)), create=lambda: Organization.create("acme", at(2)))
    assert b.position == notification_ids(b)[-1] > a.position
    assert heard_b == [b.position]
    assert heard_a == first_two

    # A new object over the same store starts at 0 although the store holds events.
    with open_log(store_config) as fresh:
        assert fresh.position == 0
        assert fresh.recorder.max_notification_id() == b.position


# -- concurrent append conflict and retry --------------------------------------------------------


def test_the_store_refuses_a_stale_save(pair):
    """Without RelayLog's retry: two objects load the same version, the second save conflicts."""
    a, b = pair
    register_app(a, "acme", "shop", at(0))
    mine = a.repository.get(a.get(app_ref("acme", "shop")).id)
    theirs = b.repository.get(b.get(app_ref("acme", "shop")).id)
    theirs.change_settings({"privateMode": True}, at(1))
    b.save(theirs)
    before = notification_ids(a)

    mine.change_settings({"executorTimeoutSecs": 9}, at(2))
    with pytest.raises(IntegrityError):
        a.save(mine)

    assert notification_ids(a) == before
    assert a.get(app_ref("acme", "shop")).settings == {**DEFAULT_SETTINGS, "privateMode": True}


def test_a_concurrent_append_is_retried_on_the_rivals_state(monkeypatch, pair):
    a, b = pair
    a.run(instance_ref("relay-a"),
          lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", at(0)))
    heard: list[int] = []
    a.listeners.append(heard.append)
    race = Race(
        monkeypatch, a, RelayInstance, lambda _: b.change(instance_ref("relay-a"), lambda i: i.take_lease("x", at(1)))
    )
    versions: list[int] = []

    def take_y(inst: RelayInstance) -> None:
        versions.append(inst.version)
        inst.take_lease("y", at(2))

    inst = a.change(instance_ref("relay-a"), take_y)

    assert race.reads == 2
    assert versions == [1, 2]  # first on the stale version, then on the one b wrote
    assert inst.leases == {"x": at(1), "y": at(2)}
    assert inst.version == 3
    assert b.get(instance_ref("relay-a")) == inst
    assert topics(b) == ["RelayInstance.Started", "RelayInstance.LeaseTaken", "RelayInstance.LeaseTaken"]
    ids = notification_ids(b)
    assert ids == sorted(set(ids))
    assert b.position == ids[1]
    assert a.position == ids[2]
    assert heard == [ids[2]]  # the failed attempt is not announced


def test_two_instances_connecting_the_same_executor_end_as_one_reconnection(monkeypatch, store_config, pair):
    a, b = pair
    Race(monkeypatch, a, Executor,
         lambda _: b.run(executor_ref("acme", "shop", "exec-1"),
                         lambda found: Executor.connect_again(
                             found, "acme", "shop", "exec-1", INFO_1, "relay-b", at(0))))

    ex = a.run(executor_ref("acme", "shop", "exec-1"),
               lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO_2, "relay-a", at(1)))

    assert topics(b) == ["Executor.Connected", "Executor.Reconnected"]
    assert (ex.instance, ex.created_at, ex.version) == ("relay-a", at(0), 2)
    with open_log(store_config) as later:
        assert later.get(executor_ref("acme", "shop", "exec-1")) == ex


def test_a_retry_refuses_what_the_rival_made_illegal(monkeypatch, pair):
    a, b = pair
    register_app(a, "acme", "shop", at(0))
    Race(monkeypatch, a, App,
         lambda _: b.change(app_ref("acme", "shop"), lambda application: application.delete(at(1))))

    with pytest.raises(NotFoundError, match="no application 'shop' in 'acme'"):
        a.change(app_ref("acme", "shop"), lambda application: application.change_settings({"privateMode": True}, at(2)))

    assert topics(b) == ["Organization.Created", "App.Registered", "App.Deleted"]
    assert b.get(app_ref("acme", "shop")).settings == DEFAULT_SETTINGS


def test_the_retry_gives_up_after_the_last_attempt_and_records_nothing_of_its_own(monkeypatch, pair):
    a, b = pair
    a.run(instance_ref("relay-a"),
          lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", at(0)))
    race = Race(
        monkeypatch,
        a,
        RelayInstance,
        lambda n: b.change(instance_ref("relay-a"), lambda i: i.take_lease(f"rival-{n}", at(n))),
        times=100,
    )

    with pytest.raises(IntegrityError):
        a.change(instance_ref("relay-a"), lambda i: i.take_lease("mine", at(9)))

    assert race.reads == log_module._SAVE_ATTEMPTS == 3
    assert set(b.get(instance_ref("relay-a")).leases) == {"rival-1", "rival-2", "rival-3"}
    assert topics(b).count("RelayInstance.LeaseTaken") == 3
    assert a.position == notification_ids(b)[0]  # only its Started
