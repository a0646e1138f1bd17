"""The executor endpoint /websocket/{appName}/{conductorKey}: handshake checks, then the receive loop."""

from __future__ import annotations

import contextlib
import logging
import re
from collections import deque
from typing import TYPE_CHECKING, Any

import pykka
from flask import Blueprint, Response, request

from actors.executor import BAD_FRAME_LOG_EVERY, BAD_FRAME_LOG_LIMIT, Connection, ExecutorActor
from web.context import runtime
from web.limits import STORE_ERRORS, STORE_UNAVAILABLE, EdgeLimits, retry_after_header
from web.problems import ApiError, problem_response
from web.sockets import FrameTooLargeError, GeventFrameSocket, RelayWebSocket

if TYPE_CHECKING:
    from web.runtime import Runtime

log = logging.getLogger("relay.websocket")

bp = Blueprint("websocket", __name__)

WEBSOCKET_PATH = re.compile(r"^/websocket/([^/]+)/(.+)$")
REFUSED = "connection refused: check the application name and the conductor key"
TOO_MANY_FAILURES = "too many failed handshakes from this address; try again later"
# Frames handed to the executor's actor and not yet processed: the receive loop waits for the oldest past
# this many (or past RELAY_MAX_FRAME_BYTES of them), so a flooding executor is slowed down by TCP, not queued.
MAX_QUEUED_FRAMES = 64
AT_CAPACITY = "Relay has as many executor connections open as it allows (RELAY_MAX_CONNECTIONS); try again later"


# Anything after /websocket/ in a text (a path, a request line however malformed, an absolute URI, doubled
# slashes, any case): what follows the application name may be a key.
_SOCKET_TAIL = re.compile(r"/websocket/+([^\s\"']*)", re.IGNORECASE)
_APP_SEGMENT = re.compile(r"[a-z0-9_-]{1,64}")


def _redact_tail(match: re.Match[str]) -> str:
    app, slash, _rest = match.group(1).partition("/")
    if _APP_SEGMENT.fullmatch(app) and (slash or not _rest):
        return f"/websocket/{app}/<redacted>" if slash else f"/websocket/{app}"
    return "/websocket/<redacted>"


def redact_path(path: str) -> str:
    """A request path, request line or log text safe to log: whatever follows /websocket/{appName}/ (the
    conductor key) is replaced, and all of it when the application segment is not a plain name."""
    return _SOCKET_TAIL.sub(_redact_tail, path)


def check_handshake(rt: Runtime, environ: dict[str, Any], edge: EdgeLimits | None = None) -> None:
    """Decide an upgrade before it happens; the answer goes into the environ for the route.
    401 for an unknown key, 403 for everything else; the body says the same in both cases.
    With ``edge`` (web/limits.py): 429 for an address with too many recent failures, 503 when every
    connection slot is taken; a slot taken here (``relay.ws_slot``) is the caller's to release."""
    match = WEBSOCKET_PATH.match(environ.get("PATH_INFO", ""))
    if match is None:
        return
    address = str(environ.get("REMOTE_ADDR", "?"))
    if edge is not None:
        wait = edge.failures.retry_after(address)
        if wait is not None:
            environ["relay.ws_refusal"] = (429, TOO_MANY_FAILURES)
            environ["relay.ws_retry_after"] = retry_after_header(wait)
            return
    app, key = match.group(1), match.group(2)
    try:
        principal = rt.auth.principal_for(key)
        org = (principal.org or rt.settings.default_org) if principal is not None else ""
        refused = principal is None or not principal.allows("websocket.connect", org, app) or (
            rt.views.applications.app(org, app) is None
        )
    except STORE_ERRORS as error:  # not the executor's fault, and not a failed handshake: it will retry
        log.warning("executor handshake from %s refused: store unavailable (%s)", address, type(error).__name__)
        environ["relay.ws_refusal"] = (503, STORE_UNAVAILABLE)
        environ["relay.ws_retry_after"] = "5"
        return
    if refused:
        environ["relay.ws_refusal"] = (401 if principal is None else 403, REFUSED)
        if edge is not None and edge.failures.failed(address):
            log.warning("executor handshakes from %s refused for a while: %d failed within %g s",
                        address, edge.failures.limit, edge.failures.window_s)
        return
    if edge is not None:
        if not edge.slots.acquire():
            log.warning("executor handshake from %s refused: %d connections open (RELAY_MAX_CONNECTIONS)",
                        address, edge.slots.limit)
            environ["relay.ws_refusal"] = (503, AT_CAPACITY)
            environ["relay.ws_retry_after"] = "1"
            return
        environ["relay.ws_slot"] = True
    environ["relay.ws_org"] = org
    environ["relay.ws_key_name"] = principal.key_name or "admin"


@bp.route("/websocket/<app>/<path:key>", websocket=True)
def executor_socket(app: str, key: str) -> Response:
    del key  # checked before the upgrade; never logged
    ws = request.environ.get("wsgi.websocket")
    if ws is None:
        status, detail = request.environ.get("relay.ws_refusal", (400, "a WebSocket upgrade is required"))
        response = problem_response(ApiError(status, detail))
        if "relay.ws_retry_after" in request.environ:
            response.headers["Retry-After"] = request.environ["relay.ws_retry_after"]
        return response
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
    queued: deque[tuple[pykka.Future[Any], int]] = deque()
    queued_chars = 0
    binary = 0
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
                binary += 1
                if binary <= BAD_FRAME_LOG_LIMIT or binary % BAD_FRAME_LOG_EVERY == 0:
                    log.warning("executor %s/%s sent a binary frame; ignored (%d so far)", conn.org, app, binary)
                continue
            queued.append((proxy.on_frame(message), len(message)))
            queued_chars += len(message)
            while len(queued) > MAX_QUEUED_FRAMES or queued_chars > rt.settings.limits.max_frame_bytes:
                future, size = queued.popleft()
                queued_chars -= size
                with contextlib.suppress(Exception):  # on_frame's own errors are its to log
                    future.get(timeout=30)
    except Exception as error:
        reason = f"socket error ({type(error).__name__})"
    finally:
        try:
            proxy.on_closed(reason).get(timeout=30)
        except pykka.ActorDeadError:
            pass
        except pykka.Timeout:
            log.warning("executor %s/%s: close not processed in time", conn.org, app)
