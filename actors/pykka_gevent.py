"""Actors without a thread of their own under gevent: pykka 4.x's private actor-loop hooks, quarantined here.

An actor of `DrainedActor` keeps its messages in a deque; the first message into an idle inbox spawns a
greenlet that handles messages (one at a time, in order) and ends once the inbox has stayed empty for
DRAIN_LINGER_S. Thousands of idle executor connections then hold no greenlet, stack or thread for their actors.
It reaches into pykka (`_create_actor_inbox`, `_start_actor_loop`, `_actor_loop_setup`, `_actor_loop_teardown`,
`_handle_receive`, `_handle_failure`, the envelope's `message`/`reply_to`): `install()` checks them at start-up
and turns the drained inbox on, only under gevent's monkey-patching; tests/unit/test_library_hooks.py pins them
to pykka 4.5.0. Until installed (unit tests) a DrainedActor is an ordinary ThreadingActor.

It also gives gevent's lock the `_is_owned` that `threading.Condition` looks for (see `lock_is_owned`)."""

from __future__ import annotations

import inspect
import logging
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import gevent
import gevent.event
import gevent.monkey
import pykka
from pykka._envelope import Envelope

from relay.events.errors import DomainError

PINNED = "pykka 4.5.0"
# pykka logs every exception an actor hands back to the caller of an ask, at INFO with its traceback (and so
# does `_handle_envelope` below, as pykka does). The caller gets the exception and decides; for the outcomes a
# caller expects (a DomainError: not found, exists already, invalid, illegal now: the API's refusals) the
# line is noise, a traceback per refused API call (issue 29): `QuietRefusals` drops it. Any other exception
# is still logged so.
RETURNED_TO_CALLER = "Exception returned from "
EXPECTED_OUTCOMES: tuple[type[Exception], ...] = (DomainError,)


class QuietRefusals(logging.Filter):
    """On the `pykka` logger: no line for an expected outcome returned to the caller of an ask."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(RETURNED_TO_CALLER) or not record.exc_info:
            return True
        return not isinstance(record.exc_info[1], EXPECTED_OUTCOMES)
# How long a drained inbox's greenlet waits for more before it ends (a busy connection keeps its greenlet).
DRAIN_LINGER_S = 2.0


def lock_is_owned(lock: Any) -> bool:
    """`threading.Condition._is_owned` for gevent's lock, which has none. Without it, Condition falls back on
    `lock.acquire(False)`, which gevent's lock follows with a `sleep()` when it fails (as it does on every
    `notify` of a Condition the caller holds): a trip to the back of the hub's queue. Every checkout of an
    eventsourcing pool's connection (a Semaphore's release) paid that, and in a connect storm the queue holds
    thousands of handshakes: the projection runner, a few dozen checkouts per catch-up, trailed the log by
    seconds (issue 32). Same answer as the fallback (held, by anyone), without the sleep."""
    return bool(lock.locked())


def install() -> None:
    """Check pykka's hooks, then drain inboxes with greenlets if (and only if) gevent has patched threading."""
    missing = [name for name in ("_create_actor_inbox", "_start_actor_loop", "_actor_loop_setup",
                                 "_actor_loop_teardown", "_handle_receive", "_handle_failure")
               if not callable(getattr(pykka.ThreadingActor, name, None))]
    if {"message", "reply_to"} - set(inspect.signature(Envelope).parameters):
        missing.append("Envelope(message, reply_to)")
    if missing:
        raise RuntimeError(f"pykka changed since {PINNED}: {', '.join(missing)} (actors/pykka_gevent.py)")
    DrainedActor.drain_with_greenlets = gevent.monkey.is_module_patched("threading")
    lock_type = type(threading.Lock())  # gevent's, once patched
    if DrainedActor.drain_with_greenlets and not hasattr(lock_type, "_is_owned"):
        setattr(lock_type, "_is_owned", lock_is_owned)  # noqa: B010 - a private name of the stdlib's protocol
    pykka_log = logging.getLogger("pykka")
    if not any(isinstance(f, QuietRefusals) for f in pykka_log.filters):
        pykka_log.addFilter(QuietRefusals())


class _DrainedInbox:
    """An executor actor's inbox under gevent: a deque, and no greenlet of its own while it has been empty for a
    while. The first message into an idle inbox spawns a greenlet that handles messages (one at a time: a put
    while it runs only appends and wakes it) and ends once the inbox has stayed empty for DRAIN_LINGER_S (so a
    busy connection does not pay a greenlet per message). An idle connection (most of them: pings do not reach
    the actor) then costs no greenlet, no saved stack and no Python data stack for its actor. pykka's teardown
    reads it with empty()/get()."""

    __slots__ = ("drain", "items", "ready", "running")

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self.running = True  # until the actor has started: what arrives meanwhile waits for on_start
        self.drain: Callable[[], None] | None = None
        self.ready: gevent.event.Event | None = None  # made when the greenlet first waits

    def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
        self.items.append(item)
        if self.running:
            if self.ready is not None:
                self.ready.set()
        elif self.drain is not None:
            self.running = True
            gevent.spawn_raw(self.drain)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return self.items.popleft()

    def empty(self) -> bool:
        return not self.items

    def qsize(self) -> int:
        return len(self.items)


T = TypeVar("T")


class GeventFuture(pykka.Future[T]):
    """pykka's ThreadingFuture for an actor drained by greenlets: the same contract (set once, `get` with a
    timeout raising pykka.Timeout, exceptions as exc_info triples, get hooks), on a gevent Event rather than a
    Condition, its re-entrant lock and a waiter lock per `get`. Used only under gevent's monkey-patching, where
    whoever sets or waits on it is a greenlet of the one thread."""

    def __init__(self) -> None:
        super().__init__()
        self._result: tuple[Any, Any] | None = None  # (value, exc_info)
        self._ready = gevent.event.Event()

    def get(self, *, timeout: float | None = None) -> Any:
        try:
            return super().get(timeout=timeout)  # a get hook, when one is set
        except NotImplementedError:
            pass
        if self._result is None:
            if not self._ready.wait(timeout):
                raise pykka.Timeout(f"{timeout} seconds")
            if self._result is None:  # woken by a get hook set meanwhile
                return super().get(timeout=timeout)
        value, exc_info = self._result
        if exc_info is not None:
            exc_type, exc_value, exc_traceback = exc_info
            if exc_value is None:
                exc_value = exc_type()
            if exc_value.__traceback__ is not exc_traceback:
                raise exc_value.with_traceback(exc_traceback)
            raise exc_value
        return value

    def set(self, value: object | None = None) -> None:
        if self._result is not None or self._get_hook is not None:
            raise queue.Full
        self._result = (value, None)
        self._ready.set()

    def set_exception(self, exc_info: Any | None = None) -> None:
        assert exc_info is None or len(exc_info) == 3
        if exc_info is None:
            exc_info = sys.exc_info()
        if self._result is not None or self._get_hook is not None:
            raise queue.Full
        self._result = (None, exc_info)
        self._ready.set()

    def set_get_hook(self, func: Any) -> None:
        if self._result is not None:
            raise queue.Full
        super().set_get_hook(func)
        self._ready.set()


class DrainedActor(pykka.ThreadingActor):
    """A ThreadingActor whose inbox, once `install()` ran under gevent, is drained by short-lived greenlets."""

    drain_with_greenlets: ClassVar[bool] = False  # set by install()

    @staticmethod
    def _create_actor_inbox() -> Any:
        return _DrainedInbox() if DrainedActor.drain_with_greenlets else pykka.ThreadingActor._create_actor_inbox()

    @staticmethod
    def _create_future() -> Any:
        """The future of an ask (pykka calls this), and of an answer the actor resolves later (actors/executor.py)."""
        return GeventFuture() if DrainedActor.drain_with_greenlets else pykka.ThreadingFuture()

    def _start_actor_loop(self) -> None:
        inbox = self.actor_inbox
        if not isinstance(inbox, _DrainedInbox):
            super()._start_actor_loop()
            return
        inbox.drain = self._drain_inbox

        def first_run() -> None:
            self._actor_loop_setup()  # on_start
            self._drain_inbox()

        gevent.spawn_raw(first_run)

    def _drain_inbox(self) -> None:
        """pykka's actor loop (`Actor._actor_loop_running`), run until the inbox has been empty for
        DRAIN_LINGER_S rather than forever."""
        inbox = self.actor_inbox
        assert isinstance(inbox, _DrainedInbox)
        while True:
            while inbox.items and not self.actor_stopped.is_set():
                self._handle_envelope(inbox.items.popleft())
            if self.actor_stopped.is_set():
                self._actor_loop_teardown()  # what is left gets ActorDeadError; `running` stays set: no more drains
                return
            if inbox.ready is None:
                inbox.ready = gevent.event.Event()
            inbox.ready.clear()
            if not inbox.ready.wait(DRAIN_LINGER_S) and not inbox.items:
                inbox.running = False
                return

    def _handle_envelope(self, envelope: Any) -> None:
        try:
            response = self._handle_receive(envelope.message)
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception:
            if envelope.reply_to is not None:
                logging.getLogger("pykka").info("%s%s to caller:", RETURNED_TO_CALLER, self, exc_info=True)
                envelope.reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:
                    self._handle_failure(*sys.exc_info())
        except BaseException:  # as pykka does: this actor stops, and every other one
            self._stop()
            pykka.ActorRegistry.stop_all()
