"""A one-shot DBOS application on the current SDK release (dbos 3.4.0, run from .venv-dbos-current): it writes a
workflow's events, notifications and streams and declares queues, then exits, so Relay has nothing but its system
database to read them from (test_dataplane_communications.py). Its SDK has no open conductor client: it never
connects to Relay.

Configuration comes from the environment: ``APP_NAME`` (the DBOS application's name, the one registered on Relay),
``SYSTEM_DATABASE_URL`` (PostgreSQL, or ``sqlite:///...``).

It declares the queues ``prio_queue`` (global concurrency 5, 2 per worker, at most 10 per 2.5 s, polled every
0.5 s) and ``part_queue`` (partitioned: 1 per partition), runs ``chatty`` (it sets four events, writes a closed
stream ``progress`` and an open one ``open``, and receives the message sent to it on topic ``greeting``; a second
message, without a topic, stays unconsumed) and ``quiet`` (none of that), and prints one line
``READY {"dbos_version", "workflows": {"chatty": id, "quiet": id}}``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib.metadata import version

from dbos import DBOS, DBOSConfig, SetWorkflowID
from dbos._serialization import WorkflowSerializationFormat

PORTABLE = WorkflowSerializationFormat.PORTABLE


@dataclass
class Receipt:
    """A value only this app's code can unpickle: Relay shows it as the stored text, never loads it."""

    label: str


@DBOS.workflow()
def chatty(label: str) -> str:
    DBOS.set_event("status", {"stage": 2, "ok": True})
    DBOS.set_event("note", f"plain {label}")
    DBOS.set_event("portable", [1, "two"], serialization_type=PORTABLE)
    DBOS.set_event("receipt", Receipt(label))
    DBOS.write_stream("progress", 1)
    DBOS.write_stream("progress", "two")
    DBOS.close_stream("progress")
    DBOS.write_stream("open", {"k": "v"})
    message = DBOS.recv("greeting", timeout_seconds=60)
    return f"{label} got {message}"


@DBOS.workflow()
def quiet(label: str) -> str:
    return label


def main() -> None:
    app = os.environ["APP_NAME"]
    config: DBOSConfig = {"name": app, "system_database_url": os.environ["SYSTEM_DATABASE_URL"],
                          "application_version": "v1"}
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue("prio_queue", global_concurrency=5, worker_concurrency=2,
                        limiter={"limit": 10, "period": 2.5}, polling_interval_sec=0.5, on_conflict="always_update")
    DBOS.register_queue("part_queue", partition_concurrency=1, on_conflict="always_update")
    ids = {"chatty": f"{app}-chatty", "quiet": f"{app}-quiet"}
    with SetWorkflowID(ids["chatty"]):
        handle = DBOS.start_workflow(chatty, app)
    DBOS.send(ids["chatty"], "hello relay", "greeting")
    DBOS.send(ids["chatty"], {"n": 1})  # no topic, never received
    assert handle.get_result() == f"{app} got hello relay"
    with SetWorkflowID(ids["quiet"]):
        quiet(app)
    print("READY " + json.dumps({"dbos_version": version("dbos"), "workflows": ids}), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main()
