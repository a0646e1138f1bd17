"""The executor endpoint /websocket/{appName}/{conductorKey}: handshake checks, then the receive loop."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

import pykka
from flask import Blueprint, Response, request

from actors.executor import Connection, ExecutorActor
from web.context import runtime
from web.problems import ApiError
from web.sockets import FrameTooLargeError, GeventFrameSocket, RelayWebSocket

if TYPE_CHECKING:
    from web.runtime import Runtime

log = logging.getLogger("relay.websocket")

bp = Blueprint("websocket", __name__)

WEBSOCKET_PATH = re.compile(r"^/websocket/([^/]+)/(.+)$")
REFUSED = "connection refused: check the application name and the conductor key"


def redact_path(path: str) -> str:
    """A request path safe to log: the conductor key in /websocket/... is replaced."""
    match = WEBSOCKET_PATH.match(path.split("?", 1)[0])
    return f"/websocket/{match.group(1)}/<redacted>" if match else path


def check_handshake(rt: Runtime, environ: dict[str, Any]) -> None:
    """Decide an upgrade before it happens; the answer goes into the environ for the route.
    401 for an unknown key, 403 for everything else; the body says the same in both cases."""
    match = WEBSOCKET_PATH.match(environ.get("PATH_INFO", ""))
    if match is None:
        return
    app, key = match.group(1), match.group(2)
    principal = rt.auth.principal_for(key)
    if principal is None:
        environ["relay.ws_refusal"] = (401, REFUSED)
        return
    org = principal.org or rt.settings.default_org
    if not principal.allows("websocket.connect", org, app) or rt.views.applications.app(org, app) is None:
        environ["relay.ws_refusal"] = (403, REFUSED)
        return
    environ["relay.ws_org"] = org
    environ["relay.ws_key_name"] = principal.key_name or "admin"


@bp.route("/websocket/<app>/<path:key>", websocket=True)
def executor_socket(app: str, key: str) -> Response:
    del key  # checked before the upgrade; never logged
    ws = request.environ.get("wsgi.websocket")
    if ws is None:
        status, detail = request.environ.get("relay.ws_refusal", (400, "a WebSocket upgrade is required"))
        raise ApiError(status, detail)
    serve_executor(runtime(), ws, app, request.environ)
    return Response(status=204)


def serve_executor(rt: Runtime, ws: RelayWebSocket, app: str, environ: dict[str, Any]) -> None:
    """Start the executor's actor and feed it frames until the socket closes."""
    conn = Connection(
        org=environ["relay.ws_org"],
        app=app,
        key_name=environ["relay.ws_key_name"],
        peer=str(environ.get("REMOTE_ADDR", "?")),
    )
    actor = ExecutorActor.start(rt.ctx, rt.directory, GeventFrameSocket(ws), conn)
    proxy = actor.proxy()
    reason = "socket closed"
    try:
        while True:
            try:
                message = ws.receive()
            except FrameTooLargeError:
                log.warning("executor %s/%s sent a message over the frame limit; closing", conn.org, app)
                reason = "frame too large"
                ws.hard_close(1009, "message too big")
                break
            if message is None:
                break
            if not isinstance(message, str):
                log.warning("executor %s/%s sent a binary frame; ignored", conn.org, app)
                continue
            proxy.on_frame(message)
    except Exception as error:
        reason = f"socket error ({type(error).__name__})"
    finally:
        try:
            proxy.on_closed(reason).get(timeout=30)
        except pykka.ActorDeadError:
            pass
        except pykka.Timeout:
            log.warning("executor %s/%s: close not processed in time", conn.org, app)
