"""Live fuzz: thousands of garbage frames at a real `relay serve`, while a real DBOS 3.2.0 executor of the same
application stays HEALTHY and keeps answering the API.

- Message level: a scripted executor (identified as dbos 2.0.0, which lacks list_queues, so the API's queue calls
  route to the real executor) sends frames drawn from a seeded generator: random bytes, random text, truncated
  answers, fields of the wrong type, unknown request ids and types, nesting past the limit and past the parser's
  recursion, NaN and giant numbers, frames near the size limit. Between bursts it must still be served (a ping
  is answered, a raw request through it is answered, which proves every earlier frame was processed), and a
  thread keeps calling the API, every call answered 200 by the real executor.
- WebSocket level: hundreds of raw connections that upgrade with a good key and then send broken WebSocket
  framing (reserved bits, unknown opcodes, unmasked frames, oversized control frames, absurd lengths, invalid
  UTF-8, cut headers) or garbage instead of the HTTP request itself. Each is closed by Relay (or times out at
  its handshake deadline); nothing else notices.

Test_bad_frames.py pins one bad frame of each kind; this throws volume and randomness at the same paths. The
seed is printed on failure (RELAY_FUZZ_SEED reproduces a run).
"""

from __future__ import annotations

import base64
import json
import os
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
import websocket

from tests.fuzz.hypothesis_settings import SCALE
from tests.integration.fake_executor import (
    FakeExecutor,
    create_key,
    dbos_executor,
    executors,
    register_app,
    wait_status,
)
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

APP = "live-fuzz-app"
MAX_FRAME_BYTES = 256 * 1024
HANDSHAKE_TIMEOUT_S = 2.0
MARKER = "live-fuzz-marker-2b9c"
SEED = int(os.environ.get("RELAY_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
FRAMES = 8000 * SCALE
BURST = 250
RAW_CONNECTIONS = 400 * SCALE
STATS: Counter[str] = Counter()


@dataclass
class Setup:
    relay: RelayProcess
    key: str
    real: ExecutorProcess
    real_id: str
    api_statuses: Counter[int] = field(default_factory=Counter)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    env = {
        "RELAY_MAX_FRAME_BYTES": str(MAX_FRAME_BYTES),
        "RELAY_HANDSHAKE_TIMEOUT_S": str(HANDSHAKE_TIMEOUT_S),
        "RELAY_REQUEST_TIMEOUT_S": "10",
        # Garbage requests below fail handshakes by the hundred from 127.0.0.1: the rate limit is tested elsewhere.
        "RELAY_HANDSHAKE_FAILURES_PER_MIN": "1000000",
    }
    with RelayProcess(env=env) as relay:
        register_app(relay, APP)
        key = create_key(relay, "live-fuzz-key")
        with dbos_executor(relay, APP, key, cwd=tmp_path_factory.mktemp("dbos-executor")) as real:
            found = wait_until(
                lambda: [e for e in executors(relay, APP).values() if e["status"] == "HEALTHY"],
                timeout=60, message=f"the DBOS executor did not connect; its log:\n{real.log_tail()}",
            )
            yield Setup(relay, key, real, found[0]["executorId"])
            assert real.running, real.log_tail()


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["frames"]:
        kinds = sum(1 for k in STATS if k.startswith("kind:"))
        record(
            "fuzz-2-live-frames", area="Live frame fuzz: a real `relay serve`, a real dbos 3.2.0 executor beside",
            tried={"garbage frames": STATS["frames"], "kinds of garbage": kinds,
                   "frame bytes": STATS["bytes"], "raw WebSocket connections with broken framing":
                   STATS["raw connections"], "API calls during the fuzz": STATS["api calls"]},
            outcome="every API call answered 200 by the real executor, which was never disconnected; the "
                    "fuzzing socket still served; no frame content in the log",
        )


def assert_real_executor_untouched(setup: Setup) -> None:
    assert executors(setup.relay, APP)[setup.real_id]["status"] == "HEALTHY"
    who = f"executor local/{APP}/{setup.real_id} from"
    lines = [line for line in setup.relay.log_text().splitlines() if who in line]
    assert sum(" connected (" in line for line in lines) == 1
    assert not [line for line in lines if "disconnected" in line]
    assert setup.real.running and setup.relay.running


# -- message-level garbage -------------------------------------------------------------------------------------------

TYPES = ["executor_info", "recovery", "cancel", "list_workflows", "get_workflow", "list_steps", "get_metrics",
         "fork_workflow", "backfill_schedule", "list_queues", "exist_pending_workflows", "export_workflow"]


def _text(rng: random.Random, n: int) -> str:
    alphabet = "ab{}[]\",:\\ \n\t0123456789-.eEtrufalsn" + "éü€𝄞\u2028\x00\x1f\ufffd"
    return "".join(rng.choice(alphabet) for _ in range(n))


def _json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([None, True, False, rng.randint(-(2**64), 2**64), rng.random() * 1e300, MARKER,
                           _text(rng, rng.randint(0, 12))])
    if roll < 0.7:
        return [_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice([MARKER, "output", "success", "type", "x", _text(rng, 3)]): _json(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


def _answer(rng: random.Random) -> dict[str, Any]:
    """Something shaped like an answer: a known type, an id Relay never sent, fields sometimes right."""
    frame: dict[str, Any] = {"type": rng.choice(TYPES), "request_id": f"{MARKER}-{rng.getrandbits(64):x}"}
    for name in rng.sample(["success", "output", "executor_id", "metrics", "workflow_ids", "error_message"],
                           rng.randint(0, 3)):
        frame[name] = _json(rng)
    return frame


def garbage(rng: random.Random) -> tuple[str, str | bytes]:
    """(kind, frame): one frame an executor should never send."""
    kind = rng.choice([
        "random bytes", "random text", "truncated answer", "wrong field types", "unknown request id",
        "unknown type", "envelope of the wrong type", "not an object", "nested past the limit",
        "nested past the parser", "NaN and infinities", "giant integer", "near the size limit", "duplicate keys",
        "answer to nothing, error_message of the wrong type",
    ])
    if kind == "random bytes":
        return kind, rng.randbytes(rng.randint(1, 2000))
    if kind == "random text":
        return kind, _text(rng, rng.randint(1, 2000)) + MARKER
    if kind == "truncated answer":
        text = json.dumps(_answer(rng))
        return kind, text[: rng.randint(0, len(text) - 1)]
    if kind == "wrong field types":
        frame = _answer(rng)
        frame[rng.choice(["success", "output", "executor_id", "metrics"])] = rng.choice([7, "x", [1], {"a": 1}])
        return kind, json.dumps(frame)
    if kind == "unknown request id":
        return kind, json.dumps(_answer(rng))
    if kind == "unknown type":
        return kind, json.dumps({"type": MARKER + _text(rng, 5), "request_id": MARKER, "x": _json(rng)})
    if kind == "envelope of the wrong type":
        return kind, json.dumps({"type": _json(rng) if rng.random() < 0.5 else 7, "request_id": [MARKER]})
    if kind == "not an object":
        return kind, json.dumps(rng.choice([[MARKER, 1], MARKER, 12, None, True, [[{}]]]))
    if kind == "nested past the limit":
        levels = rng.randint(101, 900)
        return kind, '{"type":"list_workflows","request_id":"n","output":' + "[" * levels + "]" * levels + "}"
    if kind == "nested past the parser":
        levels = rng.randint(20_000, 60_000)
        return kind, '{"type":"get_workflow","request_id":"n","output":' + "[" * levels + "]" * levels + "}"
    if kind == "NaN and infinities":
        return kind, '{"type":"cancel","request_id":"' + MARKER + '","success":' + rng.choice(
            ["NaN", "Infinity", "-Infinity", "1e999"]) + "}"
    if kind == "giant integer":
        return kind, '{"type":"recovery","request_id":"g","success":' + "9" * rng.randint(4301, 20_000) + "}"
    if kind == "near the size limit":
        pad = MAX_FRAME_BYTES - 200 - rng.randint(0, 5000)
        return kind, json.dumps({"type": "list_workflows", "request_id": MARKER, "output": [], "pad": "p" * pad})
    if kind == "duplicate keys":
        return kind, '{"type":"cancel","type":7,"request_id":"' + MARKER + '","request_id":null}'
    return kind, json.dumps({"type": "cancel", "request_id": MARKER, "error_message": {"m": MARKER}})


def _raw_request_through(relay: RelayProcess, fake: FakeExecutor) -> None:
    """A raw request routed to the fuzzing executor and answered by it: every frame it sent before is processed."""
    result: dict[str, Any] = {}

    def call() -> None:
        try:
            result["response"] = relay.api(
                "POST", f"/relay/v1/orgs/local/apps/{APP}/executors/{fake.executor_id}/requests",
                json={"type": "list_workflows"}, timeout=20,
            )
        except requests.RequestException as error:  # reported below, beside what the executor got (or not)
            result["error"] = error

    thread = threading.Thread(target=call)
    thread.start()
    try:
        request = fake.recv_json(timeout=15)
    except websocket.WebSocketTimeoutException:
        thread.join(timeout=20)
        raise AssertionError(f"seed {SEED}: the raw request never reached the executor; "
                             f"the call: {result.get('error') or result.get('response')}") from None
    assert request["type"] == "list_workflows", f"seed {SEED}: {request}; the call: {result.get('error')}"
    fake.send_text(json.dumps({"type": "list_workflows", "request_id": request["request_id"], "output": [],
                               "error_message": None}))
    thread.join(timeout=20)
    response = result["response"]
    assert response.status_code == 200, response.text
    assert response.json()["output"] == []


def test_thousands_of_garbage_frames(setup: Setup) -> None:
    relay = setup.relay
    rng = random.Random(SEED)
    stop = threading.Event()
    failures: list[str] = []

    def keep_calling_the_api() -> None:  # list_queues: only the real executor (3.2.0) has it
        while not stop.is_set():
            try:
                response = relay.api("GET", f"/v2/orgs/local/apps/{APP}/queues", timeout=20)
            except requests.RequestException as error:
                failures.append(repr(error))  # not a silent end of the thread
                return
            setup.api_statuses[response.status_code] += 1
            STATS["api calls"] += 1
            if response.status_code != 200:
                failures.append(f"{response.status_code} {response.text[:200]}")

    with FakeExecutor(relay, APP, setup.key) as fake, FakeExecutor(relay, APP, setup.key) as bystander:
        for executor in (fake, bystander):
            request = executor.connect()
            executor.identify(request, dbos_version="2.0.0")
            wait_status(relay, APP, executor.executor_id, "HEALTHY")
        caller = threading.Thread(target=keep_calling_the_api)
        caller.start()
        try:
            sent = 0
            while sent < FRAMES:
                for _ in range(min(BURST, FRAMES - sent)):
                    kind, frame = garbage(rng)
                    STATS[f"kind:{kind}"] += 1
                    STATS["bytes"] += len(frame)
                    if isinstance(frame, bytes):
                        fake.send_binary(frame)
                    else:
                        fake.send_text(frame)
                    sent += 1
                fake.ping_pong()
                _raw_request_through(relay, fake)
                bystander.ping_pong()
                assert_real_executor_untouched(setup)
            STATS["frames"] += sent
        finally:
            stop.set()
            caller.join(timeout=30)
        assert not failures, f"seed {SEED}: API calls failed during the fuzz: {failures[:5]}"
        assert setup.api_statuses[200] >= 3
        listed = executors(relay, APP)
        assert listed[fake.executor_id]["status"] == "HEALTHY"
        assert listed[bystander.executor_id]["status"] == "HEALTHY"
    text = relay.log_text()
    assert MARKER not in text, f"seed {SEED}: frame content reached the log"
    # Bad frames are counted, and logged without flooding the log: at most 100 lines, then one per 1000.
    who = f"executor local/{APP}/{fake.executor_id} from"
    warned = [line for line in text.splitlines() if who in line and ("bad frame" in line or "unknown request" in line)]
    assert "further ones are counted" in text
    assert len(warned) <= 100 + FRAMES // 1000 + 2, len(warned)
    assert_real_executor_untouched(setup)


# -- WebSocket-level garbage -----------------------------------------------------------------------------------------


def _upgrade(relay: RelayProcess, path: str) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{relay.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, head


def _frame(opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, mask: bool = True,
           length: int | None = None) -> bytes:
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload) if length is None else length
    mask_bit = 0x80 if mask else 0
    if n < 126:
        header = struct.pack("!BB", first, mask_bit | n)
    elif n < 2**16:
        header = struct.pack("!BBH", first, mask_bit | 126, n)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, n)
    if not mask:
        return header + payload
    key = os.urandom(4)
    return header + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def broken_framing(rng: random.Random) -> tuple[str, bytes]:
    text = json.dumps({"type": "executor_info", "request_id": MARKER}).encode()
    kind = rng.choice([
        "reserved bits", "unknown opcode", "unmasked frame", "control frame over 125 bytes",
        "fragmented control frame", "continuation without a start", "length of 2^63", "invalid UTF-8 text",
        "bad close frame", "cut header", "random bytes", "length beyond the frame limit",
    ])
    if kind == "reserved bits":
        return kind, _frame(1, text, rsv=rng.randint(1, 7))
    if kind == "unknown opcode":
        return kind, _frame(rng.choice([3, 4, 5, 6, 7, 11, 12, 13, 14, 15]), text)
    if kind == "unmasked frame":
        return kind, _frame(1, text, mask=False)
    if kind == "control frame over 125 bytes":
        return kind, _frame(9, os.urandom(200))
    if kind == "fragmented control frame":
        return kind, _frame(9, b"ping", fin=False)
    if kind == "continuation without a start":
        return kind, _frame(0, text)
    if kind == "length of 2^63":
        return kind, _frame(1, b"", length=2**63 - 1)[:14]
    if kind == "invalid UTF-8 text":
        return kind, _frame(1, b'{"type": "\xff\xfe' + MARKER.encode() + b'"}')
    if kind == "bad close frame":
        return kind, _frame(8, rng.choice([b"\x00", struct.pack("!H", 999) + b"x", struct.pack("!H", 1000) + b"\xff"]))
    if kind == "cut header":
        return kind, _frame(1, text)[: rng.randint(1, 5)]
    if kind == "length beyond the frame limit":
        return kind, _frame(1, b"", length=MAX_FRAME_BYTES + rng.randint(1, 10**6))[:14]
    return kind, os.urandom(rng.randint(1, 3000))


def _one_raw_connection(relay: RelayProcess, key: str, rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.15:  # garbage instead of the HTTP request itself
        kind = "garbage HTTP request"
        sock = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
        sock.sendall(rng.choice([os.urandom(rng.randint(1, 2000)), b"GET /websocket/" + os.urandom(50) + b"\r\n\r\n",
                                 b"GET " + b"/x" * 5000 + b" HTTP/1.1\r\n\r\n",
                                 f"GET /websocket/{APP}/{key} HTTP/1.1\r\nUpgrade: websocket\r\n"
                                 "Connection: Upgrade\r\nSec-WebSocket-Version: 99\r\n\r\n".encode()]))
    elif roll < 0.3:  # the upgrade request with the key in it, a few bytes broken: the key must not be logged
        kind = "mutated upgrade request"
        request = bytearray(
            f"GET /websocket/{APP}/{key} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: "
            "Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(request))
            if rng.random() < 0.5:
                request[at] = rng.choice(b" /%?#\r\n\x00\xff:")
            else:
                request.insert(at, rng.choice(b" /%?#\r\n\x00\xff:"))
        sock = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
        sock.sendall(bytes(request))
    else:
        sock, head = _upgrade(relay, f"/websocket/{APP}/{key}")
        assert head.startswith(b"HTTP/1.1 101"), head[:200]
        kind, data = broken_framing(rng)
        sock.sendall(data)
    # Relay closes it: at once for broken framing, at the handshake deadline for a stalled one.
    sock.settimeout(HANDSHAKE_TIMEOUT_S + 15)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"relay did not close a connection with {kind}") from None
    finally:
        sock.close()
    return kind


def test_hundreds_of_connections_with_broken_framing(setup: Setup) -> None:
    relay = setup.relay
    rngs = [random.Random(SEED + n) for n in range(RAW_CONNECTIONS)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=24) as pool:
        kinds = list(pool.map(lambda r: _one_raw_connection(relay, setup.key, r), rngs))
    STATS["raw connections"] += len(kinds)
    for kind in kinds:
        STATS[f"kind:{kind}"] += 1
    assert time.monotonic() - started < 120
    # Relay serves on: the API answers, through the real executor; a new executor connects and is served.
    assert relay.api("GET", f"/v2/orgs/local/apps/{APP}/queues", timeout=20).status_code == 200
    STATS["api calls"] += 1
    with FakeExecutor(relay, APP, setup.key) as late:
        late.connect_and_identify()
        wait_status(relay, APP, late.executor_id, "HEALTHY")
        late.ping_pong()
    text = relay.log_text()
    assert MARKER not in text
    assert setup.key not in text
    assert_real_executor_untouched(setup)
