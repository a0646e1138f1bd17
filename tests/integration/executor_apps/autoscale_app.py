"""A DBOS application with a backlog, for the autoscaling test (tests/integration/test_autoscaling.py).

Configuration from the environment: ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY`` (see minimal_app.py); it runs
as application version ``v2`` on a SQLite system database in its working directory.

After launch it:
- registers an older version ``v1`` (so ``v2`` is the latest and ``v1`` the newest old one);
- declares three queues: ``scale-q`` (worker_concurrency 2: it can drive autoscaling), ``parted-q`` (with a partition
  limit: partitioned) and ``plain-q`` (no worker_concurrency);
- enqueues on ``scale-q`` 5 workflows of ``v2`` (2 run here, PENDING; 3 wait, ENQUEUED) and 3 of ``v1`` (no executor
  of v1 runs: ENQUEUED). Every one waits for a message that never comes, so the backlog stays put;
and prints ``READY {"executor_id": ..., "app_version": "v2"}``, then runs until killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

from dbos import DBOS, DBOSConfig, SetEnqueueOptions
from dbos._dbos import _get_dbos_instance

SCALE_QUEUE, PARTED_QUEUE, PLAIN_QUEUE = "scale-q", "parted-q", "plain-q"
LATEST_BACKLOG, OLD_BACKLOG = 5, 3


@DBOS.workflow()
def blocker(index: int) -> int:
    DBOS.recv("never", timeout_seconds=3600)
    return index


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": "sqlite:///dbos_system.sqlite",
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
        "application_version": "v2",
    }
    DBOS(config=config)
    DBOS.launch()
    # An older version, as a previous deployment would have left it: no public call registers one, so the SDK's
    # system database does (test-only), and v2 is promoted again to stay the latest.
    _get_dbos_instance()._sys_db.create_application_version("v1")
    DBOS.set_latest_application_version("v2")
    queue = DBOS.register_queue(SCALE_QUEUE, worker_concurrency=2)
    DBOS.register_queue(PARTED_QUEUE, worker_concurrency=2, partition_concurrency=1)
    DBOS.register_queue(PLAIN_QUEUE)
    for index in range(LATEST_BACKLOG):
        queue.enqueue(blocker, index)
    with SetEnqueueOptions(app_version="v1"):
        for index in range(OLD_BACKLOG):
            queue.enqueue(blocker, 100 + index)
    print("READY " + json.dumps({"executor_id": DBOS.executor_id, "app_version": DBOS.application_version}),
          flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
