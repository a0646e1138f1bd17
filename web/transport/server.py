"""`relay serve`: gevent's WSGI server with gevent-websocket, our handler, and a clean shutdown."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.socket
import geventwebsocket.handler
from flask import Flask, Response
from gevent.event import Event
from gevent.pywsgi import WSGIServer
from geventwebsocket.handler import WebSocketHandler

from relay.actors.configuration.settings import ConfigError, Settings
from relay.actors.identity_claim import IdentityInUse, claim_identity
from relay.actors.runtime import Runtime
from relay.web.cli.workers import worker_sockets
from relay.web.problems import ApiError, problem_response
from relay.web.transport import body_limits
from relay.web.transport.forwarded import TrustedProxies
from relay.web.transport.gc_tuning import tune_gc
from relay.web.transport.http_connections import HttpConnections
from relay.web.transport.http_parsing import environ_headers, http_date, log_time, parse_headers
from relay.web.transport.limits import STORE_ERRORS, STORE_UNAVAILABLE, EdgeLimits
from relay.web.transport.log_secrets import install_secret_filter
from relay.web.transport.sockets import RelayWebSocket, send_all
from relay.web.transport.websocket import (
    HANDSHAKE,
    HANDSHAKES_BUSY,
    WEBSOCKET_PATH,
    ExecutorLink,
    HandshakeGate,
    check_handshake,
    handshake_of,
    redact_path,
    start_executor,
)
from relay.web.wsgi import create_app

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

log = logging.getLogger("relay.server")

# The listen backlog: gevent's default (128) overflows in a connect storm of thousands, and a connection dropped
# there costs the client a SYN retransmit (1 s, then 3 s...). The kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG = 4096
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
        self._admit_body()
        if WEBSOCKET_PATH.match(self.environ.get("PATH_INFO", "")):  # an executor's: its own limits from here
            self.server.relay_http.release_current()
        handshake = check_handshake(self.server.relay, self.environ, self.server.relay_edge,
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
        handshake = handshake_of(self.environ)
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
        handshake = handshake_of(self.environ)
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
        handshake = handshake_of(self.environ)
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




class RelayServer(WSGIServer):
    """With TLS, the handshake too must be done within RELAY_HANDSHAKE_TIMEOUT_S; one that fails (a plain-HTTP
    client, a client that does not trust the certificate, a silent one) costs a log line, not a traceback.
    A socket handed over (`keep_open`: an executor's, read on once its request is over) is not closed here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept: dict[int, Any] = {}  # id -> socket, from keep_open until its handler has returned

    def keep_open(self, sock: object) -> None:
        """Leave `sock` open when its handler returns (whoever took it over closes it)."""
        self._kept[id(sock)] = sock

    def _release_kept(self, sock: object) -> bool:
        """True (and forgotten) if `sock` was kept open."""
        return self._kept.pop(id(sock), None) is sock

    def do_handle(self, *args: object) -> None:
        """BaseServer.do_handle with RELAY_MAX_HTTP_CONNECTIONS: a place taken at the accept (else 503 at once),
        held while the connection's handler runs (web/transport/http_connections.py)."""
        connections: HttpConnections = self.relay_http  # type: ignore[attr-defined]
        ticket = connections.admit()
        if ticket is None:
            connections.refuse(args[0], tls=self.ssl_enabled)
            return
        try:
            self._spawn(self._handle_counted, ticket, *args)  # type: ignore[attr-defined]
        except BaseException:
            ticket.release()
            self.do_close(*args)
            raise

    def _handle_counted(self, ticket: object, *args: object) -> None:
        try:
            with self.relay_http.serving(ticket):  # type: ignore[attr-defined]
                self._handle(*args)  # type: ignore[attr-defined]
        finally:
            self.do_close(*args)

    def do_close(self, sock: Any, *args: Any) -> None:
        if not self._release_kept(sock):
            super().do_close(sock, *args)

    def wrap_socket_and_handle(self, client_socket: Any, address: Any) -> Any:
        client_socket.settimeout(self.relay.settings.limits.handshake_timeout_s)  # type: ignore[attr-defined]
        try:
            tls_socket = self.wrap_socket(client_socket, **self.ssl_args)  # type: ignore[misc, arg-type]  # stubs
        except (ssl.SSLError, OSError) as error:
            reason = getattr(error, "reason", None) or type(error).__name__
            log.info("TLS handshake from %s failed (%s)", address[0] if address else "?", reason)
            client_socket.close()
            return None
        try:
            return self.handle(tls_socket, address)
        finally:
            if not self._release_kept(tls_socket):
                tls_socket.close()


class _AccessLog:
    """gevent writes access lines to a file-like object; send them to logging instead."""

    def write(self, line: str) -> None:
        line = line.rstrip()
        if line:
            logging.getLogger("relay.access").info("%s", line)


def install_store_errors(app: Flask) -> None:
    """The store failing under a request (web/transport/limits.py STORE_ERRORS): 503 saying so, not a bare 500."""
    def _store_unavailable(error: Exception) -> Response:
        # The reason's first line ("disk I/O error", "database is locked", "connection refused"...), not more:
        # a driver's detail lines can quote values.
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        log.error("store unavailable during a request: %s: %s", type(error).__name__, reason)
        response = problem_response(ApiError(503, STORE_UNAVAILABLE))
        response.headers["Retry-After"] = "5"
        return response

    for kind in STORE_ERRORS:
        app.register_error_handler(kind, _store_unavailable)


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The server's TLS context (TLS 1.2 or later) from RELAY_TLS_CERT/RELAY_TLS_KEY, or None for plain HTTP."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    except (ssl.SSLError, OSError) as error:
        reason = getattr(error, "reason", None) or type(error).__name__
        raise ConfigError(f"RELAY_TLS_CERT/RELAY_TLS_KEY cannot be used ({reason})") from None
    return context


def _close_listeners(servers: list[RelayServer]) -> None:
    for server in servers:
        with contextlib.suppress(Exception):
            server.close()


def _identity_free(rt: Runtime) -> bool:
    """Whether no other live process is this instance (actors/identity_claim.py); says why not."""
    settings = rt.settings
    try:
        held_by_dead = claim_identity(rt.table, settings.instance_id, timeout_s=settings.instance_timeout_s,
                                      heartbeat_interval_s=settings.heartbeat_interval_s)
    except IdentityInUse as refusal:
        log.error("not starting: %s", refusal)
        return False
    if held_by_dead is not None:
        log.info("instance %s last beat %.1f s ago and no longer beats (its process ended without a clean stop): "
                 "starting as it", settings.instance_id, held_by_dead)
    return True


def _servers(settings: Settings, context: ssl.SSLContext | None, public: socket.socket | None,
             private: socket.socket | None) -> list[RelayServer]:
    """The servers (not bound yet, no application yet): one on the address, or a worker's two sockets."""
    tls: dict[str, Any] = {"ssl_context": context} if context is not None else {}
    servers = []
    for listener in ([public, private] if public is not None else [(settings.host, settings.port)]):
        # A socket comes with its own backlog (gevent refuses one then); an address is bound here.
        backlog = {"backlog": LISTEN_BACKLOG} if isinstance(listener, tuple) else {}
        server = RelayServer(listener, None, handler_class=RelayHandler, log=_AccessLog(), error_log=_AccessLog(),
                             **backlog, **tls)
        # gevent-websocket's access-log logger without the do-nothing handler it would add (it emits only in its
        # debug mode): the lines propagate to the root handler as they did, one handler pass fewer each.
        server.logger = logging.getLogger("geventwebsocket.handler")  # type: ignore[attr-defined]
        server.relay_edge = EdgeLimits(settings.handshake_failures_per_min, settings.max_connections)  # type: ignore[attr-defined]
        server.relay_handshakes = HandshakeGate(settings.max_handshakes_in_flight)  # type: ignore[attr-defined]
        server.relay_proxies = TrustedProxies(settings.trusted_proxies)  # type: ignore[attr-defined]
        server.relay_bodies = body_limits.BodyCaps(settings)  # type: ignore[attr-defined]
        server.relay_http = HttpConnections(settings.max_http_connections)  # type: ignore[attr-defined]
        servers.append(server)
    if len(servers) == 2:  # one worker's limits hold over both its ports
        servers[1].relay_edge, servers[1].relay_handshakes = servers[0].relay_edge, servers[0].relay_handshakes  # type: ignore[attr-defined]
        servers[1].relay_http = servers[0].relay_http  # type: ignore[attr-defined]
    return servers


def serve(settings: Settings, worker: int | None = None) -> int:
    """Run one instance until SIGTERM/SIGINT. `worker`: this process is that worker of `relay serve --workers`
    (web/cli/workers.py): the public port is shared (SO_REUSEPORT), and a port of its own is what peers reach."""
    context = tls_context(settings)  # before anything starts: a bad certificate stops `serve` at once
    install_secret_filter(settings)
    public: socket.socket | None = None
    private: socket.socket | None = None
    if worker is not None:
        try:
            public, private = worker_sockets(settings)
        except OSError as error:
            log.error("cannot listen on %s:%d: %s", settings.host, settings.port, error.strerror or error)
            return 2
        settings.peer_port = int(private.getsockname()[1])
    servers = _servers(settings, context, public, private)
    try:
        # The port before anything is recorded: a process that cannot have it must leave the log as it was
        # (issue 29: a second `relay serve` on a taken port recorded a restart and a stop of the live one).
        for server in servers:
            server.init_socket()
    except OSError as error:  # the port taken, or not ours to bind: say so and exit
        log.error("cannot listen on %s:%d: %s", settings.host, settings.port, error.strerror or error)
        _close_listeners(servers)
        return 2
    rt = Runtime(settings)
    if not _identity_free(rt):
        rt.close()
        _close_listeners(servers)
        return 2
    rt.start()
    app = create_app(rt)
    install_store_errors(app)
    for server in servers:
        server.application = app
        server.relay = rt  # type: ignore[attr-defined]
    stopping = Event()

    def _stop(*_: object) -> None:
        stopping.set()

    gevent.signal_handler(signal.SIGTERM, _stop)
    gevent.signal_handler(signal.SIGINT, _stop)
    try:
        if public is not None:
            public.listen(LISTEN_BACKLOG)  # now the kernel may hand this worker connections
        for server in servers:
            server.start()
    except OSError as error:  # not expected once bound: say so and exit, not hang with actors alive
        log.error("cannot listen on %s:%d: %s", settings.host, settings.port, error.strerror or error)
        rt.stop()
        return 2
    log.info(
        "relay %s listening on %s://%s:%d%s (store %s)",
        rt.settings.instance_id, "https" if context else "http", settings.host, servers[0].server_port,
        f" (worker {worker}; peers reach it at port {settings.peer_port})" if worker is not None else "",
        settings.store.describe(),
    )
    sys.stdout.flush()
    tune_gc()  # fewer, larger collections from now on (web/transport/gc_tuning.py)
    stopping.wait()
    log.info("relay stopping")
    for server in servers:
        server.close()  # no new connections: an executor told to go away must reconnect elsewhere, or to our successor
    still_open = rt.close_executors()
    if still_open:
        log.warning("%d executor socket(s) did not close in time; dropping them", still_open)
    for server in servers:
        server.stop(timeout=5)
    rt.stop()
    return 0
