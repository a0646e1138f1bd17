"""What Relay takes from its libraries beyond their public API, pinned: each quarantine module's install() checks
the hooks it relies on, and these tests fail loudly, naming the pinned release, when a library changes them."""

from __future__ import annotations

import inspect
import subprocess
import sys
from importlib.metadata import version

import pykka
from eventsourcing.sqlite import SQLiteConnectionPool, SQLiteTrackingRecorder

from relay.actors import pykka_gevent
from relay.projections import eventsourcing_recorders, pool_reconnect


def test_pinned_releases_are_the_ones_installed() -> None:
    assert f"pykka {version('pykka')}" == pykka_gevent.PINNED
    assert f"eventsourcing {version('eventsourcing')}" == eventsourcing_recorders.PINNED
    assert f"psycopg-pool {version('psycopg-pool')}" == pool_reconnect.PINNED


def test_pykka_still_has_the_actor_loop_hooks_the_drained_inbox_overrides() -> None:
    pykka_gevent.install()  # raises, naming pykka 4.5.0, when a hook is gone
    assert isinstance(inspect.getattr_static(pykka.ThreadingActor, "_create_actor_inbox"), staticmethod)
    loop = inspect.getsource(pykka.Actor._actor_loop)
    assert "_actor_loop_setup" in loop and "_actor_loop_running" in loop and "_actor_loop_teardown" in loop
    assert "self.actor_inbox.get()" in inspect.getsource(pykka.Actor._actor_loop_running)


def test_without_gevent_install_leaves_actors_threaded() -> None:
    pykka_gevent.install()
    assert pykka_gevent.DrainedActor.drain_with_greenlets is False


def test_eventsourcing_still_has_the_recorder_internals_relay_uses() -> None:
    eventsourcing_recorders.install()
    assert "_create_connection" in vars(SQLiteConnectionPool) or hasattr(SQLiteConnectionPool, "_create_connection")
    assert "construct_create_table_statements" in vars(SQLiteTrackingRecorder)


def test_the_tuned_sqlite_pool_sets_synchronous_on_each_connection(tmp_path) -> None:
    from eventsourcing.sqlite import SQLiteDatastore

    store = eventsourcing_recorders.tune_sqlite(SQLiteDatastore(db_name=str(tmp_path / "x.sqlite")), "FULL")
    with store.transaction(commit=False) as cursor:
        cursor.execute("PRAGMA synchronous")
        assert cursor.fetchone()[0] == 2  # FULL
    store.close()


def test_nothing_is_patched_or_switched_on_import() -> None:
    code = ("import relay.actors.executor, relay.projections.views, psycopg_pool.pool; "
            "from relay.actors.pykka_gevent import DrainedActor; "
            "from relay.projections.pool_reconnect import CappedBackoff; "
            "assert psycopg_pool.pool.AttemptWithBackoff is not CappedBackoff; "
            "assert DrainedActor.drain_with_greenlets is False")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_under_gevent_a_condition_held_notifies_without_yielding_to_the_hub() -> None:
    # A Semaphore's release (every checkout of an eventsourcing pool connection) notifies its Condition; without
    # _is_owned on gevent's lock that went to the back of the hub's queue (issue 32: the views trailed a storm).
    code = """
from gevent import monkey; monkey.patch_all()
import threading, gevent
from relay.actors import pykka_gevent
ran = []
def count(): ran.append(1)
def release_many(install):
    if install:
        pykka_gevent.install()
    gevent.spawn(count)  # ready to run: it runs only if the releases below yield to the hub
    sem = threading.Semaphore(1)
    for _ in range(10):
        sem.acquire(); sem.release()
    return len(ran)
assert gevent.spawn(release_many, False).get() == 1, "gevent no longer yields here: drop lock_is_owned"
ran.clear()
assert gevent.spawn(release_many, True).get() == 0
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
