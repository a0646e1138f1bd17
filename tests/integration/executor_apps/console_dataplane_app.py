"""A DBOS application on the current SDK release (dbos 3.4.0, run from .venv-dbos-current) for the data plane's
console (issue 36, tests/e2e/test_console_dataplane.py). It never connects to Relay: Relay shows it from its
system database only.

Environment: ``APP_NAME``, ``SYSTEM_DATABASE_URL``, ``APP_VERSION``.

The scenario: ``greet`` completes (two steps) under ids ``order-alpha-<n>``; ``checkout`` fails with this app's
own exception class ``PaymentDeclined`` (an argument and attributes: a pickle only this app's code could load);
``hold`` on ``urgent_queue`` (global concurrency 1) takes the queue's one slot and waits, so the two
after it stay ENQUEUED; ``stepper`` (id ``live-stepper``) runs one step, then one more each time its gate is
opened, and ends after its last. One line ``READY {"control_port", "workflows": {name: id}}``.

Control server (loopback): ``POST /open {"label"}`` opens a gate; ``GET /status/{id}`` is the app's own view.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dbos import DBOS, DBOSConfig, Queue, SetWorkflowID

QUEUE_NAME = "urgent_queue"
STEPPER_STEPS = 3
GATE_POLL_S = 0.2

_gates: dict[str, threading.Event] = {}
_gates_lock = threading.Lock()


def gate_event(label: str) -> threading.Event:
    with _gates_lock:
        return _gates.setdefault(label, threading.Event())


class PaymentDeclined(Exception):
    """An error of this app's own: Relay must show it decoded without loading this module."""

    def __init__(self, reason: str, code: int) -> None:
        super().__init__(reason)
        self.code = code
        self.retryable = False


@DBOS.step()
def shout(text: str) -> str:
    return text.upper()


@DBOS.step()
def exclaim(text: str) -> str:
    return text + "!"


@DBOS.workflow()
def greet(name: str) -> str:
    return exclaim(shout(f"hello {name}"))


@DBOS.step()
def charge(order: str) -> None:
    raise PaymentDeclined(f"card declined for {order}", 51)


@DBOS.workflow()
def checkout(order: str) -> None:
    charge(order)


def wait_gate(label: str) -> None:
    """Waits in the workflow's own code, not in a step: the workflow's steps are only the ones it records."""
    while not gate_event(label).wait(GATE_POLL_S):
        pass


@DBOS.workflow()
def hold(label: str) -> str:
    wait_gate(label)
    return label


@DBOS.step()
def advance(number: int) -> str:
    return f"step {number} done"


@DBOS.workflow()
def stepper(label: str) -> str:
    for number in range(STEPPER_STEPS):
        advance(number)
        if number < STEPPER_STEPS - 1:
            wait_gate(f"{label}-{number}")
    return f"{label} finished"


class Control(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, body: Any, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts[0] == "status" and len(parts) == 2:
            status = DBOS.get_workflow_status(parts[1])
            self.answer({"status": status.status if status else None})
        else:
            self.answer({"error": f"no route {self.path}"}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/open":
            gate_event(body["label"]).set()
            self.answer({})
        else:
            self.answer({"error": f"no route {self.path}"}, 404)


def run_scenario(queue: Queue) -> dict[str, str]:
    ids: dict[str, str] = {}
    for n in range(3):
        ids[f"greet{n}"] = f"order-alpha-{n}"
        with SetWorkflowID(ids[f"greet{n}"]):
            greet(f"customer {n}")
    ids["checkout"] = "order-beta-checkout"
    with SetWorkflowID(ids["checkout"]), contextlib.suppress(PaymentDeclined):
        checkout("order-beta")
    for n in range(3):  # the first takes the queue's one slot and waits; the others stay ENQUEUED
        ids[f"queued{n}"] = f"queued-{n}"
        with SetWorkflowID(ids[f"queued{n}"]):
            queue.enqueue(hold, f"queued-{n}")
    ids["stepper"] = "live-stepper"
    with SetWorkflowID(ids["stepper"]):
        DBOS.start_workflow(stepper, "live")
    return ids


def main() -> None:
    config: DBOSConfig = {
        "name": os.environ["APP_NAME"],
        "system_database_url": os.environ["SYSTEM_DATABASE_URL"],
        "application_version": os.environ.get("APP_VERSION", "v1"),
    }
    DBOS(config=config)
    DBOS.launch()
    queue = DBOS.register_queue(QUEUE_NAME, global_concurrency=1, on_conflict="always_update")
    workflows = run_scenario(queue)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Control)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("READY " + json.dumps({"control_port": server.server_address[1], "workflows": workflows}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    DBOS.destroy()


if __name__ == "__main__":
    main()
