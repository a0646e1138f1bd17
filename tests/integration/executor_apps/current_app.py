"""A DBOS application on the current SDK release (dbos 3.4.0, run from .venv-dbos-current), which has no open
conductor client: it never connects to Relay, so Relay manages it through its system database (the data plane,
test_dataplane_python.py). Everything Relay does there must show up here, in the app: that is what the control
server below reports.

Configuration comes from the environment:

- ``APP_NAME``: the application's name (the one registered on Relay: the SDK scopes its rows by it);
- ``SYSTEM_DATABASE_URL``: its PostgreSQL system database;
- ``APP_VERSION``: the ``application_version`` it registers;
- ``REGISTER_ONLY``: when ``1``, launch (migrating the system database and registering ``APP_VERSION`` as the
  latest version), print ``REGISTERED`` and exit: how a test gives the app an older version to go back to.

Otherwise it registers the queue ``current_queue``, the schedules ``yearly`` (``tick`` on new year's midnight
UTC, context ``"ctx"``: it never fires during a test) and ``pulse`` (``pulse`` every second, paused at once),
runs the scenario (``greet`` completes with two steps, ``flaky`` fails in its second step, ``receipt`` returns
an instance of a class of this app, ``gate`` labelled ``held`` waits for a gate nobody opens), and prints one line
``READY {"executor_id", "app_version", "dbos_version", "control_port", "workflows": {name: id}}``.

The control server (loopback, ``control_port``): ``POST /start {"workflow", "args", "workflowId"?, "queue"?}``
starts (or enqueues) a workflow; ``POST /open {"label"}`` opens a gate; ``GET /seen`` is what the workflows
recorded as they ran (``{"seen": [{"event", "workflow_id", ...}]}``, each also logged as a line ``SEEN {json}``);
``GET /status/{id}``, ``GET /schedules/{name}`` and ``GET /latest-version`` are the app's own view of a workflow,
a schedule and the latest application version, read through its SDK.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID, error

QUEUE_NAME = "current_queue"
YEARLY = "yearly"
PULSE = "pulse"
GATE_POLL_S = 0.2  # how long one gate step waits: the cancellation check runs at each step's start

_seen: list[dict[str, Any]] = []
_seen_lock = threading.Lock()
_gates: dict[str, threading.Event] = {}
_gates_lock = threading.Lock()


def record(event: str, **fields: Any) -> None:
    entry = {"event": event, "workflow_id": DBOS.workflow_id, **fields}
    with _seen_lock:
        _seen.append(entry)
    print("SEEN " + json.dumps(entry), flush=True)


def gate_event(label: str) -> threading.Event:
    with _gates_lock:
        return _gates.setdefault(label, threading.Event())


@DBOS.step()
def shout(text: str) -> str:
    return text.upper()


@DBOS.step()
def exclaim(text: str) -> str:
    return text + "!"


@DBOS.workflow()
def greet(name: str) -> str:
    result = exclaim(shout(f"hello {name}"))
    record("greet", result=result)
    return result


@DBOS.step()
def first(label: str) -> str:
    return f"first {label}"


@DBOS.step()
def fragile(label: str) -> str:
    raise RuntimeError(f"fragile step failed for {label}")


@DBOS.workflow()
def flaky(label: str) -> str:
    first(label)
    return fragile(label)


@dataclass
class Receipt:
    """An output only this app's code can unpickle: Relay must hand it back as stored, never load it."""

    label: str
    total: int


@DBOS.workflow()
def receipt(label: str) -> Receipt:
    return Receipt(label, len(label))


@DBOS.step()
def gate_open(label: str) -> bool:
    return gate_event(label).wait(GATE_POLL_S)


@DBOS.workflow()
def gate(label: str) -> str:
    """Waits, one short step at a time, until the test opens the gate ``label``; each run records that it
    started, and whether it was stopped (cancelled from outside, the SDK raises at the next step: 3.4.0 raises
    that the run lost ownership of the workflow) or finished."""
    record("gate-started", label=label)
    try:
        while not gate_open(label):
            pass
    except (error.DBOSWorkflowCancelledError, error.DBOSWorkflowConflictIDError) as exc:
        record("gate-stopped", label=label, reason=type(exc).__name__)
        raise
    record("gate-finished", label=label)
    return f"{label} opened"


@DBOS.workflow()
def tick(scheduled_at: datetime, context: Any) -> str:
    record("tick", scheduled_at=scheduled_at.isoformat(), context=context)
    return scheduled_at.isoformat()


@DBOS.workflow()
def pulse(scheduled_at: datetime, context: Any) -> None:
    record("pulse", scheduled_at=scheduled_at.isoformat())


WORKFLOWS = {"greet": greet, "flaky": flaky, "gate": gate}


def start(body: dict[str, Any]) -> str:
    fn = WORKFLOWS[body["workflow"]]
    args = body.get("args", [])
    workflow_id = body.get("workflowId")
    if body.get("queue"):
        queue = DBOS.retrieve_queue(body["queue"])
        assert queue is not None, body["queue"]
        if workflow_id:
            with SetWorkflowID(workflow_id):
                return queue.enqueue(fn, *args).get_workflow_id()
        return queue.enqueue(fn, *args).get_workflow_id()
    if workflow_id:
        with SetWorkflowID(workflow_id):
            return DBOS.start_workflow(fn, *args).get_workflow_id()
    return DBOS.start_workflow(fn, *args).get_workflow_id()


class Control(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are not the app's news

    def answer(self, body: Any, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts == ["seen"]:
            with _seen_lock:
                self.answer({"seen": list(_seen)})
        elif parts[0] == "status" and len(parts) == 2:
            status = DBOS.get_workflow_status(parts[1])
            self.answer({"status": status.status if status else None})
        elif parts[0] == "schedules" and len(parts) == 2:
            schedule = DBOS.get_schedule(parts[1])
            self.answer({"status": schedule["status"] if schedule else None})
        elif parts == ["latest-version"]:
            self.answer({"versionName": DBOS.get_latest_application_version()["version_name"]})
        else:
            self.answer({"error": f"no route {self.path}"}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        try:
            if self.path == "/start":
                self.answer({"workflowId": start(body)})
            elif self.path == "/open":
                gate_event(body["label"]).set()
                self.answer({})
            else:
                self.answer({"error": f"no route {self.path}"}, 404)
        except Exception as exc:  # the test reads the reason rather than a reset connection
            self.answer({"error": repr(exc)}, 500)


def run_scenario() -> dict[str, str]:
    ids = {name: f"scenario-{name}" for name in ("greet", "flaky", "receipt", "held")}
    with SetWorkflowID(ids["greet"]):
        greet("relay")
    with SetWorkflowID(ids["receipt"]):
        receipt("relay")
    with SetWorkflowID(ids["flaky"]), contextlib.suppress(RuntimeError):  # it fails in its second step
        flaky("relay")
    with SetWorkflowID(ids["held"]):
        DBOS.start_workflow(gate, "held")  # nobody opens this gate: it stays PENDING
    return ids


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ["SYSTEM_DATABASE_URL"],
        "application_version": os.environ["APP_VERSION"],
        # A schedule resumed through Relay fires here within a second, not after the default 30 s poll.
        "scheduler_polling_interval_sec": 0.5,
    }
    DBOS(config=config)
    DBOS.launch()
    if os.environ.get("REGISTER_ONLY") == "1":
        print("REGISTERED", flush=True)
        DBOS.destroy()
        return
    DBOS.register_queue(QUEUE_NAME, worker_concurrency=2, on_conflict="always_update")
    if DBOS.get_schedule(YEARLY) is None:
        DBOS.create_schedule(schedule_name=YEARLY, workflow_fn=tick, schedule="0 0 0 1 1 *", context="ctx")
    if DBOS.get_schedule(PULSE) is None:
        DBOS.create_schedule(schedule_name=PULSE, workflow_fn=pulse, schedule="* * * * * *")
    DBOS.pause_schedule(PULSE)  # a test resumes it to see it fire here
    workflows = run_scenario()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Control)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ready = {
        "executor_id": DBOS.executor_id,
        "app_version": DBOS.application_version,
        "dbos_version": version("dbos"),
        "control_port": server.server_address[1],
        "workflows": workflows,
    }
    print("READY " + json.dumps(ready), flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    DBOS.destroy()


if __name__ == "__main__":
    main()
