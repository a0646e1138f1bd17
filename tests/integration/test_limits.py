"""Relay's limits, against a real `relay serve`: each configurable, with a safe default, and a clear answer when hit.

- RELAY_MAX_INFLIGHT_PER_EXECUTOR: an executor with that many API requests unanswered gets no more; the API
  answers 429 naming the limit, at once, and serves again as soon as the executor answers.
- RELAY_MAX_CONNECTIONS: past that many executor sockets the handshake is refused with 503 (Retry-After); slots
  come back when sockets close, and refused, failed or abandoned handshakes never keep one. A real DBOS executor
  refused at capacity keeps retrying and gets in once a slot is free.
- RELAY_MAX_HANDSHAKES_IN_FLIGHT: past that many upgrades whose executor has not been identified yet, the handshake
  is refused with 503 (Retry-After: 1); a place comes back once the executor answers executor_info, or its socket
  is closed (at the handshake deadline).
- RELAY_HANDSHAKE_TIMEOUT_S bounds the HTTP request too: a connection that sends nothing, or trickles its request
  line and headers, is closed after it (the executor_info half is test_bad_frames.py's).
- RELAY_MAX_FRAME_BYTES is test_bad_frames.py's (1009 on the sender only).
- Bad values of every limit stop `relay serve` with a message naming the variable, never the value.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from relay.actors.configuration.limits import Limits
from relay.actors.configuration.settings import ConfigError, Settings
from tests.integration.fake_executor import (
    FakeExecutor,
    HandshakeRefusedError,
    create_key,
    dbos_executor,
    executors,
    register_app,
    wait_status,
)
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess, run_cli
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

APP = "limits-app"
STATS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["refused"]:
        record(
            "limits-1-live", area="Limits hit on a live Relay (in flight, connections, idle requests, bad values)",
            tried={"requests and handshakes past a limit": STATS["refused"],
                   "handshakes that must not keep a slot": STATS["abandoned"],
                   "idle or trickling connections": STATS["idle"], "bad settings": STATS["bad settings"]},
            outcome="429 / 503 naming the limit at once, idle connections closed at the deadline, no slot lost, "
                    "`relay serve` refusing bad values by name",
        )


# -- settings ---------------------------------------------------------------------------------------------------------

LIMIT_VARIABLES = ["RELAY_MAX_FRAME_BYTES", "RELAY_MAX_INFLIGHT_PER_EXECUTOR", "RELAY_MAX_CONNECTIONS",
                   "RELAY_HANDSHAKE_FAILURES_PER_MIN", "RELAY_HANDSHAKE_TIMEOUT_S", "RELAY_MAX_HANDSHAKES_IN_FLIGHT"]


def test_limits_have_safe_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.limits.max_frame_bytes == 64 * 1024 * 1024 == Limits().max_frame_bytes
    assert settings.limits.max_inflight_per_executor == 256
    assert settings.limits.handshake_timeout_s == 10.0
    assert settings.max_connections == 1000
    assert settings.handshake_failures_per_min == 30
    assert settings.max_handshakes_in_flight == 8192  # a 10,000 storm: 1,024 cost thousands of 503 retries
    assert settings.tls_cert is None and settings.tls_key is None


@pytest.mark.parametrize("variable", LIMIT_VARIABLES)
@pytest.mark.parametrize("value", ["0", "-3", "lots", "1e99999", "nan", "99999999999"])
def test_bad_limit_values_are_refused_by_name(variable: str, value: str) -> None:
    if variable.endswith("_S") and value == "99999999999":
        # A long timeout is a valid timeout: accepted, not refused.
        assert Settings.from_env({variable: value}) is not None
        return
    STATS["bad settings"] += 1
    with pytest.raises(ConfigError) as error:
        Settings.from_env({variable: value})
    assert variable in str(error.value) and value not in str(error.value)


def test_serve_refuses_a_bad_limit_with_a_clear_message(tmp_data_dir: Any) -> None:
    STATS["bad settings"] += 1
    result = run_cli(["serve"], {"RELAY_DATA_DIR": str(tmp_data_dir), "RELAY_MAX_CONNECTIONS": "none",
                                 "RELAY_ADMIN_TOKEN": "relay-limits-test-token-" + "t" * 32}, timeout=60)
    assert result.returncode == 2
    assert "RELAY_MAX_CONNECTIONS must be an integer" in result.stderr
    assert "none" not in result.stderr.replace("RELAY_MAX_CONNECTIONS", "")


# -- in-flight requests per executor ---------------------------------------------------------------------------------


def test_in_flight_requests_per_executor_are_bounded() -> None:
    limit = 4
    env = {"RELAY_MAX_INFLIGHT_PER_EXECUTOR": str(limit), "RELAY_REQUEST_TIMEOUT_S": "30"}
    with RelayProcess(env=env) as relay:
        register_app(relay, APP)
        key = create_key(relay, "inflight")
        with FakeExecutor(relay, APP, key) as fake:
            fake.connect_and_identify()
            wait_status(relay, APP, fake.executor_id, "HEALTHY")
            answers: list[requests.Response] = []
            callers = [threading.Thread(target=lambda: answers.append(
                relay.api("GET", f"/v2/orgs/local/apps/{APP}/workflows", timeout=40))) for _ in range(limit)]
            for caller in callers:
                caller.start()
            pending = [fake.recv_json() for _ in range(limit)]  # all four reached the executor, unanswered
            assert {r["type"] for r in pending} == {"list_workflows"}
            for path, method, body in ((f"/v2/orgs/local/apps/{APP}/workflows", "GET", None),
                                       (f"/v2/orgs/local/apps/{APP}/workflows/search", "POST", {}),
                                       (f"/relay/v1/orgs/local/apps/{APP}/executors/{fake.executor_id}/requests",
                                        "POST", {"type": "list_queues"})):
                started = time.monotonic()
                refused = relay.api(method, path, json=body)
                STATS["refused"] += 1
                assert refused.status_code == 429, refused.text
                assert time.monotonic() - started < 5  # at once, not at the request timeout
                assert refused.headers["Content-Type"] == "application/problem+json"
                assert "RELAY_MAX_INFLIGHT_PER_EXECUTOR" in refused.json()["detail"]
            for request in pending:
                fake.send_text(json.dumps({"type": "list_workflows", "request_id": request["request_id"],
                                           "output": [], "error_message": None}))
            for caller in callers:
                caller.join(timeout=40)
            assert [a.status_code for a in answers] == [200] * limit
            # Answered: room again.
            caller = threading.Thread(target=lambda: answers.append(
                relay.api("GET", f"/v2/orgs/local/apps/{APP}/workflows", timeout=40)))
            caller.start()
            request = fake.recv_json()
            fake.send_text(json.dumps({"type": "list_workflows", "request_id": request["request_id"], "output": []}))
            caller.join(timeout=40)
            assert answers[-1].status_code == 200


# -- connections -----------------------------------------------------------------------------------------------------


def _plain_get(relay: RelayProcess, path: str) -> int:
    return requests.get(f"{relay.base_url}{path}", timeout=10).status_code


def _upgrade_status(relay: RelayProcess, path: str) -> int:
    with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        return int(sock.recv(4096).split()[1])


def _abandoned_upgrade(relay: RelayProcess, path: str) -> None:
    """An upgrade request cut off halfway, and one dropped right after the 101."""
    with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n".encode())
    with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        assert sock.recv(12).startswith(b"HTTP/1.1 101")


def test_connections_are_bounded_and_slots_come_back(tmp_path: Any) -> None:
    limit = 3
    env = {"RELAY_MAX_CONNECTIONS": str(limit), "RELAY_HANDSHAKE_TIMEOUT_S": "2"}
    with RelayProcess(env=env) as relay:
        register_app(relay, APP)
        key = create_key(relay, "connections")
        path = f"/websocket/{APP}/{key}"
        # Refused, failed and abandoned handshakes keep no slot.
        for _ in range(5):
            STATS["abandoned"] += 4
            assert _upgrade_status(relay, f"/websocket/{APP}/dbos_not-a-key") == 401
            assert _plain_get(relay, path) == 400  # a good key, but no upgrade asked
            _abandoned_upgrade(relay, path)
        fakes = [FakeExecutor(relay, APP, key) for _ in range(limit)]
        try:
            # The dropped 101s are counted until Relay notices them (at the handshake deadline at the latest).
            def all_connected() -> bool:
                for fake in fakes:
                    if fake.ws is None:
                        try:
                            fake.connect_and_identify()
                        except HandshakeRefusedError:
                            return False
                return True

            wait_until(all_connected, timeout=15, message="slots were not given back")
            for fake in fakes:
                wait_status(relay, APP, fake.executor_id, "HEALTHY")
            extra = FakeExecutor(relay, APP, key)
            with pytest.raises(HandshakeRefusedError) as refused:
                extra.connect()
            STATS["refused"] += 1
            assert refused.value.status == 503
            assert refused.value.headers["retry-after"] == "1"
            assert "RELAY_MAX_CONNECTIONS" in json.loads(refused.value.body)["detail"]
            # A real DBOS executor at capacity: refused (its log says why), and in as soon as a slot frees.
            with dbos_executor(relay, APP, key, cwd=tmp_path / "dbos") as real:
                real.wait_for_log("RELAY_MAX_CONNECTIONS", timeout=60)
                STATS["refused"] += 1
                freed = fakes.pop()
                freed.close()
                # Not the closed fake's record, which reads HEALTHY until its disconnect is recorded.
                ours = {f.executor_id for f in fakes} | {freed.executor_id}
                found = wait_until(
                    lambda: [e for e in executors(relay, APP).values()
                             if e["status"] == "HEALTHY" and e["language"] == "python"
                             and e["executorId"] not in ours],
                    timeout=30, message=f"the DBOS executor did not get the free slot:\n{real.log_tail()}")
                assert found
                with pytest.raises(HandshakeRefusedError):
                    extra.connect()
                STATS["refused"] += 1
            # The executor stopped: its slot is back.
            wait_until(lambda: _try(extra), timeout=15, message="the executor's slot did not come back")
            extra.close()
        finally:
            for fake in fakes:
                fake.close()


def test_handshakes_in_flight_are_bounded_until_the_executor_is_identified() -> None:
    env = {"RELAY_MAX_HANDSHAKES_IN_FLIGHT": "2", "RELAY_HANDSHAKE_TIMEOUT_S": "3"}
    with RelayProcess(env=env) as relay:
        register_app(relay, APP)
        key = create_key(relay, "handshakes")
        first, second, third = (FakeExecutor(relay, APP, key) for _ in range(3))
        try:
            hello = first.connect()  # upgraded, executor_info not answered yet: in flight
            second.connect()
            with pytest.raises(HandshakeRefusedError) as refused:
                third.connect()
            STATS["refused"] += 1
            assert refused.value.status == 503
            assert refused.value.headers["retry-after"] == "1"
            assert "RELAY_MAX_HANDSHAKES_IN_FLIGHT" in json.loads(refused.value.body)["detail"]
            first.identify(hello)  # identified: its place is free at once, its socket stays open
            wait_status(relay, APP, first.executor_id, "HEALTHY")
            third.connect_and_identify()
            wait_status(relay, APP, third.executor_id, "HEALTHY")
            # One that never answers gives its place back when it is closed at the handshake deadline.
            assert second.wait_closed(timeout=15) == 1008
            late = FakeExecutor(relay, APP, key)
            wait_until(lambda: _try(late), timeout=15, message="the place of an expired handshake did not come back")
            late.close()
            first.ping_pong()
        finally:
            for fake in (first, second, third):
                fake.close()


def _try(fake: FakeExecutor) -> bool:
    try:
        fake.connect_and_identify()
    except HandshakeRefusedError:
        return False
    return True


# -- idle requests ---------------------------------------------------------------------------------------------------


def test_idle_and_trickling_requests_are_closed_at_the_handshake_deadline() -> None:
    deadline = 1.0
    with RelayProcess(env={"RELAY_HANDSHAKE_TIMEOUT_S": str(deadline), "RELAY_PING_INTERVAL_S": "2"}) as relay:
        register_app(relay, APP)
        key = create_key(relay, "idle")
        openings = [b"", b"GET /healthz HTT", f"GET /websocket/{APP}/{key} HTTP/1.1\r\nHost: x\r\n".encode()]
        for opening in openings:
            STATS["idle"] += 1
            with socket.create_connection(("127.0.0.1", relay.port), timeout=deadline + 10) as sock:
                started = time.monotonic()
                sock.sendall(opening)
                try:
                    while sock.recv(4096):
                        pass
                except ConnectionResetError:
                    pass
                waited = time.monotonic() - started
            assert deadline * 0.9 <= waited < deadline + 5, (opening, waited)
        # A request trickling one header line per half second still has to be complete within the deadline.
        STATS["idle"] += 1
        with socket.create_connection(("127.0.0.1", relay.port), timeout=deadline + 10) as sock:
            started = time.monotonic()
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            closed = False
            for n in range(20):
                try:
                    sock.sendall(f"X-Slow-{n}: 1\r\n".encode())
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                sock.settimeout(0.5)
                try:
                    if sock.recv(4096) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    closed = True
                    break
            assert closed and time.monotonic() - started < deadline * 10
        # Served requests, keep-alive included, are not affected; nor is a WebSocket idle past the deadline.
        session = requests.Session()
        for _ in range(3):
            assert session.get(f"{relay.base_url}/healthz", timeout=5).status_code == 200
        with FakeExecutor(relay, APP, key) as fake:
            fake.connect_and_identify()
            wait_status(relay, APP, fake.executor_id, "HEALTHY")
            opened = time.monotonic()
            fake.socket.settimeout(10)  # Relay's first ping (2 s in): the socket has outlived the deadline
            opcode, _frame = fake.socket.recv_data_frame(control_frame=True)
            assert opcode == 0x9 and time.monotonic() - opened > deadline
            fake.ping_pong()
        assert key not in relay.log_text()
