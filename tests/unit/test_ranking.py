"""The one ranking rule (actors/policies/ranking.py) that routing, alerting/retention requests and recovery share."""

from __future__ import annotations

from dataclasses import dataclass, field

from relay.actors import executor_requests, recovery_dispatch, routing
from relay.actors.policies.ranking import order, supports


@dataclass
class E:
    executor_id: str
    application_version: str
    connected_at: float
    remote: bool = False
    language: str = "python"
    dbos_version: str = "3.2.0"
    unsupported: set[str] = field(default_factory=set)


EXECUTORS = [
    E("old-v1", "v1", 1.0), E("new-v1", "v1", 5.0), E("mid-v2", "v2", 3.0), E("far-v2", "v2", 4.0, remote=True),
]


def ids(executors: list[E]) -> list[str]:
    return [e.executor_id for e in executors]


def test_latest_version_first_then_newest_connection() -> None:
    assert ids(order(EXECUTORS, latest="v2")) == ["far-v2", "mid-v2", "new-v1", "old-v1"]
    assert ids(order(EXECUTORS, latest=None)) == ["new-v1", "far-v2", "mid-v2", "old-v1"]


def test_recovery_prefers_the_dead_executors_version_then_local_then_longest_connected() -> None:
    ranked = order(EXECUTORS, latest="v2", version="v1", local_first=True, longest_connected=True)
    assert ids(ranked) == ["old-v1", "new-v1", "mid-v2", "far-v2"]


def test_ties_are_broken_by_executor_id() -> None:
    twins = [E("b", "v1", 1.0), E("a", "v1", 1.0)]
    assert ids(order(twins, latest="v1")) == ["a", "b"]


def test_every_caller_ranks_with_the_one_rule() -> None:
    lacking = E("lacks", "v2", 9.0, unsupported={"list_workflows"})
    everyone = [*EXECUTORS, lacking]
    expected = ids(order(EXECUTORS, latest="v2"))
    assert ids(routing.rank(everyone, "list_workflows", "v2").candidates) == expected
    assert ids(executor_requests.rank(everyone, "list_workflows", "v2")) == expected
    peers = recovery_dispatch.rank_peers("old-v1", "v1", EXECUTORS, latest_version="v2")
    assert ids(peers) == ["new-v1", "mid-v2", "far-v2"]
    assert not supports(lacking, "list_workflows") and supports(lacking, "recovery")
