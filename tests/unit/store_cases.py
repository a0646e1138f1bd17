"""Shared helpers for the store and projection tests: both stores, fixed times, a realistic history.

`make_store_config` is what each module's `store_config` fixture returns: the embedded SQLite store in
`tmp_data_dir`, or the same data dir with a fresh PostgreSQL database from the `pg_url` fixture.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from relay.actors.alerting import fire_alert
from relay.actors.application import register_app
from relay.actors.membership import Registration, register, remove_member
from relay.events.access import ORG_ADMIN
from relay.events.alerting import AlertingRule
from relay.events.executor import Executor, ExecutorInfo
from relay.events.instance import RelayInstance
from relay.events.organization import Organization
from relay.events.refs import access_ref, alert_ref, app_ref, executor_ref, instance_ref, org_ref, rule_ref
from relay.projections.backend import StoreConfig, ViewStore
from relay.projections.store.log import RelayLog

# Both stores; the PostgreSQL case is marked like every other test that needs the server.
STORES = ("sqlite", pytest.param("postgresql", marks=pytest.mark.postgres))

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """A fixed instant `seconds` after T0 (no clock is read anywhere in these tests)."""
    return T0 + timedelta(seconds=seconds)


# Raw API keys exist only here: the log and the views are only ever given their SHA-256 hashes.
KEY_CI = "relay_live_ci_8f1c2d3e4b5a69788796a5b4c3d2e1f0"
KEY_DEPLOY = "relay_live_deploy_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
HASH_CI = hashlib.sha256(KEY_CI.encode()).hexdigest()
HASH_DEPLOY = hashlib.sha256(KEY_DEPLOY.encode()).hexdigest()

INFO_1 = ExecutorInfo(
    application_version="1.0.0", hostname="host-1", language="python", dbos_version="2.4.0", metadata=None
)
INFO_2 = ExecutorInfo(
    application_version="1.0.0", hostname="host-2", language="typescript", dbos_version="3.1.0",
    metadata={"region": "eu-west-1"},
)
INFO_2B = ExecutorInfo(
    application_version="1.1.0", hostname="host-2b", language="typescript", dbos_version="3.1.1", metadata=None
)
INFO_3 = ExecutorInfo(
    application_version="1.0.0", hostname="host-3", language="go", dbos_version="0.9.0", metadata=None
)


def make_store_config(request: pytest.FixtureRequest, data_dir: Path) -> StoreConfig:
    if request.param == "sqlite":
        return StoreConfig(data_dir=data_dir)
    return StoreConfig(data_dir=data_dir, database_url=request.getfixturevalue("pg_url"))


@contextmanager
def open_log(config: StoreConfig) -> Iterator[RelayLog]:
    """A RelayLog over `config`: a new object per call, as a new process would make."""
    relay_log = RelayLog(env=config.event_store_env())
    try:
        yield relay_log
    finally:
        relay_log.close()


def topics(relay_log: RelayLog) -> list[str]:
    """Every recorded event in notification order, as 'Aggregate.Event'."""
    return [n.topic.split(":", 1)[1] for n in relay_log.recorder.select_notifications(start=1, limit=10_000)]


def notification_ids(relay_log: RelayLog) -> list[int]:
    return [n.id for n in relay_log.recorder.select_notifications(start=1, limit=10_000)]


# -- the realistic history ------------------------------------------------------------------------

# What `history` records, in order (one notification each).
HISTORY_EVENTS = (
    "RelayInstance.Started",  # relay-a starts
    "Organization.Created",  # register shop (creates acme first)
    "App.Registered",
    "App.Registered",  # register billing
    "Organization.ApiKeyIssued",  # ci
    "Organization.ApiKeyIssued",  # deploy
    "App.SettingsChanged",  # shop: executorTimeoutSecs 5
    "Executor.Connected",  # exec-1
    "Executor.Connected",  # exec-2
    "Executor.Connected",  # bill-1 (billing)
    "Executor.Disconnected",  # exec-1
    "Executor.DeclaredDead",  # exec-1
    "Executor.RecoveryDispatched",  # exec-1 -> exec-2, attempt 1
    "Executor.Disconnected",  # exec-2 (the peer goes away)
    "Executor.RecoveryFailed",  # attempt 1 failed
    "Executor.Connected",  # exec-3
    "Executor.RecoveryDispatched",  # exec-1 -> exec-3, attempt 2
    "Executor.RecoveryAcknowledged",  # attempt 2 done
    "Executor.Deleted",  # exec-1's dead record
    "Executor.Reconnected",  # exec-2 comes back inside its grace period
    "Organization.ApiKeyRevoked",  # ci
    "App.Deleted",  # billing
    "AlertingRule.Created",  # shop: failures
    "AlertingRule.Created",  # shop: a slow queue
    "Alert.Fired",  # failures, alert 1
    "Alert.Delivered",  # to exec-2
    "AlertingRule.Deleted",  # the slow-queue rule
    "Alert.Fired",  # failures, alert 2
)


def history(relay_log: RelayLog) -> None:
    """A day in the life of one organization: apps, keys, executors dying and being recovered."""
    relay_log.run(instance_ref("relay-a"),
                  lambda found: RelayInstance.start_again(found, "relay-a", "10.0.0.1", 8080, "0.1.0", at(0)))
    register_app(relay_log, "acme", "shop", at(1))
    register_app(relay_log, "acme", "billing", at(2))
    relay_log.change(org_ref("acme"),
                     lambda organization: organization.issue_key(
                         "ci", HASH_CI, ["shop"], ["websocket.connect", "application.read"], at(3), "admin"),
                     create=lambda: Organization.create("acme", at(3)))
    relay_log.change(org_ref("acme"),
                     lambda organization: organization.issue_key(
                         "deploy", HASH_DEPLOY, [], ["application.write"], at(4)),
                     create=lambda: Organization.create("acme", at(4)))
    relay_log.change(app_ref("acme", "shop"),
                     lambda application: application.change_settings({"executorTimeoutSecs": 5}, at(5)))
    relay_log.run(executor_ref("acme", "shop", "exec-1"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO_1, "relay-a", at(10)))
    relay_log.run(executor_ref("acme", "shop", "exec-2"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-2", INFO_2, "relay-a", at(11)))
    relay_log.run(executor_ref("acme", "billing", "bill-1"),
                  lambda found: Executor.connect_again(found, "acme", "billing", "bill-1", INFO_1, "relay-a", at(12)))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("socket closed", at(20)))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.declare_dead(5, at(25)))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.dispatch_recovery("exec-2", "relay-a", at(25)))
    relay_log.change(executor_ref("acme", "shop", "exec-2"), lambda e: e.disconnect("pong missed", at(26)))
    relay_log.change(executor_ref("acme", "shop", "exec-1"),
                     lambda e: e.fail_recovery("exec-2", "peer disconnected", at(26)))
    relay_log.run(executor_ref("acme", "shop", "exec-3"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-3", INFO_3, "relay-a", at(27)))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.dispatch_recovery("exec-3", "relay-a", at(27)))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.acknowledge_recovery("exec-3", at(28)))
    relay_log.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.delete("recovered", at(28)))
    relay_log.run(executor_ref("acme", "shop", "exec-2"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-2", INFO_2B, "relay-a", at(29)))
    relay_log.change(org_ref("acme"), lambda organization: organization.revoke_key("ci", at(30), "admin"))
    relay_log.change(app_ref("acme", "billing"), lambda application: application.delete(at(31)))
    relay_log.create(rule_ref("acme", "shop", "failures"),
                     lambda: AlertingRule.create(
                         "acme", "shop", "failures", "WorkflowFailure", {}, None, None, at(32), "admin"))
    relay_log.create(rule_ref("acme", "shop", "slow"),
                     lambda: AlertingRule.create(
                         "acme", "shop", "slow", "SlowQueue", {"queueName": "q"}, None, None, at(33)))
    fire_alert(relay_log, "acme", "shop", "failures", 1, "1 workflow failed", {"count": "1"}, "relay-a", at(34))
    relay_log.change(alert_ref("acme", "shop", "failures", 1),
                     lambda alert: alert.deliver(["exec-2"], [], None, at(35)))
    relay_log.change(rule_ref("acme", "shop", "slow"), lambda rule: rule.delete(at(36)))
    fire_alert(relay_log, "acme", "shop", "failures", 2, "2 workflows failed", {"count": "2"}, "relay-a", at(37))


# What `people_history` records after `history`, in order: one organization's people (events/access.py).
PEOPLE_HISTORY_EVENTS = (
    "User.Registered",  # ann registers: her own organization "anns"
    "Organization.Created",
    "OrganizationAccess.Created",
    "OrganizationAccess.MemberJoined",  # ann, Organization Admin
    "OrganizationAccess.RoleCreated",  # viewer
    "OrganizationAccess.SecretGenerated",
    "OrganizationAccess.DomainClaimed",  # anns.example
    "User.Registered",  # bob registers with the secret
    "OrganizationAccess.SecretUsed",
    "OrganizationAccess.MemberJoined",  # bob, Organization Member
    "OrganizationAccess.RoleGranted",  # bob: viewer
    "OrganizationAccess.MemberRemoved",  # bob
    "Organization.RetentionChanged",  # anns: 30 days
    "OrganizationAccess.DomainReleased",
    "OrganizationAccess.RoleDeleted",  # viewer
)
JOIN_SECRET_HASH = hashlib.sha256(b"a join secret").hexdigest()


def people_history(relay_log: RelayLog, start: float = 50) -> None:
    """After `history`: ann makes her organization, bob joins it with a secret, is given a role and removed."""
    register(relay_log, Registration("ann", "ann@anns.example", "https://idp.example", "ann-sub", "anns", ORG_ADMIN,
                                      "register", new_org=True), at(start))
    relay_log.change(access_ref("anns"), lambda a: a.create_role("viewer", ["application.read"], "ann@anns.example",
                                                                 at(start + 1)))
    relay_log.change(access_ref("anns"), lambda a: a.generate_secret(JOIN_SECRET_HASH, "ann@anns.example",
                                                                     at(start + 2)))
    relay_log.change(access_ref("anns"), lambda a: a.claim_domain("anns.example", "ann@anns.example", at(start + 3)))
    register(relay_log, Registration("bob", "bob@else.example", "https://idp.example", "bob-sub", "anns",
                                      "Organization Member", "secret", secret_hash=JOIN_SECRET_HASH), at(start + 4))
    bob = relay_log.get(access_ref("anns"))
    assert bob is not None
    bob_id = bob.member_named("bob")
    assert bob_id is not None
    relay_log.change(access_ref("anns"), lambda a: a.grant(bob_id, "viewer", "ann@anns.example", at(start + 5)))
    remove_member(relay_log, "anns", "bob", "ann@anns.example", at(start + 6))
    relay_log.change(org_ref("anns"), lambda o: o.change_retention(30, at(start + 7), "ann@anns.example"))
    relay_log.change(access_ref("anns"), lambda a: a.release_domain("anns.example", "ann@anns.example", at(start + 8)))
    relay_log.change(access_ref("anns"), lambda a: a.delete_role("viewer", "ann@anns.example", at(start + 9)))


def more_history(relay_log: RelayLog, count: int, start: float = 100) -> None:
    """`count` further events after `history`, all updates of rows the views already hold: settings
    changes (applications), exec-3 dropping and coming back (registry), leases taken (audit only)."""
    for i in range(count):
        when = at(start + i)
        step = i % 4
        if step == 0:
            relay_log.change(app_ref("acme", "shop"),
                             lambda application, n=i, w=when: application.change_settings(
                                 {"executorTimeoutSecs": 10 + n}, w))
        elif step == 1:
            relay_log.change(executor_ref("acme", "shop", "exec-3"), lambda e, w=when: e.disconnect("socket closed", w))
        elif step == 2:
            relay_log.change(instance_ref("relay-a"), lambda inst, n=i, w=when: inst.take_lease(f"acme/shop/x-{n}", w))
        else:
            relay_log.run(executor_ref("acme", "shop", "exec-3"),
                          lambda found, w=when: Executor.connect_again(
                              found, "acme", "shop", "exec-3", INFO_3, "relay-a", w))


# -- reading views and scratch locations -----------------------------------------------------------


def rows(store: ViewStore, table: str, order_by: str) -> list[dict[str, Any]]:
    with store.transaction(commit=False) as sql:
        return sql.all(f"SELECT * FROM {{s}}{table} ORDER BY {order_by}")


def scratch_location(config: StoreConfig, tmp_path: Path, name: str) -> str:
    """Where to build a second copy of the views: a directory (SQLite) or a schema (PostgreSQL)."""
    if config.is_postgres:
        return f"scratch_{name}"
    return str(tmp_path / f"scratch-{name}")


def execute_directly(config: StoreConfig, view: str, statement: str, params: tuple[Any, ...] = ()) -> int:
    """Run one statement on a live view's table with the plain driver, behind Relay's back."""
    if config.database_url is None:
        conn = sqlite3.connect(config.data_dir / f"view_{view}.sqlite")
        try:
            with conn:  # commits
                return conn.execute(statement, params).rowcount
        finally:
            conn.close()
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        return conn.execute(statement.replace("?", "%s"), params).rowcount  # type: ignore[arg-type]


def replay_schemas(config: StoreConfig) -> list[str]:
    """PostgreSQL schemas a replay would create (relay_replay_*)."""
    assert config.database_url is not None
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'relay\\_replay\\_%'"
        ).fetchall()
    return sorted(r[0] for r in found)


class Race:
    """Make `relay_log` read an aggregate of `kind`, then let a rival write it before `relay_log` saves:
    the rival writes on each of the first `times` reads, so the first `times` saves collide."""

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
