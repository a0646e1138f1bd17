"""Frames an executor should never send, against a real `relay serve` and a real DBOS 3.2.0 executor.

A scripted executor (websocket-client) of the same app as the real one sends bad frames. Each is logged
(without the key and without the frame's content), its socket stays open, and the real executor stays
HEALTHY. An oversized message (RELAY_MAX_FRAME_BYTES=65536) closes only the sender's socket, with 1009;
an executor that never answers executor_info is closed after RELAY_HANDSHAKE_TIMEOUT_S (1 s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.integration.fake_executor import (
    FakeExecutor,
    create_key,
    dbos_executor,
    executors,
    log_count,
    register_app,
    wait_log_count,
    wait_status,
)
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

MAX_FRAME_BYTES = 65536
HANDSHAKE_TIMEOUT_S = 1.0
APP = "bad-frames-app"
# Put into every bad frame: it must never show up in the relay's log.
MARKER = "frame-content-marker-7f3a"


@dataclass
class Setup:
    relay: RelayProcess
    key: str
    real: ExecutorProcess
    real_id: str


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    return {"RELAY_MAX_FRAME_BYTES": str(MAX_FRAME_BYTES), "RELAY_HANDSHAKE_TIMEOUT_S": str(HANDSHAKE_TIMEOUT_S)}


@pytest.fixture(scope="module")
def setup(relay: RelayProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    register_app(relay, APP)
    key = create_key(relay, "bad-frames-key")
    with dbos_executor(relay, APP, key, cwd=tmp_path_factory.mktemp("dbos-executor")) as real:
        found = wait_until(
            lambda: [e for e in executors(relay, APP).values() if e["status"] == "HEALTHY"],
            timeout=30,
            message=f"the DBOS executor did not connect; its log:\n{real.log_tail()}",
        )
        assert found[0]["language"] == "python" and found[0]["dbosVersion"] == "3.2.0"
        yield Setup(relay, key, real, found[0]["executorId"])
        assert real.running, real.log_tail()


def assert_real_executor_untouched(setup: Setup) -> None:
    """The real executor is HEALTHY and was never disconnected (one connect, no disconnect in the log)."""
    listed = executors(setup.relay, APP)
    assert listed[setup.real_id]["status"] == "HEALTHY"
    text = setup.relay.log_text()
    who = f"executor local/{APP}/{setup.real_id} from"
    assert sum(1 for line in text.splitlines() if who in line and " connected (" in line) == 1
    assert not [line for line in text.splitlines() if who in line and "disconnected" in line]
    assert setup.real.running


def assert_log_clean(setup: Setup) -> None:
    text = setup.relay.log_text()
    assert setup.key not in text
    assert setup.relay.admin_token not in text
    assert MARKER not in text


@pytest.fixture
def fake(setup: Setup) -> Iterator[FakeExecutor]:
    with FakeExecutor(setup.relay, APP, setup.key) as executor:
        executor.connect_and_identify()
        wait_status(setup.relay, APP, executor.executor_id, "HEALTHY")
        yield executor


def deep(levels: int) -> str:
    return "[" * levels + json.dumps(MARKER) + "]" * levels


BAD_FRAMES: dict[str, tuple[str | bytes, str]] = {
    # name: (frame, what the relay logs about it)
    "malformed JSON": (
        '{"type": "executor_info", "request_id": "' + MARKER,
        "sent a bad frame: frame is not valid JSON",
    ),
    "JSON array": (json.dumps(["executor_info", MARKER]), "sent a bad frame: frame is not a JSON object"),
    "JSON string": (json.dumps(MARKER), "sent a bad frame: frame is not a JSON object"),
    "binary frame": (b"\x00\xff" + MARKER.encode(), "sent a binary frame; ignored"),
    "no request_id": (
        json.dumps({"type": "executor_info", "note": MARKER}),
        "sent a bad frame: frame has no request_id",
    ),
    "no type": (json.dumps({"request_id": MARKER}), "sent a bad frame: frame has no type"),
    "unknown request id": (
        json.dumps({"type": "list_workflows", "request_id": MARKER, "output": []}),
        "answered an unknown request id",
    ),
    "unknown request id, unknown type": (
        json.dumps({"type": MARKER + "\nFORGED log line", "request_id": MARKER}),
        "answered an unknown request id",
    ),
    "deeply nested": (
        '{"type": "list_workflows", "request_id": "x", "output": ' + deep(150) + "}",
        "sent a bad frame: frame nests deeper than 100 levels",
    ),
    "deeply nested (past the parser's recursion guard)": (
        '{"type": "list_workflows", "request_id": "x", "output": ' + deep(30000) + "}",
        "sent a bad frame: frame nests deeper than 100 levels",
    ),
    "type not a string": (
        json.dumps({"type": 7, "request_id": MARKER}),
        "sent a bad frame: frame type must be a string",
    ),
    "request_id not a string": (
        json.dumps({"type": "executor_info", "request_id": [MARKER]}),
        "sent a bad frame: frame request_id must be a string",
    ),
    "error_message not a string": (
        json.dumps({"type": "cancel", "request_id": MARKER, "error_message": {"m": MARKER}}),
        "sent a bad frame: field 'error_message' must be a string or null",
    ),
    "field of the wrong type": (
        json.dumps({"type": "executor_info", "request_id": MARKER, "executor_id": 12, "language": MARKER}),
        "sent a bad frame: field 'executor_id' must be a string",
    ),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
def test_bad_frame_is_logged_and_ignored(setup: Setup, fake: FakeExecutor, name: str) -> None:
    frame, logged = BAD_FRAMES[name]
    relay = setup.relay
    before = log_count(relay, logged)
    if isinstance(frame, bytes):
        fake.send_binary(frame)
    else:
        fake.send_text(frame)
    wait_log_count(relay, logged, before + 1)
    # The line names the connection (org/app, and the executor once the actor decoded the frame).
    line = [x for x in relay.log_text().splitlines() if logged in x][-1]
    assert f"executor local/{APP}" in line
    if isinstance(frame, str):
        assert fake.executor_id in line
    fake.ping_pong()
    assert executors(relay, APP)[fake.executor_id]["status"] == "HEALTHY"
    assert_real_executor_untouched(setup)
    assert_log_clean(setup)
    assert "FORGED" not in relay.log_text()


def test_many_bad_frames_in_a_row(setup: Setup, fake: FakeExecutor) -> None:
    """A burst of every kind, back to back: all logged, the socket still served, nothing else disturbed."""
    relay = setup.relay
    before = log_count(relay, f"executor local/{APP}/{fake.executor_id} from 127.0.0.1 sent a bad frame")
    text_frames = [f for f, logged in BAD_FRAMES.values() if isinstance(f, str) and "bad frame" in logged]
    for _ in range(5):
        for frame in text_frames:
            fake.send_text(frame)
    wait_log_count(
        relay, f"executor local/{APP}/{fake.executor_id} from 127.0.0.1 sent a bad frame", before + 5 * len(text_frames)
    )
    fake.ping_pong()
    assert executors(relay, APP)[fake.executor_id]["status"] == "HEALTHY"
    assert_real_executor_untouched(setup)
    assert_log_clean(setup)


def test_oversized_frame_closes_only_that_socket(setup: Setup, fake: FakeExecutor) -> None:
    relay = setup.relay
    with FakeExecutor(relay, APP, setup.key) as bystander:
        bystander.connect_and_identify()
        wait_status(relay, APP, bystander.executor_id, "HEALTHY")

        oversized = json.dumps({"type": "list_workflows", "request_id": MARKER, "output": ["x" * MAX_FRAME_BYTES]})
        fake.send_text(oversized)
        assert fake.wait_closed() == 1009
        wait_status(relay, APP, fake.executor_id, "DISCONNECTED")
        wait_log_count(relay, "sent a message over the frame limit; closing", 1)

        bystander.ping_pong()
        assert executors(relay, APP)[bystander.executor_id]["status"] == "HEALTHY"
    assert_real_executor_untouched(setup)
    assert_log_clean(setup)


def test_frame_just_under_the_limit_is_read(setup: Setup, fake: FakeExecutor) -> None:
    """The limit is on size, not a blanket refusal: a big (but allowed) bad frame is parsed and ignored."""
    relay = setup.relay
    before = log_count(relay, "answered an unknown request id")
    padding = MAX_FRAME_BYTES - 200
    frame = json.dumps({"type": "list_workflows", "request_id": MARKER, "output": [], "pad": "p" * padding})
    assert len(frame.encode()) <= MAX_FRAME_BYTES
    fake.send_text(frame)
    wait_log_count(relay, "answered an unknown request id", before + 1)
    fake.ping_pong()
    assert_real_executor_untouched(setup)


def test_silent_executor_is_closed_after_the_handshake_timeout(setup: Setup, fake: FakeExecutor) -> None:
    relay = setup.relay
    before = log_count(relay, "did not answer executor_info in time; closing")
    with FakeExecutor(relay, APP, setup.key) as silent:
        started = time.monotonic()
        first = silent.connect()
        assert first["type"] == "executor_info"
        code = silent.wait_closed(timeout=HANDSHAKE_TIMEOUT_S + 9)
        waited = time.monotonic() - started
    assert code == 1008
    assert HANDSHAKE_TIMEOUT_S * 0.9 <= waited < HANDSHAKE_TIMEOUT_S + 5
    wait_log_count(relay, "did not answer executor_info in time; closing", before + 1)
    assert silent.executor_id not in executors(relay, APP)
    # `fake` answered in time and has now lived past the timeout: it is still open and HEALTHY.
    fake.ping_pong()
    assert executors(relay, APP)[fake.executor_id]["status"] == "HEALTHY"
    assert_real_executor_untouched(setup)
    assert_log_clean(setup)
