"""The projections on both real stores: each view's rows for a realistic history, exactly-once tracking
(twice, after a crash mid-batch, with two projectors racing), the background runner, and replay
(verify against a scratch rebuild, rebuild after tampering, no scratch left behind)."""

from __future__ import annotations

import json
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.actors.application import register_app
from relay.events.application import DEFAULT_SETTINGS
from relay.events.executor import Executor
from relay.events.ids import app_id, executor_id, organization_id
from relay.events.refs import executor_ref
from relay.projections import replay
from relay.projections.alerting import AlertingProjection
from relay.projections.applications import ApplicationsProjection
from relay.projections.audit import AuditProjection
from relay.projections.backend import StoreConfig, ViewStore
from relay.projections.instances import InstancesProjection
from relay.projections.operations import OperationsProjection
from relay.projections.people import PeopleProjection
from relay.projections.projector import Projector, ViewProjection
from relay.projections.registry import RegistryProjection
from relay.projections.store.log import RelayLog
from relay.projections.views import SKIP_IDLE, ProjectionRunner, Views
from tests.unit.store_cases import (
    HASH_CI,
    HASH_DEPLOY,
    HISTORY_EVENTS,
    INFO_1,
    KEY_CI,
    KEY_DEPLOY,
    at,
    execute_directly,
    history,
    more_history,
    notification_ids,
    open_log,
    people_history,
    replay_schemas,
    rows,
    scratch_location,
    topics,
)

PROJECTIONS: dict[str, type[ViewProjection]] = {
    "registry": RegistryProjection,
    "applications": ApplicationsProjection,
    "audit": AuditProjection,
    "alerting": AlertingProjection,
    "operations": OperationsProjection,
    "instances": InstancesProjection,
    "people": PeopleProjection,
}
VIEWS = tuple(PROJECTIONS)
N = len(HISTORY_EVENTS)


@pytest.fixture
def views(store_config: StoreConfig, relay_log: RelayLog) -> Iterator[Views]:
    live = Views(store_config, relay_log)
    try:
        yield live
    finally:
        live.close()


@pytest.fixture
def make_projector(store_config: StoreConfig) -> Iterator[Callable[..., Projector]]:
    """Projectors for one view, each with its own ViewStore object (closed after the test)."""
    opened: list[ViewStore] = []

    def make(relay_log: RelayLog, view: str, *, location: str | None = None, batch_size: int = 500) -> Projector:
        projection_class = PROJECTIONS[view]
        store = ViewStore(store_config, projection_class.schema, location=location)
        opened.append(store)
        return Projector(relay_log, projection_class(store), batch_size=batch_size)

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def rebuilt(
    store_config: StoreConfig, tmp_path: Path, make_projector: Callable[..., Projector]
) -> Callable[..., dict[str, list[dict[str, Any]]]]:
    """What a fresh rebuild of one view from the whole log (or up to `stop`) holds, built elsewhere."""
    made = Counter[str]()

    def build(relay_log: RelayLog, view: str, stop: int | None = None) -> dict[str, list[dict[str, Any]]]:
        made[view] += 1
        location = scratch_location(store_config, tmp_path, f"{view}_{made[view]}")
        projector = make_projector(relay_log, view, location=location)
        projector.catch_up(stop=stop)
        return projector.view.dump()

    return build


class InjectedFaultError(RuntimeError):
    pass


class Applied:
    """Instruments one projection: counts per log position the events applied in batches that committed,
    can fail right after applying the event at `fail_at`, and can run `before_first_batch` once."""

    def __init__(self, projection: ViewProjection) -> None:
        self.committed: Counter[int] = Counter()
        self.fail_at: int | None = None
        self.before_first_batch: Callable[[], None] | None = None
        self.batches = 0
        pending: list[int] = []

        def instrument(apply: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
            def instrumented(sql: Any, domain_event: Any, position: int) -> None:
                apply(sql, domain_event, position)
                pending.append(position)
                if position == self.fail_at:
                    raise InjectedFaultError(f"fault injected at {position}")

            return instrumented

        if isinstance(projection, AuditProjection):
            projection.audit = instrument(projection.audit)  # type: ignore[method-assign]
        else:
            for name, handler in list(projection.handlers.items()):
                projection.handlers[name] = instrument(handler)

        original = projection.process_batch

        def process_batch(batch: list[tuple[Any, int]], tracking: Any, **options: Any) -> None:
            self.batches += 1
            if self.before_first_batch is not None:
                hook, self.before_first_batch = self.before_first_batch, None
                hook()
            pending.clear()
            original(batch, tracking, **options)  # raises if the transaction did not commit
            self.committed.update(pending)
            pending.clear()

        projection.process_batch = process_batch  # type: ignore[method-assign]


def handled_positions(relay_log: RelayLog, view: str) -> list[int]:
    """The log positions whose events `view` applies (audit: all of them)."""
    names = set(PROJECTIONS[view](_NoStore()).handlers) if view != "audit" else None  # type: ignore[arg-type]
    notifications = relay_log.recorder.select_notifications(start=1, limit=10_000)
    return [
        n.id for n in notifications if names is None or n.topic.split(":", 1)[1] in names
    ]


class _NoStore:
    """Enough of a ViewStore to ask a projection for its handler names."""


# -- each view's rows for a realistic history ---------------------------------------------------


def test_the_registry_view_follows_every_executor(relay_log, views):
    history(relay_log)
    assert views.catch_up() == len(VIEWS) * N
    store = views.stores[0]

    def executor_row(app: str, executor: str, **values: Any) -> dict[str, Any]:
        return {
            "id": str(executor_id("acme", app, executor)), "org": "acme", "app": app, "executor_id": executor,
            "metadata": None, "instance": "relay-a", "disconnected_at": None, "dead_at": None,
            "recovery_attempts": 0, "recovery_peer": None, "recovered": 0, **values,
        }

    assert rows(store, "relay_executors", "executor_id") == [
        executor_row(
            "billing", "bill-1", status="HEALTHY", app_version="1.0.0", hostname="host-1", language="python",
            dbos_version="2.4.0", created_at=at(12).isoformat(), connected_at=at(12).isoformat(),
            updated_at=at(12).isoformat(),
        ),
        executor_row(
            "shop", "exec-1", status="DELETED", app_version="1.0.0", hostname="host-1", language="python",
            dbos_version="2.4.0", created_at=at(10).isoformat(), connected_at=at(10).isoformat(),
            disconnected_at=at(20).isoformat(), dead_at=at(25).isoformat(), updated_at=at(28).isoformat(),
            recovery_attempts=2, recovered=1,
        ),
        executor_row(  # reconnected with new info: the old disconnection is cleared
            "shop", "exec-2", status="HEALTHY", app_version="1.1.0", hostname="host-2b", language="typescript",
            dbos_version="3.1.1", created_at=at(11).isoformat(), connected_at=at(29).isoformat(),
            updated_at=at(29).isoformat(),
        ),
        executor_row(
            "shop", "exec-3", status="HEALTHY", app_version="1.0.0", hostname="host-3", language="go",
            dbos_version="0.9.0", created_at=at(27).isoformat(), connected_at=at(27).isoformat(),
            updated_at=at(27).isoformat(),
        ),
    ]
    exec_1 = str(executor_id("acme", "shop", "exec-1"))
    recovery = {"id": exec_1, "org": "acme", "app": "shop", "executor_id": "exec-1", "instance": "relay-a"}
    assert rows(store, "relay_recoveries", "attempt") == [
        {**recovery, "attempt": 1, "peer": "exec-2", "dispatched_at": at(25).isoformat(), "outcome": "failed",
         "reason": "peer disconnected", "finished_at": at(26).isoformat()},
        {**recovery, "attempt": 2, "peer": "exec-3", "dispatched_at": at(27).isoformat(),
         "outcome": "acknowledged", "reason": None, "finished_at": at(28).isoformat()},
    ]

    # The queries web/ and the actors use.
    queries = views.registry
    # ordered by connected_at: exec-2 reconnected last
    assert [r["executor_id"] for r in queries.executors("acme", "shop")] == ["exec-3", "exec-2"]
    assert [r["executor_id"] for r in queries.executors("acme", "shop", include_deleted=True)] == [
        "exec-1", "exec-3", "exec-2"]
    assert queries.counts_by_status("acme", "shop") == {"DELETED": 1, "HEALTHY": 2}
    assert [r["executor_id"] for r in queries.unfinished()] == ["bill-1", "exec-2", "exec-3"]
    assert [r["attempt"] for r in queries.recoveries("acme", "shop")] == [2, 1]
    assert queries.recoveries("acme", "billing") == []
    assert queries.executor("acme", "shop", "nobody") is None


def test_the_registry_view_mid_history(relay_log, views):
    """Up to `stop`: exec-1 dead with recovery pending on exec-2, exec-2 still carrying its metadata."""
    history(relay_log)
    ids = notification_ids(relay_log)
    assert HISTORY_EVENTS[12] == "Executor.RecoveryDispatched"
    views.catch_up(stop=ids[12])
    assert views.position() == ids[12]

    exec_1 = views.registry.executor("acme", "shop", "exec-1")
    assert (exec_1["status"], exec_1["dead_at"], exec_1["recovery_attempts"], exec_1["recovery_peer"]) == (
        "DEAD", at(25).isoformat(), 1, "exec-2")
    exec_2 = views.registry.executor("acme", "shop", "exec-2")
    assert exec_2["status"] == "HEALTHY"
    assert json.loads(exec_2["metadata"]) == {"region": "eu-west-1"}
    [pending] = views.registry.recoveries("acme", "shop")
    assert (pending["attempt"], pending["peer"], pending["outcome"], pending["finished_at"]) == (
        1, "exec-2", "pending", None)
    assert views.registry.executor("acme", "shop", "exec-3") is None


def test_the_applications_view_holds_orgs_apps_and_key_hashes(relay_log, views):
    history(relay_log)
    views.catch_up()
    store = views.stores[1]

    assert rows(store, "relay_orgs", "name") == [
        {"id": str(organization_id("acme")), "name": "acme", "created_at": at(1).isoformat()}
    ]
    apps = rows(store, "relay_apps", "name")
    for row in apps:
        row["settings"] = json.loads(row["settings"])
    assert apps == [
        {"id": str(app_id("acme", "billing")), "org": "acme", "name": "billing", "deleted": 1,
         "settings": DEFAULT_SETTINGS, "created_at": at(2).isoformat(), "updated_at": at(31).isoformat()},
        {"id": str(app_id("acme", "shop")), "org": "acme", "name": "shop", "deleted": 0,
         "settings": {**DEFAULT_SETTINGS, "executorTimeoutSecs": 5}, "created_at": at(1).isoformat(),
         "updated_at": at(5).isoformat()},
    ]
    keys = rows(store, "relay_api_keys", "name")
    assert keys == [
        {"org": "acme", "name": "ci", "key_hash": HASH_CI, "apps": '["shop"]',
         "permissions": '["application.read","websocket.connect"]', "issued_at": at(3).isoformat(),
         "revoked_at": at(30).isoformat()},
        {"org": "acme", "name": "deploy", "key_hash": HASH_DEPLOY, "apps": "[]",
         "permissions": '["application.write"]', "issued_at": at(4).isoformat(), "revoked_at": None},
    ]

    queries = views.applications
    assert queries.organization_exists("acme")
    assert not queries.organization_exists("other")
    assert [a["name"] for a in queries.apps("acme")] == ["shop"]
    assert queries.app("acme", "billing") is None
    assert queries.app("acme", "shop")["settings"]["executorTimeoutSecs"] == 5
    assert queries.key_by_hash(HASH_CI) is None  # revoked
    active = queries.key_by_hash(HASH_DEPLOY)
    assert (active["name"], active["permissions"], active["apps"]) == ("deploy", ["application.write"], [])


def test_keys_are_stored_as_hashes_only(relay_log, views):
    """The raw keys appear in no view row and no stored event; their hashes only in relay_api_keys."""
    history(relay_log)
    views.catch_up()

    for store in views.stores:
        for table, table_rows in store.dump().items():
            text = json.dumps(table_rows, default=str)
            assert KEY_CI not in text and KEY_DEPLOY not in text, table
            if table != "relay_api_keys":
                assert HASH_CI not in text and HASH_DEPLOY not in text, table
    stored = b"".join(n.state for n in relay_log.recorder.select_notifications(start=1, limit=10_000))
    assert KEY_CI.encode() not in stored and KEY_DEPLOY.encode() not in stored
    assert {r["key_hash"] for r in rows(views.stores[1], "relay_api_keys", "name")} == {HASH_CI, HASH_DEPLOY}


# What the audit view says of each event: (event, org, app, subject, at).
AUDIT = [
    ("RelayInstance.Started", None, None, "relay-a", 0),
    ("Organization.Created", "acme", None, "acme", 1),
    ("App.Registered", "acme", "shop", "shop", 1),
    ("App.Registered", "acme", "billing", "billing", 2),
    ("Organization.ApiKeyIssued", "acme", None, "acme", 3),
    ("Organization.ApiKeyIssued", "acme", None, "acme", 4),
    ("App.SettingsChanged", "acme", "shop", "shop", 5),
    ("Executor.Connected", "acme", "shop", "exec-1", 10),
    ("Executor.Connected", "acme", "shop", "exec-2", 11),
    ("Executor.Connected", "acme", "billing", "bill-1", 12),
    ("Executor.Disconnected", "acme", "shop", "exec-1", 20),
    ("Executor.DeclaredDead", "acme", "shop", "exec-1", 25),
    ("Executor.RecoveryDispatched", "acme", "shop", "exec-1", 25),
    ("Executor.Disconnected", "acme", "shop", "exec-2", 26),
    ("Executor.RecoveryFailed", "acme", "shop", "exec-1", 26),
    ("Executor.Connected", "acme", "shop", "exec-3", 27),
    ("Executor.RecoveryDispatched", "acme", "shop", "exec-1", 27),
    ("Executor.RecoveryAcknowledged", "acme", "shop", "exec-1", 28),
    ("Executor.Deleted", "acme", "shop", "exec-1", 28),
    ("Executor.Reconnected", "acme", "shop", "exec-2", 29),
    ("Organization.ApiKeyRevoked", "acme", None, "acme", 30),
    ("App.Deleted", "acme", "billing", "billing", 31),
    ("AlertingRule.Created", "acme", "shop", "failures", 32),
    ("AlertingRule.Created", "acme", "shop", "slow", 33),
    ("Alert.Fired", "acme", "shop", "failures#1", 34),
    ("Alert.Delivered", "acme", "shop", "failures#1", 35),
    ("AlertingRule.Deleted", "acme", "shop", "slow", 36),
    ("Alert.Fired", "acme", "shop", "failures#2", 37),
]


def test_the_audit_view_records_every_event(relay_log, views):
    history(relay_log)
    views.catch_up()
    ids = notification_ids(relay_log)
    assert [a[0] for a in AUDIT] == list(HISTORY_EVENTS)

    entries = views.audit.entries(limit=1000)
    assert [(e["position"], e["event"], e["org"], e["app"], e["subject"], e["at"]) for e in entries] == [
        (position, event, org, app, subject, at(seconds).isoformat())
        for position, (event, org, app, subject, seconds) in zip(ids, AUDIT, strict=True)
    ]
    assert all(e["kind"] == e["event"].split(".")[0] for e in entries)
    assert all(e["recorded_at"] for e in entries)

    by_event = {e["position"]: e["details"] for e in entries}
    assert by_event[ids[4]] == {
        "key_name": "ci", "apps": ["shop"], "permissions": ["application.read", "websocket.connect"], "by": "admin"
    }  # no key_hash
    assert by_event[ids[10]] == {"reason": "socket closed"}
    assert by_event[ids[14]] == {"peer": "exec-2", "attempt": 1, "reason": "peer disconnected"}
    assert by_event[ids[19]]["previous"] == "DISCONNECTED"
    assert by_event[ids[19]]["info"]["hostname"] == "host-2b"
    assert by_event[ids[20]] == {"key_name": "ci", "by": "admin"}
    assert by_event[ids[5]]["by"] == "relay"

    assert [e["subject"] for e in views.audit.entries(org="acme", app="billing")] == ["billing", "bill-1", "billing"]
    assert len(views.audit.entries(event="Executor")) == 13
    assert [e["position"] for e in views.audit.entries(event="Executor.Deleted")] == [ids[18]]
    assert [e["position"] for e in views.audit.entries(since=ids[19], newest_first=True)] == ids[:19:-1]
    assert len(views.audit.entries(start_time=at(25).isoformat(), end_time=at(26).isoformat())) == 4


# -- tracking: exactly once ---------------------------------------------------------------------


def test_catching_up_twice_applies_nothing_twice(relay_log, views):
    history(relay_log)
    assert views.catch_up() == len(VIEWS) * N
    position = views.position()
    dumps = [store.dump() for store in views.stores]
    assert position == notification_ids(relay_log)[-1]

    assert views.catch_up() == 0
    assert views.position() == position
    assert [store.dump() for store in views.stores] == dumps
    assert len(views.audit.entries(limit=1000)) == N

    # Only what is new is applied next time.
    more_history(relay_log, 4)
    assert views.catch_up() == len(VIEWS) * 4
    assert views.position() == notification_ids(relay_log)[-1]
    assert len(views.audit.entries(limit=1000)) == N + 4
    assert views.catch_up() == 0


def test_a_new_views_object_resumes_from_the_stored_position(store_config, relay_log, views):
    history(relay_log)
    views.catch_up()
    dumps = [store.dump() for store in views.stores]
    with open_log(store_config) as other_process:
        again = Views(store_config, other_process)
        try:
            assert again.position() == views.position()
            assert again.catch_up() == 0
            assert [store.dump() for store in again.stores] == dumps
        finally:
            again.close()


# (view, index in HISTORY_EVENTS to fail at): an event in the middle of a batch of 5, after other
# events of the same batch have already been written by this view.
# The people view handles one event of the history: its case runs on `people_history` after it.
FAULTS = {"registry": 13, "applications": 6, "audit": 13, "alerting": 24, "operations": 14, "instances": 13,
          "people": N + 4}


@pytest.mark.parametrize("view", VIEWS)
def test_a_crash_mid_batch_commits_nothing_of_that_batch(view, relay_log, make_projector, rebuilt):
    history(relay_log)
    if view == "people":
        people_history(relay_log)
    ids = notification_ids(relay_log)
    projector = make_projector(relay_log, view, batch_size=5)
    applied = Applied(projector.projection)
    fault = FAULTS[view]
    applied.fail_at = ids[fault]
    batch_start = fault - fault % 5  # index of the first event of the failing batch
    assert ids[fault] in handled_positions(relay_log, view)
    assert any(ids[i] in handled_positions(relay_log, view) for i in range(batch_start, fault))

    with pytest.raises(InjectedFaultError):
        projector.catch_up()

    # The batches before the failing one are committed, nothing of the failing one is.
    assert projector.position() == ids[batch_start - 1]
    assert projector.view.dump() == rebuilt(relay_log, view, stop=ids[batch_start - 1])
    assert all(p < ids[batch_start] for p in applied.committed)

    # The fault is gone: the next catch_up applies the rest, each event exactly once.
    applied.fail_at = None
    assert projector.catch_up() == len(ids) - batch_start
    assert projector.position() == ids[-1]
    assert applied.committed == Counter(handled_positions(relay_log, view))
    assert projector.view.dump() == rebuilt(relay_log, view)
    assert projector.catch_up() == 0


@pytest.mark.parametrize("view", VIEWS)
def test_a_crash_in_the_first_batch_leaves_the_view_empty(view, relay_log, make_projector):
    history(relay_log)
    ids = notification_ids(relay_log)
    projector = make_projector(relay_log, view)  # one batch holds the whole history
    applied = Applied(projector.projection)
    applied.fail_at = handled_positions(relay_log, view)[-1]

    with pytest.raises(InjectedFaultError):
        projector.catch_up()

    assert projector.position() == 0
    assert all(table_rows == [] for table_rows in projector.view.dump().values())
    applied.fail_at = None
    assert projector.catch_up() == N
    assert projector.position() == ids[-1]
    assert applied.committed == Counter(handled_positions(relay_log, view))


@pytest.mark.parametrize("view", VIEWS)
def test_two_projectors_reading_the_same_batch_apply_it_once(
    view, store_config, relay_log, make_projector, rebuilt
):
    """Two instances' projectors start from the same position; the second to commit backs off."""
    history(relay_log)
    with open_log(store_config) as other_log:
        first = make_projector(relay_log, view, batch_size=8)
        second = make_projector(other_log, view, batch_size=8)
        first_applied, second_applied = Applied(first.projection), Applied(second.projection)
        done_by_second: list[int] = []
        # `first` has read its batch; `second` catches up completely before `first` writes it.
        first_applied.before_first_batch = lambda: done_by_second.append(second.catch_up())

        done_by_first = first.catch_up()

        assert done_by_second == [N]
        assert done_by_first == 0
        assert first.position() == second.position() == notification_ids(relay_log)[-1]
        assert first_applied.committed + second_applied.committed == Counter(handled_positions(relay_log, view))
        assert first.view.dump() == rebuilt(relay_log, view)


@pytest.mark.parametrize("view", VIEWS)
def test_a_projector_overtaken_part_way_through_its_batch_applies_the_rest_once(
    view, store_config, relay_log, make_projector, rebuilt
):
    """`first` reads p+1..r; meanwhile `second` commits p+1..q (q < r). `first` must apply only q+1..r."""
    history(relay_log)
    with open_log(store_config) as other_log:
        first = make_projector(relay_log, view, batch_size=100)
        second = make_projector(other_log, view, batch_size=100)
        assert first.catch_up() == N  # both at p: the end of the history
        p = first.position()
        assert second.position() == p

        more_history(relay_log, 12)  # updates only: no new rows whose keys could clash
        ids = notification_ids(relay_log)
        q = ids[N + 5]
        first_applied, second_applied = Applied(first.projection), Applied(second.projection)
        overtaken_at: list[int] = []

        def overtake() -> None:
            second.catch_up(stop=q)
            overtaken_at.append(second.position())

        first_applied.before_first_batch = overtake

        first.catch_up()

        assert overtaken_at == [q]
        assert first.position() == second.position() == ids[-1]
        expected = Counter(pos for pos in handled_positions(relay_log, view) if pos > p)
        assert first_applied.committed + second_applied.committed == expected
        assert first.view.dump() == rebuilt(relay_log, view)


@pytest.mark.parametrize("view", VIEWS)
def test_a_batch_read_before_a_reset_is_not_applied_to_the_emptied_view(
    view, store_config, relay_log, make_projector, rebuilt
):
    """A running server's projector has read its next batch when a rebuild empties the view. That batch
    must not land on the empty view: the events before it would be missing from the view for good."""
    history(relay_log)
    ids = notification_ids(relay_log)
    live = make_projector(relay_log, view, batch_size=100)
    live.catch_up(stop=ids[9])
    rebuilder = make_projector(relay_log, view)  # what replay.rebuild opens: the same view, another object
    applied = Applied(live.projection)
    applied.before_first_batch = lambda: rebuilder.view.reset(relay_log.name)

    live.catch_up()

    assert live.position() == ids[-1]
    assert applied.committed == Counter(handled_positions(relay_log, view))  # all of it, after the reset
    assert live.view.dump() == rebuilt(relay_log, view)
    assert rebuilder.catch_up() == 0


@pytest.mark.parametrize("view", VIEWS)
def test_two_projectors_racing_in_threads_apply_each_event_once(
    view, store_config, relay_log, make_projector, rebuilt
):
    history(relay_log)
    more_history(relay_log, 20)
    with open_log(store_config) as other_log:
        racers = [make_projector(relay_log, view, batch_size=3), make_projector(other_log, view, batch_size=4)]
        applied = [Applied(racer.projection) for racer in racers]
        start = threading.Barrier(2)
        done: list[int] = []
        errors: list[BaseException] = []

        def run(projector: Projector) -> None:
            try:
                start.wait(timeout=10)
                done.append(projector.catch_up())
            except BaseException as error:  # reported in the test's thread
                errors.append(error)

        threads = [threading.Thread(target=run, args=(racer,)) for racer in racers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

        assert errors == []
        assert not any(thread.is_alive() for thread in threads)
        ids = notification_ids(relay_log)
        assert racers[0].position() == racers[1].position() == ids[-1]
        assert applied[0].committed + applied[1].committed == Counter(handled_positions(relay_log, view))
        assert sum(done) == len(ids)  # each notification read into a committed batch once in all
        assert racers[0].view.dump() == rebuilt(relay_log, view)


# -- the background runner ----------------------------------------------------------------------


def test_the_runner_applies_appends_and_wait_for_returns_when_they_are_visible(store_config, relay_log, views):
    runner = ProjectionRunner(views, poll_interval=0.05)
    runner.start()
    try:
        register_app(relay_log, "acme", "shop", at(0))
        assert runner.wait_for(relay_log.position, timeout=10)
        assert views.position() >= relay_log.position
        assert views.applications.app("acme", "shop")["created_at"] == at(0).isoformat()

        relay_log.run(executor_ref("acme", "shop", "exec-1"),
                      lambda found: Executor.connect_again(found, "acme", "shop", "exec-1", INFO_1, "relay-a", at(1)))
        assert runner.wait_for(relay_log.position, timeout=10)
        assert views.registry.executor("acme", "shop", "exec-1")["status"] == "HEALTHY"
        assert [e["event"] for e in views.audit.entries()][-1] == "Executor.Connected"

        # An append by another process reaches this runner too (it is not a listener of that log).
        with open_log(store_config) as other_process:
            other_process.change(executor_ref("acme", "shop", "exec-1"), lambda e: e.disconnect("socket closed", at(2)))
            assert runner.wait_for(other_process.position, timeout=10)
        assert views.registry.executor("acme", "shop", "exec-1")["status"] == "DISCONNECTED"

        assert not runner.wait_for(relay_log.recorder.max_notification_id() + 100, timeout=0.1)
        assert runner.last_error is None
        assert views.catch_up(skip_idle=SKIP_IDLE) == 0  # the runner left nothing to fold
    finally:
        runner.stop()
    assert not runner._thread.is_alive()
    assert topics(relay_log) == ["Organization.Created", "App.Registered", "Executor.Connected",
                                 "Executor.Disconnected"]


# -- replay: verify and rebuild -----------------------------------------------------------------


@pytest.fixture
def scratch_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where verify's SQLite scratch directories go (instead of the system temp dir), to check cleanup."""
    root = tmp_path / "tmp"
    root.mkdir()
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(prefix: str | None = None) -> str:
        return real_mkdtemp(prefix=prefix, dir=root)

    monkeypatch.setattr(replay.tempfile, "mkdtemp", mkdtemp)
    return root


def scratch_in_use(config: StoreConfig, scratch_root: Path) -> list[str]:
    if config.is_postgres:
        return replay_schemas(config)
    return sorted(p.name for p in scratch_root.iterdir())


def run_verify(config: StoreConfig, relay_log: RelayLog, scratch_root: Path) -> replay.ReplayReport:
    """replay.verify, checking that its scratch exists while it works and is gone afterwards."""
    seen: list[list[str]] = []
    report = replay.verify(config, relay_log, lambda _n: seen.append(scratch_in_use(config, scratch_root)))
    assert seen, "verify replayed nothing"
    assert all(len(names) == 1 for names in seen)
    [name] = seen[0]
    assert name.startswith("relay_replay_" if config.is_postgres else "relay-replay-")
    assert scratch_in_use(config, scratch_root) == []
    return report


def test_verify_a_consistent_store(store_config, relay_log, views, scratch_root):
    history(relay_log)
    views.catch_up()

    report = run_verify(store_config, relay_log, scratch_root)

    assert report.verified is True
    assert report.differences == []
    assert report.position == notification_ids(relay_log)[-1]
    assert report.events == len(VIEWS) * N
    assert views.catch_up() == 0  # verify did not touch the live views


# (view, statement behind Relay's back, the table the difference must name)
TAMPERING = [
    ("registry", "UPDATE relay_executors SET status = 'HEALTHY' WHERE executor_id = 'exec-1'",
     "registry.relay_executors"),
    ("applications", "UPDATE relay_api_keys SET revoked_at = NULL WHERE name = 'ci'",
     "applications.relay_api_keys"),
    ("audit", "UPDATE relay_audit SET subject = 'someone-else' WHERE event = 'Executor.Deleted'",
     "audit.relay_audit"),
]


@pytest.mark.parametrize(("view", "statement", "table"), TAMPERING, ids=[t[0] for t in TAMPERING])
def test_verify_finds_a_tampered_view_and_rebuild_restores_it(
    view, statement, table, store_config, relay_log, views, scratch_root
):
    history(relay_log)
    views.catch_up()
    store = views.stores[VIEWS.index(view)]
    honest = store.dump()

    assert execute_directly(store_config, view, statement) == 1
    assert store.dump() != honest

    report = run_verify(store_config, relay_log, scratch_root)
    assert report.verified is False
    assert len(report.differences) == 1
    assert report.differences[0].startswith(f"{table}: ")
    assert "1 only live, 1 only rebuilt" in report.differences[0]

    progress: list[int] = []
    rebuild = replay.rebuild(store_config, relay_log, progress.append)
    assert rebuild.events == len(VIEWS) * N
    assert rebuild.position == notification_ids(relay_log)[-1] == progress[-1]  # progress: log positions reached
    assert progress == sorted(progress)
    assert store.dump() == honest
    assert views.position() == rebuild.position

    again = run_verify(store_config, relay_log, scratch_root)
    assert (again.verified, again.differences) == (True, [])


def test_verify_compares_views_behind_the_log_at_their_own_position(store_config, relay_log, views, scratch_root):
    """Views that have not caught up are compared at their own position: still consistent."""
    history(relay_log)
    views.catch_up(stop=notification_ids(relay_log)[9])
    report = run_verify(store_config, relay_log, scratch_root)
    assert (report.verified, report.position) == (True, notification_ids(relay_log)[9])
    assert report.events == len(VIEWS) * 10
