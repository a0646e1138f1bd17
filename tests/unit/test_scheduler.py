"""Timers and liveness without a thread per timer (actors/scheduler.py, actors/liveness.py), the bound
on handshakes in flight (web/transport/websocket.py HandshakeGate) and the cached application proxies
(actors/directory.py).
Real time only where the real scheduler is under test, with deadlines (no fixed sleeps)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka
import pytest

from relay.actors.directory import Directory
from relay.actors.liveness import Liveness
from relay.actors.scheduler import ManualScheduler, ThreadingScheduler
from relay.web.transport.limits import Ticket
from relay.web.transport.websocket import HandshakeGate
from tests.support.ports import wait_until


def test_threading_scheduler_runs_timers_in_order_of_time_on_one_thread() -> None:
    scheduler = ThreadingScheduler()
    ran: list[tuple[str, str]] = []
    done = threading.Event()
    threads_before = threading.active_count()

    def note(name: str) -> None:
        ran.append((name, threading.current_thread().name))
        if name == "last":
            done.set()

    scheduler.call_later(0.20, lambda: note("last"))
    scheduler.call_later(0.05, lambda: note("first"))
    scheduler.call_later(0.10, lambda: note("never")).cancel()
    for i in range(200):  # many timers: still one thread
        scheduler.call_later(0.12, lambda i=i: note(f"t{i}"))
    assert threading.active_count() <= threads_before + 1
    assert done.wait(5)
    names = [name for name, _ in ran]
    assert names[0] == "first" and names[-1] == "last" and "never" not in names
    assert len(names) == 202
    assert {thread for _, thread in ran} == {"relay-scheduler"}


def test_threading_scheduler_wakes_early_for_a_sooner_timer_and_survives_a_failing_callback() -> None:
    scheduler = ThreadingScheduler()
    soon = threading.Event()
    scheduler.call_later(60, lambda: None)  # the thread now sleeps for a minute...
    scheduler.call_later(0.01, lambda: 1 / 0)  # ...and is woken for this one, which fails
    began = time.monotonic()
    scheduler.call_later(0.02, soon.set)
    assert soon.wait(5)
    assert time.monotonic() - began < 2


def test_a_cancelled_timer_lets_go_of_its_callback() -> None:
    scheduler = ThreadingScheduler()
    timer = scheduler.call_later(60, lambda: None)
    timer.cancel()
    assert timer.callback is None  # type: ignore[attr-defined]


class Socket:
    def __init__(self, clock: ManualScheduler) -> None:
        self.clock = clock
        self.pings = 0
        self.pong_at = clock.now()
        self.accepts = True
        self.broken = False

    def ping(self) -> bool:
        if self.broken:
            raise OSError("broken")
        if not self.accepts:
            return False
        self.pings += 1
        return True

    def last_pong(self) -> float:
        return self.pong_at

    def pong(self) -> None:
        self.pong_at = self.clock.now()


def liveness(clock: ManualScheduler, socket: Socket) -> tuple[Liveness, list[str]]:
    failures: list[str] = []
    watch = Liveness(clock, socket, interval=10, timeout=25, failed=failures.append)  # type: ignore[arg-type]
    watch.start()
    return watch, failures


def test_liveness_keeps_one_timer_per_connection_and_fails_at_the_pong_deadline() -> None:
    clock = ManualScheduler()
    socket = Socket(clock)
    _, failures = liveness(clock, socket)
    for _ in range(34):
        clock.advance(1)
        assert len(clock.pending()) == 1
    assert socket.pings == 3 and failures == []  # pings at 10, 20, 30; the first one's deadline is 35
    clock.advance(1)
    assert failures == ["pong timeout"] and clock.pending() == []
    clock.advance(100)
    assert failures == ["pong timeout"] and socket.pings == 3


def test_a_pong_to_any_ping_keeps_the_connection_open() -> None:
    clock = ManualScheduler()
    socket = Socket(clock)
    _, failures = liveness(clock, socket)
    for _ in range(30):
        clock.advance(10)
        socket.pong()
    assert failures == [] and socket.pings == 30
    clock.advance(21)  # last pong at 300; pings at 310 (unanswered), 320; deadline 335
    assert failures == []
    clock.advance(15)
    assert failures == ["pong timeout"]


def test_a_ping_the_socket_cannot_take_now_is_sent_at_the_next_interval() -> None:
    clock = ManualScheduler()
    socket = Socket(clock)
    socket.accepts = False
    _, failures = liveness(clock, socket)
    clock.advance(50)  # never sent: no deadline armed
    assert failures == [] and socket.pings == 0
    socket.accepts = True
    clock.advance(10)
    assert socket.pings == 1
    clock.advance(25)
    assert failures == ["pong timeout"]


def test_a_failed_ping_and_a_stopped_liveness() -> None:
    clock = ManualScheduler()
    socket = Socket(clock)
    _, failures = liveness(clock, socket)
    socket.broken = True
    clock.advance(10)
    assert failures == ["ping failed"]
    other = Socket(clock)
    watch, failures = liveness(clock, other)
    watch.stop()
    clock.advance(100)
    assert other.pings == 0 and failures == [] and clock.pending() == []


def test_handshake_gate_bounds_what_is_in_flight_and_tickets_release_once() -> None:
    gate = HandshakeGate(2, wait_s=0)
    first, second = gate.enter(), gate.enter()
    assert first is not None and second is not None
    assert gate.enter() is None and gate.refused == 1
    first.release()
    first.release()  # idempotent: the actor and the handler may both release
    assert gate.in_flight == 1
    third = gate.enter()
    assert third is not None and gate.enter() is None
    with pytest.raises(ValueError, match="limit must be positive"):
        HandshakeGate(0)


def test_handshake_gate_lets_an_upgrade_wait_for_a_place() -> None:
    gate = HandshakeGate(1, wait_s=5.0)
    first = gate.enter()
    assert first is not None
    admitted: list[Ticket | None] = []
    waiter = threading.Thread(target=lambda: admitted.append(gate.enter()))
    waiter.start()
    wait_until(lambda: gate.waiting, 5, interval=0.005, message="the second upgrade never waited")
    first.release()
    waiter.join(5)
    assert admitted and admitted[0] is not None and gate.refused == 0
    started = time.monotonic()
    short = HandshakeGate(1, wait_s=0.05)
    assert short.enter() is not None
    assert short.enter() is None and short.refused == 1  # refused once its wait is over
    assert time.monotonic() - started >= 0.05


class App(pykka.ThreadingActor):
    def hello(self) -> str:
        return "hello"


def test_directory_hands_out_one_proxy_per_application_until_its_actor_stops() -> None:
    started: list[pykka.ActorRef[Any]] = []

    def start(org: str, app: str) -> pykka.ActorRef[Any]:
        ref = App.start()
        started.append(ref)
        return ref

    directory = Directory(start)
    try:
        proxy = directory.application_proxy("o", "a")
        assert directory.application_proxy("o", "a") is proxy
        assert proxy.hello().get(timeout=5) == "hello"
        assert directory.application_proxy("o", "b") is not proxy
        started[0].stop()
        wait_until(lambda: not started[0].is_alive(), timeout=5)
        again = directory.application_proxy("o", "a")
        assert again is not proxy and again.actor_ref is started[-1]
        assert again.hello().get(timeout=5) == "hello"
    finally:
        pykka.ActorRegistry.stop_all()
