"""projections/store/group_commit.py: concurrent appends in one transaction, in order, conflicts and errors per
caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, OperationalError

from relay.events.executor import Executor, ExecutorInfo
from relay.events.refs import executor_ref
from relay.projections.store.group_commit import GroupCommitter
from relay.projections.store.log import RelayLog

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Store:
    """A write function that records its batches; `gate` holds the first write until released, so that the
    next callers queue behind it."""

    def __init__(self, fail: Callable[[list[str]], BaseException | None] = lambda _items: None) -> None:
        self.batches: list[list[str]] = []
        self.fail = fail
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def write(self, items: list[str]) -> list[str]:
        self.entered.set()
        self.gate.wait(10)
        error = self.fail(items)
        if error is not None:
            raise error
        self.batches.append(list(items))
        return [f"ok:{item}" for item in items]


def _wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.002)


def _queued_behind_first(store: Store, committer: GroupCommitter[str, str],
                         calls: list[tuple[list[str], str]]) -> dict[str, Any]:
    """Each (keys, item) committed from a thread of its own. The first call's write is held until every other
    call has queued, in the order given: they then form the next batches. Returns item -> result or error."""
    out: dict[str, Any] = {}

    def run(keys: list[str], item: str) -> None:
        try:
            out[item] = committer.commit(keys, item)
        except BaseException as error:
            out[item] = error

    store.gate.clear()
    threads = []
    for n, (keys, item) in enumerate(calls):
        thread = threading.Thread(target=run, args=(keys, item))
        thread.start()
        threads.append(thread)
        if n == 0:
            _wait_until(store.entered.is_set)
        else:
            _wait_until(lambda n=n: len(committer._queue) == n)  # type: ignore[misc]
    store.gate.set()
    for thread in threads:
        thread.join(10)
    return out


def test_concurrent_commits_share_one_transaction_in_order() -> None:
    store = Store()
    committer: GroupCommitter[str, str] = GroupCommitter(store.write)
    calls = [([f"agg-{n}"], f"e{n}") for n in range(6)]
    out = _queued_behind_first(store, committer, calls)
    assert out == {f"e{n}": f"ok:e{n}" for n in range(6)}
    assert store.batches == [["e0"], ["e1", "e2", "e3", "e4", "e5"]]


def test_two_changes_of_one_aggregate_never_share_a_batch_nor_swap() -> None:
    store = Store()
    committer: GroupCommitter[str, str] = GroupCommitter(store.write)
    # x1 and x2 change aggregate X; y2 changes Y and X after x2 (so it must follow x2); z is independent.
    calls = [(["W"], "w"), (["X"], "x1"), (["X"], "x2"), (["Y"], "y1"), (["Y", "X"], "y2"), (["Z"], "z")]
    out = _queued_behind_first(store, committer, calls)
    assert all(str(v).startswith("ok:") for v in out.values())
    assert store.batches == [["w"], ["x1", "y1", "z"], ["x2"], ["y2"]]


def test_a_conflict_fails_only_its_caller() -> None:
    def fail(items: list[str]) -> BaseException | None:
        return IntegrityError("version taken") if "bad" in items else None

    store = Store(fail)
    committer: GroupCommitter[str, str] = GroupCommitter(store.write)
    calls = [(["A"], "first"), (["B"], "good1"), (["C"], "bad"), (["D"], "good2")]
    out = _queued_behind_first(store, committer, calls)
    assert out["first"] == "ok:first"
    assert out["good1"] == "ok:good1" and out["good2"] == "ok:good2"
    assert isinstance(out["bad"], IntegrityError)
    # The batch was refused as a whole, then written request by request.
    assert store.batches == [["first"], ["good1"], ["good2"]]


def test_a_store_error_reaches_every_caller_of_the_batch() -> None:
    store = Store(lambda items: OperationalError("database is locked") if "a" not in items else None)
    committer: GroupCommitter[str, str] = GroupCommitter(store.write)
    out = _queued_behind_first(store, committer, [(["A"], "a"), (["B"], "b"), (["C"], "c"), (["D"], "d")])
    assert out["a"] == "ok:a"
    assert all(isinstance(out[k], OperationalError) for k in "bcd")
    assert committer.batches == 2  # the error is not retried per request
    store.fail = lambda _items: None
    assert committer.commit(["B"], "again") == "ok:again"  # and the committer still works


def test_offload_runs_each_transaction() -> None:
    ran: list[int] = []

    def offload(fn: Callable[[], Any]) -> Any:
        ran.append(1)
        return fn()

    committer: GroupCommitter[str, str] = GroupCommitter(Store().write, offload=offload)
    assert committer.commit(["A"], "a") == "ok:a"
    assert ran == [1]


def test_many_threads_all_answered_with_their_own_result() -> None:
    store = Store()
    committer: GroupCommitter[str, str] = GroupCommitter(store.write, max_batch=7)
    out: dict[str, Any] = {}

    def run(n: int) -> None:
        out[f"i{n}"] = committer.commit([f"k{n % 13}"], f"i{n}")

    threads = [threading.Thread(target=run, args=(n,)) for n in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert out == {f"i{n}": f"ok:i{n}" for n in range(200)}
    assert sorted(i for b in store.batches for i in b) == sorted(out)
    assert max(len(b) for b in store.batches) <= 7
    for batch in store.batches:  # never one aggregate twice in a batch
        keys = [int(i[1:]) % 13 for i in batch]
        assert len(keys) == len(set(keys))


def test_relay_log_appends_concurrent_connects_once_each(tmp_path: Path) -> None:
    """Through RelayLog: many executors connecting at once, each Connected recorded once, positions
    distinct, and a second RelayLog on the same store (an HA peer's) sees them all."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db"),
           "SQLITE_LOCK_TIMEOUT": "10"}
    relay_log = RelayLog(env=env)
    info = ExecutorInfo(application_version="v1", hostname="h", language="python", dbos_version="2", metadata={})
    positions: dict[str, int] = {}
    errors: list[BaseException] = []

    def connect(n: int) -> None:
        try:
            executor = relay_log.run(executor_ref("org", "app", f"e{n}"),
                                     lambda found: Executor.connect_again(found, "org", "app", f"e{n}", info, "i1", T0))
            positions[f"e{n}"] = executor.version
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=connect, args=(n,)) for n in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    peer = RelayLog(env=env)
    notifications = peer.recorder.select_notifications(start=1, limit=1000)
    assert len(notifications) == 60
    assert len({n.originator_id for n in notifications}) == 60
    assert relay_log.position == max(n.id for n in notifications)
    assert relay_log.committer.batches <= 60
    # The same executors again, concurrently with the peer reconnecting some of them: conflicts retried.
    threads = [threading.Thread(target=connect, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for n in range(0, 20, 2):
        peer.run(executor_ref("org", "app", f"e{n}"),
                 lambda found, e=f"e{n}": Executor.connect_again(found, "org", "app", e, info, "i2", T0))
    for thread in threads:
        thread.join(30)
    assert not errors
    for n in range(20):
        executor = peer.get(executor_ref("org", "app", f"e{n}"))
        assert executor is not None
        assert executor.version == (3 if n % 2 == 0 else 2)


def test_save_without_events_writes_nothing(tmp_path: Path) -> None:
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db")}
    relay_log = RelayLog(env=env)
    assert relay_log.save() == []
    with pytest.raises(TypeError):
        relay_log.save(foo=1)
    assert relay_log.committer.batches == 0


def test_offloaded_appends_use_a_pool_of_their_own(tmp_path: Path) -> None:
    """With an offload (SQLite under `relay serve`), appends go through a second connection pool, used by one
    batch at a time; what they append is read through the first."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "relay.db")}
    ran: list[int] = []

    def offload(fn: Callable[[], Any]) -> Any:
        ran.append(1)
        return fn()

    relay_log = RelayLog(env=env, offload=offload)
    try:
        info = ExecutorInfo(application_version="v1", hostname="h", language="python", dbos_version="2", metadata={})
        relay_log.run(executor_ref("org", "app", "e1"),
                      lambda found: Executor.connect_again(found, "org", "app", "e1", info, "i1", T0))
        assert ran == [1]
        assert relay_log._writes is not relay_log.recorder
        assert relay_log._writes.datastore is not relay_log.recorder.datastore  # type: ignore[attr-defined]
        executor = relay_log.get(executor_ref("org", "app", "e1"))
        assert executor is not None and executor.version == 1
    finally:
        relay_log.close()
