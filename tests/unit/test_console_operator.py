"""Pure pieces of the console's operator views: where a recovery stands (projections/registry.py), values as
formatted JSON (web/console/helpers.py) and the workflow graph (web/console/graph.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from relay.web.console.graph import workflow_graph
from relay.web.console.helpers import json_view
from relay.web.console.recovery_state import recovery_wait

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def executor(**values: Any) -> dict[str, Any]:
    row = {"status": "DEAD", "disconnected_at": None, "recovered": 0, "recovery_peer": None, "recovery_attempts": 0,
           "app_version": "v1"}
    return {**row, **values}


def test_a_disconnected_executor_counts_its_grace_period() -> None:
    row = executor(status="DISCONNECTED", disconnected_at=(NOW - timedelta(seconds=37)).isoformat())
    assert recovery_wait(row, None, {"v1"}, 60, NOW) == "grace period: 37 s of 60 s"
    late = executor(status="DISCONNECTED", disconnected_at=(NOW - timedelta(seconds=99)).isoformat())
    assert recovery_wait(late, None, set(), 60, NOW) == "grace period: 60 s of 60 s"
    assert recovery_wait(executor(status="HEALTHY"), None, {"v1"}, 60, NOW) == ""


def test_a_dead_executor_says_why_its_recovery_waits() -> None:
    assert recovery_wait(executor(), None, set(), 60, NOW) == "no executor connected"
    assert recovery_wait(executor(), None, {"v2"}, 60, NOW) == "no executor of version v1 connected"
    failed = {"outcome": "failed", "reason": "workflows of e1 remain pending", "peer": "e2", "attempt": 1}
    assert recovery_wait(executor(), failed, {"v2"}, 60, NOW) == (
        "no executor of version v1 connected; last attempt failed: workflows of e1 remain pending")
    assert recovery_wait(executor(), failed, {"v1"}, 60, NOW).startswith("waiting for the next recovery round")
    flying = executor(recovery_peer="e3", recovery_attempts=2)
    assert recovery_wait(flying, None, {"v1"}, 60, NOW) == "recovery dispatched to e3 (attempt 2), awaiting its answer"


def test_a_recovered_executor_names_its_peer() -> None:
    done = {"outcome": "acknowledged", "reason": None, "peer": "e9", "attempt": 3}
    assert recovery_wait(executor(status="DELETED", recovered=1), done, set(), 60, NOW) == "recovered by e9 (attempt 3)"
    assert recovery_wait(executor(status="DELETED"), None, set(), 60, NOW) == "deleted"


def test_values_are_shown_as_formatted_json_whatever_their_serialization() -> None:
    python_repr = json_view("{'args': ('order-1',), 'kwargs': {}}")
    assert python_repr["parsed"] and python_repr["summary"] == "object · 2 keys"
    assert python_repr["text"] == '{\n  "args": [\n    "order-1"\n  ],\n  "kwargs": {}\n}'
    assert json_view('[1, 2]')["summary"] == "array · 2 items" and json_view("[1, 2]")["open"]
    assert json_view({"a": 1})["text"] == '{\n  "a": 1\n}'
    raw = json_view("shipped order-1 for 42")
    assert not raw["parsed"] and raw["text"] == "shipped order-1 for 42" and raw["summary"] == "text"
    assert not json_view(list(range(40)))["open"]  # a long value starts folded
    assert not json_view("__import__('os').getcwd()")["parsed"]  # literals only: nothing is evaluated


def test_the_graph_has_a_node_per_step_and_one_linked_node_per_child() -> None:
    steps = [
        {"stepId": 1, "stepName": "order", "childWorkflowId": "c<0>", "completedAt": "x", "durationMs": 4},
        {"stepId": 2, "stepName": "order", "childWorkflowId": "c1"},
        {"stepId": 3, "stepName": "DBOS.getResult", "childWorkflowId": "c<0>", "error": "boom"},
    ]
    svg = str(workflow_graph({"workflowName": "batch", "status": "ERROR", "workflowId": "b"}, steps,
                             lambda wid: f"/wf/{wid}", {"c1": "SUCCESS"}))
    assert svg.count('data-testid="graph-step"') == 3 and svg.count('data-testid="graph-child"') == 2
    assert svg.count('class="edge child"') == 3
    assert '<a href="/wf/c&lt;0&gt;">' in svg and "c<0>" not in svg  # escaped
    assert "child workflow · SUCCESS" in svg and 'class="node err"' in svg and "done · 4 ms" in svg
