"""A small DBOS application for the console's browser tests, connected to Relay as its conductor.

Configuration from the environment: ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY`` (as
tests/integration/executor_apps/minimal_app.py), ``SYSTEM_DATABASE_URL`` (default: SQLite in the working
directory), ``SCENARIO_PREFIX`` (workflow IDs start with it).

Before printing ``READY {...}`` it runs a scenario whose workflows the console shows:

- ``order``: three steps and an event, SUCCESS;
- ``approval``: one step, a stream, then waits for a message that never comes (PENDING: the one to cancel),
  with an unconsumed notification on another topic;
- ``faulty``: its second step raises, ERROR;
- ``batch``: starts two child ``order`` workflows, SUCCESS;
- ``stale``: an ``approval`` cancelled at once, CANCELLED;
- ``long``: ``restock``, 21 ``reserve`` steps (a long step list), SUCCESS;
- on the ``orders`` queue (one at a time per worker): a second waiting ``approval`` (PENDING) and an
  ``order`` behind it (ENQUEUED);
- ``mended``: a ``quote`` step that fails, the same step again that succeeds (a retry), then a child
  ``order`` workflow (``<id>-child``) whose result it waits for, SUCCESS;
- a ``nightly`` schedule that fires at 03:00 UTC (never during a test).

Before them it starts ``thousand`` (1,000 ``tick`` steps, SUCCESS), left running in the background (~3 s; the
graph's test waits for it). ``READY`` waits until the queue's first workflow has left it (PENDING).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
from datetime import datetime
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from sqlalchemy import event
from sqlalchemy.engine import Engine

QUEUE = "orders"


@event.listens_for(Engine, "connect")
def _no_fsync(dbapi_conn: object, _record: object) -> None:
    """SQLite commits without waiting for the disk, as the tests' PostgreSQL runs with fsync off: a crash of this
    process loses nothing (only one of the machine would). 1,000 steps take ~3 s instead of ~10."""
    if isinstance(dbapi_conn, sqlite3.Connection):
        dbapi_conn.execute("PRAGMA synchronous=OFF")


@DBOS.workflow()
def order(order_id: str) -> str:
    reserve(order_id)
    total = charge(order_id, 42)
    DBOS.set_event("stage", "charged")
    return ship(order_id, total)


@DBOS.step()
def reserve(order_id: str) -> str:
    return f"reserved {order_id}"


@DBOS.step()
def charge(order_id: str, amount: int) -> int:
    return amount


@DBOS.step()
def ship(order_id: str, total: int) -> str:
    return f"shipped {order_id} for {total}"


@DBOS.workflow()
def approval(order_id: str) -> str:
    reserve(order_id)
    DBOS.write_stream("log", f"waiting for approval of {order_id}")
    decision = DBOS.recv("approval", timeout_seconds=3600)
    return f"{order_id}: {decision}"


@DBOS.workflow()
def faulty(order_id: str) -> str:
    reserve(order_id)
    return explode(order_id)


@DBOS.step()
def explode(order_id: str) -> str:
    raise RuntimeError(f"payment gateway refused {order_id}")


@DBOS.workflow()
def batch(prefix: str) -> list[str]:
    handles = []
    for index in range(2):
        with SetWorkflowID(f"{prefix}-child-{index}"):
            handles.append(DBOS.start_workflow(order, f"{prefix}-{index}"))
    return [h.get_result() for h in handles]


LONG_STEPS = 21


@DBOS.workflow()
def restock(order_id: str) -> int:
    for index in range(LONG_STEPS):
        reserve(f"{order_id}-{index}")
    return LONG_STEPS


THOUSAND_STEPS = 1000


@DBOS.workflow()
def thousand(label: str) -> int:
    for index in range(THOUSAND_STEPS):
        tick(index)
    return THOUSAND_STEPS


@DBOS.step()
def tick(index: int) -> int:
    return index


@DBOS.workflow()
def mended(order_id: str) -> str:
    for attempt in (1, 2):  # the app retries a failed step itself: two step records of the same name
        with contextlib.suppress(RuntimeError):
            quote(order_id, attempt)
            break
    with SetWorkflowID(f"{order_id}-child"):
        handle = DBOS.start_workflow(order, f"{order_id}-child")
    return handle.get_result()


@DBOS.step()
def quote(order_id: str, attempt: int) -> str:
    if attempt == 1:
        raise RuntimeError(f"rate service timed out for {order_id}")
    return f"quoted {order_id} on attempt {attempt}"


@DBOS.workflow()
def nightly(scheduled: datetime, context: Any) -> None:
    tidy(scheduled.isoformat())


@DBOS.step()
def tidy(when: str) -> str:
    return f"tidied at {when}"


def run_scenario(prefix: str) -> dict[str, str]:
    ids = {name: f"{prefix}-{name}" for name in ("order", "approval", "faulty", "batch", "stale",
                                                 "long", "queued-wait", "queued-order", "mended", "thousand")}
    # Started first, in the background: the oldest of the scenario, so the lists' newest rows stay what they were.
    with SetWorkflowID(ids["thousand"]):
        DBOS.start_workflow(thousand, ids["thousand"])
    with SetWorkflowID(ids["order"]):
        order(ids["order"])
    with SetWorkflowID(ids["approval"]):
        DBOS.start_workflow(approval, ids["approval"])
    DBOS.send(ids["approval"], "please hurry", topic="comments")
    with SetWorkflowID(ids["faulty"]), contextlib.suppress(RuntimeError):
        faulty(ids["faulty"])
    with SetWorkflowID(ids["batch"]):
        batch(ids["batch"])
    with SetWorkflowID(ids["stale"]):
        DBOS.start_workflow(approval, ids["stale"])
    DBOS.cancel_workflow(ids["stale"])
    with SetWorkflowID(ids["long"]):
        restock(ids["long"])
    with SetWorkflowID(ids["mended"]):
        mended(ids["mended"])
    queue = DBOS.retrieve_queue(QUEUE)
    with SetWorkflowID(ids["queued-wait"]):
        queue.enqueue(approval, ids["queued-wait"])
    with SetWorkflowID(ids["queued-order"]):
        queue.enqueue(order, ids["queued-order"])
    _wait_for_status(ids["queued-wait"], "PENDING")
    return ids


def _wait_for_status(workflow_id: str, status: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (found := DBOS.get_workflow_status(workflow_id)) is None or found.status != status:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workflow_id} not {status} after {timeout_s} s")
        time.sleep(0.05)


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ.get("SYSTEM_DATABASE_URL") or "sqlite:///dbos_system.sqlite",
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
    }
    if os.environ.get("APP_VERSION"):
        config["application_version"] = os.environ["APP_VERSION"]
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=1, on_conflict="always_update")
    try:
        DBOS.create_schedule(schedule_name="nightly-tidy", workflow_fn=nightly, schedule="0 0 3 * * *")
    except Exception as error:  # already there from an earlier run on the same database
        print(f"schedule not created: {error}", flush=True)
    prefix = os.environ.get("SCENARIO_PREFIX") or "console"
    workflows = run_scenario(prefix)
    print("READY " + json.dumps({"executor_id": DBOS.executor_id, "app_version": DBOS.application_version,
                                 "workflows": workflows}), flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
