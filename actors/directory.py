"""Directory: finds the live actors of this process by natural key (an app, an API key), and keeps one proxy
per application actor."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import pykka

from relay.actors.errors import InstanceStoppingError

if TYPE_CHECKING:
    from relay.actors.application import ApplicationActor
    from relay.actors.executor import ExecutorActor


class Directory:
    """Application actors by (org, app), started on first use; executor actors by API key."""

    def __init__(self, start_application: Callable[[str, str], pykka.ActorRef[ApplicationActor]]) -> None:
        self._start_application = start_application
        self._apps: dict[tuple[str, str], pykka.ActorRef[ApplicationActor]] = {}
        # One proxy per application actor, built once: `ActorRef.proxy()` introspects the whole actor.
        self._proxies: dict[tuple[str, str], pykka.ActorProxy[ApplicationActor]] = {}
        self._by_key: dict[tuple[str, str], set[pykka.ActorRef[ExecutorActor]]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """The instance is stopping: no application actor starts any more. One started by a request served while
        the actors stop would outlive them, and its thread would keep the process from exiting."""
        with self._lock:
            self._closed = True

    def application(self, org: str, app: str) -> pykka.ActorRef[ApplicationActor]:
        with self._lock:
            ref = self._apps.get((org, app))
            if ref is None or not ref.is_alive():
                if self._closed:
                    raise InstanceStoppingError("this Relay instance is stopping: ask another one")
                ref = self._apps[(org, app)] = self._start_application(org, app)
            return ref

    def application_proxy(self, org: str, app: str) -> pykka.ActorProxy[ApplicationActor]:
        """The application's actor as a proxy (started on first use), the same object for every caller while
        that actor lives: use this rather than `application(...).proxy()`."""
        with self._lock:
            ref = self._apps.get((org, app))
            proxy = self._proxies.get((org, app))
            if ref is not None and proxy is not None and proxy.actor_ref is ref and ref.is_alive():
                return proxy
        ref = self.application(org, app)
        proxy = ref.proxy()  # outside the lock: the introspection takes a while
        with self._lock:
            if self._apps.get((org, app)) is ref:
                self._proxies[(org, app)] = proxy
        return proxy

    def applications(self) -> list[pykka.ActorRef[ApplicationActor]]:
        with self._lock:
            return [ref for ref in self._apps.values() if ref.is_alive()]

    def add_connection(self, org: str, key_name: str, ref: pykka.ActorRef[ExecutorActor]) -> None:
        with self._lock:
            self._by_key.setdefault((org, key_name), set()).add(ref)

    def remove_connection(self, org: str, key_name: str, ref: pykka.ActorRef[ExecutorActor]) -> None:
        with self._lock:
            refs = self._by_key.get((org, key_name))
            if refs is not None:
                refs.discard(ref)
                if not refs:
                    del self._by_key[(org, key_name)]

    def connections(self) -> list[pykka.ActorRef[ExecutorActor]]:
        """Every executor socket's actor on this instance."""
        with self._lock:
            return [ref for refs in self._by_key.values() for ref in refs]

    def connections_of_key(self, org: str, key_name: str) -> list[pykka.ActorRef[ExecutorActor]]:
        with self._lock:
            return list(self._by_key.get((org, key_name), ()))
