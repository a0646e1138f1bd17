"""A DBOS (dbos==3.2.0) application for the alerting tests (test_alerting.py): it fails, clogs a queue and
succeeds on command, and its alert handler writes every alert it receives to a file.

Configuration from the environment:

- ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY``: the application, Relay's ``ws://host:port`` and key;
- ``SYSTEM_DATABASE_URL``: the system database (default: SQLite in the working directory);
- ``ALERTS_FILE``: its ``DBOS.alert_handler`` appends one JSON line ``{"name", "message", "metadata"}`` per alert;
- ``COMMANDS_DIR``: the app runs each ``*.json`` file dropped there (in name order), then renames it
  ``*.done``: ``{"action": "fail", "count": N}`` starts N workflows ``failing`` (they end in ERROR);
  ``{"action": "succeed", "count": N}`` N workflows ``quick`` (SUCCESS); ``{"action": "clog", "count": N}``
  enqueues a ``blocker`` (PENDING until the app stops) and N more ``quick`` behind it on ``stuck-queue``
  (concurrency 1), which stay ENQUEUED.

After launch it prints ``READY {"executor_id": ...}`` and runs until SIGTERM (or SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

from dbos import DBOS, DBOSConfig

QUEUE = "stuck-queue"
_write_lock = threading.Lock()


def on_alert(name: str, message: str, metadata: dict[str, str]) -> None:
    line = json.dumps({"name": name, "message": message, "metadata": metadata}) + "\n"
    with _write_lock, open(os.environ["ALERTS_FILE"], "a", encoding="utf-8") as handle:
        handle.write(line)


@DBOS.workflow()
def failing(index: int) -> None:
    raise RuntimeError(f"failing workflow {index} fails on purpose")


@DBOS.workflow()
def quick(index: int) -> int:
    return index


@DBOS.workflow()
def blocker() -> None:
    DBOS.recv("never", timeout_seconds=3600)


def run_command(command: dict) -> None:
    count = int(command.get("count", 1))
    action = command["action"]
    if action == "fail":
        handles = [DBOS.start_workflow(failing, i) for i in range(count)]
        for handle in handles:
            with contextlib.suppress(RuntimeError):
                handle.get_result()
    elif action == "succeed":
        for i in range(count):
            DBOS.start_workflow(quick, i).get_result()
    elif action == "clog":
        queue = DBOS.retrieve_queue(QUEUE)
        assert queue is not None
        queue.enqueue(blocker)
        for i in range(count):
            queue.enqueue(quick, i)


def watch_commands(directory: Path, stop: threading.Event) -> None:
    while not stop.is_set():
        for path in sorted(directory.glob("*.json")):
            command = json.loads(path.read_text())
            run_command(command)
            path.rename(path.with_suffix(".done"))
        time.sleep(0.05)  # polls the test's command directory


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ.get("SYSTEM_DATABASE_URL") or "sqlite:///dbos_system.sqlite",
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
        "application_version": "v1",
    }
    DBOS(config=config)
    DBOS.alert_handler(on_alert)  # after DBOS() (it needs the instance), before launch
    DBOS.launch()
    DBOS.register_queue(QUEUE, concurrency=1)
    stop = threading.Event()
    commands = Path(os.environ["COMMANDS_DIR"])
    commands.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=watch_commands, args=(commands, stop), daemon=True).start()
    print("READY " + json.dumps({"executor_id": DBOS.executor_id}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
