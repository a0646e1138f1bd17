"""Request bodies at the edge (issue 34): each route's size cap, decided from `Content-Length` before anything is
read (413), counted as read for a chunked body; and a deadline with a minimum rate, enforced on every read of the
connection's socket while a body is being read (408, then the connection is closed).

Slow headers are bounded by one timer per request (web/transport/handler.py, RELAY_HANDSHAKE_TIMEOUT_S); a body gets
the same
first allowance, plus one second for every RELAY_BODY_MIN_BYTES_PER_S bytes received, and RELAY_BODY_TIMEOUT_S at
most: a trickle of a byte a second is cut after about RELAY_HANDSHAKE_TIMEOUT_S, a large body at a fair rate gets
the time it needs. The rate is counted where bytes arrive (the raw socket reader under the buffered one), so a
read waiting for many bytes is timed by what has come so far, not by what it asked for.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from werkzeug.exceptions import HTTPException, RequestEntityTooLarge, RequestTimeout

if TYPE_CHECKING:
    from relay.actors.configuration.settings import Settings

# Console forms (login, keys, settings...) are a few fields each.
FORM_BODY_BYTES = 64 * 1024
# The routes that take large bodies (Flask endpoints), capped by RELAY_MAX_LARGE_BODY_BYTES.
LARGE_BODY_ENDPOINTS = frozenset({"v2_workflows.import_workflow", "relay_raw.raw_request"})
# The HA forward carries one executor frame in an envelope (web/api/cluster.py checks the same bound).
FORWARD_ENDPOINT = "cluster.forward"
FORWARD_ENVELOPE_BYTES = 64 * 1024


class BodyTooSlowError(RequestTimeout, TimeoutError):
    """The body did not arrive within its deadline. An HTTPException, so that a view reading it answers 408; and a
    TimeoutError (an OSError), so that pywsgi discarding the rest of a body after the response just stops."""

    description = ("The request body did not arrive in time (RELAY_BODY_TIMEOUT_S, RELAY_BODY_MIN_BYTES_PER_S); "
                   "the connection is closed.")


@dataclass
class BodyClock:
    """One body's deadline: ``grace_s`` from its start, plus a second for every ``min_rate`` bytes received, at
    most ``timeout_s``."""

    grace_s: float
    timeout_s: float
    min_rate: int
    started: float = field(default_factory=time.monotonic)
    received: int = 0
    expired: bool = False

    def deadline(self) -> float:
        return self.started + min(self.timeout_s, self.grace_s + self.received / self.min_rate)


class MeteredReader(io.RawIOBase):
    """The raw stream under a connection's buffered reader. While a body is read (``clock`` set), each receive
    waits at most until the body's deadline as it stands, and what arrives is counted; otherwise it is the
    socket's reader as it was."""

    def __init__(self, raw: Any, sock: Any) -> None:
        super().__init__()
        self.raw = raw
        self.sock = sock
        self.clock: BodyClock | None = None

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return int(self.raw.fileno())

    def readinto(self, buffer: object) -> int | None:
        clock = self.clock
        if clock is None:
            return self.raw.readinto(buffer)
        left = clock.deadline() - time.monotonic()
        if clock.expired or left <= 0:
            clock.expired = True
            raise BodyTooSlowError
        previous = self.sock.gettimeout()
        self.sock.settimeout(left)
        try:
            got = self.raw.readinto(buffer)
        except TimeoutError:
            clock.expired = True
            raise BodyTooSlowError from None
        finally:
            self.sock.settimeout(previous)
        clock.received += got or 0
        return got

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            super().close()


def metered_rfile(sock: Any, buffer_bytes: int) -> tuple[io.BufferedReader, MeteredReader]:
    """A connection's buffered reader (as ``sock.makefile("rb", buffer_bytes)``) over a MeteredReader."""
    metered = MeteredReader(sock.makefile("rb", buffering=0), sock)
    return io.BufferedReader(metered, buffer_bytes), metered


class CappedInput:
    """A chunked body (no `Content-Length` to decide from) counted as the application reads it: past ``cap``
    bytes, 413."""

    def __init__(self, stream: Any, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        self.read_bytes = 0
        self.over = False

    def _count(self, data: bytes) -> bytes:
        self.read_bytes += len(data)
        if self.read_bytes > self.cap:
            self.over = True
            raise RequestEntityTooLarge(f"The request body is larger than this route takes ({self.cap} bytes).")
        return data

    def read(self, length: int | None = None) -> bytes:
        if length is not None and length >= 0:
            return self._read_some(length)
        parts = []  # all of it: read a piece at a time, so that an endless body is refused once past the cap
        while part := self._read_some(64 * 1024):
            parts.append(part)
        return b"".join(parts)

    def _read_some(self, length: int) -> bytes:
        if self.over:
            raise RequestEntityTooLarge
        return self._count(self.stream.read(min(length, self.cap - self.read_bytes + 1)))

    def readline(self, size: int | None = None) -> bytes:
        if self.over:
            raise RequestEntityTooLarge
        return self._count(self.stream.readline(size))

    def readlines(self, hint: int | None = None) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


class BodyCaps:
    """Each route's largest body, from the settings."""

    def __init__(self, settings: Settings) -> None:
        self.default = settings.max_body_bytes
        self.large = settings.max_large_body_bytes
        self.forward = settings.limits.max_frame_bytes + FORWARD_ENVELOPE_BYTES
        self.grace_s = settings.limits.handshake_timeout_s
        self.timeout_s = settings.body_timeout_s
        self.min_rate = settings.body_min_bytes_per_s

    def cap(self, endpoint: str | None) -> int:
        if endpoint is None:
            return self.default
        if endpoint in LARGE_BODY_ENDPOINTS:
            return self.large
        if endpoint == FORWARD_ENDPOINT:
            return self.forward
        if endpoint.startswith("console."):
            return min(FORM_BODY_BYTES, self.default)
        return self.default

    def clock(self) -> BodyClock:
        return BodyClock(self.grace_s, self.timeout_s, self.min_rate)


def endpoint_of(app: object, environ: dict[str, Any]) -> str | None:
    """The Flask endpoint a request goes to (None: no route, or not a Flask application)."""
    url_map = getattr(app, "url_map", None)
    if url_map is None:
        return None
    try:
        endpoint, _args = url_map.bind_to_environ(environ).match()
    except HTTPException:  # 404, 405, a redirect: no route's cap, the default one
        return None
    return str(endpoint)


def announced(environ: dict[str, Any]) -> tuple[bool, int | None] | None:
    """Whether a request's body is chunked, and its `Content-Length`; None for a request without a body."""
    chunked = environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked"
    try:
        length: int | None = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = None
    return (chunked, length) if chunked or length else None


def was_cut(metered: MeteredReader | None, capped: CappedInput | None) -> bool:
    """Whether the body being read was cut (too slow, or a chunked one past its cap): nothing more is read."""
    clock = metered.clock if metered is not None else None
    return bool((clock is not None and clock.expired) or (capped is not None and capped.over))


def too_large(cap: int) -> Any:
    """A WSGI application answering 413 (the body unread; the connection is closed after it)."""
    detail = f"the request body is larger than this route takes ({cap} bytes)"
    body = json.dumps({"type": "about:blank", "title": "Content Too Large", "status": 413,
                       "detail": detail}).encode()

    def answer(environ: Mapping[str, object], start_response: Any) -> list[bytes]:
        del environ
        start_response("413 Content Too Large", [("Content-Type", "application/problem+json"),
                                                 ("Content-Length", str(len(body))), ("Connection", "close")])
        return [body]

    return answer


class NothingToDiscard:
    """Stands for a request's input once its body is not to be read any further (refused, too slow, over its
    cap): pywsgi would otherwise read and discard the rest after the response, at the sender's pace."""

    @staticmethod
    def _discard() -> None:
        return None


NOTHING_TO_DISCARD = NothingToDiscard()
