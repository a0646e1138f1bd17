"""A DBOS application of a given application version that holds workflows PENDING, for
test_recovery_versions.py.

Configuration comes from the environment:

- ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY``, ``SYSTEM_DATABASE_URL`` (PostgreSQL, shared by the
  test's executors): as for recovery_app.py;
- ``APP_VERSION``: its ``application_version`` (the SDK recovers only workflows of its own version);
- ``EFFECTS_FILE``: each step appends ``<step> <workflow id> <executor id>`` to it;
- ``WORKFLOWS``: comma-separated workflow IDs to start at launch (none when unset);
- ``PAUSE_S``: how long each workflow sleeps (durably) between its steps (default 4).

``held`` runs step ``begin``, sleeps, then step ``finish``. The process prints
``READY {"executor_id": ..., "app_version": ...}`` once its workflows are started and runs until killed.
"""

from __future__ import annotations

import json
import os
import signal
import threading

from dbos import DBOS, DBOSConfig, SetWorkflowID


def effect(step: str) -> None:
    line = f"{step} {DBOS.workflow_id} {DBOS.executor_id}\n"
    fd = os.open(os.environ["EFFECTS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@DBOS.step()
def begin() -> None:
    effect("begin")


@DBOS.step()
def finish() -> None:
    effect("finish")


@DBOS.workflow()
def held() -> str:
    begin()
    DBOS.sleep(float(os.environ.get("PAUSE_S") or 4))  # the scenario: a workflow held while the test acts
    finish()
    return "done"


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ["SYSTEM_DATABASE_URL"],
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
        "application_version": os.environ["APP_VERSION"],
        "sys_db_pool_size": 4,
    }
    DBOS(config=config)
    DBOS.launch()
    for workflow_id in filter(None, (os.environ.get("WORKFLOWS") or "").split(",")):
        with SetWorkflowID(workflow_id):
            DBOS.start_workflow(held)
    print("READY " + json.dumps({"executor_id": DBOS.executor_id, "app_version": DBOS.application_version}),
          flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
