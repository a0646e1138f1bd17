"""The workflow graph's pure parts (web/console/graph.py): the critical path, retries, and the rows drawn."""

from __future__ import annotations

import re

from relay.web.console.graph import NODE_W, ROW_H, child_chain, column_rows, critical_path, retries, workflow_graph


def test_a_sequential_workflow_is_all_critical_path() -> None:
    assert critical_path([(0, 10), (10, 30), (31, 40)]) == {0, 1, 2}


def test_of_overlapping_steps_only_the_one_waited_for_is_on_the_path() -> None:
    # 0 then two concurrent steps (1 short, 2 long), then 3 starts when 2 ends: 1 is off the path.
    assert critical_path([(0, 10), (10, 15), (10, 50), (50, 60)]) == {0, 2, 3}


def test_the_path_ends_at_the_step_that_ended_last_not_the_last_listed() -> None:
    # Step 2 was started last but step 1 (concurrent) ended last: the workflow waited for 1.
    assert critical_path([(0, 5), (5, 100), (6, 20)]) == {0, 1}


def test_steps_without_both_times_are_left_out() -> None:
    assert critical_path([]) == set()
    assert critical_path([(0, None), (None, None)]) == set()
    assert critical_path([(0, 10), (10, None)]) == {0}


def test_a_predecessor_comes_earlier_in_the_list() -> None:
    # Step 1 ended before step 0 started (clock skew or a replay): not a predecessor of 0.
    assert critical_path([(20, 30), (0, 10)]) == {0}


def test_a_retry_is_the_same_name_right_after_a_failure_of_it() -> None:
    steps = [
        {"stepName": "quote", "error": "timeout"},
        {"stepName": "log"},
        {"stepName": "quote", "error": "timeout"},
        {"stepName": "quote"},
        {"stepName": "quote"},  # after a success: a new call, not a retry
        {"stepName": "log"},  # the earlier `log` succeeded
    ]
    assert retries(steps) == {2: 2, 3: 3}


def _step(i: int, name: str, start: int, end: int, **more: object) -> dict[str, object]:
    return {"stepId": i + 1, "stepName": name, "startedAt": start, "completedAt": end, "output": "x", **more}


def test_every_step_is_drawn_with_its_marks_and_rows_a_row_apart() -> None:
    steps = [_step(i, "tick", i * 10, i * 10 + 5) for i in range(1000)]
    steps[3] = _step(3, "tick", 30, 35, error="boom", output=None)
    svg = str(workflow_graph({"workflowName": "w", "status": "SUCCESS", "workflowId": "w1"}, steps, lambda w: w))
    assert svg.count('data-testid="graph-step"') == 1000
    assert svg.count('class="row crit') == 1000 and svg.count('class="row crit retry"') == 1  # step 4 retries 3
    # The workflow, then its steps, down a column of column_rows(1001) rows, then on to the next column.
    per_column = column_rows(1001)
    assert per_column == 38 and column_rows(22) == 22  # the 21-step workflow is one column
    at = [(int(x), int(y)) for x, y in re.findall(r'class="row[^"]*" transform="translate\((\d+),(\d+)\)"', svg)]
    assert at == [(r // per_column * (NODE_W + 40), 10 + r % per_column * ROW_H) for r in range(1001)]
    assert svg.count('class="edge wrap"') == -(-1001 // per_column) - 1  # one turn between two columns
    assert len(svg) < 400_000  # a 1,000-step page stays far under a megabyte
    assert svg.count('tabindex="0"') == 1  # one tab stop: the workflow's node (graph.js moves it)


def test_a_child_has_a_linked_node_and_an_expand_toggle_and_its_chain_nests() -> None:
    steps = [_step(0, "order", 0, 5, childWorkflowId="k<1>"), _step(1, "DBOS.getResult", 5, 9, childWorkflowId="k<1>")]
    svg = str(workflow_graph({"workflowName": "w", "workflowId": "w1"}, steps, lambda w: f"/wf/{w}"))
    assert svg.count('data-testid="graph-expand"') == 1 and 'data-child="k&lt;1&gt;"' in svg
    assert 'data-to="0"' in svg and "k<1>" not in svg  # the second step points back at the child's node
    chain, height = child_chain("k<1>", [_step(0, "reserve", 0, 1), _step(1, "ship", 1, 2)], lambda w: w)
    assert 'data-wf="k&lt;1&gt;"' in chain and chain.count('data-testid="graph-step"') == 2
    assert height == 2 * ROW_H - (ROW_H - 38)
