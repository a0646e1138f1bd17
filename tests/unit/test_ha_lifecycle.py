"""AppLifecycle in a cluster (actors/recovery.py), time driven by hand, a real in-memory RelayLog:

- candidates: the dead executor's version first, then local before remote, then connection age;
- a dead executor with no local peer is dispatched to a remote one; with none anywhere it looks again every
  poll, and a peer that connected to another instance gets it;
- a remote dispatch that does not reach its peer fails that attempt with the reason, the next candidate follows;
- a grace timer declares dead only what it was armed for: not a newer disconnection another instance saw, not
  an adopted connection that came back elsewhere; an adopted one that never came back is recorded gone with the
  adoption reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import pytest

from relay.actors.recovery import ADOPTED_REASON, AppLifecycle
from relay.actors.recovery_dispatch import rank_peers
from relay.actors.scheduler import ManualScheduler
from relay.events.executor import DEAD, DELETED, DISCONNECTED, HEALTHY, Executor, ExecutorInfo
from relay.events.refs import executor_ref
from relay.projections.store.log import RelayLog
from relay.wire.errors import PeerUnreachableError
from relay.wire.requests import RecoveryRequest
from relay.wire.responses import ExistPendingWorkflowsResponse, SuccessResponse

ORG, APP = "acme", "shop"
GRACE = 10.0
POLL = 2.0


def info(version: str = "v1") -> ExecutorInfo:
    return ExecutorInfo(application_version=version, hostname="h", language="python", dbos_version="3.2.0",
                        metadata=None)


@dataclass
class Local:
    executor_id: str
    application_version: str = "v1"
    connected_at: float = 0.0


@dataclass
class Remote:
    remote: ClassVar[bool] = True
    executor_id: str
    application_version: str = "v1"
    connected_at: float = 0.0
    instance: str = "relay-2"


def ok(request_id: str = "r") -> SuccessResponse:
    return SuccessResponse(type="recovery", request_id=request_id, success=True)


def none_pending() -> ExistPendingWorkflowsResponse:
    """The answer to the exist_pending_workflows check that confirms a recovery's success."""
    return ExistPendingWorkflowsResponse(type="exist_pending_workflows", request_id="r", exist=False)


@dataclass
class Harness:
    clock: ManualScheduler = field(default_factory=ManualScheduler)
    log: RelayLog = field(default_factory=RelayLog)
    local: list[Local] = field(default_factory=list)
    remote: list[Remote] = field(default_factory=list)
    sent: list[tuple[str, RecoveryRequest, Any]] = field(default_factory=list)
    mailbox: list[dict[str, Any]] = field(default_factory=list)
    lifecycle: AppLifecycle = field(init=False)

    def __post_init__(self) -> None:
        self.lifecycle = AppLifecycle(
            ORG, APP, log=self.log, instance_id="relay-1", clock=self.clock.wall, scheduler=self.clock,
            grace_secs=lambda: GRACE, recovery_timeout_s=30, peers=lambda: list(self.local),
            latest_version=lambda: None,
            send=lambda peer, request, on_answer: self.sent.append((peer.executor_id, request, on_answer)),
            forget=lambda peer, request_id: None, post=self.mailbox.append,
            remote_peers=lambda: list(self.remote), remote_poll_s=POLL,
        )

    def drain(self) -> None:
        while self.mailbox:
            self.lifecycle.handle(self.mailbox.pop(0))

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.drain()

    def answer(self, index: int, answer: Any) -> None:
        self.sent[index][2](answer)
        self.drain()

    def connect(self, executor: str, instance: str = "relay-1", version: str = "v1") -> None:
        self.log.run(executor_ref(ORG, APP, executor),
                     lambda found: Executor.connect_again(
                         found, ORG, APP, executor, info(version), instance, self.clock.wall()))

    def disconnect(self, executor: str, *, watch: bool = True) -> None:
        at = self.clock.wall()
        self.log.change(executor_ref(ORG, APP, executor), lambda e: e.disconnect("socket closed", at))
        if watch:
            self.lifecycle.disconnected(executor, at)

    def kill(self, executor: str) -> None:
        """Connected here, then gone past its grace period: DEAD."""
        self.connect(executor)
        self.disconnect(executor)
        self.advance(GRACE)
        assert self.record(executor).status == DEAD

    def record(self, executor: str) -> Any:
        return self.log.get(executor_ref(ORG, APP, executor))

    def events(self, executor: str) -> list[tuple[str, dict[str, Any]]]:
        record = self.record(executor)
        return [(type(e).__name__, vars(e)) for e in self.log.events.get(record.id)]


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_candidates_same_version_first_then_local_before_remote() -> None:
    live = [
        Remote("remote-same-early", "v1", 1.0),
        Local("local-other", "v2", 0.0),
        Local("local-same-late", "v1", 9.0),
        Remote("remote-other", "v2", 0.0),
        Local("local-same-early", "v1", 2.0),
    ]
    assert [p.executor_id for p in rank_peers("dead", "v1", live)] == [
        "local-same-early", "local-same-late", "remote-same-early", "local-other", "remote-other",
    ]


def test_a_dead_executor_without_a_local_peer_goes_to_a_remote_one(h: Harness) -> None:
    h.remote.append(Remote("far"))
    h.kill("a")
    [(peer, request, _)] = h.sent
    assert (peer, request.executor_ids) == ("far", ["a"])
    assert h.record("a").recovery["peer"] == "far"
    h.answer(0, ok(request.request_id))
    assert [peer for peer, _, _ in h.sent] == ["far", "far"]  # the check goes to the same remote peer
    h.answer(1, none_pending())
    assert h.record("a").status == DELETED


def test_with_no_peer_anywhere_it_looks_again_every_poll(h: Harness) -> None:
    h.kill("a")
    assert h.sent == []
    h.advance(POLL * 3)
    assert h.sent == [] and h.record("a").status == DEAD
    h.remote.append(Remote("joined-elsewhere"))  # connected to another instance: nobody tells us
    h.advance(POLL)
    assert [peer for peer, _, _ in h.sent] == ["joined-elsewhere"]


def test_an_unreachable_remote_peer_fails_that_attempt_and_the_next_follows(h: Harness) -> None:
    h.remote += [Remote("far-1", connected_at=1), Remote("far-2", connected_at=2)]
    h.kill("a")
    h.answer(0, PeerUnreachableError("peer on instance relay-2 did not answer: unreachable (ConnectionRefusedError)"))
    assert [peer for peer, _, _ in h.sent] == ["far-1", "far-2"]
    failed = [e for name, e in h.events("a") if name == "RecoveryFailed"]
    assert [f["reason"] for f in failed] == [
        "peer on instance relay-2 did not answer: unreachable (ConnectionRefusedError)"
    ]
    h.answer(1, ok(h.sent[1][1].request_id))
    h.answer(2, none_pending())
    assert h.record("a").status == DELETED


def test_a_newer_disconnection_seen_by_another_instance_is_not_ours_to_declare(h: Harness) -> None:
    h.connect("a")
    h.disconnect("a")  # we saw it go: our grace timer runs
    h.advance(GRACE / 2)
    h.connect("a", instance="relay-2")  # it came back through another instance ...
    h.disconnect("a", watch=False)  # ... and went again there: relay-2 watches that one
    h.advance(GRACE / 2)
    assert h.record("a").status == DISCONNECTED
    assert "DeclaredDead" not in [name for name, _ in h.events("a")]


def test_an_adopted_connection_that_came_back_elsewhere_is_left_alone(h: Harness) -> None:
    h.connect("a", instance="relay-gone")
    row = {"executor_id": "a", "status": HEALTHY, "connected_at": h.record("a").connected_at.isoformat()}
    h.advance(1)
    # Reconnected through the balancer to another survivor after the adopter read the row, before it adopted
    # it: the adoption time is later than that connection, the row's connection earlier.
    h.connect("a", instance="relay-2")
    h.advance(1)
    h.lifecycle.adopt([row], h.clock.wall(), ADOPTED_REASON)
    h.advance(GRACE)
    assert h.record("a").status == HEALTHY
    assert [name for name, _ in h.events("a")] == ["Connected", "Reconnected"]


def test_an_adopted_connection_that_never_came_back_is_recovered(h: Harness) -> None:
    h.local.append(Local("b"))
    h.connect("a", instance="relay-gone")
    h.advance(3)
    adopted_at = h.clock.wall()
    row = {"executor_id": "a", "status": HEALTHY, "connected_at": h.record("a").connected_at.isoformat()}
    h.lifecycle.adopt([row], adopted_at, ADOPTED_REASON)
    h.advance(GRACE - 0.01)
    assert h.record("a").status == HEALTHY
    h.advance(0.01)
    names = [name for name, _ in h.events("a")]
    assert names == ["Connected", "Disconnected", "DeclaredDead", "RecoveryDispatched"]
    disconnected = dict(h.events("a"))["Disconnected"]
    assert (disconnected["reason"], disconnected["at"]) == (ADOPTED_REASON, adopted_at)
    assert h.record("a").dead_at - adopted_at == timedelta(seconds=GRACE)
    assert [peer for peer, _, _ in h.sent] == ["b"]
