"""A requests Session that never reuses a keep-alive connection near the server's idle deadline.

Relay closes a keep-alive connection that sends no request line within RELAY_HANDSHAKE_TIMEOUT_S
(web/transport/handler.py
`read_requestline`: idle and trickling connections hold nothing for longer). A client that reuses a pooled
connection at that very moment gets ``RemoteDisconnected('Remote end closed connection without response')``:
its request crossed Relay's close on the wire, and urllib3 retries no POST. HTTP/1.1 clients avoid that race by
keeping their own idle limit below the server's; this is that, for the tests' clients.

The limit alone leaves a race when the test process is starved of CPU (a thread that cannot run for a second
returns its connection to the pool late, so the pool's idle clock starts after Relay's did). So, as browsers
do, a request sent on a reused connection that the server closed without a byte of answer is sent once more on
a new connection: the server closed it while waiting for a request line, so it never read the first one.
"""

from __future__ import annotations

import http.client
import threading
import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ProtocolError

_IDLE_SINCE = "_relay_test_idle_since"


class _IdleLimit:
    """Mixin for a urllib3 pool: a connection idle for longer than `max_idle_s` is closed before reuse (it then
    reconnects on its next request, as a dropped connection does)."""

    max_idle_s = 5.0
    _this_request = threading.local()  # per calling thread: whether its connection was reused; or must be new

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        since = getattr(conn, _IDLE_SINCE, None)
        fresh_only = getattr(self._this_request, "fresh_only", False)
        if since is not None and (fresh_only or time.monotonic() - since > self.max_idle_s):
            conn.close()  # it reconnects on this request
            since = None
        self._this_request.reused = since is not None and getattr(conn, "sock", None) is not None
        return conn

    def urlopen(self, *args: Any, **kwargs: Any) -> Any:
        self._this_request.reused = False
        try:
            return super().urlopen(*args, **kwargs)  # type: ignore[misc]
        except ProtocolError as error:
            if not (self._this_request.reused and _closed_without_answer(error)):
                raise
        self._this_request.fresh_only = True
        try:
            return super().urlopen(*args, **kwargs)  # type: ignore[misc]
        finally:
            self._this_request.fresh_only = False

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            setattr(conn, _IDLE_SINCE, time.monotonic())
        super()._put_conn(conn)  # type: ignore[misc]


def _closed_without_answer(error: ProtocolError) -> bool:
    """Whether the server closed the connection before any byte of an answer (not a broken answer)."""
    cause = error.args[1] if len(error.args) > 1 else error.__cause__
    return isinstance(cause, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError))


def session_idle_below(server_idle_s: float) -> requests.Session:
    """A Session whose pooled connections are reused only while idle for less than half `server_idle_s`."""

    class Pool(_IdleLimit, HTTPConnectionPool):
        max_idle_s = server_idle_s / 2

    class TLSPool(_IdleLimit, HTTPSConnectionPool):
        max_idle_s = server_idle_s / 2

    session = requests.Session()
    for prefix in ("http://", "https://"):
        adapter = HTTPAdapter()
        adapter.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": TLSPool}
        session.mount(prefix, adapter)
    return session
