"""RelayLog: deterministic ids, every command (what it records, what it refuses, and that a refused command
records nothing), rebuilding from a shared store, and the retry when a concurrent writer appends first."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from uuid import NAMESPACE_URL, UUID, uuid5

import pytest
from eventsourcing.persistence import IntegrityError

from relay.actors.application import register_app
from relay.events.application import DEFAULT_SETTINGS, App
from relay.events.errors import AlreadyExistsError, IllegalTransitionError, InvalidValueError, NotFoundError
from relay.events.executor import DEAD, DISCONNECTED, HEALTHY, Executor, ExecutorInfo
from relay.events.ids import app_id, executor_id, instance_id, organization_id
from relay.events.instance import RUNNING, RelayInstance, lease_key
from relay.events.organization import Organization
from relay.events.refs import app_ref, executor_ref, instance_ref, org_ref
from relay.projections.store import log as log_module
from relay.projections.store.log import RelayLog

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
T2 = T0 + timedelta(seconds=61)
T3 = T0 + timedelta(seconds=62)
T4 = T0 + timedelta(seconds=63)
T5 = T0 + timedelta(seconds=64)

HASH_A = hashlib.sha256(b"key-a").hexdigest()
HASH_B = hashlib.sha256(b"key-b").hexdigest()
INFO = ExecutorInfo(
    application_version="1.0.0", hostname="host-a", language="python", dbos_version="2.4.0", metadata=None
)
INFO_2 = ExecutorInfo(
    application_version="1.1.0", hostname="host-b", language="go", dbos_version="0.9.0", metadata={"k": "v"}
)


@pytest.fixture
def log() -> Iterator[RelayLog]:
    relay_log = RelayLog(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    yield relay_log
    relay_log.close()


@pytest.fixture
def sqlite_env(tmp_path) -> dict[str, str]:
    return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db")}


@pytest.fixture
def pair(sqlite_env) -> Iterator[tuple[RelayLog, RelayLog]]:
    """Two RelayLogs (two HA instances) sharing one SQLite event store."""
    a, b = RelayLog(env=sqlite_env), RelayLog(env=sqlite_env)
    yield a, b
    a.close()
    b.close()


def topics(relay_log: RelayLog) -> list[str]:
    """The recorded events, in notification order, as 'Aggregate.Event'."""
    return [n.topic.split(":", 1)[1] for n in relay_log.recorder.select_notifications(start=1, limit=1000)]


def recorded(relay_log: RelayLog) -> int:
    return relay_log.recorder.max_notification_id() or 0


def stored(relay_log: RelayLog, aggregate_id: UUID) -> object:
    return relay_log.repository.get(aggregate_id)


class Race:
    """Make `relay_log` read an aggregate of `kind`, then let a rival write it before `relay_log` saves.

    The rival writes on each of the first `times` reads, so the first `times` saves collide."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        relay_log: RelayLog,
        kind: type,
        rival_write: Callable[[int], object],
        times: int = 1,
    ) -> None:
        self.reads = 0
        original = relay_log.load

        def racing_get(aggregate_id: UUID, wanted: type) -> object:
            found = original(aggregate_id, wanted)
            if wanted is kind:
                self.reads += 1
                if self.reads <= times:
                    rival_write(self.reads)
            return found

        monkeypatch.setattr(relay_log, "load", racing_get)


# -- deterministic ids -------------------------------------------------------------------------


def test_ids_follow_the_documented_uuid5_scheme():
    assert organization_id("acme") == uuid5(NAMESPACE_URL, "relay:org:acme")
    assert app_id("acme", "shop") == uuid5(NAMESPACE_URL, "relay:app:acme/shop")
    assert executor_id("acme", "shop", "exec-1") == uuid5(NAMESPACE_URL, "relay:executor:acme/shop/exec-1")
    assert instance_id("relay-a") == uuid5(NAMESPACE_URL, "relay:instance:relay-a")


def test_ids_are_stable_across_releases():
    # Persisted event streams are found by these ids: they must never change.
    assert organization_id("acme") == UUID("13366df6-1e96-57f5-bd9d-855cf27986b4")
    assert app_id("acme", "shop") == UUID("32d4468f-e2b3-5d83-8d6a-468162f7ecbe")
    assert executor_id("acme", "shop", "exec-1") == UUID("015b91dc-3160-536f-be45-c9091e11a535")
    assert instance_id("relay-a") == UUID("d0634806-13a8-561c-a4f3-9c3e4037d64e")


@pytest.mark.parametrize(
    "make",
    [
        lambda: organization_id("acme"),
        lambda: app_id("acme", "shop"),
        lambda: executor_id("acme", "shop", "exec-1"),
        lambda: instance_id("relay-a"),
    ],
)
def test_ids_are_deterministic_name_based_uuids(make):
    first = make()
    assert isinstance(first, UUID)
    assert first.version == 5
    assert make() == first


def test_ids_of_different_kinds_never_collide_on_the_same_name():
    ids = {organization_id("acme"), app_id("acme", ""), instance_id("acme"), executor_id("acme", "", "")}
    assert len(ids) == 4


def test_ids_differ_for_different_natural_keys():
    assert organization_id("acme") != organization_id("acme_2")
    assert app_id("acme", "shop") != app_id("acme", "cart")
    assert app_id("acme", "shop") != app_id("other", "shop")
    assert executor_id("acme", "shop", "e1") != executor_id("acme", "shop", "e2")
    assert executor_id("acme", "shop", "e1") != executor_id("acme", "cart", "e1")
    assert executor_id("acme", "shop", "e1") != executor_id("other", "shop", "e1")
    assert instance_id("relay-a") != instance_id("relay-b")


def test_ids_are_case_sensitive():
    assert instance_id("relay-a") != instance_id("Relay-A")
    assert executor_id("acme", "shop", "E1") != executor_id("acme", "shop", "e1")


# -- organizations -----------------------------------------------------------------------------


def test_an_unknown_organization_is_none(log):
    assert log.get(org_ref("acme")) is None
    assert recorded(log) == 0


def test_ensure_organization_creates_it_once(log):
    created = log.ensure(org_ref("acme"), lambda: Organization.create("acme", T0))

    assert isinstance(created, Organization)
    assert created.name == "acme"
    assert created.created_at == T0
    assert topics(log) == ["Organization.Created"]
    assert log.get(org_ref("acme")) == created

    again = log.ensure(org_ref("acme"), lambda: Organization.create("acme", T1))

    assert again == created
    assert again.created_at == T0
    assert recorded(log) == 1


def test_ensure_organization_refuses_an_invalid_name(log):
    with pytest.raises(InvalidValueError, match="organization name"):
        log.ensure(org_ref("Acme"), lambda: Organization.create("Acme", T0))
    assert recorded(log) == 0


def test_issue_key_creates_the_organization_if_needed(log):
    org = log.change(org_ref("acme"),
                     lambda organization: organization.issue_key(
                         "ci", HASH_A, ["shop"], ["application.read"], T0), create=lambda: Organization.create("acme",
                                                                                                               T0))

    assert topics(log) == ["Organization.Created", "Organization.ApiKeyIssued"]
    assert org.active_key("ci")["key_hash"] == HASH_A
    assert log.get(org_ref("acme")) == org


def test_issue_key_appends_to_an_existing_organization(log):
    log.ensure(org_ref("acme"), lambda: Organization.create("acme", T0))

    org = log.change(org_ref("acme"),
                     lambda organization: organization.issue_key(
                         "ci", HASH_A, [], ["metric.read"], T1), create=lambda: Organization.create("acme", T1))

    assert topics(log) == ["Organization.Created", "Organization.ApiKeyIssued"]
    assert org.version == 2
    assert org.keys["ci"]["issued_at"] == T1


def test_issue_key_refuses_a_duplicate_and_records_nothing(log):
    log.change(org_ref("acme"),
               lambda organization: organization.issue_key(
                   "ci", HASH_A, [], [], T0), create=lambda: Organization.create("acme", T0))
    with pytest.raises(AlreadyExistsError, match="'ci'"):
        log.change(org_ref("acme"),
                   lambda organization: organization.issue_key(
                       "ci", HASH_B, [], [], T1), create=lambda: Organization.create("acme", T1))
    assert recorded(log) == 2
    assert log.get(org_ref("acme")).keys["ci"]["key_hash"] == HASH_A


def test_a_refused_first_key_does_not_create_the_organization(log):
    with pytest.raises(InvalidValueError, match="unknown permission"):
        log.change(org_ref("acme"),
                   lambda organization: organization.issue_key(
                       "ci", HASH_A, [], ["root"], T0), create=lambda: Organization.create("acme", T0))
    assert recorded(log) == 0
    assert log.get(org_ref("acme")) is None


def test_revoke_key(log):
    log.change(org_ref("acme"),
               lambda organization: organization.issue_key(
                   "ci", HASH_A, [], [], T0), create=lambda: Organization.create("acme", T0))

    org = log.change(org_ref("acme"), lambda organization: organization.revoke_key("ci", T1))

    assert topics(log)[-1] == "Organization.ApiKeyRevoked"
    assert org.active_key("ci") is None
    assert log.get(org_ref("acme")).keys["ci"]["revoked_at"] == T1


def test_revoke_key_of_an_unknown_organization_is_not_found(log):
    with pytest.raises(NotFoundError, match="no organization 'acme'"):
        log.change(org_ref("acme"), lambda organization: organization.revoke_key("ci", T0))
    assert recorded(log) == 0


def test_revoke_an_unknown_key_is_not_found(log):
    log.ensure(org_ref("acme"), lambda: Organization.create("acme", T0))
    with pytest.raises(NotFoundError, match="no active API key named 'ci'"):
        log.change(org_ref("acme"), lambda organization: organization.revoke_key("ci", T1))
    assert recorded(log) == 1


# -- applications ------------------------------------------------------------------------------


def test_an_unknown_app_is_none(log):
    assert log.get(app_ref("acme", "shop")) is None


def test_register_app_creates_the_organization_and_the_app(log):
    app = register_app(log, "acme", "shop", T0)

    assert isinstance(app, App)
    assert (app.org, app.name, app.created_at, app.deleted) == ("acme", "shop", T0, False)
    assert app.settings == DEFAULT_SETTINGS
    assert topics(log) == ["Organization.Created", "App.Registered"]
    assert log.get(app_ref("acme", "shop")) == app
    assert log.get(org_ref("acme")).created_at == T0


def test_register_a_second_app_in_the_same_organization(log):
    register_app(log, "acme", "shop", T0)
    register_app(log, "acme", "cart", T1)
    assert topics(log) == ["Organization.Created", "App.Registered", "App.Registered"]
    assert log.get(app_ref("acme", "cart")).created_at == T1


def test_the_same_app_name_in_two_organizations_is_two_apps(log):
    one = register_app(log, "acme", "shop", T0)
    two = register_app(log, "other", "shop", T1)
    assert one.id != two.id
    log.change(app_ref("acme", "shop"), lambda application: application.delete(T2))
    assert log.get(app_ref("other", "shop")).deleted is False


def test_register_an_existing_app_is_refused_and_records_nothing(log):
    register_app(log, "acme", "shop", T0)
    with pytest.raises(AlreadyExistsError, match="application 'shop' exists in 'acme'"):
        register_app(log, "acme", "shop", T1)
    assert recorded(log) == 2


def test_register_an_invalid_app_name_records_nothing(log):
    # Regression: the organization used to be created before the app name was checked.
    with pytest.raises(InvalidValueError, match="application name"):
        register_app(log, "acme", "Bad Name", T0)
    assert recorded(log) == 0
    assert log.get(org_ref("acme")) is None


def test_register_with_an_invalid_org_name_records_nothing(log):
    with pytest.raises(InvalidValueError, match="organization name"):
        register_app(log, "A", "shop", T0)
    assert recorded(log) == 0


def test_register_a_deleted_app_again(log):
    register_app(log, "acme", "shop", T0)
    log.change(app_ref("acme", "shop"), lambda application: application.change_settings({"privateMode": True}, T1))
    log.change(app_ref("acme", "shop"), lambda application: application.delete(T2))

    app = register_app(log, "acme", "shop", T3)

    assert topics(log)[-1] == "App.Reregistered"
    assert app.deleted is False
    assert app.settings == DEFAULT_SETTINGS
    assert app.created_at == T0
    assert app.updated_at == T3
    assert log.get(app_ref("acme", "shop")) == app


def test_change_app_settings(log):
    register_app(log, "acme", "shop", T0)

    app = log.change(app_ref("acme", "shop"),
                     lambda application: application.change_settings(
                         {"executorTimeoutSecs": 5, "privateMode": False}, T1))

    assert topics(log)[-1] == "App.SettingsChanged"
    assert app.settings["executorTimeoutSecs"] == 5
    assert log.get(app_ref("acme", "shop")) == app
    assert log.get(app_ref("acme", "shop")).updated_at == T1


def test_change_app_settings_that_changes_nothing_records_nothing(log):
    register_app(log, "acme", "shop", T0)
    app = log.change(app_ref("acme", "shop"),
                     lambda application: application.change_settings({"executorTimeoutSecs": 60}, T1))
    assert recorded(log) == 2
    assert app.version == 1


def test_change_settings_of_an_unknown_app_is_not_found(log):
    with pytest.raises(NotFoundError, match="no application 'shop' in 'acme'"):
        log.change(app_ref("acme", "shop"), lambda application: application.change_settings({"privateMode": True}, T0))
    assert recorded(log) == 0


def test_change_settings_of_a_deleted_app_is_not_found(log):
    register_app(log, "acme", "shop", T0)
    log.change(app_ref("acme", "shop"), lambda application: application.delete(T1))
    with pytest.raises(NotFoundError, match="no application 'shop' in 'acme'"):
        log.change(app_ref("acme", "shop"), lambda application: application.change_settings({"privateMode": True}, T2))
    assert recorded(log) == 3


def test_invalid_settings_are_refused_and_record_nothing(log):
    register_app(log, "acme", "shop", T0)
    with pytest.raises(InvalidValueError, match="executorTimeoutSecs"):
        log.change(app_ref("acme", "shop"),
                   lambda application: application.change_settings({"privateMode": True, "executorTimeoutSecs": 0}, T1))
    assert recorded(log) == 2
    assert log.get(app_ref("acme", "shop")).settings == DEFAULT_SETTINGS


def test_delete_app(log):
    register_app(log, "acme", "shop", T0)

    app = log.change(app_ref("acme", "shop"), lambda application: application.delete(T1))

    assert topics(log)[-1] == "App.Deleted"
    assert app.deleted is True
    assert log.get(app_ref("acme", "shop")).deleted is True


def test_delete_an_unknown_app_is_not_found(log):
    with pytest.raises(NotFoundError, match="no application 'shop' in 'acme'"):
        log.change(app_ref("acme", "shop"), lambda application: application.delete(T0))
    assert recorded(log) == 0


def test_delete_a_deleted_app_is_not_found(log):
    register_app(log, "acme", "shop", T0)
    log.change(app_ref("acme", "shop"), lambda application: application.delete(T1))
    with pytest.raises(NotFoundError, match="no application 'shop' in 'acme'"):
        log.change(app_ref("acme", "shop"), lambda application: application.delete(T2))
    assert recorded(log) == 3


# -- executors ---------------------------------------------------------------------------------


def test_an_unknown_executor_is_none(log):
    assert log.get(executor_ref("acme", "shop", "exec-1")) is None


def test_first_connection_records_connected(log):
    ex = log.run(executor_ref("acme", "shop", "exec-1"),
                 lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T0))

    assert isinstance(ex, Executor)
    assert ex.status == HEALTHY
    assert topics(log) == ["Executor.Connected"]
    assert log.get(executor_ref("acme", "shop", "exec-1")) == ex


def test_a_known_executor_connecting_again_records_reconnected(log):
    log.run(executor_ref("acme", "shop", "exec-1"),
            lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T0))
    log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("socket closed", T1))

    ex = log.run(executor_ref("acme", "shop", "exec-1"),
                 lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO_2, "relay-b", T2))

    assert topics(log) == ["Executor.Connected", "Executor.Disconnected", "Executor.Reconnected"]
    assert ex.status == HEALTHY
    assert ex.instance == "relay-b"
    assert ex.info == INFO_2.as_dict()
    stored_ex = log.get(executor_ref("acme", "shop", "exec-1"))
    assert stored_ex == ex
    assert stored_ex.version == 3


def test_a_connection_with_incomplete_info_records_nothing(log):
    with pytest.raises(InvalidValueError, match="executor info"):
        log.run(executor_ref("acme", "shop", "exec-1"),
                lambda found: Executor.connect_again(
                    found, "acme", "shop", "exec-1", ExecutorInfo("1", None, "", "2", None), "relay-a", T0))
    assert recorded(log) == 0


def test_the_whole_lifecycle_through_the_log(log):
    log.run(executor_ref("acme", "shop", "exec-2"),
            lambda found: Executor.connect_again(found, "acme", "shop", "exec-2", INFO, "relay-a", T0))
    log.run(executor_ref("acme", "shop", "exec-1"),
            lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T0))
    steps: list[tuple[Callable[[Executor], None], str]] = [
        (lambda e: e.disconnect("socket closed", T1), DISCONNECTED),
        (lambda e: e.declare_dead(60, T2), DEAD),
        (lambda e: e.dispatch_recovery("exec-2", "relay-a", T3), DEAD),
        (lambda e: e.acknowledge_recovery("exec-2", T4), DEAD),
        (lambda e: e.delete("recovered by exec-2", T5), "DELETED"),
    ]
    for command, status in steps:
        ex = log.change(executor_ref("acme", "shop", "exec-1"), command)
        assert ex.status == status
        assert log.get(executor_ref("acme", "shop", "exec-1")) == ex

    assert topics(log) == [
        "Executor.Connected",
        "Executor.Connected",
        "Executor.Disconnected",
        "Executor.DeclaredDead",
        "Executor.RecoveryDispatched",
        "Executor.RecoveryAcknowledged",
        "Executor.Deleted",
    ]
    assert log.get(executor_ref("acme", "shop", "exec-2")).status == HEALTHY


def test_update_an_unknown_executor_is_not_found(log):
    with pytest.raises(NotFoundError, match="no executor 'exec-1' in 'acme/shop'"):
        log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("x", T0))
    assert recorded(log) == 0


def test_an_illegal_executor_command_records_nothing(log):
    log.run(executor_ref("acme", "shop", "exec-1"),
            lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T0))
    with pytest.raises(IllegalTransitionError, match="executor 'exec-1' is HEALTHY: cannot declare it dead"):
        log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.declare_dead(60, T1))
    assert recorded(log) == 1
    assert log.get(executor_ref("acme", "shop", "exec-1")).status == HEALTHY


def test_a_command_that_records_nothing_saves_nothing(log):
    log.run(executor_ref("acme", "shop", "exec-1"),
            lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T0))
    ex = log.change(executor_ref("acme", "shop", "exec-1"), lambda e: None)
    assert ex.version == 1
    assert recorded(log) == 1


# -- relay instances ---------------------------------------------------------------------------


def test_an_unknown_instance_is_none(log):
    assert log.get(instance_ref("relay-a")) is None


def test_instance_started_records_started_then_restarted(log):
    first = log.run(instance_ref("relay-a"),
                    lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))

    assert isinstance(first, RelayInstance)
    assert first.status == RUNNING
    assert first.relay_version == "0.1.0"
    assert topics(log) == ["RelayInstance.Started"]

    log.change(instance_ref("relay-a"), lambda i: i.take_lease(lease_key("acme", "shop", "exec-1"), T1))
    second = log.run(instance_ref("relay-a"),
                     lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.2", 9090, "0.2.0", T2))

    assert topics(log) == ["RelayInstance.Started", "RelayInstance.LeaseTaken", "RelayInstance.Restarted"]
    assert second.leases == {}
    assert (second.address, second.port, second.relay_version) == ("10.0.0.2", 9090, "0.2.0")
    assert second.version == 3
    assert log.get(instance_ref("relay-a")) == second


def test_update_instance_with_leases(log):
    log.run(instance_ref("relay-a"),
            lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))
    lease = lease_key("acme", "shop", "exec-1")

    log.change(instance_ref("relay-a"), lambda i: i.take_lease(lease, T1))
    log.change(instance_ref("relay-a"), lambda i: i.adopt_lease("acme/shop/exec-2", "relay-b", T2))
    inst = log.change(instance_ref("relay-a"), lambda i: i.release_lease(lease, T3))

    assert inst.leases == {"acme/shop/exec-2": T2}
    assert log.get(instance_ref("relay-a")) == inst
    assert topics(log)[1:] == [
        "RelayInstance.LeaseTaken",
        "RelayInstance.LeaseAdopted",
        "RelayInstance.LeaseReleased",
    ]


def test_update_an_unknown_instance_is_not_found(log):
    with pytest.raises(NotFoundError, match="no relay instance 'relay-a'"):
        log.change(instance_ref("relay-a"), lambda i: i.stop(T0))
    assert recorded(log) == 0


def test_an_illegal_instance_command_records_nothing(log):
    log.run(instance_ref("relay-a"),
            lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))
    log.change(instance_ref("relay-a"), lambda i: i.stop(T1))
    with pytest.raises(IllegalTransitionError, match="instance 'relay-a' is STOPPED: cannot take a lease"):
        log.change(instance_ref("relay-a"), lambda i: i.take_lease("acme/shop/exec-1", T2))
    assert recorded(log) == 2


# -- rebuilding from a shared store ------------------------------------------------------------


def _scenario(relay_log: RelayLog) -> None:
    relay_log.run(instance_ref("relay-a"),
                  lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))
    relay_log.change(org_ref("acme"),
                     lambda organization: organization.issue_key(
                         "ci", HASH_A, ["shop"], ["application.read",
                                                  "websocket.connect"], T0), create=lambda: Organization.create("acme",
                                                                                                                T0))
    register_app(relay_log, "acme", "shop", T0)
    relay_log.change(app_ref("acme", "shop"),
                     lambda application: application.change_settings({"executorTimeoutSecs": 5}, T1))
    relay_log.run(executor_ref("acme", "shop", "exec-1"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T1))
    relay_log.run(executor_ref("acme", "shop", "exec-2"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-2", INFO_2, "relay-a", T1))
    relay_log.change(instance_ref("relay-a"), lambda i: i.take_lease("acme/shop/exec-1", T1))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("socket closed", T2))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.declare_dead(5, T3))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.dispatch_recovery("exec-2", "relay-a", T3))
    relay_log.change(org_ref("acme"), lambda organization: organization.revoke_key("ci", T4))


def test_a_second_log_over_the_same_store_rebuilds_identical_aggregates(sqlite_env):
    writer = RelayLog(env=sqlite_env)
    _scenario(writer)
    reader = RelayLog(env=sqlite_env)
    try:
        assert topics(reader) == topics(writer)
        assert len(topics(reader)) == 12
        assert reader.get(org_ref("acme")) == writer.get(org_ref("acme"))
        assert reader.get(app_ref("acme", "shop")) == writer.get(app_ref("acme", "shop"))
        assert reader.get(executor_ref("acme", "shop", "exec-1")) == writer.get(executor_ref("acme", "shop", "exec-1"))
        assert reader.get(executor_ref("acme", "shop", "exec-2")) == writer.get(executor_ref("acme", "shop", "exec-2"))
        assert reader.get(instance_ref("relay-a")) == writer.get(instance_ref("relay-a"))

        ex = reader.get(executor_ref("acme", "shop", "exec-1"))
        assert ex.status == DEAD
        assert ex.recovery == {"peer": "exec-2", "attempt": 1, "dispatched_at": T3}
        assert ex.dead_at == T3
        assert reader.get(app_ref("acme", "shop")).settings["executorTimeoutSecs"] == 5
        assert reader.get(org_ref("acme")).keys["ci"]["revoked_at"] == T4
    finally:
        writer.close()
        reader.close()


def test_popo_and_sqlite_rebuild_the_same_state(log, sqlite_env):
    _scenario(log)
    sqlite_log = RelayLog(env=sqlite_env)
    try:
        _scenario(sqlite_log)
        for aggregate_id in (
            organization_id("acme"),
            app_id("acme", "shop"),
            executor_id("acme", "shop", "exec-1"),
            executor_id("acme", "shop", "exec-2"),
            instance_id("relay-a"),
        ):
            from_popo = stored(log, aggregate_id)
            from_sqlite = stored(sqlite_log, aggregate_id)
            assert type(from_popo) is type(from_sqlite)
            assert {k: v for k, v in vars(from_popo).items() if k not in {"_created_on", "_modified_on"}} == {
                k: v for k, v in vars(from_sqlite).items() if k not in {"_created_on", "_modified_on"}
            }
    finally:
        sqlite_log.close()


# -- retry on a concurrent append --------------------------------------------------------------


def test_a_concurrent_append_is_retried_on_fresh_state(monkeypatch, pair):
    a, b = pair
    a.run(instance_ref("relay-a"),
          lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))
    Race(
        monkeypatch, a, RelayInstance, lambda _: b.change(instance_ref("relay-a"), lambda i: i.take_lease("x", T1))
    )
    calls: list[int] = []

    def take_y(inst: RelayInstance) -> None:
        calls.append(inst.version)
        inst.take_lease("y", T2)

    inst = a.change(instance_ref("relay-a"), take_y)

    assert calls == [1, 2]  # first on the stale version, then on the version b wrote
    assert inst.leases == {"x": T1, "y": T2}
    assert inst.version == 3
    assert b.get(instance_ref("relay-a")) == inst
    assert topics(b) == ["RelayInstance.Started", "RelayInstance.LeaseTaken", "RelayInstance.LeaseTaken"]


def test_a_retry_applies_the_command_to_what_the_rival_wrote(monkeypatch, pair):
    a, b = pair
    a.run(executor_ref("acme", "shop", "exec-1"),
          lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T0))
    a.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("socket closed", T1))
    a.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.declare_dead(60, T2))
    Race(
        monkeypatch,
        a,
        Executor,
        lambda _: b.change(executor_ref("acme", "shop", "exec-1"),
                           lambda e: e.dispatch_recovery("exec-2", "relay-b", T3)),
    )

    ex = a.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.dispatch_recovery("exec-3", "relay-a", T4))

    # Both dispatches are kept (at-least-once): b's is attempt 1, a's retried one is attempt 2.
    assert ex.attempts == 2
    assert ex.recovery == {"peer": "exec-3", "attempt": 2, "dispatched_at": T4}
    assert b.get(executor_ref("acme", "shop", "exec-1")) == ex
    assert topics(a)[-2:] == ["Executor.RecoveryDispatched", "Executor.RecoveryDispatched"]


def test_a_retry_refuses_a_command_that_the_rival_made_illegal(monkeypatch, pair):
    a, b = pair
    a.run(executor_ref("acme", "shop", "exec-1"),
          lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-a", T0))
    Race(
        monkeypatch,
        a,
        Executor,
        lambda _: b.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("pong missed", T1)),
    )

    with pytest.raises(
        IllegalTransitionError, match="executor 'exec-1' is DISCONNECTED: cannot disconnect it"
    ):
        a.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("socket closed", T2))

    assert topics(b) == ["Executor.Connected", "Executor.Disconnected"]
    ex = b.get(executor_ref("acme", "shop", "exec-1"))
    assert ex.disconnected_at == T1


def test_two_instances_creating_the_same_executor_end_as_one_reconnection(monkeypatch, pair):
    a, b = pair
    Race(
        monkeypatch,
        a,
        Executor,
        lambda _: b.run(executor_ref("acme", "shop", "exec-1"),
                        lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO, "relay-b", T0)),
    )

    ex = a.run(executor_ref("acme", "shop", "exec-1"),
               lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO_2, "relay-a", T1))

    assert topics(b) == ["Executor.Connected", "Executor.Reconnected"]
    assert ex.instance == "relay-a"
    assert ex.created_at == T0
    assert ex.version == 2
    assert b.get(executor_ref("acme", "shop", "exec-1")) == ex


def test_concurrent_ensure_organization_creates_it_once(monkeypatch, pair):
    a, b = pair
    Race(monkeypatch, a, Organization, lambda _: b.ensure(org_ref("acme"), lambda: Organization.create("acme", T0)))

    org = a.ensure(org_ref("acme"), lambda: Organization.create("acme", T1))

    assert org.created_at == T0
    assert topics(a) == ["Organization.Created"]


def test_concurrent_registration_of_the_same_app_is_refused(monkeypatch, pair):
    a, b = pair
    a.ensure(org_ref("acme"), lambda: Organization.create("acme", T0))
    Race(monkeypatch, a, App, lambda _: register_app(b, "acme", "shop", T0))

    with pytest.raises(AlreadyExistsError, match="application 'shop' exists in 'acme'"):
        register_app(a, "acme", "shop", T1)

    assert topics(a) == ["Organization.Created", "App.Registered"]
    assert a.get(app_ref("acme", "shop")).created_at == T0


def test_concurrent_settings_changes_are_both_kept(monkeypatch, pair):
    a, b = pair
    register_app(a, "acme", "shop", T0)
    Race(monkeypatch, a, App,
         lambda _: b.change(app_ref("acme", "shop"),
                            lambda application: application.change_settings({"privateMode": True}, T1)))

    app = a.change(app_ref("acme", "shop"),
                   lambda application: application.change_settings({"executorTimeoutSecs": 10}, T2))

    assert app.settings == {**DEFAULT_SETTINGS, "privateMode": True, "executorTimeoutSecs": 10}
    assert b.get(app_ref("acme", "shop")) == app


def test_concurrent_keys_with_the_same_name_are_refused(monkeypatch, pair):
    a, b = pair
    a.ensure(org_ref("acme"), lambda: Organization.create("acme", T0))
    Race(monkeypatch, a, Organization,
         lambda _: b.change(org_ref("acme"),
                            lambda organization: organization.issue_key(
                                "ci", HASH_A, [], [], T1), create=lambda: Organization.create("acme", T1)))

    with pytest.raises(AlreadyExistsError, match="'ci'"):
        a.change(org_ref("acme"),
                 lambda organization: organization.issue_key(
                     "ci", HASH_B, [], [], T2), create=lambda: Organization.create("acme", T2))

    assert a.get(org_ref("acme")).keys["ci"]["key_hash"] == HASH_A
    assert topics(a) == ["Organization.Created", "Organization.ApiKeyIssued"]


def test_the_last_attempt_may_still_succeed(monkeypatch, pair):
    a, b = pair
    a.run(instance_ref("relay-a"),
          lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))
    race = Race(
        monkeypatch,
        a,
        RelayInstance,
        lambda n: b.change(instance_ref("relay-a"), lambda i: i.take_lease(f"rival-{n}", T1)),
        times=log_module._SAVE_ATTEMPTS - 1,
    )

    inst = a.change(instance_ref("relay-a"), lambda i: i.take_lease("mine", T2))

    assert race.reads == log_module._SAVE_ATTEMPTS
    assert set(inst.leases) == {"rival-1", "rival-2", "mine"}
    assert b.get(instance_ref("relay-a")) == inst


def test_the_retry_gives_up_after_the_last_attempt(monkeypatch, pair):
    a, b = pair
    a.run(instance_ref("relay-a"),
          lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))
    race = Race(
        monkeypatch,
        a,
        RelayInstance,
        lambda n: b.change(instance_ref("relay-a"), lambda i: i.take_lease(f"rival-{n}", T1)),
        times=100,
    )

    with pytest.raises(IntegrityError):
        a.change(instance_ref("relay-a"), lambda i: i.take_lease("mine", T2))

    assert log_module._SAVE_ATTEMPTS == 3
    assert race.reads == 3
    leases = b.get(instance_ref("relay-a")).leases
    assert set(leases) == {"rival-1", "rival-2", "rival-3"}
    assert topics(b).count("RelayInstance.LeaseTaken") == 3


# -- position and listeners --------------------------------------------------------------------


def test_position_follows_what_this_log_appended_and_listeners_hear_it(log):
    heard: list[int] = []
    log.listeners.append(heard.append)
    assert log.position == 0

    register_app(log, "acme", "shop", T0)  # two saves: the organization, then the app
    assert log.position == 2
    assert heard == [1, 2]

    log.ensure(org_ref("acme"), lambda: Organization.create("acme", T1))  # nothing new
    log.change(app_ref("acme", "shop"),
               lambda application: application.change_settings({"executorTimeoutSecs": 60}, T1))  # no effective change
    with pytest.raises(AlreadyExistsError):
        register_app(log, "acme", "shop", T1)
    assert log.position == 2
    assert heard == [1, 2]


def test_position_after_a_retry_is_that_of_the_retried_append(monkeypatch, pair):
    a, b = pair
    a.run(instance_ref("relay-a"),
          lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", T0))
    heard: list[int] = []
    a.listeners.append(heard.append)
    Race(
        monkeypatch, a, RelayInstance, lambda _: b.change(instance_ref("relay-a"), lambda i: i.take_lease("x", T1))
    )

    a.change(instance_ref("relay-a"), lambda i: i.take_lease("y", T2))

    assert b.position == 2
    assert a.position == 3
    assert heard == [3]
