"""Needs attention's rules (web/console/attention_rules.py, pure) from answers and registry rows of their own, and its
asking (web/console/attention.py): every question at once (`gather`), a slow one cut at the deadline, a failed one
kept as its error; `collect` over fakes of the views and the executors lists what answered and says which
applications could not be asked, and why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import gevent
import pytest

from relay.actors.errors import TimedOutError
from relay.web.console import attention
from relay.web.console import attention_rules as rules

NOW = datetime(2026, 12, 6, 12, 30, tzinfo=UTC)


def ago(**delta: float) -> str:
    return rules.iso(NOW - timedelta(**delta))


def waiting(queue: str | None, version: str | None, status: str, count: int, oldest: str) -> dict[str, Any]:
    return {"group": {"queueName": queue, "appVersion": version, "status": status}, "count": count,
            "minCreatedAt": oldest}


def executor(executor_id: str, status: str, version: str = "v1", **extra: Any) -> dict[str, Any]:
    return {"executor_id": executor_id, "status": status, "app_version": version, "hostname": "host",
            "dead_at": "2026-12-06T12:00:00+00:00" if status == "DEAD" else None,
            "disconnected_at": "2026-12-06T11:59:00+00:00" if status != "HEALTHY" else None,
            "updated_at": "2026-12-06T12:00:00+00:00", "recovered": False, "recovery_peer": None,
            "recovery_attempts": 0, **extra}


def test_questions_are_aggregates_and_one_small_search_of_the_last_hour() -> None:
    asked = rules.questions(NOW)
    assert asked["failed_count"]["status"] == ["ERROR"] and asked["failed_count"]["selectCount"]
    assert asked["failed_newest"]["limit"] == rules.FAILED_SHOWN
    assert asked["failed_newest"]["loadInput"] is False and asked["failed_newest"]["loadOutput"] is False
    assert asked["failed_count"]["startTime"] == asked["failed_newest"]["startTime"] == "2026-12-06T11:30:00Z"
    assert asked["waiting"]["status"] == ["PENDING", "ENQUEUED"] and asked["waiting"]["selectMinCreatedAt"]


def test_failures_count_all_and_list_the_newest_few() -> None:
    newest = [{"workflowId": f"w{i}"} for i in range(3)]
    found = rules.failed("shop", [{"group": {"status": "ERROR"}, "count": 42}], newest)
    assert found is not None and (found.count, [w["workflowId"] for w in found.newest]) == (42, ["w0", "w1", "w2"])
    assert rules.failed("shop", [], []) is None
    # Counted a moment before the newest one ended: the count is never below what is listed.
    late = rules.failed("shop", [], newest)
    assert late is not None and late.count == 3


def test_a_queue_is_stuck_when_its_oldest_enqueued_workflow_waited_past_the_threshold() -> None:
    rows = [
        waiting("orders", "v1", "ENQUEUED", 2, ago(minutes=10)),
        waiting("orders", "v2", "ENQUEUED", 1, ago(minutes=30)),  # another version's: the same queue
        waiting("orders", "v1", "PENDING", 5, ago(hours=5)),  # running work is not waiting
        waiting("mail", "v1", "ENQUEUED", 7, ago(minutes=2)),  # not long enough
        waiting(None, "v1", "PENDING", 3, ago(hours=9)),  # not on a queue
    ]
    stuck = rules.stuck_queues("shop", rows, NOW, 300)
    assert [(q.queue, q.enqueued, q.oldest, q.waited_s) for q in stuck] == [("orders", 3, ago(minutes=30), 1800)]
    assert [q.queue for q in rules.stuck_queues("shop", rows, NOW, 60)] == ["orders", "mail"]
    assert rules.stuck_queues("shop", rows, NOW, 3600) == []


@pytest.mark.parametrize(("raw", "expected"), [(None, 300), ("", 300), ("5", 5), ("0", 1), ("x", 300),
                                               ("99999999", rules.MAX_STUCK_AFTER_S)])
def test_the_stuck_threshold_a_person_sets(raw: str | None, expected: int) -> None:
    assert rules.stuck_after(raw) == expected


def test_a_version_is_stranded_with_waiting_work_and_no_healthy_executor_of_it() -> None:
    rows = [
        waiting("orders", "v1", "ENQUEUED", 2, ago(minutes=1)),
        waiting(None, "v1", "PENDING", 1, ago(minutes=1)),
        waiting("orders", "v2", "ENQUEUED", 4, ago(minutes=1)),
        waiting(None, "v2", "PENDING", 1, ago(minutes=1)),
        waiting(None, "v0", "PENDING", 6, ago(minutes=1)),
        waiting(None, None, "PENDING", 9, ago(minutes=1)),  # no version: nothing to say of it
    ]
    down = [executor("b", "DEAD", "v2"), executor("c", "DISCONNECTED", "v1")]
    stranded = rules.stranded_versions("shop", rows, {"v1"}, down)
    assert [(s.version, s.pending, s.enqueued, s.last_seen) for s in stranded] == [
        ("v0", 6, 0, ""), ("v2", 1, 4, "2026-12-06T11:59:00Z")]
    # Once an executor of v2 is HEALTHY, v2 is not stranded.
    assert [s.version for s in rules.stranded_versions("shop", rows, {"v1", "v2"}, down)] == ["v0"]


def test_dead_executors_not_recovered_with_why() -> None:
    registry = [
        executor("waiting", "DISCONNECTED", "v1"),  # in its grace period: not dead yet
        executor("lost", "DEAD", "v2"),
        executor("done", "DEAD", "v1", recovered=True),
        executor("acked", "DEAD", "v1"),
        executor("tried", "DEAD", "v1"),
    ]
    latest = {"acked": {"outcome": "acknowledged", "peer": "alive", "attempt": 1},
              "tried": {"outcome": "failed", "peer": "alive", "attempt": 2, "reason": "executor busy"}}
    dead = rules.dead_executors("shop", registry, latest, {"v1"}, 10, NOW)
    assert [(d.executor_id, d.why) for d in dead] == [
        ("lost", "no executor of version v2 connected"),
        ("tried", "waiting for the next recovery round; last attempt failed: executor busy")]
    assert dead[0].dead_at == "2026-12-06T12:00:00.000Z"
    nobody = rules.dead_executors("shop", [executor("lost", "DEAD", "v2")], {}, set(), 10, NOW)
    assert nobody[0].why == "no executor connected"


@pytest.mark.parametrize(("state", "down"), [
    (None, False), ({"status": "ready", "detail": "schema 5"}, False), ({"status": "unchecked", "detail": ""}, False),
    ({"status": "unreachable", "detail": "the system database cannot be reached"}, True),
    ({"status": "refused", "detail": "another application's"}, True), ({"status": "unresolved", "detail": ""}, True),
])
def test_a_data_plane_needs_attention_unless_ready_or_not_opened_yet(state: dict[str, Any] | None,
                                                                      down: bool) -> None:
    found = rules.data_plane_down("shop", state)
    assert (found is not None) == down
    if found is not None and state is not None:
        assert (found.status, found.detail) == (state["status"], state["detail"])


def test_gather_asks_at_once_cuts_the_slow_and_keeps_errors() -> None:
    started: list[str] = []

    def answer(name: str, wait_s: float) -> str:
        started.append(name)
        gevent.sleep(wait_s)
        return name

    def broken() -> str:
        raise RuntimeError("no")

    began = gevent.get_hub().loop.now()
    results = attention.gather({"a": lambda: answer("a", 0.05), "b": lambda: answer("b", 0.05),
                      "slow": lambda: answer("slow", 5), "broken": broken}, 0.3)
    elapsed = gevent.get_hub().loop.now() - began
    assert results["a"] == "a" and results["b"] == "b"
    assert isinstance(results["slow"], attention.NotInTime) and "0.3 s" in str(results["slow"])
    assert isinstance(results["broken"], RuntimeError)
    assert sorted(started) == ["a", "b", "slow"]
    assert elapsed < 1.0  # side by side, cut at the deadline: not 0.05 + 0.05 + 5 s


# -- the page's collection over fakes of the views and the executors -----------------------------------------------
class FakeRegistry:
    def __init__(self, executors: dict[str, list[dict[str, Any]]]) -> None:
        self.by_app = executors

    def counts_by_status(self, org: str, app: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in self.by_app.get(app, []):
            counts[e["status"]] = counts.get(e["status"], 0) + 1
        return counts

    def healthy_versions(self, org: str, app: str) -> set[str]:
        return {e["app_version"] for e in self.by_app.get(app, []) if e["status"] == "HEALTHY"}

    def executors_page(self, org: str, app: str, *, status: str, limit: int, offset: int) -> list[dict[str, Any]]:
        return [e for e in self.by_app.get(app, []) if e["status"] == status][offset:offset + limit]

    def latest_recoveries(self, org: str, app: str, ids: list[str]) -> dict[str, Any]:
        return {}


class FakeAlerting:
    def incidents(self, org: str, app: str, state: str, limit: int, offset: int) -> list[dict[str, Any]]:
        assert state == "open"
        return [{"id": "i1", "rule_id": "r", "number": 1, "rule_type": "WorkflowFailure", "message": "boom",
                 "opened_at": "2026-12-06T12:00:00+00:00", "resolved_at": None, "silenced_until": None,
                 "acknowledged_at": None}] if app == "fast" else []


class FakeActions:
    """An application's executors: `fast` answers, `slow` answers too late, `broken` times out at once."""

    def __init__(self, calls: Any) -> None:
        self.calls = calls

    def records(self, org: str, app: str, request: Any) -> list[dict[str, Any]]:
        if app == "slow":
            gevent.sleep(3)
        if app == "broken":
            raise TimedOutError("executor e1 did not answer within 10 s")
        self.calls.served_from = "executor"
        body = request.body
        if request.type.value == "list_workflows":
            return [{"WorkflowUUID": "f1", "Status": "ERROR", "WorkflowName": "pay", "CreatedAt": "1765000000000"}]
        if body.group_by_queue_name:
            return [{"group": {"queue_name": "orders", "application_version": "v9", "status": "ENQUEUED"},
                     "count": 3, "min_created_at": int((NOW - timedelta(hours=2)).timestamp() * 1000)}]
        return [{"group": {"status": "ERROR"}, "count": 4}]


def test_collect_shows_what_answered_and_says_which_could_not(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = FakeRegistry({
        "fast": [executor("a", "HEALTHY", "v1"), executor("gone", "DEAD", "v9")],
        "slow": [executor("b", "HEALTHY", "v1")],
        "broken": [executor("c", "DISCONNECTED", "v1")],
        "idle": [],
    })
    rt = SimpleNamespace(views=SimpleNamespace(registry=registry, alerting=FakeAlerting()),
                         ctx=SimpleNamespace(clock=lambda: NOW), data_planes=SimpleNamespace(get=lambda *a: None))
    monkeypatch.setattr(attention, "runtime", lambda: rt)
    monkeypatch.setattr(attention, "WorkflowActions", FakeActions)
    monkeypatch.setattr(attention, "ASK_DEADLINE_S", 0.3)
    apps = [{"name": name, "settings": {}} for name in ("broken", "fast", "idle", "slow")]

    found = attention.collect("acme", apps, NOW, 300)
    assert [(f.app, f.count, [w["workflowId"] for w in f.newest]) for f in found.failed] == [("fast", 4, ["f1"])]
    assert [(q.app, q.queue, q.enqueued, q.waited_s) for q in found.stuck] == [("fast", "orders", 3, 7200)]
    assert [(s.app, s.version, s.enqueued) for s in found.stranded] == [("fast", "v9", 3)]
    assert [(d.app, d.executor_id, d.why) for d in found.dead] == [
        ("fast", "gone", "no executor of version v9 connected")]
    assert [(i["app"], i["state"]) for i in found.incidents] == [("fast", "open")]
    assert found.problems == [
        ("broken", "could not ask its workflows: executor e1 did not answer within 10 s"),
        ("idle", "not asked: no executor connected and no data plane configured"),
        ("slow", "could not ask its workflows: did not answer within 0.3 s"),
    ]
    assert found.sources == {"fast": "executor"}
