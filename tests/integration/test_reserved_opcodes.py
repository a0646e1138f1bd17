"""Frame headers that announce more than Relay reads, against a real `relay serve` (issue 34, point 5).

An admitted executor (a valid key) sends a 14-byte frame header alone: a reserved opcode (3-7, 0xB-0xF) announcing
4 GiB, or a text, binary or continuation frame announcing more than RELAY_MAX_FRAME_BYTES. Each is refused from
its header (1002 for a reserved opcode, 1009 for a message past the limit) without allocating anything: the
server's peak RSS (VmHWM) stays where it was, /healthz answers at once, and another executor is untouched.
Before the fix a reserved opcode made Relay allocate the 4 GiB it announced and wait for them.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.fake_executor import FakeExecutor, create_key, register_app, wait_status
from tests.support import reliability_report
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

MAX_FRAME_BYTES = 65536
APP = "opcodes-app"
FOUR_GIB = 4 * 1024**3
RESERVED_OPCODES = [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF]
# What the server's peak RSS may grow by over the whole test: frames are refused from their 14-byte headers.
RSS_MARGIN_KIB = 64 * 1024
HEALTHZ_WITHIN_S = 2.0


@dataclass
class Setup:
    relay: RelayProcess
    key: str


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    return {"RELAY_MAX_FRAME_BYTES": str(MAX_FRAME_BYTES)}


@pytest.fixture(scope="module")
def setup(relay: RelayProcess) -> Setup:
    register_app(relay, APP)
    return Setup(relay, create_key(relay, "opcodes-key"))


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB, from /proc."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            figures[name] = int(value.split()[0])
    return figures


def frame_header(opcode: int, length: int, fin: bool = True) -> bytes:
    """A client's frame header (masked, 64-bit length): 14 bytes, no payload."""
    return bytes(((0x80 if fin else 0) | opcode, 0x80 | 127)) + struct.pack("!Q", length) + b"\x0f\x1e\x2d\x3c"


def masked_frame(opcode: int, payload: bytes, fin: bool) -> bytes:
    mask = b"\x0f\x1e\x2d\x3c"
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes(((0x80 if fin else 0) | opcode, 0x80 | len(payload))) + mask + body


def healthz_seconds(relay: RelayProcess) -> float:
    started = time.monotonic()
    response = relay.session.get(f"{relay.base_url}/healthz", timeout=HEALTHZ_WITHIN_S)
    assert response.status_code == 200
    return time.monotonic() - started


def send_and_wait_close(setup: Setup, *frames: bytes) -> int | None:
    """From an admitted executor: these raw bytes, then Relay's close code."""
    with FakeExecutor(setup.relay, APP, setup.key) as fake:
        fake.connect_and_identify()
        wait_status(setup.relay, APP, fake.executor_id, "HEALTHY")
        fake.socket.sock.sendall(b"".join(frames))
        return fake.wait_closed(timeout=5)


def test_reserved_opcodes_are_refused_from_the_header(setup: Setup) -> None:
    relay = setup.relay
    assert relay.pid is not None
    before = memory_kib(relay.pid)
    with FakeExecutor(relay, APP, setup.key) as bystander:
        bystander.connect_and_identify()
        slowest = 0.0
        for opcode in RESERVED_OPCODES:
            assert send_and_wait_close(setup, frame_header(opcode, FOUR_GIB)) == 1002, f"opcode {opcode:#x}"
            slowest = max(slowest, healthz_seconds(relay))
        # A reserved opcode announcing a small payload too, and inside a fragmented message.
        assert send_and_wait_close(setup, masked_frame(3, b"abc", fin=True)) == 1002
        assert send_and_wait_close(setup, masked_frame(1, b'{"a":', fin=False), frame_header(5, FOUR_GIB)) == 1002
        after = memory_kib(relay.pid)
        assert after["VmHWM"] - before["VmHWM"] < RSS_MARGIN_KIB, (before, after)
        assert slowest < HEALTHZ_WITHIN_S
        bystander.ping_pong()
    # Opcodes 3-7 are Relay's refusals, logged; 0xB-0xF are control opcodes, refused by gevent-websocket's header
    # check (over 125 bytes) before Relay's, and a small one by Relay's.
    text = relay.log_text()
    assert text.count("sent a frame refused; closing with 1002 (reserved opcode") >= 5 + 2
    assert "Traceback" not in text and "MemoryError" not in text
    reliability_report.record(
        "websocket_reserved_opcodes", area="Executor WebSocket",
        tried={"reserved opcodes (3-7, 0xB-0xF) each announcing 4 GiB": len(RESERVED_OPCODES),
               "peak RSS growth (MiB)": round((after["VmHWM"] - before["VmHWM"]) / 1024, 1),
               "slowest /healthz meanwhile (ms)": round(slowest * 1000, 1)},
        outcome="each closed with 1002 from its 14-byte header, nothing allocated; another executor untouched",
    )


def test_data_frames_past_the_limit_are_refused_from_the_header(setup: Setup) -> None:
    relay = setup.relay
    assert relay.pid is not None
    before = memory_kib(relay.pid)
    over = MAX_FRAME_BYTES + 1
    with FakeExecutor(relay, APP, setup.key) as bystander:
        bystander.connect_and_identify()
        assert send_and_wait_close(setup, frame_header(1, FOUR_GIB)) == 1009
        assert send_and_wait_close(setup, frame_header(2, over)) == 1009
        # A message begun small, then a continuation that would take it past the limit.
        assert send_and_wait_close(setup, masked_frame(1, b'{"a":', fin=False), frame_header(0, FOUR_GIB)) == 1009
        assert send_and_wait_close(setup, masked_frame(1, b'{"a":', fin=False),
                                   frame_header(0, MAX_FRAME_BYTES - 4, fin=False)) == 1009
        # A continuation with no message begun; a ping over 125 bytes.
        assert send_and_wait_close(setup, frame_header(0, FOUR_GIB)) == 1002
        assert send_and_wait_close(setup, frame_header(9, FOUR_GIB)) == 1002
        slowest = healthz_seconds(relay)
        after = memory_kib(relay.pid)
        assert after["VmHWM"] - before["VmHWM"] < RSS_MARGIN_KIB, (before, after)
        bystander.ping_pong()
    reliability_report.record(
        "websocket_frames_past_limit", area="Executor WebSocket",
        tried={"text/binary/continuation frames announcing past RELAY_MAX_FRAME_BYTES (64 KiB) up to 4 GiB": 4,
               "bare continuation or 4 GiB ping": 2,
               "peak RSS growth (MiB)": round((after["VmHWM"] - before["VmHWM"]) / 1024, 1),
               "/healthz meanwhile (ms)": round(slowest * 1000, 1)},
        outcome="1009 (or 1002) from the header alone, before any payload is read; another executor untouched",
    )
