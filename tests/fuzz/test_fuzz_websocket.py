"""Hypothesis against Relay's WebSocket frame reading (web/transport/sockets.py): ``unmask``, which replaces
gevent-websocket's per-byte Python loop, gives exactly what that loop gives; and every frame header is decided
before its payload is read (reserved opcodes 1002, messages past the limit 1009, control frames' 125 bytes)."""

from __future__ import annotations

import struct

from geventwebsocket.exceptions import ProtocolError
from geventwebsocket.websocket import Header
from hypothesis import given
from hypothesis import strategies as st

from relay.web.transport.sockets import FrameRefusedError, RelayWebSocket, _read_frame_checked, unmask
from tests.fuzz.hypothesis_settings import fuzz


@fuzz(300)
@given(mask=st.binary(min_size=4, max_size=4), payload=st.binary(max_size=5000))
def test_unmask_is_gevent_websockets_unmask(mask: bytes, payload: bytes) -> None:
    header = Header()
    header.mask = mask
    header.length = len(payload)
    assert unmask(mask, payload) == bytes(header.unmask_payload(payload))
    assert unmask(mask, unmask(mask, payload)) == payload  # masking is its own inverse


# ---------------------------------------------------------------------- frame headers (issue 34, point 5)

LIMIT = 4096
_RESERVED = [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF]


class _HeaderOnly:
    """A stream holding one frame's header and nothing else: reading past it (the payload) fails the test."""

    def __init__(self, header: bytes) -> None:
        self.data = header

    def read(self, n: int) -> bytes:
        assert len(self.data) >= n, f"the payload was read ({n} bytes asked past the header)"
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk


def _masked_header(opcode: int, length: int, fin: bool) -> bytes:
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        lengths = bytes((0x80 | length,))
    elif length < 1 << 16:
        lengths = bytes((0x80 | 126,)) + struct.pack("!H", length)
    else:
        lengths = bytes((0x80 | 127,)) + struct.pack("!Q", length)
    return bytes((first,)) + lengths + b"\x01\x02\x03\x04"


def _socket(fragmented: bool, so_far: int) -> RelayWebSocket:
    ws = RelayWebSocket.__new__(RelayWebSocket)
    ws.prepare(LIMIT, tcp=None)
    ws._fragmented, ws._message_bytes = fragmented, so_far
    return ws


def _read(ws: RelayWebSocket, header: bytes) -> int | None:
    """The close code a frame with only this header gets (None: admitted, its payload to be read next)."""
    ws.stream = _HeaderOnly(header)
    ws.raw_read = ws.stream.read
    try:
        _read_frame_checked(ws)
    except FrameRefusedError as refused:
        return refused.code
    except ProtocolError:  # gevent-websocket's own header checks (a control frame over 125 bytes): 1002
        return 1002
    except AssertionError:
        return None  # it went on to read the payload: the header was admitted
    return None


@fuzz(400)
@given(opcode=st.sampled_from(_RESERVED), length=st.integers(0, 2**63 - 1), fin=st.booleans(),
       fragmented=st.booleans())
def test_reserved_opcodes_are_refused_from_the_header(opcode: int, length: int, fin: bool, fragmented: bool) -> None:
    """Whatever a reserved opcode announces (up to 2^63-1 bytes), it is refused with 1002 before its payload."""
    assert _read(_socket(fragmented, 0), _masked_header(opcode, length, fin)) == 1002


@fuzz(400)
@given(opcode=st.sampled_from([0, 1, 2]), length=st.integers(0, 2**63 - 1), fin=st.booleans(),
       so_far=st.integers(0, LIMIT))
def test_data_frames_past_the_limit_are_refused_from_the_header(opcode: int, length: int, fin: bool,
                                                                so_far: int) -> None:
    """A text, binary or continuation frame whose message would pass the limit is refused (1009) before its
    payload; a continuation without a message begun, or a new message inside one, is a protocol error (1002)."""
    fragmented = opcode == 0  # a continuation continues a message begun
    code = _read(_socket(fragmented, so_far), _masked_header(opcode, length, fin))
    total = length + (so_far if opcode == 0 else 0)
    assert code == (1009 if total > LIMIT else None)
    assert _read(_socket(not fragmented, 0), _masked_header(opcode, min(length, LIMIT), fin)) == 1002


@fuzz(300)
@given(opcode=st.sampled_from([8, 9, 10]), length=st.integers(0, 2**63 - 1), fin=st.booleans())
def test_control_frames_keep_the_125_byte_rule(opcode: int, length: int, fin: bool) -> None:
    code = _read(_socket(False, 0), _masked_header(opcode, length, fin))
    assert code == (None if length <= 125 and fin else 1002)
