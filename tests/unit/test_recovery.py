"""The executor lifecycle on one instance, with time driven by hand (ManualScheduler): no sleeps.

- peer selection (`rank_peers`) and how answers are read (`describe_answer`);
- the manual scheduler itself;
- AppLifecycle against a real RelayLog (in memory): grace timers, reconnection inside the grace period,
  recovery dispatch, failover on error / disconnect / deadline, retry rounds, stale answers, a dead executor
  coming back, and the rebuild after a restart (HEALTHY, DISCONNECTED, DEAD with a dispatch pending);
- real actors (ExecutorActor + ApplicationActor) over fake sockets: pings, a missed pong deadline closing the
  socket, and the whole chain to a recovered, deleted record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pykka
import pytest

from relay.actors.application import ApplicationActor
from relay.actors.configuration.limits import Limits
from relay.actors.context import ActorContext
from relay.actors.directory import Directory
from relay.actors.executor import Connection, ExecutorActor
from relay.actors.recovery import (
    INTERRUPTED_REASON,
    RESTART_REASON,
    STORM_QUIET_S,
    AppLifecycle,
)
from relay.actors.recovery_dispatch import MESSAGE_KEY, describe_answer, rank_peers
from relay.actors.scheduler import ManualScheduler
from relay.events.executor import DEAD, DELETED, DISCONNECTED, HEALTHY, Executor, ExecutorInfo
from relay.events.refs import executor_ref
from relay.projections.store.log import RelayLog
from relay.wire.errors import ExecutorGoneError
from relay.wire.requests import ExistPendingWorkflowsRequest, RecoveryRequest
from relay.wire.responses import ExistPendingWorkflowsResponse, SuccessResponse
from tests.support.ports import wait_until

ORG, APP = "acme", "shop"
GRACE = 60.0
TIMEOUT = 30.0


def info(version: str = "v1") -> ExecutorInfo:
    return ExecutorInfo(application_version=version, hostname="h", language="python", dbos_version="3.2.0",
                        metadata=None)


@dataclass
class Peer:
    executor_id: str
    application_version: str = "v1"
    connected_at: float = 0.0


def ok(request_id: str = "r") -> SuccessResponse:
    return SuccessResponse(type="recovery", request_id=request_id, success=True)


def exist(value: bool, request_id: str = "r") -> ExistPendingWorkflowsResponse:
    return ExistPendingWorkflowsResponse(type="exist_pending_workflows", request_id=request_id, exist=value)


# -------------------------------------------------------------------------------- peer selection


def test_peers_rank_same_version_then_latest_then_longest_connected() -> None:
    live = [
        Peer("newer-old", "v2", 1.0),
        Peer("same-late", "v1", 9.0),
        Peer("latest", "v3", 5.0),
        Peer("same-early", "v1", 2.0),
        Peer("dead", "v1", 0.0),
    ]
    ranked = [p.executor_id for p in rank_peers("dead", "v1", live, latest_version="v3")]
    assert ranked == ["same-early", "same-late", "latest", "newer-old"]  # never the dead one itself
    assert [p.executor_id for p in rank_peers("dead", "v1", live, tried={"same-early"})] == [
        "same-late", "newer-old", "latest"
    ]
    assert rank_peers("dead", "v1", [Peer("dead")]) == []


def test_answers_are_read_strictly() -> None:
    assert describe_answer(ok()) is None
    assert describe_answer(ExecutorGoneError("x")) == "peer disconnected before answering"
    refused = SuccessResponse(type="recovery", request_id="r", success=False,
                                       error_message="boom\nTraceback (most recent call last): ...")
    assert describe_answer(refused) == "peer answered an error: boom"
    assert describe_answer(SuccessResponse(type="recovery", request_id="r", success=False)) == (
        "peer answered success: false"
    )
    assert describe_answer(SuccessResponse(type="cancel", request_id="r", success=True)) == (
        "peer sent an unexpected answer"
    )
    assert len(describe_answer(SuccessResponse(type="recovery", request_id="r", error_message="x" * 999))
               or "") == 200


def test_manual_scheduler_runs_what_falls_due_in_order() -> None:
    clock = ManualScheduler()
    ran: list[str] = []
    clock.call_later(2, lambda: ran.append("b"))
    clock.call_later(1, lambda: (ran.append("a"), clock.call_later(0.5, lambda: ran.append("a2"))))
    clock.call_later(3, lambda: ran.append("never")).cancel()
    assert clock.advance(0.99) == 0
    assert clock.advance(1.01) == 3
    assert ran == ["a", "a2", "b"]
    assert clock.pending() == []
    start = clock.wall()
    clock.advance(5)
    assert clock.wall() - start == timedelta(seconds=5)


# -------------------------------------------------------------------------------- AppLifecycle


@dataclass
class Harness:
    """An AppLifecycle with a real in-memory RelayLog, manual time, peers and a mailbox."""

    clock: ManualScheduler = field(default_factory=ManualScheduler)
    log: RelayLog = field(default_factory=RelayLog)
    peers: list[Peer] = field(default_factory=list)
    grace: float = GRACE
    sent: list[tuple[str, RecoveryRequest, Any]] = field(default_factory=list)
    forgotten: list[tuple[str, str]] = field(default_factory=list)
    mailbox: list[dict[str, Any]] = field(default_factory=list)
    lifecycle: AppLifecycle = field(init=False)

    def __post_init__(self) -> None:
        self.lifecycle = AppLifecycle(
            ORG, APP, log=self.log, instance_id="relay-1", clock=self.clock.wall, scheduler=self.clock,
            grace_secs=lambda: self.grace, recovery_timeout_s=TIMEOUT, peers=lambda: list(self.peers),
            latest_version=lambda: None,
            send=lambda peer, request, on_answer: self.sent.append((peer.executor_id, request, on_answer)),
            forget=lambda peer, request_id: self.forgotten.append((peer.executor_id, request_id)),
            post=self.mailbox.append,
        )

    # -- driving it like its actor would
    def drain(self) -> None:
        while self.mailbox:
            self.lifecycle.handle(self.mailbox.pop(0))

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.drain()

    def answer(self, index: int, answer: Any) -> None:
        self.sent[index][2](answer)
        self.drain()

    def recovered(self, index: int) -> None:
        """The peer of dispatch `index` answers success, then its check: nothing remains pending."""
        self.answer(index, ok())
        peer, check, _ = self.sent[-1]
        assert isinstance(check, ExistPendingWorkflowsRequest), check
        assert peer == self.sent[index][0]
        self.answer(len(self.sent) - 1, exist(False))

    def connect(self, executor: str, version: str = "v1") -> None:
        self.log.run(executor_ref(ORG, APP, executor),
                     lambda found: Executor.connect_again(
                         found, ORG, APP, executor, info(version), "relay-1", self.clock.wall()))

    def disconnect(self, executor: str) -> None:
        at = self.clock.wall()
        self.log.change(executor_ref(ORG, APP, executor), lambda e: e.disconnect("socket closed", at))
        self.lifecycle.disconnected(executor, at)

    def join(self, executor: str, version: str = "v1") -> None:
        """A peer connects and its connection is recorded."""
        self.connect(executor, version)
        self.peers.append(Peer(executor, version, self.clock.now()))
        self.lifecycle.peer_connected()
        self.drain()

    # -- reading the record
    def record(self, executor: str) -> Any:
        return self.log.get(executor_ref(ORG, APP, executor))

    def events(self, executor: str) -> list[tuple[str, dict[str, Any]]]:
        record = self.record(executor)
        aggregate_id = record.id
        out = []
        for e in self.log.events.get(aggregate_id):
            payload = {k: v for k, v in vars(e).items()
                       if k not in {"originator_id", "originator_version", "timestamp", "originator_topic"}}
            out.append((type(e).__name__, payload))
        return out

    def names(self, executor: str) -> list[str]:
        return [name for name, _ in self.events(executor)]


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_grace_period_expiry_declares_dead_and_waits_for_a_peer(h: Harness) -> None:
    h.connect("a")
    h.disconnect("a")
    assert h.clock.pending() == [GRACE]
    h.advance(GRACE - 0.001)
    assert h.record("a").status == DISCONNECTED
    h.advance(0.001)
    assert h.record("a").status == DEAD
    _, declared = h.events("a")[-1]
    assert declared["grace_secs"] == GRACE
    assert h.sent == []  # no healthy peer: it stays DEAD ...
    assert h.lifecycle.snapshot()["dead"] == {"a": {"peer": None, "tried": [], "retry": False}}
    h.advance(3600)
    assert h.record("a").status == DEAD and h.sent == []

    h.join("b")  # ... until one connects
    [(peer, request, _)] = h.sent
    assert (peer, request.executor_ids) == ("b", ["a"])
    assert h.record("a").recovery["peer"] == "b"


def test_reconnecting_inside_the_grace_period_cancels_it(h: Harness) -> None:
    h.join("b")
    h.connect("a")
    h.disconnect("a")
    h.advance(GRACE / 2)
    h.connect("a")  # Reconnected recorded by its ExecutorActor ...
    h.lifecycle.returned("a")  # ... after its claim told the lifecycle
    h.advance(GRACE * 2)
    assert h.record("a").status == HEALTHY
    assert "DeclaredDead" not in h.names("a")
    assert h.sent == [] and h.clock.pending() == []


def test_the_grace_period_is_the_apps_setting_when_the_disconnect_happens(h: Harness) -> None:
    h.grace = 5
    h.connect("a")
    h.disconnect("a")
    h.grace = 500  # read when the executor went: a change reaches running timers through grace_changed only
    h.advance(5)
    assert h.record("a").status == DEAD


def test_a_lowered_grace_period_reaches_executors_already_waiting(h: Harness) -> None:
    """Issue 34: an executor gone under a long grace period is not left waiting it out once it is lowered."""
    h.grace = 86_400
    for executor in ("a", "b", "c"):
        h.connect(executor)
    h.disconnect("a")
    h.advance(100)
    h.disconnect("b")
    h.advance(100)  # a has waited 200 s, b 100 s
    h.lifecycle.grace_changed(150)
    h.advance(0)
    assert h.record("a").status == DEAD  # past the new period already: at once
    _, declared = h.events("a")[-1]
    assert declared["grace_secs"] == 150
    assert h.record("b").status == DISCONNECTED
    h.advance(49.9)
    assert h.record("b").status == DISCONNECTED
    h.advance(0.1)  # 150 s after b went
    assert h.record("b").status == DEAD


def test_a_raised_grace_period_puts_off_a_running_timer(h: Harness) -> None:
    h.grace = 10
    h.connect("a")
    h.disconnect("a")
    h.advance(5)
    h.lifecycle.grace_changed(30)
    h.advance(24.9)
    assert h.record("a").status == DISCONNECTED
    h.advance(0.1)  # 30 s after it went
    assert h.record("a").status == DEAD
    assert h.clock.pending() == []  # the first timer was cancelled, not left to fire


def test_a_grace_expiry_for_an_executor_that_is_live_again_does_nothing(h: Harness) -> None:
    h.connect("a")
    h.disconnect("a")
    h.peers.append(Peer("a"))  # claimed again, its Reconnected not recorded yet
    h.advance(GRACE)
    assert h.record("a").status == DISCONNECTED


def test_success_acknowledges_and_deletes(h: Harness) -> None:
    h.join("b")
    h.connect("a")
    h.disconnect("a")
    h.advance(GRACE)
    [(_, request, _)] = h.sent
    h.answer(0, ok(request.request_id))
    # The success is confirmed first: the same peer is asked whether a's workflows of v1 remain pending.
    assert h.record("a").status == DEAD
    assert h.lifecycle.snapshot()["dead"]["a"]["checking"] is True
    [_, (peer, check, _)] = h.sent
    assert (peer, check.executor_id, check.application_version) == ("b", "a", "v1")
    h.answer(1, exist(False, check.request_id))
    assert h.record("a").status == DELETED
    assert h.names("a")[-4:] == ["DeclaredDead", "RecoveryDispatched", "RecoveryAcknowledged", "Deleted"]
    assert h.lifecycle.snapshot() == {"grace": [], "dead": {}}
    assert h.clock.pending() == []  # the dispatch deadline went with it


def test_failover_error_then_disconnect_then_deadline_then_a_retry_round(h: Harness) -> None:
    h.join("p1")
    h.clock.advance(1)
    h.join("other", "v2")
    h.clock.advance(1)
    h.join("p3")
    h.connect("a")
    h.disconnect("a")
    h.advance(GRACE)

    assert [s[0] for s in h.sent] == ["p1"]  # same version, longest connected
    h.answer(0, SuccessResponse(type="recovery", request_id="x", success=False, error_message="no"))
    assert [s[0] for s in h.sent] == ["p1", "p3"]
    h.answer(1, ExecutorGoneError("gone"))
    assert [s[0] for s in h.sent] == ["p1", "p3", "other"]  # another version only when no same-version peer
    h.advance(TIMEOUT)
    assert h.forgotten == [("other", h.sent[2][1].request_id)]
    failed = [p for name, p in h.events("a") if name == "RecoveryFailed"]
    assert [(f["peer"], f["attempt"], f["reason"]) for f in failed] == [
        ("p1", 1, "peer answered an error: no"),
        ("p3", 2, "peer disconnected before answering"),
        ("other", 3, "no answer within 30 s"),
    ]
    # Everybody failed: a new round after a pause that doubles.
    assert h.clock.pending() == [TIMEOUT]
    h.advance(TIMEOUT)
    assert [s[0] for s in h.sent][3:] == ["p1"]
    h.answer(3, ExecutorGoneError("gone"))
    h.answer(4, ExecutorGoneError("gone"))
    h.advance(TIMEOUT)  # "other" times out again
    assert h.clock.pending() == [TIMEOUT * 2]
    # A new peer does not wait for the round.
    h.join("p4")
    assert h.sent[-1][0] == "p4"
    h.recovered(len(h.sent) - 1)
    assert h.record("a").status == DELETED
    assert h.clock.pending() == []


def test_an_answer_after_the_deadline_is_ignored(h: Harness) -> None:
    h.join("b")
    h.connect("a")
    h.disconnect("a")
    h.advance(GRACE)
    h.advance(TIMEOUT)  # b is silent: failed; nobody else; retry scheduled
    before = h.names("a")
    h.answer(0, ok())  # the late answer of the first attempt
    assert h.names("a") == before
    assert h.record("a").status == DEAD


def test_a_dead_executor_coming_back_ends_its_recovery(h: Harness) -> None:
    h.join("b")
    h.connect("a")
    h.disconnect("a")
    h.advance(GRACE)
    h.connect("a")  # Reconnected (from DEAD)
    h.lifecycle.returned("a")
    h.answer(0, ok())  # whatever b says now is stale
    assert h.record("a").status == HEALTHY
    assert h.names("a")[-1] == "Reconnected"
    assert h.clock.pending() == []


def test_never_across_applications() -> None:
    shop, other = Harness(), Harness()
    other.lifecycle = AppLifecycle(
        ORG, "other-app", log=shop.log, instance_id="relay-1", clock=shop.clock.wall, scheduler=shop.clock,
        grace_secs=lambda: GRACE, recovery_timeout_s=TIMEOUT, peers=lambda: [Peer("x")], latest_version=lambda: None,
        send=lambda *a: other.sent.append(a), forget=lambda *a: None, post=shop.mailbox.append,
    )
    shop.connect("a")
    shop.disconnect("a")
    shop.advance(GRACE)
    other.lifecycle.peer_connected()
    assert shop.record("a").status == DEAD
    assert other.sent == [] and shop.sent == []


# -- restart --------------------------------------------------------------------------------------


def row(h: Harness, executor: str) -> dict[str, Any]:
    record = h.record(executor)
    return {"executor_id": executor, "status": record.status,
            "disconnected_at": record.disconnected_at.isoformat() if record.disconnected_at else None}


def test_restart_healthy_records_get_a_full_grace_period_from_the_start(h: Harness) -> None:
    h.connect("a")
    h.connect("back")
    h.advance(100)  # Relay was down meanwhile
    started = h.clock.wall()
    h.lifecycle.adopt([row(h, "a"), row(h, "back")], started)
    h.advance(10)
    h.connect("back")  # reconnects: its own actor records it and claims
    h.lifecycle.returned("back")
    h.advance(GRACE - 10)
    assert h.record("a").status == DEAD
    disconnected = next(p for name, p in h.events("a") if name == "Disconnected")
    assert (disconnected["reason"], disconnected["at"]) == (RESTART_REASON, started)
    assert h.record("back").status == HEALTHY


def test_restart_expiries_wait_while_the_others_are_still_coming_back(h: Harness) -> None:
    """A restart under thousands of executors takes a while to get them all in (most handshakes refused with
    503 meanwhile): a record whose grace ends while others still come back is looked at again a little later,
    and declared dead once they stop coming."""
    h.connect("late")
    h.connect("gone")
    h.connect("other")
    started = h.clock.wall()
    h.lifecycle.adopt([row(h, n) for n in ("late", "gone", "other")], started)
    h.advance(GRACE - 1)
    h.connect("other")
    h.lifecycle.returned("other")  # still coming back 1 s before the grace ends
    h.advance(1)
    assert h.record("late").status == HEALTHY and h.record("gone").status == HEALTHY
    h.advance(2)
    h.connect("late")
    h.lifecycle.returned("late")  # got in after its grace period: not dead
    h.advance(STORM_QUIET_S - 1)
    assert h.record("gone").status == HEALTHY  # "late" came back within the last STORM_QUIET_S
    h.advance(STORM_QUIET_S)
    assert h.record("gone").status == DEAD
    assert h.record("late").status == HEALTHY
    assert "DeclaredDead" not in h.names("late")


def test_restart_expiries_wait_at_most_one_more_grace_period(h: Harness) -> None:
    peers = [f"peer-{n}" for n in range(int(3 * GRACE))]
    for name in ["gone", *peers]:
        h.connect(name)
    started = h.clock.wall()
    h.lifecycle.adopt([row(h, n) for n in ["gone", *peers]], started)
    for name in peers:  # one comes back every second, for longer than two grace periods
        h.connect(name)
        h.lifecycle.returned(name)
        h.advance(1)
        if h.record("gone").status == DEAD:
            break
    dead_at = h.record("gone").dead_at
    assert dead_at is not None
    assert started + timedelta(seconds=2 * GRACE) <= dead_at <= started + timedelta(seconds=2 * GRACE + STORM_QUIET_S)


def test_restart_healthy_record_that_reconnected_elsewhere_is_left_alone(h: Harness) -> None:
    h.connect("a")
    started = h.clock.wall()
    h.lifecycle.adopt([row(h, "a")], started)
    h.advance(1)
    h.connect("a")  # to another instance: we never see its claim
    h.advance(GRACE)
    assert h.record("a").status == HEALTHY
    assert h.names("a") == ["Connected", "Reconnected"]


def test_restart_disconnected_records_keep_the_rest_of_their_grace(h: Harness) -> None:
    h.connect("a")
    h.log.change(executor_ref(ORG, APP, "a"), lambda e: e.disconnect("socket closed", h.clock.wall()))
    h.advance(GRACE - 5)  # most of it went by while Relay was down
    h.lifecycle.adopt([row(h, "a")], h.clock.wall())
    assert h.clock.pending() == [5]
    h.advance(5)
    assert h.record("a").status == DEAD


def test_restart_disconnected_records_do_not_count_the_downtime(h: Harness) -> None:
    """A restart says when the previous run ended: the time Relay was down (nobody could reconnect) does not
    count against the grace period, however long it was."""
    h.connect("a")
    h.log.change(executor_ref(ORG, APP, "a"), lambda e: e.disconnect("socket closed", h.clock.wall()))
    h.advance(10)  # 10 s of its grace went by while Relay still ran
    down_at = h.clock.wall()
    h.advance(GRACE * 5)  # Relay was down for five grace periods
    h.lifecycle.adopt([row(h, "a")], h.clock.wall(), down_at=down_at)
    assert h.clock.pending() == [GRACE - 10]
    h.advance(GRACE - 11)
    h.connect("a")  # it came back within what was left of its grace
    h.lifecycle.returned("a")
    h.advance(GRACE)
    assert h.record("a").status == HEALTHY
    assert "DeclaredDead" not in h.names("a")


def test_restart_disconnected_record_that_never_returns_is_dead_after_the_rest_of_its_grace(h: Harness) -> None:
    h.connect("a")
    disconnected = h.clock.wall()
    h.log.change(executor_ref(ORG, APP, "a"), lambda e: e.disconnect("socket closed", disconnected))
    h.advance(GRACE - 5)
    down_at = h.clock.wall()
    h.advance(3600)
    started = h.clock.wall()
    h.lifecycle.adopt([row(h, "a")], started, down_at=down_at)
    h.advance(4)
    assert h.record("a").status == DISCONNECTED
    h.advance(1)
    assert h.record("a").status == DEAD
    assert h.record("a").dead_at == started + timedelta(seconds=5)


def test_restart_dispatched_but_unacknowledged_is_dispatched_again(h: Harness) -> None:
    h.connect("a")
    at = h.clock.wall()
    h.log.change(executor_ref(ORG, APP, "a"), lambda e: (e.disconnect("socket closed", at), e.declare_dead(GRACE, at),
                                                    e.dispatch_recovery("gone-peer", "relay-0", at)))
    h.lifecycle.adopt([row(h, "a")], h.clock.wall())
    failed = [p for name, p in h.events("a") if name == "RecoveryFailed"]
    assert [(f["peer"], f["reason"]) for f in failed] == [("gone-peer", INTERRUPTED_REASON)]
    h.join("b")
    assert h.record("a").recovery == {"peer": "b", "attempt": 2, "dispatched_at": h.clock.wall()}
    h.recovered(0)
    assert h.record("a").status == DELETED


def test_restart_dead_record_with_a_peer_online_is_dispatched_at_once(h: Harness) -> None:
    h.join("b")
    h.connect("a")
    h.log.change(executor_ref(ORG, APP, "a"), lambda e: (e.disconnect("x", h.clock.wall()),
                                                    e.declare_dead(GRACE, h.clock.wall())))
    h.lifecycle.adopt([row(h, "a"), row(h, "b")], h.clock.wall())  # b is live: not watched
    assert [s[0] for s in h.sent] == ["b"]
    assert h.lifecycle.snapshot()["grace"] == []


# -------------------------------------------------------------------------------- real actors


class FakeSocket:
    """A FrameSocket: records what the actor sends; the test decides when pongs arrive."""

    def __init__(self, clock: ManualScheduler) -> None:
        self.clock = clock
        self.sent: list[dict[str, Any]] = []
        self.pings = 0
        self.pong_at = clock.now()
        self.closed: tuple[int, str] | None = None

    def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    def ping(self) -> None:
        self.pings += 1

    def pong(self) -> None:
        self.pong_at = self.clock.now()

    def last_pong(self) -> float:
        return self.pong_at

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


class FakeApplications:
    def __init__(self, grace: int) -> None:
        self.grace = grace

    def app(self, org: str, app: str) -> dict[str, Any]:
        return {"settings": {"executorTimeoutSecs": self.grace}}


@dataclass
class FakeViews:
    applications: FakeApplications


@pytest.fixture
def world() -> Iterator[tuple[ActorContext, Directory, ManualScheduler]]:
    clock = ManualScheduler()
    ctx = ActorContext(
        log=RelayLog(), views=FakeViews(FakeApplications(grace=20)), runner=None,  # type: ignore[arg-type]
        instance_id="relay-1", limits=Limits(ping_interval_s=10, pong_timeout_s=25, recovery_timeout_s=30),
        clock=clock.wall, scheduler=clock,
    )
    directory = Directory(lambda org, app: ApplicationActor.start(ctx, org, app))
    yield ctx, directory, clock
    pykka.ActorRegistry.stop_all()


def start_executor(ctx: ActorContext, directory: Directory, clock: ManualScheduler, executor_id: str,
                   ) -> tuple[pykka.ActorRef[Any], FakeSocket]:
    socket = FakeSocket(clock)
    ref = ExecutorActor.start(ctx, directory, socket, Connection(ORG, APP, "key", "127.0.0.1"))
    flush(ref)
    [hello] = socket.sent
    answer = {"type": "executor_info", "request_id": hello["request_id"], "executor_id": executor_id,
              "application_version": "v1", "hostname": "h", "language": "python", "dbos_version": "3.2.0"}
    ref.proxy().on_frame(json.dumps(answer)).get()
    return ref, socket


def flush(ref: pykka.ActorRef[Any]) -> None:
    """Wait until the actor has handled everything told to it so far (its mailbox is FIFO)."""
    ref.proxy().closed.get(timeout=5)


def settle(directory: Directory, *refs: pykka.ActorRef[Any]) -> None:
    for ref in refs:
        if ref.is_alive():
            flush(ref)
    directory.application(ORG, APP).proxy().lifecycle_snapshot().get(timeout=5)


def run_for(seconds: float, clock: ManualScheduler, directory: Directory, *refs: pykka.ActorRef[Any]) -> None:
    """Advance time in 0.25 s steps (exact in binary), letting the actors handle what fell due after each
    (a timer an actor arms while handling a message is then due in a later step, as in real time)."""
    for _ in range(round(seconds * 4)):
        clock.advance(0.25)
        settle(directory, *refs)


def test_pings_every_interval_and_a_pong_keeps_the_socket_open(world: Any) -> None:
    ctx, directory, clock = world
    ref, socket = start_executor(ctx, directory, clock, "a")
    for _ in range(6):  # a minute of pings, each answered at once
        run_for(10, clock, directory, ref)
        socket.pong()
    assert socket.pings == 6
    run_for(25, clock, directory, ref)
    assert socket.closed is None


def test_a_missed_pong_deadline_closes_the_socket(world: Any) -> None:
    ctx, directory, clock = world
    ref, socket = start_executor(ctx, directory, clock, "a")
    run_for(34.75, clock, directory, ref)  # pings at 10, 20, 30 s; the first one's deadline is 35 s
    assert socket.closed is None and socket.pings == 3
    run_for(0.25, clock, directory, ref)
    assert socket.closed == (1001, "pong timeout")


def test_from_a_missed_pong_to_a_recovered_record_through_the_actors(world: Any) -> None:
    ctx, directory, clock = world
    a, a_socket = start_executor(ctx, directory, clock, "a")
    b, b_socket = start_executor(ctx, directory, clock, "b")
    b_socket.pong_at = float("inf")  # b always answers
    run_for(35, clock, directory, a, b)
    assert a_socket.closed == (1001, "pong timeout")
    a.proxy().on_closed("socket closed").get(timeout=5)  # what the receive loop does once it wakes
    settle(directory, b)
    record = ctx.log.get(executor_ref(ORG, APP, "a"))
    assert (record.status, list(ctx.log.events.get(record.id))[-1].reason) == (DISCONNECTED, "pong timeout")

    run_for(20, clock, directory, b)  # the app's grace period
    assert ctx.log.get(executor_ref(ORG, APP, "a")).status == DEAD
    # The dispatch goes app actor → b's actor → socket: wait for it to reach the socket (no fixed sleep).
    recovery = wait_until(lambda: next((f for f in b_socket.sent if f["type"] == "recovery"), None), timeout=5,
                          message=f"no recovery sent to b: {b_socket.sent}")
    assert recovery["executor_ids"] == ["a"]
    b.proxy().on_frame(json.dumps({"type": "recovery", "request_id": recovery["request_id"], "success": True})).get()
    settle(directory, b)
    assert ctx.log.get(executor_ref(ORG, APP, "a")).status == DEAD  # until confirmed
    check = wait_until(lambda: next((f for f in b_socket.sent if f["type"] == "exist_pending_workflows"), None),
                       timeout=5, message=f"no exist_pending_workflows check sent to b: {b_socket.sent}")
    assert check == {"type": "exist_pending_workflows", "request_id": check["request_id"], "executor_id": "a",
                     "application_version": "v1"}
    b.proxy().on_frame(json.dumps({"type": "exist_pending_workflows", "request_id": check["request_id"],
                                   "exist": False})).get()
    settle(directory, b)
    wait_until(lambda: ctx.log.get(executor_ref(ORG, APP, "a")).status == DELETED, timeout=5, message="a not deleted")
    assert directory.application(ORG, APP).proxy().lifecycle_snapshot().get() == {"grace": [], "dead": {}}
    assert b_socket.closed is None


def test_lifecycle_messages_never_stop_the_application_actor(world: Any) -> None:
    _, directory, _ = world
    app = directory.application(ORG, APP)
    app.tell({MESSAGE_KEY: "rewatch", "executor": "nobody"})
    app.tell({MESSAGE_KEY: "grace_expired", "executor": "nobody", "token": 99})
    assert app.proxy().lifecycle_snapshot().get(timeout=5) == {"grace": [], "dead": {}}
    assert app.is_alive()
