"""Asking an application's executors from an actor's worker: the same ranking rule as actors/routing.py
(actors/policies/ranking.py) over any executor-like rows, sends to several executors at once with
one deadline, and the outcome of each as a metrics word (actors/metrics.py), counted there.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pykka

from relay.actors import metrics
from relay.actors.policies.ranking import order, supports
from relay.wire.errors import ExecutorGoneError

ASK_S = 5.0  # waiting for an executor actor to take a request (not for the executor's answer)


class Transport(Protocol):
    """How a request reaches one executor: ``send`` returns a future of its answer (raising when the
    socket closes first), ``forget`` drops a request nobody waits for any more."""

    def send(self, executor: object, request: object) -> pykka.Future[object]: ...

    def forget(self, executor: object, request_id: str) -> None: ...


class ActorTransport:
    """Through the executor's actor (actors/executor.py `request`)."""

    def send(self, executor: Any, request: Any) -> pykka.Future[object]:
        return executor.ref.proxy().request(request).get(timeout=ASK_S)

    def forget(self, executor: Any, request_id: str) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            executor.ref.proxy().forget(request_id)


@dataclass
class Answer:
    """What one executor made of one request: ``outcome`` is a metrics outcome word."""

    executor: Any
    outcome: str
    response: object = None
    refused: str | None = None  # the actor refused to send or answer (the exception's name)

    @property
    def reason(self) -> str:
        if self.outcome == metrics.OK:
            return ""
        if self.outcome == metrics.GONE:
            return "executor disconnected before answering"
        if self.outcome == metrics.TIMEOUT:
            return "executor did not answer in time"
        if self.outcome == metrics.UNSUPPORTED:
            return "executor does not support the request"
        if self.refused:
            return f"the request was refused ({self.refused})"
        text = str(getattr(self.response, "error_message", "") or "").strip()
        first = text.splitlines()[0] if text else "error"
        return f"executor answered an error: {first}"[:200]


def request_all(
    org: str, app: str, transport: Transport, targets: Sequence[tuple[Any, Any]], timeout: float,
) -> list[Answer]:
    """Send each (executor, request) at once, then wait for the answers with one common deadline."""
    pending: list[tuple[Any, Any, pykka.Future[Any] | None, float]] = []
    for executor, request in targets:
        started = time.monotonic()
        try:
            future: pykka.Future[Any] | None = transport.send(executor, request)
        except (pykka.ActorDeadError, pykka.Timeout):
            future = None
        pending.append((executor, request, future, started))
    deadline = time.monotonic() + timeout
    answers = []
    for executor, request, future, started in pending:
        if future is None:
            answer = Answer(executor, metrics.GONE)
        else:
            try:
                response = future.get(timeout=max(0.0, deadline - time.monotonic()))
            except pykka.Timeout:
                transport.forget(executor, request.request_id)
                answer = Answer(executor, metrics.TIMEOUT)
            except ExecutorGoneError:  # the socket closed first
                answer = Answer(executor, metrics.GONE)
            except Exception as error:  # the executor's actor refusing: too many in flight, a malformed answer
                answer = Answer(executor, metrics.ERROR, refused=type(error).__name__)
            else:
                answer = Answer(executor, metrics.outcome_of(response), response)
        metrics.observe_request(org, app, str(request.type), answer.outcome, time.monotonic() - started)
        answers.append(answer)
    return answers


def rank(executors: Iterable[Any], message_type: str, latest: str | None) -> list[Any]:
    """The executors that may take the type, best first (actors/policies/ranking.py)."""
    return order((e for e in executors if supports(e, message_type)), latest=latest)
