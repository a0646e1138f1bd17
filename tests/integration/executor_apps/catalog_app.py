"""A DBOS (dbos==3.2.0) application with something for every operation of the Conductor API v2.

Workflows with steps (``greet``), child workflows (``parent`` → ``child``), a queue (``catalog-queue``),
events, messages and streams (``messenger``: ``DBOS.set_event``, ``DBOS.recv``, ``DBOS.write_stream``),
workflows that wait until cancelled (``waiter``), one that fails once (``flaky``: its step fails in the
original workflow only, so a fork of it succeeds) and a scheduled workflow (``nightly``, created with
``DBOS.create_schedule``, cron ``0 0 0 1 1 *``: new year's midnight UTC, so it does not fire during a test).

Configuration from the environment:

- ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY``: the application and Relay's ``ws://host:port`` and key;
- ``SYSTEM_DATABASE_URL``: the system database (two versions of the app share one: use PostgreSQL);
- ``APP_VERSION``: the ``application_version`` (run the app twice with different ones);
- ``ROLE``: ``main`` starts the scenario below and creates the schedule; anything else only serves;
- ``RUN``: the prefix of the scenario's workflow IDs (``{RUN}-greet``, ...).

After launch it prints ``READY {"executor_id": ..., "app_version": ..., "workflows": {...}}`` and runs
until SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from datetime import datetime
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

RUN = os.environ.get("RUN", "run")
QUEUE = "catalog-queue"
SCHEDULE_CRON = "0 0 0 1 1 *"  # seconds first: every January 1st at 00:00:00 UTC


@DBOS.step()
def shout(text: str) -> str:
    return text.upper()


@DBOS.step()
def count_letters(text: str) -> int:
    return sum(ch.isalpha() for ch in text)


@DBOS.workflow()
def greet(name: str) -> str:
    loud = shout(f"hello {name}")
    return f"{loud}:{count_letters(loud)}"


@DBOS.workflow()
def child(index: int) -> str:
    return shout(f"child {index}")


@DBOS.workflow()
def parent(children: int) -> list[str]:
    handles = [DBOS.start_workflow(child, i) for i in range(children)]
    return [h.get_result() for h in handles]


@DBOS.workflow()
def messenger() -> str:
    DBOS.set_event("progress", "started")
    DBOS.write_stream("chunks", "alpha")
    DBOS.write_stream("chunks", "beta")
    DBOS.close_stream("chunks")
    message = DBOS.recv("greeting", timeout_seconds=120)
    DBOS.set_event("reply", f"got {message}")
    return str(message)


@DBOS.workflow()
def waiter(tag: str) -> Any:
    """PENDING until cancelled (nobody sends it anything)."""
    return DBOS.recv(f"never-{tag}", timeout_seconds=3600)


@DBOS.step()
def fragile_step() -> str:
    if DBOS.workflow_id == f"{RUN}-flaky":
        raise RuntimeError("the original run of this step always fails")
    return "recovered"


@DBOS.workflow()
def flaky() -> str:
    shout("before the fragile step")
    return fragile_step()


@DBOS.workflow()
def nightly(scheduled_at: datetime, context: Any) -> str:
    return f"{scheduled_at.isoformat()} {context}"


def run_scenario() -> dict[str, str]:
    """Start the workflows the test reads back; their IDs, by role."""
    queue = DBOS.retrieve_queue(QUEUE)
    assert queue is not None
    ids = {name: f"{RUN}-{name}" for name in ("greet", "queued", "parent", "messenger", "flaky")}
    ids.update({f"waiter{i}": f"{RUN}-waiter{i}" for i in range(3)})
    with SetWorkflowID(ids["greet"]):
        DBOS.start_workflow(greet, "relay")
    with SetWorkflowID(ids["queued"]):
        queue.enqueue(greet, "queue")
    with SetWorkflowID(ids["parent"]):
        DBOS.start_workflow(parent, 2)
    with SetWorkflowID(ids["messenger"]):
        DBOS.start_workflow(messenger)
    with SetWorkflowID(ids["flaky"]):
        DBOS.start_workflow(flaky)
    for i in range(3):
        with SetWorkflowID(ids[f"waiter{i}"]):
            DBOS.start_workflow(waiter, str(i))
    DBOS.send(ids["messenger"], "hi there", topic="greeting")
    DBOS.create_schedule(schedule_name=f"{RUN}-nightly", workflow_fn=nightly, schedule=SCHEDULE_CRON,
                         context="ctx")
    return ids


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ.get("SYSTEM_DATABASE_URL") or "sqlite:///dbos_system.sqlite",
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
        "application_version": os.environ.get("APP_VERSION") or "v1",
    }
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=2, global_concurrency=4)
    workflows = run_scenario() if os.environ.get("ROLE") == "main" else {}
    ready = {"executor_id": DBOS.executor_id, "app_version": DBOS.application_version, "workflows": workflows}
    print("READY " + json.dumps(ready), flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
