"""A requests Session that never reuses a keep-alive connection near the server's idle deadline.

Relay closes a keep-alive connection that sends no request line within RELAY_HANDSHAKE_TIMEOUT_S
(web/transport/handler.py
`read_requestline`: idle and trickling connections hold nothing for longer). A client that reuses a pooled
connection at that very moment gets ``RemoteDisconnected('Remote end closed connection without response')``:
its request crossed Relay's close on the wire, and urllib3 retries no POST. HTTP/1.1 clients avoid that race by
keeping their own idle limit below the server's; this is that, for the tests' clients.
"""

from __future__ import annotations

import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

_IDLE_SINCE = "_relay_test_idle_since"


class _IdleLimit:
    """Mixin for a urllib3 pool: a connection idle for longer than `max_idle_s` is closed before reuse (it then
    reconnects on its next request, as a dropped connection does)."""

    max_idle_s = 5.0

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        since = getattr(conn, _IDLE_SINCE, None)
        if since is not None and time.monotonic() - since > self.max_idle_s:
            conn.close()
        return conn

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            setattr(conn, _IDLE_SINCE, time.monotonic())
        super()._put_conn(conn)  # type: ignore[misc]


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
