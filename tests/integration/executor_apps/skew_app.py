"""One DBOS application run by two SDK releases at once (version skew): an older ``dbos`` 2.x and 3.2.0.

The same file runs under both (each from its own virtualenv), so it keeps to the API the two share and
declares its queue the way each release wants it (2.x: ``Queue(name)`` before launch; 3.x: the
database-backed ``DBOS.register_queue`` after launch).

Configuration comes from the environment:

- ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY``: as for minimal_app.py;
- ``SYSTEM_DATABASE_URL``: the system database both executors share (PostgreSQL);
- ``APP_VERSION``: the ``application_version`` both report (the same, so that only the SDK differs);
- ``SCENARIO_PREFIX``: when set, run the scenario below before READY, with workflow IDs under this prefix;
- ``SCHEDULE``: when set, the name of a schedule of ``yearly`` to create (new year's midnight UTC, so it does
  not fire during a test);
- ``METADATA_ONLY``: when ``1``, run in conductor metadata-only mode (``conductor_metadata_only_mode``, 3.x).

The scenario: ``greet`` (two steps), ``chatty`` (an event, a stream of two values, a notification it
receives), ``flaky`` (fails in its second step). After it, the process prints one line
``READY {"executor_id", "app_version", "dbos_version", "workflows": {...}}`` and runs until killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from datetime import datetime
from importlib.metadata import version
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

QUEUE_NAME = "skew_queue"
DBOS_VERSION = version("dbos")
LEGACY_QUEUES = not hasattr(DBOS, "register_queue")

if LEGACY_QUEUES:
    from dbos import Queue

    Queue(QUEUE_NAME, worker_concurrency=2)


@DBOS.workflow()
def greet(name: str) -> str:
    return exclaim(shout(f"hello {name}"))


@DBOS.step()
def shout(text: str) -> str:
    return text.upper()


@DBOS.step()
def exclaim(text: str) -> str:
    return text + "!"


@DBOS.workflow()
def chatty(label: str) -> str:
    DBOS.set_event("progress", f"started {label}")
    DBOS.write_stream("log", "line-1")
    DBOS.write_stream("log", "line-2")
    DBOS.close_stream("log")
    ping = DBOS.recv("ping", timeout_seconds=60)
    DBOS.set_event("progress", f"done {label}")
    return f"{label} got {ping}"


@DBOS.workflow()
def flaky(label: str) -> str:
    first(label)
    return fragile(label)


@DBOS.step()
def first(label: str) -> str:
    return f"first {label}"


@DBOS.step()
def fragile(label: str) -> str:
    raise RuntimeError(f"fragile step failed for {label}")


@DBOS.workflow()
def yearly(scheduled_at: datetime, context: Any) -> str:
    return f"{scheduled_at.isoformat()} {context}"


def run_scenario(prefix: str) -> dict[str, str]:
    ids = {name: f"{prefix}-{name}" for name in ("greet", "chatty", "flaky")}
    with SetWorkflowID(ids["greet"]):
        greet("skew")
    with SetWorkflowID(ids["chatty"]):
        handle = DBOS.start_workflow(chatty, "skew")
    DBOS.send(ids["chatty"], "pong", topic="ping")
    handle.get_result()
    with SetWorkflowID(ids["flaky"]), contextlib.suppress(RuntimeError):
        flaky("skew")  # fails in its second step, as it should
    return ids


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ["SYSTEM_DATABASE_URL"],
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
        "application_version": os.environ["APP_VERSION"],
    }
    if os.environ.get("METADATA_ONLY") == "1":
        config["conductor_metadata_only_mode"] = True  # 3.x only
    DBOS(config=config)
    DBOS.launch()
    if not LEGACY_QUEUES:
        DBOS.register_queue(QUEUE_NAME, worker_concurrency=2, on_conflict="always_update")
    prefix = os.environ.get("SCENARIO_PREFIX")
    workflows = run_scenario(prefix) if prefix else {}
    if schedule := os.environ.get("SCHEDULE"):
        DBOS.create_schedule(schedule_name=schedule, workflow_fn=yearly, schedule="0 0 0 1 1 *", context="skew")
    ready = {
        "executor_id": DBOS.executor_id,
        "app_version": DBOS.application_version,
        "dbos_version": DBOS_VERSION,
        "workflows": workflows,
    }
    print("READY " + json.dumps(ready), flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
