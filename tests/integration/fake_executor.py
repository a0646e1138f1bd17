"""Helpers for the integration tests: a scripted executor (websocket-client), a real DBOS executor script,
and small calls against a running ``relay serve`` (register an app, mint a key, read its executors).

The fake executor speaks only the executor side of PROTOCOL.md that a test asks for: it answers
``executor_info`` when told to, and otherwise sends whatever frames the test hands it.
"""

from __future__ import annotations

import json
import secrets
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import websocket

from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

WS_TIMEOUT_S = 10.0

# A real DBOS 3.2.0 executor: connects to Relay as its conductor and idles until it is stopped.
DBOS_EXECUTOR_SOURCE = """
import os
import threading

from dbos import DBOS

DBOS(
    config={
        "name": os.environ["TEST_APP_NAME"],
        "system_database_url": "sqlite:///dbos_system.sqlite",
        "conductor_url": os.environ["TEST_CONDUCTOR_URL"],
        "conductor_key": os.environ["TEST_CONDUCTOR_KEY"],
    }
)


@DBOS.workflow()
def noop() -> int:
    return 1


DBOS.launch()
print("test executor launched", flush=True)
threading.Event().wait()
"""


def dbos_executor(
    relay: RelayProcess, app: str, key: str, cwd: Path | str | None = None, name: str = "dbos-executor"
) -> ExecutorProcess:
    """A real DBOS 3.2.0 executor of ``app`` (not started), its SQLite system database in its cwd."""
    env = {"TEST_APP_NAME": app, "TEST_CONDUCTOR_URL": relay.ws_url, "TEST_CONDUCTOR_KEY": key}
    return ExecutorProcess(source=DBOS_EXECUTOR_SOURCE, env=env, cwd=cwd, name=name)


# -------------------------------------------------------------------------------------- relay calls


def register_app(relay: RelayProcess, app: str, org: str = "local") -> None:
    response = relay.api("PUT", f"/v2/orgs/{org}/apps/{app}", json={})
    assert response.status_code == 204, response.text


def create_key(relay: RelayProcess, name: str, org: str = "local", **body: Any) -> str:
    """Mint an API key (admin token); ``body`` may hold ``appNames`` and ``permissions``."""
    response = relay.api("POST", f"/v2/orgs/{org}/tokens/{name}", json=body)
    assert response.status_code == 201, response.text
    return response.json()["token"]


def unique(prefix: str) -> str:
    """A name valid as an app or token name, unique within the test run."""
    return f"{prefix}-{secrets.token_hex(4)}"


def executors(relay: RelayProcess, app: str, org: str = "local") -> dict[str, dict[str, Any]]:
    """The app's executors by executorId (``GET .../executors``)."""
    response = relay.api("GET", f"/v2/orgs/{org}/apps/{app}/executors")
    assert response.status_code == 200, response.text
    return {e["executorId"]: e for e in response.json()}


def wait_status(relay: RelayProcess, app: str, executor_id: str, status: str, timeout: float = 15.0) -> None:
    wait_until(
        lambda: executors(relay, app).get(executor_id, {}).get("status") == status,
        timeout=timeout,
        message=f"executor {executor_id} of {app} did not become {status}",
    )


def log_count(relay: RelayProcess, text: str) -> int:
    return relay.log_text().count(text)


def wait_log_count(relay: RelayProcess, text: str, count: int, timeout: float = 10.0) -> None:
    """Wait until ``text`` occurs at least ``count`` times in the relay log."""
    wait_until(
        lambda: log_count(relay, text) >= count,
        timeout=timeout,
        message=f"relay did not log {text!r} {count} time(s); log tail:\n{relay.log_tail()}",
    )


# -------------------------------------------------------------------------------------- the fake


class HandshakeRefusedError(AssertionError):
    """The server answered the upgrade request with a plain HTTP status."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__(f"handshake refused with HTTP {status}")
        self.status = status
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self.body = body


class FakeExecutor:
    """One executor connection driven by the test. ``connect()`` returns Relay's first frame."""

    def __init__(self, relay: RelayProcess, app: str, key: str, executor_id: str | None = None) -> None:
        self.url = f"{relay.ws_url}/websocket/{app}/{key}"
        self.executor_id = executor_id or unique("fake")
        self.ws: websocket.WebSocket | None = None

    # -- connecting

    def connect(self, timeout: float = WS_TIMEOUT_S) -> dict[str, Any]:
        try:
            self.ws = websocket.create_connection(self.url, timeout=timeout)
        except websocket.WebSocketBadStatusException as error:
            raise HandshakeRefusedError(error.status_code, error.resp_headers, error.resp_body) from None
        return self.recv_json(timeout)

    def identify(self, request: dict[str, Any], **overrides: Any) -> None:
        """Answer an executor_info request as a DBOS 3.2.0 Python executor would."""
        answer = {
            "type": "executor_info",
            "request_id": request["request_id"],
            "executor_id": self.executor_id,
            "application_version": "fake-version-1",
            "hostname": "fake-host",
            "language": "python",
            "dbos_version": "3.2.0",
            "executor_metadata": None,
            "error_message": None,
        }
        answer.update(overrides)
        self.send_text(json.dumps(answer))

    def connect_and_identify(self, timeout: float = WS_TIMEOUT_S) -> dict[str, Any]:
        request = self.connect(timeout)
        assert request.get("type") == "executor_info", request
        self.identify(request)
        return request

    # -- frames

    @property
    def socket(self) -> websocket.WebSocket:
        assert self.ws is not None, "not connected"
        return self.ws

    def send_text(self, text: str) -> None:
        self.socket.send(text)

    def send_binary(self, data: bytes) -> None:
        self.socket.send_binary(data)

    def _reads_within(self, timeout: float) -> Iterator[None]:
        """One turn per socket read, each read's timeout set to what is left of `timeout` from now; ends once
        nothing is left. The deadline is the whole wait's: Relay's pings (every RELAY_PING_INTERVAL_S) would
        restart a per-read socket timeout, and a frame that never comes would be waited for forever."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            self.socket.settimeout(remaining)
            yield

    def recv_json(self, timeout: float = WS_TIMEOUT_S) -> dict[str, Any]:
        """The next text frame, parsed, within `timeout` in all (pings are answered on the way; a close fails
        the test)."""
        for _ in self._reads_within(timeout):
            opcode, frame = self.socket.recv_data_frame(control_frame=True)
            if opcode in (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG):
                continue  # a ping is answered by recv_data_frame itself
            assert opcode == websocket.ABNF.OPCODE_TEXT, f"expected a text frame, got opcode {opcode}"
            return json.loads(frame.data.decode())
        raise websocket.WebSocketTimeoutException(f"no text frame from relay within {timeout:g} s")

    def ping_pong(self, timeout: float = WS_TIMEOUT_S) -> None:
        """Prove the socket is open and served: a ping of ours is answered by a pong with its payload."""
        payload = secrets.token_hex(8).encode()
        self.socket.ping(payload)
        for _ in self._reads_within(timeout):
            opcode, frame = self.socket.recv_data_frame(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_PONG and frame.data == payload:
                return
            assert opcode != websocket.ABNF.OPCODE_CLOSE, f"socket closed by relay ({close_code(frame.data)})"
            assert opcode in (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG), (
                f"unexpected frame (opcode {opcode}) from relay"
            )
        raise AssertionError("no pong within the deadline")

    def wait_closed(self, timeout: float = WS_TIMEOUT_S) -> int | None:
        """Read until Relay's close frame; return its close code (None for a close frame without one).

        A connection dropped without a close frame fails the test. Frames are read raw (`recv_frame`): the
        client's automatic close reply (`recv_data_frame`) races Relay closing the TCP connection right after its
        close frame, and a broken pipe there would hide the code that did arrive."""
        for _ in self._reads_within(timeout):
            try:
                frame = self.socket.recv_frame()
            except websocket.WebSocketTimeoutException:
                continue
            if frame.opcode == websocket.ABNF.OPCODE_CLOSE:
                return close_code(frame.data)
        raise AssertionError("relay did not close the socket within the deadline")

    def close(self) -> None:
        if self.ws is not None:
            try:
                self.ws.close(timeout=1)
            except Exception:
                self.ws.shutdown()
            self.ws = None

    def __enter__(self) -> FakeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def close_code(payload: bytes) -> int | None:
    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
