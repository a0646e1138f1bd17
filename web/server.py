"""`relay serve`: gevent's WSGI server with gevent-websocket, our handler, and a clean shutdown."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import gevent
import geventwebsocket.handler
from gevent.event import Event
from gevent.pywsgi import WSGIServer
from geventwebsocket.handler import WebSocketHandler

from web.app import create_app
from web.config import Settings
from web.runtime import Runtime
from web.sockets import RelayWebSocket
from web.websocket import check_handshake, redact_path

log = logging.getLogger("relay.server")

# The handler builds its sockets from this module-level name: ours adds the frame limit, locked
# sends and pong tracking (WebSocket has __slots__, so the class cannot be swapped afterwards).
geventwebsocket.handler.WebSocket = RelayWebSocket  # type: ignore[misc]


class RelayHandler(WebSocketHandler):
    """Checks the executor handshake before upgrading, installs RelayWebSocket, redacts access logs."""

    def run_application(self) -> Any:
        check_handshake(self.server.relay, self.environ)
        return super().run_application()

    def upgrade_websocket(self) -> Any:
        if "relay.ws_refusal" in self.environ or "relay.ws_org" not in self.environ:
            return None  # not upgraded: Flask answers (401/403/400) as plain HTTP
        return super().upgrade_websocket()

    def run_websocket(self) -> Any:
        ws = self.websocket
        ws.prepare(self.server.relay.settings.limits.max_frame_bytes, self.socket)
        return super().run_websocket()

    def format_request(self) -> str:
        line = super().format_request()
        if self.path and "/websocket/" in self.path:
            line = line.replace(self.path, redact_path(self.path))
        return line

    def log_error(self, msg: str, *args: Any) -> None:
        # gevent logs the request line on errors too: never with a key in it.
        text = msg % args if args else msg
        if self.path:
            text = text.replace(self.path, redact_path(self.path))
        log.warning("%s", text)


class _AccessLog:
    """gevent writes access lines to a file-like object; send them to logging instead."""

    def write(self, line: str) -> None:
        line = line.rstrip()
        if line:
            logging.getLogger("relay.access").info("%s", line)


def serve(settings: Settings) -> int:
    rt = Runtime(settings)
    rt.start()
    app = create_app(rt)
    server = WSGIServer(
        (settings.host, settings.port), app, handler_class=RelayHandler, log=_AccessLog(), error_log=_AccessLog()
    )
    server.relay = rt  # type: ignore[attr-defined]
    stopping = Event()

    def _stop(*_: Any) -> None:
        stopping.set()

    gevent.signal_handler(signal.SIGTERM, _stop)
    gevent.signal_handler(signal.SIGINT, _stop)
    server.start()
    log.info(
        "relay %s listening on http://%s:%d (store %s)",
        rt.settings.instance_id, settings.host, server.server_port, settings.store.describe(),
    )
    sys.stdout.flush()
    stopping.wait()
    log.info("relay stopping")
    server.stop(timeout=5)
    rt.stop()
    return 0
