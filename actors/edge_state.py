"""What the edge must remember in the shared store, each item until it expires: console sessions that ended
(logout) and the nonces of the signed forwards already accepted.

Like the instances table (actors/heartbeats.py), these are not events: short-lived security state, kept where
every instance of a cluster sees it (one PostgreSQL store) and where it survives a restart (the store's file or
database), and forgotten once expired (a session ends by its age anyway; a forward is refused past its
signature's window). See docs/adr/0007-console-sessions-end-in-the-store.md and
docs/adr/0008-forward-nonces-shared-in-the-store.md.
"""

from __future__ import annotations

import threading

from relay.projections.backend import StoreConfig, ViewStore

# Expired rows are deleted at most this often per process (a delete per write would scan the table each time).
PURGE_EVERY_S = 30.0


class EdgeStateSchema:
    name = "edge_state"
    tables = ("relay_ended_sessions", "relay_forward_nonces")
    create_statements = (
        ("CREATE TABLE IF NOT EXISTS {s}relay_ended_sessions (session_id TEXT PRIMARY KEY, "
        "expires_at DOUBLE PRECISION NOT NULL)"),
        ("CREATE TABLE IF NOT EXISTS {s}relay_forward_nonces (nonce TEXT PRIMARY KEY, "
        "expires_at DOUBLE PRECISION NOT NULL)"),
    )


class EdgeState:
    def __init__(self, config: StoreConfig) -> None:
        self.store = ViewStore(config, EdgeStateSchema())
        self._lock = threading.Lock()
        self._next_purge = 0.0

    def end_session(self, session_id: str, expires_at: float, now: float) -> None:
        """Record that the console session `session_id` ended (logout); kept until `expires_at`."""
        with self.store.transaction(commit=True) as sql:
            sql.execute("INSERT INTO {s}relay_ended_sessions (session_id, expires_at) VALUES (?, ?) "
                        "ON CONFLICT (session_id) DO NOTHING", (session_id, expires_at))
        self._purge(now)

    def session_ended(self, session_id: str) -> bool:
        with self.store.transaction(commit=False) as sql:
            return sql.one("SELECT 1 AS ended FROM {s}relay_ended_sessions WHERE session_id = ?",
                           (session_id,)) is not None

    def first_use_of_nonce(self, nonce: str, expires_at: float, now: float) -> bool:
        """Record `nonce` as used; False when it was already (by this instance or any other, before or since a
        restart): one atomic insert, so two instances offered the same nonce at once accept it once."""
        with self.store.transaction(commit=True) as sql:
            inserted = sql.all("INSERT INTO {s}relay_forward_nonces (nonce, expires_at) VALUES (?, ?) "
                               "ON CONFLICT (nonce) DO NOTHING RETURNING nonce", (nonce, expires_at))
        self._purge(now)
        return bool(inserted)

    def _purge(self, now: float) -> None:
        with self._lock:
            if now < self._next_purge:
                return
            self._next_purge = now + PURGE_EVERY_S
        with self.store.transaction(commit=True) as sql:
            sql.execute("DELETE FROM {s}relay_ended_sessions WHERE expires_at < ?", (now,))
            sql.execute("DELETE FROM {s}relay_forward_nonces WHERE expires_at < ?", (now,))

    def close(self) -> None:
        self.store.close()
