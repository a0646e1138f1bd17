"""A DBOS 3.2.0 application for the dbos-mcp test: workflows that a real Conductor API client inspects and manages.

Configuration comes from the environment: ``APP_NAME``, ``CONDUCTOR_URL``, ``CONDUCTOR_KEY``,
``SYSTEM_DATABASE_URL`` (PostgreSQL, shared with the test's ``DBOSClient``), ``APP_VERSION``, and
``SCENARIO_PREFIX`` (workflow IDs of the scenario start with it).

The scenario, run after launch: ``greet`` runs to completion (two steps); ``chatty`` sets an event and
receives a message; ``gate`` is started and left waiting for a message on topic ``go`` (the test cancels,
resumes and finally releases it with ``DBOSClient.send``). Then one line
``READY {"executor_id", "app_version", "workflows": {...}}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

from dbos import DBOS, DBOSConfig, SetWorkflowID


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
    ping = DBOS.recv("ping", timeout_seconds=60)
    DBOS.set_event("progress", f"done {label}")
    return f"{label} got {ping}"


@DBOS.workflow()
def gate(tag: str) -> str:
    prepare(tag)
    message = DBOS.recv("go", timeout_seconds=300)
    return finish(tag, message)


@DBOS.step()
def prepare(tag: str) -> str:
    return f"prepared {tag}"


@DBOS.step()
def finish(tag: str, message: str | None) -> str:
    return f"{tag}:{message}"


def run_scenario(prefix: str) -> dict[str, str]:
    ids = {name: f"{prefix}-{name}" for name in ("greet", "chatty", "gate")}
    with SetWorkflowID(ids["greet"]):
        greet("mcp")
    with SetWorkflowID(ids["chatty"]):
        handle = DBOS.start_workflow(chatty, "mcp")
    DBOS.send(ids["chatty"], "pong", topic="ping")
    handle.get_result()
    with SetWorkflowID(ids["gate"]):
        DBOS.start_workflow(gate, "mcp")
    return ids


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ["SYSTEM_DATABASE_URL"],
        "conductor_url": os.environ["CONDUCTOR_URL"],
        "conductor_key": os.environ["CONDUCTOR_KEY"],
        "application_version": os.environ["APP_VERSION"],
    }
    DBOS(config=config)
    DBOS.launch()
    workflows = run_scenario(os.environ["SCENARIO_PREFIX"])
    ready = {"executor_id": DBOS.executor_id, "app_version": DBOS.application_version, "workflows": workflows}
    print("READY " + json.dumps(ready), flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
