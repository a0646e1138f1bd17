"""A stopping instance's HTTP side: how many requests are in flight, and `Connection: close` once it is stopping.

On SIGTERM `relay serve` (web/transport/server.py) first says it is stopping (/readyz answers 503, so a load
balancer's health check takes it out of rotation) while it keeps serving for RELAY_DRAIN_S; every answer then
closes its connection, so a balancer's kept-alive connection is not reused for a request that would arrive after
the port closed. Then it closes the port and waits for the requests in flight, which still reach the executors
they need, before it closes the executors' sockets. WebSocket upgrades never pass through here (handler.py hands
the socket to the executor's actor before Flask's dispatch), so they are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gevent.event

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Draining:
    """WSGI middleware (Flask's `app.wsgi_app`) counting the requests in flight."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self.stopping = False
        self.in_flight = 0
        self._idle = gevent.event.Event()
        self._idle.set()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        self.in_flight += 1
        self._idle.clear()
        try:
            def closing(status: str, headers: list[tuple[str, str]], *args: Any) -> Any:
                if self.stopping:  # asked when the answer starts: one begun before the stop closes too
                    headers = [*((k, v) for k, v in headers if k.lower() != "connection"), ("Connection", "close")]
                return start_response(status, headers, *args)

            return self.app(environ, closing)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight (at most `timeout` s); whether none is."""
        return bool(self._idle.wait(timeout))
