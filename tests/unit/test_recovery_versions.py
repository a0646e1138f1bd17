"""AppLifecycle: a recovery's success is confirmed across application versions, and dispatches are bounded
per peer (actors/recovery.py), time driven by hand (ManualScheduler), a real in-memory RelayLog.

- the SDKs recover only the dead executor's PENDING workflows of their own application version and answer
  success anyway: a success is followed by `exist_pending_workflows(dead, its version)` on the same peer;
  `exist: true` fails the attempt and the record stays DEAD until an executor of that version recovers it;
- a check without a usable answer is trusted from a peer of the same version only;
- at most `max_per_peer` dispatches (checks included) are in flight on one peer; the others queue in the
  order the executors died, and a full peer of the right version is waited for rather than a wrong one used.
"""

from __future__ import annotations

import pytest

from relay.actors.recovery_dispatch import DEFAULT_MAX_PER_PEER, read_check
from relay.events.executor import DEAD, DELETED
from relay.wire.errors import ExecutorGoneError
from relay.wire.responses import Response
from tests.unit.test_recovery import GRACE, TIMEOUT, Harness, exist, ok


@pytest.fixture
def h() -> Harness:
    return Harness()


def kill(h: Harness, *executors: str, version: str = "v1") -> None:
    """Connected, then gone past the grace period: DEAD (all at the same moment, in this order)."""
    for executor in executors:
        h.connect(executor, version)
        h.disconnect(executor)
    h.advance(GRACE)
    for executor in executors:
        assert h.record(executor).status == DEAD


def failures(h: Harness, executor: str) -> list[tuple[str, str]]:
    return [(p["peer"], p["reason"]) for name, p in h.events(executor) if name == "RecoveryFailed"]


def kinds(h: Harness) -> list[tuple[str, str]]:
    return [(peer, request.type.value) for peer, request, _ in h.sent]


# -------------------------------------------------------------------------------- the check


def test_read_check() -> None:
    assert read_check(exist(False)) == (False, None)
    assert read_check(exist(True)) == (True, None)
    unknown = Response(type="exist_pending_workflows", request_id="r", error_message="Unknown message type")
    assert read_check(unknown) == (None, "its check answered an error: Unknown message type")
    assert read_check(ExecutorGoneError("x")) == (None, "peer disconnected before answering its check")
    assert read_check(ok()) == (None, "its check got an unexpected answer")


def test_a_success_of_another_version_does_not_lose_the_workflows(h: Harness) -> None:
    h.join("b", "v2")
    kill(h, "a")
    assert kinds(h) == [("b", "recovery")]  # the only peer, though of another version
    h.answer(0, ok())
    [_, (peer, check, _)] = h.sent
    assert (peer, check.type.value, check.executor_id, check.application_version) == (
        "b", "exist_pending_workflows", "a", "v1")
    h.answer(1, exist(True))

    # Not deleted: the attempt failed, and says why; a retry round is scheduled.
    assert h.record("a").status == DEAD
    assert failures(h, "a") == [("b", ("peer answered success but workflows of version v1 remain pending (the peer "
                                      "runs v2; only an executor of v1 recovers them)"))]
    assert "RecoveryAcknowledged" not in h.names("a") and not h.record("a").recovered
    assert h.lifecycle.snapshot()["dead"] == {"a": {"peer": None, "tried": ["b"], "retry": True}}
    h.advance(TIMEOUT)  # the next round: b again, with the same outcome
    assert kinds(h)[2:] == [("b", "recovery")]
    h.answer(2, ok())
    h.answer(3, exist(True))
    assert h.record("a").status == DEAD and len(failures(h, "a")) == 2
    assert h.clock.pending() == [TIMEOUT * 2]

    # An executor of v1 connects: it gets the dispatch at once (no waiting for the round), and it recovers.
    h.join("c", "v1")
    assert kinds(h)[4:] == [("c", "recovery")]
    h.answer(4, ok())
    assert kinds(h)[5:] == [("c", "exist_pending_workflows")]
    h.answer(5, exist(False))
    assert h.record("a").status == DELETED
    assert h.names("a")[-3:] == ["RecoveryDispatched", "RecoveryAcknowledged", "Deleted"]
    assert [p["peer"] for name, p in h.events("a") if name == "RecoveryAcknowledged"] == ["c"]
    assert h.lifecycle.snapshot() == {"grace": [], "dead": {}}
    assert h.clock.pending() == []


def test_same_version_first_and_a_remaining_workflow_tries_the_next_peer(h: Harness) -> None:
    h.join("other", "v2")
    h.clock.advance(1)
    h.join("same-1")
    h.clock.advance(1)
    h.join("same-2")
    kill(h, "a")
    assert kinds(h) == [("same-1", "recovery")]
    h.answer(0, ok())
    h.answer(1, exist(True))  # e.g. a workflow whose re-enqueue failed: the SDK still answered success
    assert failures(h, "a") == [("same-1", "peer answered success but workflows of version v1 remain pending")]
    assert kinds(h)[2:] == [("same-2", "recovery")]
    h.recovered(2)
    assert h.record("a").status == DELETED


def test_a_check_without_an_answer_trusts_the_same_version_only(h: Harness) -> None:
    unknown = Response(type="exist_pending_workflows", request_id="r", error_message="Unknown message type")
    h.join("same")
    kill(h, "a")
    h.answer(0, ok())
    h.answer(1, unknown)  # an SDK without the check: its own version's workflows are what it recovers
    assert h.record("a").status == DELETED

    other = Harness()
    other.join("b", "v2")
    kill(other, "x")
    other.answer(0, ok())
    other.answer(1, unknown)
    assert other.record("x").status == DEAD
    assert failures(other, "x") == [
        ("b", "peer of version v2 answered success; not confirmed: its check answered an error: Unknown message type")
    ]
    other.advance(TIMEOUT)  # the next round: the check is lost when b drops
    other.answer(2, ok())
    other.answer(3, ExecutorGoneError("gone"))
    assert failures(other, "x")[-1] == (
        "b", "peer of version v2 answered success; not confirmed: peer disconnected before answering its check")


def test_a_check_that_times_out(h: Harness) -> None:
    h.join("same")
    h.join("b", "v2")
    kill(h, "a", "z")
    h.answer(0, ok())  # a -> same: check sent
    h.answer(1, ok())  # z -> same: check sent
    checks = [request for _, request, _ in h.sent[2:]]
    h.advance(TIMEOUT)
    assert h.forgotten == [("same", checks[0].request_id), ("same", checks[1].request_id)]
    assert h.record("a").status == DELETED and h.record("z").status == DELETED  # same version: trusted

    other = Harness()
    other.join("b", "v2")
    kill(other, "x")
    other.answer(0, ok())
    other.advance(TIMEOUT)
    assert other.record("x").status == DEAD
    assert failures(other, "x") == [("b", ("peer of version v2 answered success; not confirmed: its check got no "
                                          "answer within 30 s"))]


def test_answers_in_the_wrong_phase_are_ignored(h: Harness) -> None:
    h.join("b")
    kill(h, "a")
    recovery_answer = h.sent[0][2]
    h.answer(0, ok())
    recovery_answer(ok())  # a duplicate of the first answer, while its check is out
    h.drain()
    assert h.record("a").status == DEAD and kinds(h) == [("b", "recovery"), ("b", "exist_pending_workflows")]
    h.answer(1, exist(False))
    h.answer(1, exist(True))  # a late duplicate of the check: the record is gone already
    assert h.record("a").status == DELETED


# -------------------------------------------------------------------------------- the per-peer bound


def test_a_peer_joining_many_dead_executors_gets_a_bounded_number_at_once(h: Harness) -> None:
    dead = [f"d{i:02}" for i in range(10)]
    kill(h, *dead)
    assert h.sent == []
    h.join("p")
    assert DEFAULT_MAX_PER_PEER == 4
    assert [request.executor_ids for _, request, _ in h.sent] == [[d] for d in dead[:4]]
    snapshot = h.lifecycle.snapshot()
    assert snapshot["in_flight"] == {"p": 4}
    assert [d for d, s in snapshot["dead"].items() if s.get("queued")] == dead[4:]
    assert all(h.record(d).recovery is None for d in dead[4:])  # queued: no dispatch recorded yet

    # A success holds its slot through its check; the slot frees when the check answers.
    h.answer(0, ok())
    assert len(h.sent) == 5 and h.sent[-1][1].type.value == "exist_pending_workflows"
    h.answer(4, exist(False))
    assert [request.executor_ids for _, request, _ in h.sent[5:]] == [[dead[4]]]  # the oldest queued next
    # A failure frees a slot too (and its executor, with no other peer, waits for a retry round).
    h.answer(1, ExecutorGoneError("gone"))
    assert [request.executor_ids for _, request, _ in h.sent[6:]] == [[dead[5]]]
    # ... and so does a deadline: the four in flight time out, four waiting ones go out (the queued d06-d08,
    # and d09 or d01, whose retry round fell due at the same moment).
    h.advance(TIMEOUT)
    latest = [request.executor_ids[0] for _, request, _ in h.sent[7:]]
    assert len(latest) == 4 and set(dead[6:9]) <= set(latest) <= {*dead[6:], dead[1]}
    assert h.lifecycle.snapshot()["in_flight"] == {"p": 4}

    # Everything eventually recovers, never more than four at once on p.
    for _ in range(100):
        snapshot = h.lifecycle.snapshot()
        assert snapshot.get("in_flight", {}).get("p", 0) <= 4
        out = [d for d, s in snapshot["dead"].items() if s["peer"] == "p"]
        if not snapshot["dead"]:
            break
        if not out:
            h.advance(TIMEOUT * 8)  # the retry rounds of those that failed
            continue
        index = max(i for i, (_, r, _) in enumerate(h.sent) if getattr(r, "executor_ids", None) == [out[0]])
        h.recovered(index)
    assert all(h.record(d).status == DELETED for d in dead)
    assert h.lifecycle.snapshot() == {"grace": [], "dead": {}}


def test_the_bound_is_per_peer_and_a_setting(h: Harness) -> None:
    h.lifecycle.max_per_peer = 2
    h.join("p1")
    h.clock.advance(1)
    h.join("p2")
    kill(h, "a", "b", "c", "d", "e")
    # Ranked alike, a/b go to p1 (connected longer); then p1 is full and c/d go to p2; e queues.
    assert [(peer, request.executor_ids[0]) for peer, request, _ in h.sent] == [
        ("p1", "a"), ("p1", "b"), ("p2", "c"), ("p2", "d")]
    assert h.lifecycle.snapshot()["dead"]["e"]["queued"] is True
    h.recovered(2)  # c on p2: p2's slot goes to e
    assert (h.sent[-1][0], h.sent[-1][1].executor_ids) == ("p2", ["e"])


def test_a_full_peer_of_the_right_version_is_waited_for(h: Harness) -> None:
    h.lifecycle.max_per_peer = 1
    h.join("other", "v2")
    h.join("same")
    kill(h, "a", "b")
    # b does not go to "other" (it cannot recover v1 workflows): it waits for "same".
    assert [(peer, request.executor_ids[0]) for peer, request, _ in h.sent] == [("same", "a")]
    assert h.lifecycle.snapshot()["dead"]["b"]["queued"] is True
    h.recovered(0)
    assert (h.sent[-1][0], h.sent[-1][1].executor_ids) == ("same", ["b"])


def test_a_queued_or_dispatched_executor_coming_back_leaves_the_queue(h: Harness) -> None:
    h.lifecycle.max_per_peer = 1
    h.join("p")
    kill(h, "a", "b", "c")
    assert [request.executor_ids[0] for _, request, _ in h.sent] == ["a"]
    h.connect("b")  # queued, comes back
    h.lifecycle.returned("b")
    h.connect("a")  # dispatched, comes back: its slot goes to c (b left the queue)
    h.lifecycle.returned("a")
    assert [request.executor_ids[0] for _, request, _ in h.sent] == ["a", "c"]
    h.answer(0, ok())  # a's stale answer
    assert len(h.sent) == 2
    h.recovered(1)
    assert h.record("c").status == DELETED
    assert h.lifecycle.snapshot() == {"grace": [], "dead": {}}
