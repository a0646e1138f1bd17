"""Connections served at once (RELAY_MAX_HTTP_CONNECTIONS), decided when a connection is accepted.

Counted from the accept until the connection's handler returns: HTTP requests, keep-alive connections between
requests, and executor sockets until their upgrade is done (an executor's socket is then read by its own greenlet
and holds a RELAY_MAX_CONNECTIONS slot instead: web/transport/limits.py). Past the limit a new connection is answered
503
with `Retry-After: 1` at once, without reading anything of it, and closed (over TLS, where nothing can be said
before the TLS handshake, just closed); refusals are summed up in the log every few seconds, not logged one by one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import gevent

from relay.web.transport.limits import ConnectionSlots, Ticket

log = logging.getLogger("relay.server")

AT_CAPACITY = "Relay is serving as many connections as it allows (RELAY_MAX_HTTP_CONNECTIONS); try again shortly"
_BODY = json.dumps({"type": "about:blank", "title": "Service Unavailable", "status": 503,
                    "detail": AT_CAPACITY}).encode()
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"
           b"Content-Length: " + str(len(_BODY)).encode() + b"\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + _BODY)


class HttpConnections:
    """At most ``limit`` connections served at once: `admit` at the accept, `serving` around the connection's
    handler (its greenlet's place, given back when it returns, or earlier by `release_current`)."""

    def __init__(self, limit: int, summary_every_s: float = 10.0) -> None:
        self.slots = ConnectionSlots(limit)
        self._serving: dict[Any, Ticket] = {}  # greenlet -> its connection's ticket
        self._summary_every_s = summary_every_s
        self._summarised = 0  # refusals when last logged
        self._summary_at = time.monotonic()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return self.slots.limit

    def admit(self) -> Ticket | None:
        return Ticket(self.slots.release) if self.slots.acquire() else None

    @contextlib.contextmanager
    def serving(self, ticket: Ticket) -> Iterator[None]:
        current = gevent.getcurrent()
        self._serving[current] = ticket
        try:
            yield
        finally:
            self._serving.pop(current, None)
            ticket.release()

    def release_current(self) -> None:
        """The connection served by this greenlet no longer counts (an executor's, once its path is known)."""
        ticket = self._serving.get(gevent.getcurrent())
        if ticket is not None:
            ticket.release()

    def refuse(self, sock: Any, tls: bool) -> None:
        """Answer a connection past the limit (503, or nothing over TLS) without waiting, and close it."""
        try:
            sock.settimeout(0.0)  # never wait: a new socket's send buffer takes the answer, or nothing is said
            if not tls:
                with contextlib.suppress(OSError):
                    sock.send(REFUSAL)
                with contextlib.suppress(OSError):
                    sock.recv(16384)  # what the client sent already: read, so that closing does not reset
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.close()
        self._summarise()

    def _summarise(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._summary_at < self._summary_every_s and self._summarised:
                return
            refused = self.slots.refused
            log.warning("%d connections refused (503) in the last %.0f s: %d served at once "
                        "(RELAY_MAX_HTTP_CONNECTIONS)", refused - self._summarised, now - self._summary_at,
                        self.slots.open)
            self._summarised, self._summary_at = refused, now
