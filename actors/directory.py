"""Directory: finds the live actors of this process by natural key (an app, an API key)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka


class Directory:
    """Application actors by (org, app), started on first use; executor actors by API key."""

    def __init__(self, start_application: Callable[[str, str], pykka.ActorRef[Any]]) -> None:
        self._start_application = start_application
        self._apps: dict[tuple[str, str], pykka.ActorRef[Any]] = {}
        self._by_key: dict[tuple[str, str], set[pykka.ActorRef[Any]]] = {}
        self._lock = threading.Lock()

    def application(self, org: str, app: str) -> pykka.ActorRef[Any]:
        with self._lock:
            ref = self._apps.get((org, app))
            if ref is None or not ref.is_alive():
                ref = self._apps[(org, app)] = self._start_application(org, app)
            return ref

    def applications(self) -> list[pykka.ActorRef[Any]]:
        with self._lock:
            return [ref for ref in self._apps.values() if ref.is_alive()]

    def add_connection(self, org: str, key_name: str, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._by_key.setdefault((org, key_name), set()).add(ref)

    def remove_connection(self, org: str, key_name: str, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            refs = self._by_key.get((org, key_name))
            if refs is not None:
                refs.discard(ref)
                if not refs:
                    del self._by_key[(org, key_name)]

    def connections_of_key(self, org: str, key_name: str) -> list[pykka.ActorRef[Any]]:
        with self._lock:
            return list(self._by_key.get((org, key_name), ()))
