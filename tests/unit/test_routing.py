"""actors/routing.py: which live executor answers a message type, in what order, and who lacks it."""

from __future__ import annotations

from relay.actors.executor import LiveExecutor
from relay.actors.policies.ranking import supports
from relay.actors.routing import describe_lacking, rank


def live(executor_id: str, version: str = "v1", *, language: str = "python", dbos: str = "3.2.0",
         connected_at: float = 0.0, unsupported: set[str] | None = None) -> LiveExecutor:
    return LiveExecutor(
        executor_id=executor_id, ref=None, application_version=version, language=language, dbos_version=dbos,
        connected_at=connected_at, unsupported=set(unsupported or ()),
    )


def ids(executors: list[LiveExecutor]) -> list[str]:
    return [e.executor_id for e in executors]


def test_latest_version_first_then_most_recently_connected() -> None:
    executors = [
        live("old-early", "v1", connected_at=1), live("new-early", "v2", connected_at=2),
        live("old-late", "v1", connected_at=5), live("new-late", "v2", connected_at=4),
    ]
    route = rank(executors, "list_workflows", "v2")
    assert ids(route.candidates) == ["new-late", "new-early", "old-late", "old-early"]
    assert route.lacking == []
    # The latest version is whatever the app says it is, not the largest name.
    assert ids(rank(executors, "list_workflows", "v1").candidates) == ["old-late", "old-early", "new-late",
                                                                      "new-early"]


def test_without_a_known_latest_version_the_most_recent_comes_first() -> None:
    executors = [live("a", "v1", connected_at=3), live("b", "v2", connected_at=7), live("c", "v3", connected_at=5)]
    assert ids(rank(executors, "get_workflow", None).candidates) == ["b", "c", "a"]
    # A latest version nobody runs changes nothing.
    assert ids(rank(executors, "get_workflow", "v9").candidates) == ["b", "c", "a"]


def test_ties_are_broken_by_executor_id() -> None:
    executors = [live("z", connected_at=1), live("a", connected_at=1), live("m", connected_at=1)]
    assert ids(rank(executors, "get_workflow", "v1").candidates) == ["a", "m", "z"]


def test_an_executor_marked_unsupported_is_not_a_candidate() -> None:
    marked = live("marked", "v2", connected_at=9, unsupported={"list_queues"})
    other = live("other", "v1", connected_at=1)
    route = rank([marked, other], "list_queues", "v2")
    assert ids(route.candidates) == ["other"]
    assert ids(route.lacking) == ["marked"]
    # Marked for one type only.
    assert ids(rank([marked, other], "list_workflows", "v2").candidates) == ["marked", "other"]


def test_sdk_releases_that_lack_a_type_are_not_candidates() -> None:
    old = live("old", language="python", dbos="2.12.0", connected_at=9)  # queues came in 2.20
    new = live("new", language="python", dbos="3.2.0", connected_at=1)
    route = rank([old, new], "list_queues", None)
    assert ids(route.candidates) == ["new"]
    assert ids(route.lacking) == ["old"]
    assert not supports(old, "get_step_aggregates")  # 2.23
    assert not supports(old, "list_schedules")  # 2.13
    assert supports(old, "alert")  # 2.10
    assert supports(old, "get_workflow")
    assert not supports(live("ts", language="typescript", dbos="4.8.0"), "list_schedules")  # 4.9
    assert supports(live("ts", language="typescript", dbos="5.2.11"), "get_step_aggregates")
    # restart is gone from 3.0 on.
    assert not supports(new, "restart")


def test_unknown_languages_and_versions_are_given_the_benefit_of_the_doubt() -> None:
    for executor in (live("go", language="go", dbos="v1.7.0"), live("java", language="java", dbos="1.0"),
                     live("weird", dbos="not-a-version"), live("future", dbos="9.0.0")):
        assert supports(executor, "list_queues"), executor.executor_id
        # ...but what it said itself counts.
        executor.unsupported.add("list_queues")
        assert not supports(executor, "list_queues")


def test_unhealthy_executors_are_left_out() -> None:
    executors = [live("a", connected_at=2), live("b", connected_at=1)]
    route = rank(executors, "get_workflow", "v1", healthy=lambda e: e.executor_id != "a")
    assert ids(route.candidates) == ["b"]
    assert route.lacking == []
    assert rank([], "get_workflow", "v1").candidates == []


def test_describe_lacking_names_languages_and_releases() -> None:
    lacking = [live("a", dbos="2.12.0"), live("b", dbos="2.12.0"), live("c", language="typescript", dbos="4.8.1"),
               live("d", language="", dbos="")]
    assert describe_lacking(lacking) == (
        "python 2.12.0 (2 executors), typescript 4.8.1, unknown language unknown version"
    )
    assert describe_lacking([]) == ""
