"""A DBOS application whose workflow pauses between steps, for the recovery tests (test_recovery.py).

Configuration comes from the environment:

- ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY``: as for minimal_app.py;
- ``SYSTEM_DATABASE_URL``: the system database every executor of the test shares (PostgreSQL);
- ``APP_VERSION``: the ``application_version`` it reports (recovery only moves workflows between executors
  of the same version: the SDK recovers a dead executor's PENDING workflows of its own version);
- ``EFFECTS_FILE``: every step appends one line ``<step> <workflow id> <executor id>`` to it, so a test
  counts side effects across processes;
- ``START_WORKFLOW``: when set, start ``paced`` with this workflow ID once the file ``TRIGGER_FILE`` exists
  (polled; at once after launch when ``TRIGGER_FILE`` is not set);
- ``PAUSE_S``: how long ``paced`` sleeps (durably) between its steps (default 3).

``paced`` runs ``first``, then ``waiting`` (its line proves ``first`` was checkpointed), sleeps, then
``last``. The process prints ``READY {"executor_id": ..., "app_version": ...}`` and runs until killed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from dbos import DBOS, DBOSConfig, SetWorkflowID


def effect(step: str) -> None:
    line = f"{step} {DBOS.workflow_id} {DBOS.executor_id}\n"
    fd = os.open(os.environ["EFFECTS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@DBOS.step()
def first() -> str:
    effect("first")
    return "one"


@DBOS.step()
def waiting() -> None:
    effect("waiting")


@DBOS.step()
def last() -> str:
    effect("last")
    return "two"


@DBOS.workflow()
def paced() -> str:
    a = first()
    waiting()
    DBOS.sleep(float(os.environ.get("PAUSE_S") or 3))  # the scenario: a durable pause the test interrupts
    b = last()
    return f"{a}+{b}"


def start_when_triggered(workflow_id: str) -> None:
    trigger = os.environ.get("TRIGGER_FILE")
    while trigger and not os.path.exists(trigger):
        time.sleep(0.05)  # polls for the test's trigger file
    with SetWorkflowID(workflow_id):
        DBOS.start_workflow(paced)


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ["SYSTEM_DATABASE_URL"],
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
        # Several executors and Relay instances share one PostgreSQL in the tests: keep pools small.
        "sys_db_pool_size": 4,
    }
    if os.environ.get("APP_VERSION"):
        config["application_version"] = os.environ["APP_VERSION"]
    DBOS(config=config)
    DBOS.launch()
    if os.environ.get("START_WORKFLOW"):
        threading.Thread(target=start_when_triggered, args=(os.environ["START_WORKFLOW"],), daemon=True).start()
    print("READY " + json.dumps({"executor_id": DBOS.executor_id, "app_version": DBOS.application_version}),
          flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
