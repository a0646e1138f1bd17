"""How the rest of the process talks to an executor actor (actors/executor.py) without a pykka proxy, which
introspects the whole actor each time it is built: these send the ProxyCall messages a proxy would."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pykka
from pykka.messages import ProxyCall

if TYPE_CHECKING:
    from relay.actors.executor import ExecutorActor


def _call(method: str, *args: object) -> ProxyCall:
    """The message a pykka proxy sends for `proxy.method(*args)`, without building the proxy (which introspects
    the whole actor each time it is built)."""
    return ProxyCall(attr_path=(method,), args=args, kwargs={})


def ask_request(ref: pykka.ActorRef[ExecutorActor], request: object) -> pykka.Future[pykka.Future[object]]:
    """`ref.proxy().request(request)` without the proxy: a future of the future of the answer."""
    return ref.ask(_call("request", request), block=False)


def tell_forget(ref: pykka.ActorRef[ExecutorActor], request_id: str) -> None:
    """`ref.proxy().forget(request_id)` without the proxy (raises ActorDeadError when the actor has stopped)."""
    ref.tell(_call("forget", request_id))


def tell_request_then(ref: pykka.ActorRef[ExecutorActor], request: object, on_answer: Callable[[object], None]) -> None:
    """`ref.proxy().request_then(request, on_answer)` without the proxy (raises ActorDeadError when the actor
    has stopped)."""
    ref.tell(_call("request_then", request, on_answer))
