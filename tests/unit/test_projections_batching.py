"""The projections' fast paths, on both stores: one read and decode of the log per batch for all views,
writes queued and sent as executemany (an executor's run of events folded into one row write), the runner
publishing its position batch by batch, the applications view's answers held in memory (and dropped the
moment they change, here or on another instance), and SQLite opened with synchronous=NORMAL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from relay.actors.application import register_app
from relay.events.executor import Executor
from relay.events.refs import app_ref, executor_ref, org_ref
from relay.projections import backend
from relay.projections.applications import ApplicationsQueries
from relay.projections.backend import StoreConfig, ViewStore
from relay.projections.registry import RegistrySchema
from relay.projections.store.log import RelayLog
from relay.projections.views import ProjectionRunner, Views
from tests.unit.store_cases import (
    HASH_CI,
    HASH_DEPLOY,
    INFO_1,
    at,
    history,
    more_history,
    notification_ids,
    open_log,
)


@pytest.fixture
def views(store_config: StoreConfig, relay_log: RelayLog) -> Iterator[Views]:
    live = Views(store_config, relay_log)
    try:
        yield live
    finally:
        live.close()


def dumps(views: Views) -> list[dict[str, list[dict[str, Any]]]]:
    return [store.dump() for store in views.stores]


class CountingRecorder:
    """Counts the log reads (select_notifications) made through a RelayLog's recorder."""

    def __init__(self, relay_log: RelayLog, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        real = relay_log.recorder.select_notifications

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(relay_log.recorder, "select_notifications", counted)


def test_one_read_of_the_log_per_batch_feeds_every_view(store_config, relay_log, views, monkeypatch, tmp_path):
    history(relay_log)
    more_history(relay_log, 3)
    total = len(notification_ids(relay_log))
    counter = CountingRecorder(relay_log, monkeypatch)
    applied = views.catch_up(batch_size=4)
    batches = -(-total // 4)
    assert applied == len(views.projectors) * total
    assert counter.reads == batches + 1  # the last read finds nothing more
    assert views.position() == notification_ids(relay_log)[-1]

    # The same views built one projector at a time, one event per batch: the same rows.
    location = str(tmp_path / "one_by_one") if not store_config.is_postgres else "one_by_one"
    slow = Views(store_config, relay_log, location=location)
    try:
        for projector in slow.projectors:
            projector.batch_size = 1
            assert projector.catch_up() == total
        assert dumps(slow) == dumps(views)
    finally:
        for store in slow.stores:
            store.drop_location()
        slow.close()


def test_views_behind_each_other_catch_up_together_each_to_its_own_stop(store_config, relay_log, views):
    history(relay_log)
    ids = notification_ids(relay_log)
    registry, _, audit, *others = views.projectors
    assert registry.catch_up(stop=ids[9]) == 10
    assert audit.catch_up(stop=ids[3]) == 4
    stops = [ids[12], ids[5], ids[-1], *[None] * len(others)]
    views.catch_up(stops=stops, batch_size=3)
    assert [p.position() for p in views.projectors] == [ids[12], ids[5], ids[-1], *[ids[-1]] * len(others)]
    assert views.catch_up() == (len(ids) - 13) + (len(ids) - 6)


def test_a_view_skips_the_batches_it_folds_nothing_of_yet_reaches_the_log(store_config, relay_log, views):
    # A storm of executor events: the views that fold none of them (applications, alerting, people) write no
    # transaction per batch, yet count as caught up; past `skip_idle` positions their tracking moves on.
    register_app(relay_log, "acme", "shop", at(0))
    views.catch_up()
    before = {p.name: p.position() for p in views.projectors}
    for n in range(12):
        relay_log.run(executor_ref("acme", "shop", f"e{n}"), lambda found, n=n: Executor.connect_again(
            found, "acme", "shop", f"e{n}", INFO_1, "relay-a", at(n + 1)))
    end = notification_ids(relay_log)[-1]
    views.catch_up(batch_size=3, skip_idle=1000)
    moved = {p.name for p in views.projectors if p.position() != before[p.name]}
    assert moved == {"registry", "audit", "operations", "instances"}
    assert views.position() == end and all(p.reached() == end for p in views.projectors)
    assert views.catch_up(skip_idle=1000) == 0  # nothing read again: the skipped range is remembered
    for n in range(12, 16):
        relay_log.run(executor_ref("acme", "shop", f"e{n}"), lambda found, n=n: Executor.connect_again(
            found, "acme", "shop", f"e{n}", INFO_1, "relay-a", at(n + 1)))
    views.catch_up(batch_size=3, skip_idle=5)  # trailing by more than 5: tracking moves on
    assert all(p.position() > before[p.name] for p in views.projectors)
    ids = notification_ids(relay_log)
    left = sum(len([i for i in ids if i > p.position()]) for p in views.projectors)
    fresh = Views(store_config, relay_log)  # another process (same stores): only what is stored
    try:
        assert fresh.catch_up() == left > 0
        assert dumps(fresh) == dumps(views)
    finally:
        fresh.close()


def test_the_runner_publishes_its_position_batch_by_batch(store_config, relay_log, views):
    history(relay_log)
    ids = notification_ids(relay_log)
    published: list[int] = []
    views.catch_up(batch_size=5, reached=published.append)
    assert published == sorted(published)
    assert published[0] == ids[4] and published[-1] == ids[-1]
    assert len(published) == -(-len(ids) // 5)


def test_an_executors_run_of_events_is_one_row_write(store_config, relay_log, views, monkeypatch):
    """Connected then Disconnected/Reconnected pairs in one batch: the registry row ends as if each event
    had been applied alone (the fold is exact), written once."""
    for k in range(3):
        relay_log.run(executor_ref("acme", "shop", f"exec-{k}"),
                      lambda found, n=k: Executor.connect_again(
                          found, "acme", "shop", f"exec-{n}", INFO_1, "relay-a", at(n)))
        relay_log.change(executor_ref("acme", "shop", f"exec-{k}"), lambda e, k=k: e.disconnect("gone", at(10 + k)))
    relay_log.run(executor_ref("acme", "shop", "exec-0"),
                  lambda found: Executor.connect_again(found, "acme", "shop", "exec-0", INFO_1, "relay-b", at(20)))
    statements: list[tuple[str, int]] = []
    real_send = backend.Sql._send

    def send(sql: backend.Sql, statement: str, rows: list[tuple[Any, ...]]) -> None:
        statements.append((statement.split(" (")[0].split(" SET")[0], len(rows)))
        real_send(sql, statement, rows)

    monkeypatch.setattr(backend.Sql, "_send", send)
    views.catch_up()
    executors = [s for s in statements if "relay_executors" in s[0]]
    # Three Connected+Disconnected folded into three rows of one executemany; then exec-0's Reconnected.
    assert executors == [("INSERT INTO {s}relay_executors", 3), ("UPDATE {s}relay_executors", 1)]
    rows = {r["executor_id"]: r for r in views.registry.executors("acme", "shop")}
    assert rows["exec-0"]["status"] == "HEALTHY" and rows["exec-0"]["instance"] == "relay-b"
    assert rows["exec-0"]["disconnected_at"] is None and rows["exec-0"]["connected_at"] == at(20).isoformat()
    assert rows["exec-1"]["status"] == "DISCONNECTED" and rows["exec-1"]["disconnected_at"] == at(11).isoformat()
    assert rows["exec-2"]["updated_at"] == at(12).isoformat()


def test_queued_writes_are_sent_before_a_read(store_config, tmp_data_dir):
    store = ViewStore(store_config, RegistrySchema())
    try:
        with store.batch_transaction() as sql:
            sql.insert("relay_executors", {"id": "x", "org": "o", "app": "a", "executor_id": "e", "status": "H"})
            sql.update("relay_executors", {"id": "x"}, {"status": "D"})
            sql.write("UPDATE {s}relay_executors SET hostname = ? WHERE status = ?", ("h", "D"))
            sql.update("relay_executors", {"id": "x"}, {"status": "E"})
            row = sql.one("SELECT status, hostname FROM {s}relay_executors WHERE id = ?", ("x",))
            assert row == {"status": "E", "hostname": "h"}
            sql.update("relay_executors", {"id": "x"}, {"status": "F"})
        with store.transaction(commit=False) as sql:
            assert sql.one("SELECT status FROM {s}relay_executors WHERE id = ?", ("x",)) == {"status": "F"}
    finally:
        store.close()


# -- the applications view in memory -------------------------------------------------------------


class CountingQueries:
    """Counts the database transactions ApplicationsQueries opens."""

    def __init__(self, queries: ApplicationsQueries, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        real = queries.store.transaction

        def counted(**kwargs: Any) -> Any:
            self.reads += 1
            return real(**kwargs)

        monkeypatch.setattr(queries.store, "transaction", counted)


@pytest.fixture
def runner(views: Views) -> Iterator[ProjectionRunner]:
    running = ProjectionRunner(views, poll_interval=0.05)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_keys_and_apps_are_answered_from_memory_and_a_revoke_counts_at_once(relay_log, views, runner, monkeypatch):
    history(relay_log)
    assert runner.wait_for(relay_log.position, timeout=10)
    apps = views.applications
    counter = CountingQueries(apps, monkeypatch)
    assert apps.key_by_hash(HASH_DEPLOY)["name"] == "deploy"
    assert apps.app("acme", "shop")["name"] == "shop"
    assert apps.organization_exists("acme")
    loads = counter.reads
    assert loads == 1  # one snapshot
    for _ in range(20):
        assert apps.key_by_hash(HASH_DEPLOY) is not None
        assert apps.app("acme", "shop") is not None
        assert apps.organization_exists("acme")
    assert counter.reads == loads  # no database read

    copy = apps.app("acme", "shop")
    copy["settings"]["executorTimeoutSecs"] = 999
    assert apps.app("acme", "shop")["settings"]["executorTimeoutSecs"] == 5  # answers are copies

    assert apps.key_by_hash(HASH_CI) is None  # revoked in the history: not in memory, and the database agrees
    relay_log.change(org_ref("acme"), lambda organization: organization.revoke_key("deploy", at(40)))
    assert runner.wait_for(relay_log.position, timeout=10)  # what the API does before answering
    assert apps.key_by_hash(HASH_DEPLOY) is None
    relay_log.change(app_ref("acme", "shop"), lambda application: application.delete(at(41)))
    assert runner.wait_for(relay_log.position, timeout=10)
    assert apps.app("acme", "shop") is None


def test_a_change_made_by_another_instance_is_seen(store_config, relay_log, views, runner):
    """Two instances on one store (HA): each runs its own runner over the same views. What the other
    instance records and projects first is seen here once this runner catches up; what the other instance
    creates is never refused here meanwhile (a miss reads the database)."""
    history(relay_log)
    assert runner.wait_for(relay_log.position, timeout=10)
    assert views.applications.key_by_hash(HASH_DEPLOY) is not None  # in memory now
    with open_log(store_config) as other_log:
        other = Views(store_config, other_log)
        try:
            register_app(other_log, "acme", "fresh", at(50))
            other.catch_up()  # the other instance's views are this instance's too: the rows are there now
            assert views.applications.app("acme", "fresh")["name"] == "fresh"  # a miss: read from the database
            other_log.change(org_ref("acme"), lambda organization: organization.revoke_key("deploy", at(51)))
            other.catch_up()
            assert runner.wait_for(other_log.position, timeout=10)
            assert views.applications.key_by_hash(HASH_DEPLOY) is None
        finally:
            other.close()


def test_without_a_runner_every_answer_reads_the_view(relay_log, views, monkeypatch):
    history(relay_log)
    views.catch_up()
    counter = CountingQueries(views.applications, monkeypatch)
    assert views.applications.key_by_hash(HASH_DEPLOY) is not None
    assert views.applications.key_by_hash(HASH_DEPLOY) is not None
    assert counter.reads == 2


# -- SQLite durability setting -------------------------------------------------------------------


def test_sqlite_stores_commit_with_synchronous_normal_in_wal_mode(tmp_data_dir):
    config = StoreConfig(data_dir=tmp_data_dir)
    with open_log(config) as relay_log:
        register_app(relay_log, "acme", "shop", at(0))
        with relay_log.factory.datastore.transaction(commit=False) as cursor:  # type: ignore[attr-defined]
            cursor.execute("PRAGMA synchronous")
            assert cursor.fetchall()[0][0] == 1  # NORMAL
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchall()[0][0] == "wal"
        assert type(relay_log.recorder).__module__ == "eventsourcing.sqlite"
        store = ViewStore(config, RegistrySchema())
        try:
            with store.transaction(commit=False) as sql:
                assert sql.all("PRAGMA synchronous") == [{"synchronous": 1}]
        finally:
            store.close()
    with sqlite3.connect(tmp_data_dir / "events.sqlite") as plain:  # the file is an ordinary WAL database
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    full = StoreConfig(data_dir=tmp_data_dir / "full", sqlite_synchronous="FULL")
    with open_log(full) as relay_log, relay_log.factory.datastore.transaction(commit=False) as cursor:  # type: ignore[attr-defined]
        cursor.execute("PRAGMA synchronous")
        assert cursor.fetchall()[0][0] == 2
