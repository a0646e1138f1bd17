"""gevent-websocket, adapted: a frame-size limit, serialised sends, pong tracking, and a close that
really ends the connection. The executor actor sees only `send_text` and `close`."""

from __future__ import annotations

import contextlib
import logging
import socket as socketlib
import threading
import time
from typing import Any

from geventwebsocket.exceptions import ProtocolError
from geventwebsocket.websocket import Header, WebSocket

log = logging.getLogger("relay.websocket")


class FrameTooLargeError(ProtocolError):
    """A message larger than RELAY_MAX_FRAME_BYTES: refused before its payload is read."""


class RelayWebSocket(WebSocket):
    """Installed on each upgraded socket by the handler (see server.RelayHandler)."""

    max_message_bytes: int
    send_lock: threading.Lock
    last_pong: float
    tcp: Any

    def prepare(self, max_message_bytes: int, tcp: Any) -> None:
        self.max_message_bytes = max_message_bytes
        # The receive loop answers pings while the actor sends frames: one writer at a time.
        self.send_lock = threading.Lock()
        self.last_pong = time.monotonic()
        self.tcp = tcp
        self._message_bytes = 0

    def read_frame(self) -> Any:
        return _read_frame_checked(self)

    def send_frame(self, message: Any, opcode: int) -> None:
        with self.send_lock:
            super().send_frame(message, opcode)

    def handle_pong(self, header: Any, payload: bytes) -> None:
        self.last_pong = time.monotonic()

    def hard_close(self, code: int, reason: str) -> None:
        """Send a close frame, then shut the TCP socket so the receive loop wakes up at once."""
        if not self.closed:
            try:
                self.close(code, reason.encode()[:120])
            except Exception:
                log.debug("close frame not sent")
        with contextlib.suppress(OSError):
            self.tcp.shutdown(socketlib.SHUT_RDWR)


def _read_frame_checked(ws: RelayWebSocket) -> Any:
    """WebSocket.read_frame with the size check between header and payload."""
    header = Header.decode_header(ws.stream)
    if header.flags:
        raise ProtocolError("reserved bits set")
    if header.opcode in (ws.OPCODE_TEXT, ws.OPCODE_BINARY):
        ws._message_bytes = 0
    if header.opcode in (ws.OPCODE_TEXT, ws.OPCODE_BINARY, ws.OPCODE_CONTINUATION):
        ws._message_bytes += header.length
        if ws._message_bytes > ws.max_message_bytes:
            raise FrameTooLargeError(f"message over {ws.max_message_bytes} bytes")
    if not header.length:
        return header, b""
    payload = ws.raw_read(header.length)
    if len(payload) != header.length:
        raise ProtocolError("unexpected EOF reading frame payload")
    if header.mask:
        payload = header.unmask_payload(payload)
    return header, payload


class GeventFrameSocket:
    """What ExecutorActor holds: text frames out, and a close."""

    def __init__(self, ws: RelayWebSocket) -> None:
        self.ws = ws

    def send_text(self, text: str) -> None:
        self.ws.send(text)

    def close(self, code: int, reason: str) -> None:
        self.ws.hard_close(code, reason)
