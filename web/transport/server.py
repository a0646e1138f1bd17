"""`relay serve`: gevent's WSGI server with gevent-websocket, our handler (web/transport/handler.py), and a clean
shutdown."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from typing import Any

import gevent
import gevent.socket
from flask import Flask, Response
from gevent.event import Event
from gevent.pywsgi import WSGIServer

from relay.actors.configuration.settings import ConfigError, Settings
from relay.actors.identity_claim import IdentityInUse, claim_identity
from relay.actors.runtime import Runtime
from relay.web.problems import ApiError, problem_response
from relay.web.transport import body_limits
from relay.web.transport.draining import Draining
from relay.web.transport.forwarded import TrustedProxies
from relay.web.transport.gc_tuning import tune_gc
from relay.web.transport.handler import RelayHandler
from relay.web.transport.http_connections import HttpConnections
from relay.web.transport.limits import STORE_ERRORS, STORE_UNAVAILABLE, EdgeLimits
from relay.web.transport.log_secrets import install_secret_filter
from relay.web.transport.ports import worker_sockets
from relay.web.transport.websocket import HandshakeGate

log = logging.getLogger("relay.server")

# The listen backlog: gevent's default (128) overflows in a connect storm of thousands, and a connection dropped
# there costs the client a SYN retransmit (1 s, then 3 s...). The kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG = 4096
IN_FLIGHT_WAIT_S = 5.0  # at a stop: how long requests in flight have to finish before the executors' sockets close


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


def _drain(rt: Runtime, draining: Draining, servers: list[RelayServer]) -> None:
    """Stop taking work before letting go of anything (web/transport/draining.py): say so to health checks for
    RELAY_DRAIN_S, close the port, then let the requests in flight finish while their executors are still here."""
    drain_s = rt.settings.drain_s
    log.info("relay stopping%s", f": draining for {drain_s:g} s" if drain_s else "")
    rt.stopping = draining.stopping = True
    rt.runner.feed.close()  # the console's live streams end now: they must not hold the stop (web/console/live.py)
    if drain_s:
        gevent.sleep(drain_s)
    for server in servers:
        server.close()  # no new connections: an executor told to go away must reconnect elsewhere, or to our successor
    if not draining.wait_idle(IN_FLIGHT_WAIT_S):
        log.warning("%d request(s) still in flight after %g s; stopping anyway", draining.in_flight, IN_FLIGHT_WAIT_S)


def serve(settings: Settings, make_app: Callable[[Runtime], Flask], worker: int | None = None) -> int:
    """Run one instance, its Flask app made by `make_app` (web/wsgi.py create_app), until SIGTERM/SIGINT.
    `worker`: this process is that worker of `relay serve --workers` (web/cli/workers.py): the public port is
    shared (SO_REUSEPORT), and a port of its own is what peers reach."""
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
    app = make_app(rt)
    install_store_errors(app)
    draining = Draining(app.wsgi_app)
    app.wsgi_app = draining  # type: ignore[method-assign]
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
    _drain(rt, draining, servers)
    still_open = rt.close_executors()
    if still_open:
        log.warning("%d executor socket(s) did not close in time; dropping them", still_open)
    for server in servers:
        server.stop(timeout=5)
    rt.stop()
    return 0
