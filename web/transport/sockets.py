"""gevent-websocket, adapted: a frame-size limit, serialised sends, pong tracking, and a close that
really ends the connection. The executor actor sees only `send_text` and `close`."""

from __future__ import annotations

import contextlib
import functools
import logging
import socket as socketlib
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import gevent
import gevent.socket
import gevent.ssl
from geventwebsocket.exceptions import ProtocolError, WebSocketError
from geventwebsocket.websocket import Header, WebSocket

log = logging.getLogger("relay.websocket")
# A ping with an empty payload, as the server sends it: FIN + opcode 9, unmasked, length 0.
_PING_FRAME = bytes((0x80 | WebSocket.OPCODE_PING, 0))
# What SocketReader asks the socket for at least: a frame's header, mask and a small payload in one call.
READ_CHUNK_BYTES = 4096
# Past this many bytes still to come, a payload is received into a buffer of its exact size.
_LARGE_READ_BYTES = 64 * 1024


def send_all(sock: Any, data: bytes | bytearray) -> None:
    """``sock.sendall(data)``, in one ``send`` when the kernel takes it all (a small frame or response always).
    gevent's sendall asks the socket for SO_SNDBUF and slices a memoryview on every call: 4 % of the request
    path's CPU (bench/FINDINGS.md). TLS sockets keep their own sendall."""
    if type(sock) is not gevent.socket.socket:
        sock.sendall(data)
        return
    sent = sock.send(data)
    if sent < len(data):
        sock.sendall(memoryview(data)[sent:])


class FrameRefusedError(Exception):
    """A frame refused from its header alone, before any of its payload is read or allocated; the socket is
    closed with ``code``.

    Not a ProtocolError (nor any socket.error): WebSocket.receive() swallows those into a silent 1002 close, and
    the receive loop must see this one to log it and close with its code."""

    code = 1002
    reason = "protocol error"


class FrameTooLargeError(FrameRefusedError):
    """A message larger than RELAY_MAX_FRAME_BYTES: closed with 1009."""

    code = 1009
    reason = "message too big"


class _NoApp:
    """What gevent-websocket tells of a socket closing (current_app.on_close): nobody listens."""

    @staticmethod
    def on_close(reason: object) -> None:
        del reason


_NO_APP = _NoApp()


class SocketReader:
    """The stream a detached RelayWebSocket reads frames from: the socket itself. Between reads it holds only the
    bytes a read received past what was asked (usually none), where the HTTP request's buffered reader held a
    buffer of its own for the socket's whole life."""

    __slots__ = ("pending", "sock")

    def __init__(self, sock: Any, pending: bytes = b"") -> None:
        self.sock = sock
        self.pending = pending

    def read(self, n: int) -> bytes:
        """`n` bytes, fewer only at the end of the stream."""
        pending = self.pending
        have = len(pending)
        if have >= n:
            self.pending = pending[n:]
            return pending[:n]
        if n - have >= _LARGE_READ_BYTES:
            return self._read_large(n)
        chunks = [pending]
        while have < n:
            chunk = self.sock.recv(max(n - have, READ_CHUNK_BYTES))
            if not chunk:
                break
            chunks.append(chunk)
            have += len(chunk)
        data = b"".join(chunks)
        self.pending = data[n:]
        return data[:n]

    def _read_large(self, n: int) -> bytes:
        buffer = bytearray(n)
        have = len(self.pending)
        buffer[:have] = self.pending
        self.pending = b""
        view = memoryview(buffer)
        while have < n:
            got = self.sock.recv_into(view[have:])
            if not got:
                break
            have += got
        view.release()
        if have < n:
            del buffer[have:]
        return buffer  # type: ignore[return-value]  # bytes-like, as every reader of a payload takes it

    def buffered(self) -> bool:
        """Whether bytes are waiting here or in the TLS layer, which the socket's readiness does not show."""
        if self.pending:
            return True
        pending = getattr(self.sock, "pending", None)  # SSLSocket: decrypted bytes not read yet
        return bool(pending is not None and pending())


def _already_buffered(rfile: Any, sock: Any) -> bytes:
    """The bytes the HTTP request's buffered reader holds past the request (a client that sent frames right
    behind its upgrade), plus what the socket has at hand, without waiting for more."""
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        return bytes(rfile.peek(0))  # the buffer, or one read of the socket when it is empty (none: b"")
    except (OSError, ValueError):  # TLS: nothing decrypted yet; or the socket already broken (the reader sees it)
        return b""
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(timeout)


class RelayWebSocket(WebSocket):
    """Installed on each upgraded socket by the handler (see handler.RelayHandler)."""

    if TYPE_CHECKING:  # the type checker sees the slots of WebSocket this class sets too
        __slots__ = ("_fragmented", "_message_bytes", "closed", "environ", "handler", "last_pong",
                     "max_message_bytes", "raw_read", "raw_write", "send_lock", "stream", "tcp")
    else:
        __slots__ = ("_fragmented", "_message_bytes", "last_pong", "max_message_bytes", "send_lock", "tcp")

    max_message_bytes: int
    send_lock: threading.Lock
    last_pong: float
    tcp: Any
    if TYPE_CHECKING:  # WebSocket's own slots (gevent-websocket has no type information) that this class sets
        closed: bool
        stream: SocketReader | None
        raw_read: Callable[[int], bytes] | None
        raw_write: Callable[[bytes], None] | None
        handler: Any
        environ: dict[str, Any] | None  # the WSGI environ

    def prepare(self, max_message_bytes: int, tcp: object) -> None:
        self.max_message_bytes = max_message_bytes
        # The receive loop answers pings while the actor sends frames: one writer at a time.
        self.send_lock = threading.Lock()
        self.last_pong = time.monotonic()
        self.tcp = tcp
        self._message_bytes = 0
        self._fragmented = False  # a text or binary message begun and not finished (its continuations to come)

    def detach(self, rfile: object) -> None:
        """Once the HTTP request is over (handler.RelayHandler hands the socket over): read frames from the
        socket itself, starting with what the request's reader already holds, and keep nothing of the request
        (handler, environ, the reader and its buffer)."""
        if self.closed:
            return
        pending = _already_buffered(rfile, self.tcp)
        self.stream = SocketReader(self.tcp, pending)
        self.raw_read = self.stream.read
        self.raw_write = functools.partial(send_all, self.tcp)
        self.handler = None
        self.environ = None

    @property
    def current_app(self) -> object:
        return _NO_APP

    def read_frame(self) -> object:
        return _read_frame_checked(self)

    def send_frame(self, message: object, opcode: int) -> None:
        with self.send_lock:
            super().send_frame(message, opcode)

    def handle_pong(self, header: object, payload: bytes) -> None:
        self.last_pong = time.monotonic()

    def validate_utf8(self, payload: object) -> None:
        """Skipped: gevent-websocket checks UTF-8 in pure Python, twice per text message (each frame, then the
        whole), about 0.3 s of CPU per MiB during which no other greenlet runs: one executor's 64 MiB answer would
        stall every socket for half a minute. The message's final decode (C, strict) still refuses invalid
        UTF-8, and the socket is closed with 1007 as before."""
        del payload

    def close(self, code: int = 1000, message: Any = b"") -> None:
        """WebSocket.close, but the close frame carries `code` (gevent-websocket 0.10.1 drops it and sends
        str(message) alone, so peers read the reason's first two bytes as the code)."""
        if self.closed:
            return
        if isinstance(message, str):
            message = message.encode()
        payload = struct.pack("!H", code) + bytes(message or b"")[:123]
        try:
            self.send_frame(payload, self.OPCODE_CLOSE)
        except WebSocketError:
            log.debug("close frame not sent")
        finally:
            self.closed = True
            self.stream = None
            self.raw_write = None
            self.raw_read = None
            self.environ = None

    def hard_close(self, code: int, reason: str) -> None:
        """Send a close frame, then shut the TCP socket so the receive loop wakes up at once."""
        if not self.closed:
            try:
                self.close(code, reason.encode()[:120])
            except Exception:
                log.debug("close frame not sent")
        with contextlib.suppress(OSError):
            self.tcp.shutdown(socketlib.SHUT_RDWR)


# The opcodes of RFC 6455: continuation, text, binary, close, ping, pong. 3-7 and 0xB-0xF are reserved.
_DATA_OPCODES = frozenset((WebSocket.OPCODE_TEXT, WebSocket.OPCODE_BINARY))
_KNOWN_OPCODES = frozenset((WebSocket.OPCODE_CONTINUATION, *_DATA_OPCODES, WebSocket.OPCODE_CLOSE,
                            WebSocket.OPCODE_PING, WebSocket.OPCODE_PONG))
_MAX_CONTROL_PAYLOAD = 125


def check_frame_header(ws: RelayWebSocket, header: Any) -> None:
    """Refuse a frame from its header alone, before its payload is read: a reserved opcode (1002, whatever
    length it announces: gevent-websocket would read and allocate it first), a control frame over 125 bytes or
    fragmented (1002), a continuation without a message begun or a new message inside one (1002), and a
    message (all its frames) over RELAY_MAX_FRAME_BYTES (1009)."""
    opcode = header.opcode
    if opcode not in _KNOWN_OPCODES:
        raise FrameRefusedError(f"reserved opcode {opcode}")
    if opcode >= WebSocket.OPCODE_CLOSE:
        if header.length > _MAX_CONTROL_PAYLOAD or not header.fin:
            raise FrameRefusedError(f"control frame (opcode {opcode}) over 125 bytes or fragmented")
        return
    if opcode in _DATA_OPCODES:
        if ws._fragmented:
            raise FrameRefusedError("a new message inside a fragmented one")
        ws._message_bytes = 0
    elif not ws._fragmented:
        raise FrameRefusedError("a continuation frame without a message begun")
    ws._message_bytes += header.length
    if ws._message_bytes > ws.max_message_bytes:
        raise FrameTooLargeError(f"message over {ws.max_message_bytes} bytes")
    ws._fragmented = not header.fin


def _read_frame_checked(ws: RelayWebSocket) -> object:
    """WebSocket.read_frame with the header checked (check_frame_header) between header and payload."""
    header = Header.decode_header(ws.stream)
    if header.flags:
        raise ProtocolError("reserved bits set")
    check_frame_header(ws, header)
    if not header.length:
        return header, b""
    payload = cast("Callable[[int], bytes]", ws.raw_read)(header.length)  # None only once closed
    if len(payload) != header.length:
        raise ProtocolError("unexpected EOF reading frame payload")
    if header.mask:
        payload = unmask(header.mask, payload)
    return header, payload


def unmask(mask: bytes, payload: bytes) -> bytes:
    """XOR ``payload`` with the 4-byte ``mask``, repeated: what Header.unmask_payload does, but in C (one big
    integer XOR) rather than a Python loop over every byte (about 0.4 s per MiB, blocking every greenlet)."""
    n = len(payload)
    if not n:
        return b""
    key = (bytes(mask) * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


class GeventFrameSocket:
    """What ExecutorActor holds: text frames out, pings out with the time of the last pong, and a close.
    (Pings *from* the executor are answered by gevent-websocket itself, in the receive loop.)"""

    def __init__(self, ws: RelayWebSocket) -> None:
        self.ws = ws

    def send_text(self, text: str) -> None:
        self.ws.send(text)

    def ping(self) -> bool:
        """A ping frame, sent without ever blocking: this runs in the scheduler's thread, which every timer of
        the process shares. False (not sent, try again later) when another greenlet is sending on this socket,
        the kernel's send buffer is full or the socket is already closed; raises when the socket is broken."""
        ws = self.ws
        if ws.closed or not ws.send_lock.acquire(False):  # closed: the receive loop reports it, not the ping
            return False
        try:
            if isinstance(ws.tcp, gevent.ssl.SSLSocket):
                # TLS cannot give up half-way through a record: send it from a greenlet of its own, which may wait.
                gevent.spawn(self._ping_waiting)
                return True
            try:
                sent = ws.tcp.send(_PING_FRAME, 0, 0.0)  # timeout 0: raises rather than waits
            except BlockingIOError:
                return False
            except OSError as error:
                raise WebSocketError("socket dead") from error
            if sent != len(_PING_FRAME):  # a ping half sent cannot be taken back: the stream is broken
                raise WebSocketError("ping frame cut short")
            return True
        finally:
            ws.send_lock.release()

    def _ping_waiting(self) -> None:
        with contextlib.suppress(Exception):  # a broken socket is the receive loop's to notice
            self.ws.send_frame("", self.ws.OPCODE_PING)

    def last_pong(self) -> float:
        return self.ws.last_pong

    def close(self, code: int, reason: str) -> None:
        self.ws.hard_close(code, reason)
