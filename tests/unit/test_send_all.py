"""web/transport/sockets.py send_all: what sock.sendall does (every byte, in order), with one send() when the kernel
takes
the whole buffer, the rest through sendall when it does not, and other sockets (TLS) left to their own sendall."""

from __future__ import annotations

from typing import Any

import gevent
import gevent.socket

from relay.web.transport.sockets import send_all


def _pair() -> tuple[Any, Any]:
    a, b = gevent.socket.socketpair()
    return a, b


def _read(sock: Any, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks += chunk
    return bytes(chunks)


def test_a_small_buffer_goes_out_whole() -> None:
    a, b = _pair()
    try:
        send_all(a, b"HTTP/1.1 200 OK\r\n\r\n")
        send_all(a, bytearray(b"second"))
        assert _read(b, 25) == b"HTTP/1.1 200 OK\r\n\r\nsecond"
    finally:
        a.close()
        b.close()


def test_a_buffer_larger_than_the_kernel_takes_arrives_whole_and_in_order() -> None:
    a, b = _pair()
    data = bytes(range(256)) * (16 * 1024)  # 4 MiB: far more than a socket buffer, so send() is partial
    try:
        reader = gevent.spawn(_read, b, len(data))
        send_all(a, data)
        received = reader.get(timeout=30)
        assert len(received) == len(data)
        assert received == data
    finally:
        a.close()
        b.close()


def test_other_sockets_keep_their_own_sendall() -> None:
    class TlsLike:
        def __init__(self) -> None:
            self.sent: list[bytes] = []

        def sendall(self, data: bytes) -> None:
            self.sent.append(bytes(data))

        def send(self, data: bytes) -> int:
            raise AssertionError("send() must not be used on a socket that is not gevent's plain socket")

    sock = TlsLike()
    send_all(sock, b"frame")
    assert sock.sent == [b"frame"]
