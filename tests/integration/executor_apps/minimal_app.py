"""A minimal DBOS application for integration tests: one workflow, connected to Relay as its conductor.

Configuration comes from the environment (so tests need not write config files):

- ``APP_NAME``: the DBOS application name (the ``{appName}`` of ``/websocket/{appName}/{key}``);
- ``CONDUCTOR_URL``: Relay's ``ws://host:port``; ``CONDUCTOR_KEY``: the API key it issued;
- ``SYSTEM_DATABASE_URL``: optional, defaults to a SQLite file in the working directory;
- ``APP_VERSION``: optional ``application_version`` (the SDK computes one from the code otherwise).

After ``DBOS.launch()`` it prints one line ``READY {"executor_id": ..., "app_version": ...}`` (with a
conductor key the SDK picks a random executor ID, so tests read it from here), then runs until killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

from dbos import DBOS, DBOSConfig


@DBOS.workflow()
def greet(name: str) -> str:
    return shout(f"hello {name}")


@DBOS.step()
def shout(text: str) -> str:
    return text.upper()


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
    ready = {"executor_id": DBOS.executor_id, "app_version": DBOS.application_version}
    print("READY " + json.dumps(ready), flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
