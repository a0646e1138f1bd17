"""The handler of one HTTP connection under `relay serve` (the server: web/transport/server.py): it checks an
executor's handshake before the upgrade (web/transport/websocket.py), installs RelayWebSocket, caps request bodies
and slow requests (web/transport/body_limits.py), sends small responses with their headers in one write, and
redacts access logs."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.socket
import geventwebsocket.handler
from geventwebsocket.handler import WebSocketHandler

from relay.web.problems import ApiError
from relay.web.transport import body_limits
from relay.web.transport.http_parsing import environ_headers, http_date, log_time, parse_headers
from relay.web.transport.sockets import RelayWebSocket, send_all
from relay.web.transport.websocket import (
    HANDSHAKE,
    HANDSHAKES_BUSY,
    WEBSOCKET_PATH,
    ExecutorLink,
    Handshake,
    check_handshake,
    redact_path,
    start_executor,
)

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

log = logging.getLogger("relay.server")

# The read buffer of each connection (gevent's default is 8 KiB, held for a WebSocket's whole life: a sixth of
# what an idle executor connection costs). Request lines and headers fit; larger reads (bodies, frame payloads)
# bypass the buffer anyway.
READ_BUFFER_BYTES = 2048
# The answer to a handshake past RELAY_MAX_HANDSHAKES_IN_FLIGHT, made once: in a connect storm thousands of them
# come every second, and through Flask (request context, session, routing) and the access log each cost more
# than admitting an executor.
_BUSY_BODY = json.dumps({"type": "about:blank", "title": ApiError(503, HANDSHAKES_BUSY).title, "status": 503,
                         "detail": HANDSHAKES_BUSY}).encode()


def _handshakes_busy(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("503 Service Unavailable", [("Content-Type", "application/problem+json"),
                                               ("Content-Length", str(len(_BUSY_BODY))), ("Retry-After", "1")])
    return [_BUSY_BODY]


# A response up to this size goes out with its headers in one send (pywsgi sends them apart: two syscalls).
COALESCE_BYTES = 64 * 1024

# The handler builds its sockets from this module-level name: ours adds the frame limit, locked
# sends and pong tracking (WebSocket has __slots__, so the class cannot be swapped afterwards).
geventwebsocket.handler.WebSocket = RelayWebSocket


class RelayHandler(WebSocketHandler):
    """Checks the executor handshake before upgrading, installs RelayWebSocket, redacts access logs."""

    _request_timer: gevent.Timeout | None = None
    _metered: body_limits.MeteredReader | None = None
    _capped: body_limits.CappedInput | None = None
    # This request's handshake, kept from run_application for upgrade_websocket, run_websocket and log_request
    # (also in the environ, for Flask's refusal route); like the environ, it lasts until the next request's.
    _handshake: Handshake | None = None
    # pywsgi.WSGIHandler's per-request state that this class reads and sets (WebSocketHandler, its base, has no
    # type information): annotations only, no class attributes.
    application: WSGIApplication
    socket: gevent.socket.socket
    websocket: RelayWebSocket  # set by upgrade_websocket before run_websocket reads it
    provided_date: str | None
    code: int
    status: Any  # pywsgi's own mix: the status line as bytes once start_response ran, a text when a send failed

    def __init__(self, sock: Any, address: Any, server: Any, rfile: Any = None) -> None:
        # No Nagle: pywsgi writes a response's headers and body in two sends, and the body then waited for the
        # client's delayed ACK (40 ms on Linux) on every keep-alive request (bench/FINDINGS.md).
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if rfile is None:  # bodies read under their deadline (web/transport/body_limits.py)
            rfile, self._metered = body_limits.metered_rfile(sock, READ_BUFFER_BYTES)
        super().__init__(sock, address, server, rfile)

    def _admit_body(self) -> None:
        """A request with a body: over its route's cap by `Content-Length`, answered 413 unread (this request's
        application replaced); else read under its deadline, a chunked one counted against the cap."""
        announced = body_limits.announced(self.environ)
        if announced is None:
            return
        chunked, length = announced
        cap = self.server.relay_bodies.cap(body_limits.endpoint_of(self.application, self.environ))
        if length is not None and length > cap:
            self.application = body_limits.too_large(cap)  # this request only, as _handshakes_busy
            self._stop_reading()
            return
        if chunked:
            self._capped = self.environ["wsgi.input"] = body_limits.CappedInput(self.environ["wsgi.input"], cap)
        if self._metered is not None:
            self._metered.clock = self.server.relay_bodies.clock()

    def _stop_reading(self) -> None:
        """Nothing more is read of this connection: no discarding of the rest of the body, no next request."""
        self.close_connection = True
        self.wsgi_input = body_limits.NOTHING_TO_DISCARD

    def run_application(self) -> object:
        self.socket.settimeout(None)  # the request arrived: no deadline while it runs (a WebSocket's life)
        self._handshake = None  # not the previous request's on this connection
        self._admit_body()
        if WEBSOCKET_PATH.match(self.environ.get("PATH_INFO", "")):  # an executor's: its own limits from here
            self.server.relay_http.release_current()
        handshake = self._handshake = check_handshake(self.server.relay, self.environ, self.server.relay_edge,
                                                      getattr(self.server, "relay_handshakes", None))
        if handshake is not None:
            self.environ[HANDSHAKE] = handshake  # for the Flask route that answers a refusal
            if handshake.refusal is not None and handshake.refusal.busy:
                self.application = _handshakes_busy  # this request only: handle_one_request sets it for the next
        try:
            return super().run_application()  # for an upgraded socket: until it closes
        finally:
            if body_limits.was_cut(self._metered, self._capped):
                self._stop_reading()
            if handshake is not None:  # the gate's place was given back once the executor was identified; else now
                handshake.release()

    def upgrade_websocket(self) -> object:
        handshake = self._handshake
        if handshake is None or not handshake.upgrades:
            return None  # not upgraded: Flask answers (401/403/400) as plain HTTP
        return super().upgrade_websocket()

    def run_websocket(self) -> None:
        """WebSocketHandler.run_websocket, except that the socket outlives the request: start_executor starts the
        executor's actor and returns an ExecutorLink (web/transport/websocket.py), which this hands the socket over
        to with the handshake's places; the handler's greenlet then ends, and with it the request's environ, handler
        and buffers."""
        ws = self.websocket
        ws.prepare(self.server.relay.settings.limits.max_frame_bytes, self.socket)
        handshake = self._handshake
        link: ExecutorLink | None = None
        try:
            # Without Flask's dispatch around it (in a connect storm the dispatch was a fifth of the CPU): an
            # upgrade is made only once check_handshake admitted it, and Flask's route answers only refusals.
            assert handshake is not None  # upgrade_websocket upgrades admitted handshakes only
            link = start_executor(self.server.relay, ws, handshake)
        except Exception:
            log.exception("executor socket not started")
            ws.close(1011, b"internal error; see the Relay log")
        finally:
            self.websocket = None  # type: ignore[assignment]  # the handler lets go of the socket
            self.environ["wsgi.websocket"] = None
            if link is None or handshake is None:
                if not ws.closed:
                    ws.close()
            else:
                self._hand_over(ws, link, handshake.hand_off())

    def _hand_over(self, ws: RelayWebSocket, link: ExecutorLink, release: Callable[[], None]) -> None:
        """`release` gives back the handshake's places once the link has closed the socket (it holds nothing of
        this handler)."""
        self.server.keep_open(self.socket)
        ws.detach(self.rfile)
        self.rfile.close()
        self.socket = None  # type: ignore[assignment]  # pywsgi closes nothing: the socket is the link's now
        self.close_connection = True
        link.take_over(release)

    def log_request(self) -> None:
        handshake = self._handshake
        if handshake is not None and handshake.refusal is not None and handshake.refusal.busy:
            return  # counted, and summed up in the log every few seconds (web/transport/websocket.py HandshakeGate)
        super().log_request()

    def format_request(self) -> str:
        # pywsgi's line (its timestamp made once a second, not per request); the raw request line, however
        # malformed, redacted as a whole (not only a path that parsed).
        length = self.response_length or "-"
        delta = "%.6f" % (self.time_finish - self.time_start) if self.time_finish else "-"
        client = self.client_address[0] if isinstance(self.client_address, tuple) else self.client_address
        status = (self._orig_status or self.status or "000").split()[0]
        return redact_path(f'{client or "-"} - - [{log_time()}] "{self.requestline or ""}" {status} {length} {delta}')

    def log_error(self, msg: str, *args: object) -> None:
        # gevent logs the request line on errors too (an invalid one quoted as sent): never with a key in it.
        text = msg % args if args else msg
        log.warning("%s", redact_path(text))

    def handle_one_request(self) -> object:
        # The request line and headers must arrive within RELAY_HANDSHAKE_TIMEOUT_S, in total: an idle or
        # trickling connection holds nothing for longer. One timer per connection, started for each request's
        # line and headers (read_requestline) and stopped once they are in (read_request). The socket itself has
        # no deadline (run_application lifts the TLS handshake's): the timer bounds the reads, and a socket
        # timeout would cost a timer of its own on every read.
        try:
            result = super().handle_one_request()
            cut = body_limits.was_cut(self._metered, self._capped)
            return None if cut else result  # None: the connection is closed
        finally:
            if self._request_timer is not None:
                self._request_timer.cancel()
            if self._metered is not None:
                self._metered.clock = None
            self._capped = None

    def read_requestline(self) -> str:
        timer = self._request_timer
        if timer is None:
            timer = self._request_timer = gevent.Timeout(self.server.relay.settings.limits.handshake_timeout_s,
                                                         TimeoutError)
        timer.cancel()
        timer.start()
        try:
            return super().read_requestline()
        except BaseException:
            timer.cancel()
            raise

    def read_request(self, raw_requestline: str) -> object:
        try:
            return super().read_request(raw_requestline)
        finally:
            if self._request_timer is not None:
                self._request_timer.cancel()

    def get_environ(self) -> object:
        environ = super().get_environ()
        proxies = self.server.relay_proxies
        # behind a trusted proxy: the caller it names (web/transport/forwarded.py)
        if proxies and "REMOTE_ADDR" in environ:
            environ["REMOTE_ADDR"] = proxies.client(environ["REMOTE_ADDR"], environ.get("HTTP_X_FORWARDED_FOR"))
        return environ

    def MessageClass(self, fp: object, *args: object) -> object:
        return parse_headers(fp)

    def _headers(self) -> object:
        return environ_headers(self.headers)

    def finalize_headers(self) -> None:
        if self.provided_date is None:  # pywsgi's Date header, its text made once a second
            self.response_headers.append((b"Date", http_date()))
            self.provided_date = "relay"
        super().finalize_headers()

    def _sendall(self, data: Any) -> None:
        # pywsgi's, through send_all (one send for a small response, no SO_SNDBUF query per call).
        try:
            send_all(self.socket, data)
        except OSError as ex:
            self.status = f"socket error: {ex}"
            if self.code > 0:
                self.code = -self.code
            raise
        self.response_length += len(data)

    def _write_with_headers(self, data: object) -> None:
        # pywsgi's, with a small body in the same send as the status line and headers (pywsgi sends them apart).
        self.headers_sent = True
        self.finalize_headers()
        towrite = bytearray(b"HTTP/1.1 ")
        towrite += self.status
        towrite += b"\r\n"
        for header, value in self.response_headers:
            towrite += header
            towrite += b": "
            towrite += value
            towrite += b"\r\n"
        towrite += b"\r\n"
        if self.response_use_chunked or not isinstance(data, bytes) or len(data) > COALESCE_BYTES:
            self._sendall(towrite)
            self._write(data)  # as pywsgi does (nothing for an empty body, chunk framing...)
            return
        towrite += data
        self._sendall(towrite)
