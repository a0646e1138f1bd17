"""A workflow's steps and child workflows as a server-rendered SVG graph (no front-end library).

The workflow is the first node; its steps follow in order, one row each, down a chain (a long one wraps into
columns: `column_rows`); a step whose record names a child workflow (`childWorkflowId`) has that child as a
linked node beside it, with a toggle that graph.js uses to draw the child's own steps nested under it
(`child_chain`, fetched on demand). Every step is
drawn (a row is a few hundred bytes: 1,000 steps stay far under a megabyte). Rows are `<g class="row">` placed by
a translate, so graph.js can open room under an expanded child by moving the rows below it.

The critical path (`critical_path`) and retries (`retries`) are marked; both are pure functions of the v2 `Step`
records. Pure: from the records (and the children's statuses when known) to SVG; every executor text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from relay.web.console.helpers import millis_between

NODE_W, NODE_H, GAP = 250, 38, 18
ROW_H = NODE_H + GAP
CHILD_X, CHILD_W = NODE_W + 90, 290
TOGGLE_R = 11  # the expand/collapse button of a child node, at its right end
NEST_X = CHILD_X + 14  # an expanded child's chain (its nodes at NEST_X + MARGIN) starts under its node, indented
MARGIN = 10
CHAIN_X = MARGIN + 24  # the vertical line joining a chain's nodes (drawn behind them)
MAX_STEPS = 10_000  # the most steps the page asks an executor for (the API's largest page)
MIN_COLUMN_ROWS = 30  # a chain this long or shorter is one column
COLUMN_GAP = 40
NESTED_ROWS = MAX_STEPS + 1  # a nested child's chain stays one column

Interval = tuple[float | None, float | None]  # a step's start and end, in ms since the epoch (None: unknown)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def epoch_ms(value: object) -> float | None:
    """A record's time (RFC 3339, epoch ms or a datetime) as ms since the epoch; None when absent."""
    return millis_between(0, value) if value not in (None, "") else None


def critical_path(intervals: Sequence[Interval]) -> set[int]:
    """The indexes of the steps that determine the workflow's end: from the step that ended last, back through the
    step that ended last before each one started (steps can overlap when the app runs them concurrently: the one it
    waited for longest is on the path, the others are not). A predecessor comes earlier in the list (step IDs are
    handed out in program order, so a step cannot wait for a later one). Steps without both times are left out."""
    known: list[tuple[int, float, float]] = [
        (i, start, end) for i, (start, end) in enumerate(intervals) if start is not None and end is not None]
    if not known:
        return set()
    current = max(known, key=lambda k: (k[2], k[0]))
    path = {current[0]}
    while True:
        before = [k for k in known if k[0] < current[0] and k[2] <= current[1]]
        if not before:
            return path
        current = max(before, key=lambda k: (k[2], k[0]))
        path.add(current[0])


def retries(steps: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """Index → attempt number of the steps that retry a failed one. The v2 `Step` record has no attempt count (a
    DBOS step's own retries happen inside one record), so a retry here is a step with the same name as the step of
    that name just before it in this workflow, which ended in error: fail, fail, ok gives attempts 2 and 3."""
    failures: dict[str, int] = {}  # step name → failed attempts in a row so far
    found: dict[int, int] = {}
    for index, step in enumerate(steps):
        name = str(step.get("stepName") or "")
        if failures.get(name):
            found[index] = failures[name] + 1
        failures[name] = failures.get(name, 0) + 1 if step.get("error") else 0
    return found


def _state(step: Mapping[str, Any]) -> str:
    if step.get("error"):
        return "error"
    if step.get("completedAt") or step.get("output") is not None:
        return "done"
    return "running" if step.get("startedAt") else ""


def _texts(w: int, title: str, sub: str) -> str:
    return (f'<text x="10" y="16">{escape(_clip(title, w // 7))}</text>'
            f'<text class="sub" x="10" y="31">{escape(_clip(sub, w // 7))}</text>')


def _step_row(index: int, step: Mapping[str, Any], at: tuple[int, int], *, on_path: bool, attempt: int | None,
              statuses: Mapping[str, str], link: Callable[[str], str],
              placed: dict[str, tuple[int, int, int]]) -> str:
    x, y = at
    state = _state(step)
    duration = step.get("durationMs")
    timing = f"{duration:.0f} ms" if isinstance(duration, int | float) else ""
    sub = " · ".join(x for x in (state, timing) if x) or " "
    title = f"{step.get('stepId')} · {step.get('stepName') or ''}"
    marks = "".join((" · critical path" if on_path else "", f" · retry, attempt {attempt}" if attempt else ""))
    badge = (f'<text class="mark" x="{NODE_W - 8}" y="16" text-anchor="end">↻{attempt}</text>' if attempt else "")
    cls = "row" + (" crit" if on_path else "") + (" retry" if attempt else "")
    numbered = f' data-attempt="{attempt}"' if attempt else ""
    parts = [
        f'<g class="{cls}" transform="translate({x},{y})" data-i="{index}"{numbered}>',
        (f'<g class="node {"err" if state == "error" else "step"}" data-testid="graph-step" role="button" '
        f'tabindex="-1" transform="translate({MARGIN},0)">'
        f'<title>Step {escape(title)}: {escape(sub.strip() or "not started")}{marks}</title>'
        f'<rect width="{NODE_W}" height="{NODE_H}" rx="6"/>{_texts(NODE_W, title, sub)}{badge}</g>'),
    ]
    child = step.get("childWorkflowId")
    if child:
        child = str(child)
        middle = NODE_H // 2
        if child in placed:  # e.g. waiting for its result: an arrow back to the child's node (graph.js keeps it)
            back, back_x, back_y = placed[child]
            parts.append(f'<line class="edge child" data-to="{back}" x1="{MARGIN + NODE_W}" y1="{middle}" '
                         f'x2="{back_x - x + CHILD_X - 2}" y2="{back_y - y + middle}" marker-end="url(#arrow)"/>')
        else:
            placed[child] = (index, x, y)
            status = f" · {statuses[child]}" if child in statuses else ""
            parts.append(
                f'<line class="edge child" x1="{MARGIN + NODE_W}" y1="{middle}" x2="{CHILD_X - 2}" y2="{middle}" '
                f'marker-end="url(#arrow)"/>'
                f'<a href="{escape(link(child))}"><g class="node child" data-testid="graph-child" '
                f'transform="translate({CHILD_X},0)"><rect width="{CHILD_W}" height="{NODE_H}" rx="6"/>'
                f'{_texts(CHILD_W - 2 * TOGGLE_R, child, "child workflow" + status)}</g></a>'
                f'<g class="toggle" role="button" tabindex="0" aria-expanded="false" data-child="{escape(child)}" '
                f'data-testid="graph-expand" aria-label="Show the steps of child workflow {escape(child)} here" '
                f'transform="translate({CHILD_X + CHILD_W - TOGGLE_R - 6},{middle})"><circle r="{TOGGLE_R}"/>'
                f'<text text-anchor="middle" y="4">+</text></g>')
    parts.append("</g>")
    return "".join(parts)


def column_rows(count: int) -> int:
    """Rows per column of a chain of `count` rows. A long workflow's chain wraps into columns (top to bottom, then
    the next column) about 3.5 times as wide as tall, the view's shape, so Fit shows nodes, not a hairline."""
    return count if count <= MIN_COLUMN_ROWS else max(MIN_COLUMN_ROWS, math.ceil(1.2 * math.sqrt(count)))


def _place(row: int, per_column: int, column_w: int, top: int) -> tuple[int, int]:
    return row // per_column * column_w, top + row % per_column * ROW_H


def _chain(steps: Sequence[Mapping[str, Any]], link: Callable[[str], str], statuses: Mapping[str, str],
           first_row: int, top: int, per_column: int, column_w: int) -> str:
    """The rows of `steps` (the first at row `first_row`), `per_column` rows to a column."""
    path = critical_path([(epoch_ms(s.get("startedAt")), epoch_ms(s.get("completedAt"))) for s in steps])
    attempts = retries(steps)
    placed: dict[str, tuple[int, int, int]] = {}
    return "".join(
        _step_row(index, step, _place(first_row + index, per_column, column_w, top), on_path=index in path,
                  attempt=attempts.get(index), statuses=statuses, link=link, placed=placed)
        for index, step in enumerate(steps)
    )


def _lines(rows: int, per_column: int, column_w: int, top: int, first_top: int) -> str:
    """Each column's line (behind its nodes, from `first_top` in the first column), and the turn from a column's
    last node to the next column's first; graph.js redraws both when rows move."""
    out = []
    columns = max(1, -(-rows // per_column))
    for column in range(columns):
        x = column * column_w + CHAIN_X
        last = min(rows, (column + 1) * per_column) - 1 - column * per_column  # its last row, in the column
        y1 = first_top if column == 0 else top
        out.append(f'<line class="edge chain" data-col="{column}" x1="{x}" y1="{y1}" x2="{x}" '
                   f'y2="{max(y1, top + last * ROW_H)}"/>')
        if column + 1 < columns:
            turn = _turn(x, top + last * ROW_H + NODE_H, x + column_w, top)
            out.append(f'<path class="edge wrap" data-col="{column}" d="{turn}"/>')
    return "".join(out)


def _turn(x: int, bottom: int, next_x: int, top: int) -> str:
    gutter = next_x - CHAIN_X - 14
    return f"M{x},{bottom}v{GAP // 2}H{gutter}V{top - GAP // 2}H{next_x}V{top}"


def workflow_graph(wf: Mapping[str, object], steps: Sequence[Mapping[str, Any]], link: Callable[[str], str],
                   child_status: Mapping[str, str] | None = None) -> Markup:
    """The SVG of `wf` and its `steps` (timeline rows: their `durationMs` is shown when present); `link`
    gives a workflow's console URL, `child_status` a child's status when the page knows it."""
    statuses = child_status or {}
    per_column = column_rows(1 + len(steps))
    column_w = (CHILD_X + CHILD_W if any(s.get("childWorkflowId") for s in steps) else NODE_W) + COLUMN_GAP
    rows = _chain(steps, link, statuses, 1, MARGIN, per_column, column_w)
    columns = -(-(1 + len(steps)) // per_column)
    height = MARGIN * 2 + min(1 + len(steps), per_column) * ROW_H - GAP
    width = MARGIN + columns * column_w - COLUMN_GAP + 2 * MARGIN
    title = str(wf.get("workflowName") or "workflow")
    sub = f"{wf.get('status') or ''} · {wf.get('workflowId') or ''}"
    root = (f'<g class="row" transform="translate(0,{MARGIN})" data-i="root">'
            f'<g class="node root" data-testid="graph-root" role="button" tabindex="0" '
            f'transform="translate({MARGIN},0)"><title>Workflow {escape(title)}: {escape(sub)}</title>'
            f'<rect width="{NODE_W}" height="{NODE_H}" rx="6"/>{_texts(NODE_W, title, sub)}</g></g>')
    defs = ('<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
            'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="currentColor"/></marker></defs>')
    svg = (
        f'<svg class="wfgraph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="group" aria-label="Graph of {len(steps)} steps and child workflows" '
        f'data-testid="graph-svg" data-row-h="{ROW_H}" data-node-h="{NODE_H}" data-gap="{GAP}" data-nest-x="{NEST_X}" '
        f'data-chain-x="{CHAIN_X}" data-child-x="{CHILD_X}" data-col-gap="{COLUMN_GAP}">'
        f'<desc>{len(steps)} steps</desc>{defs}'
        f'<g class="chain" data-wf="{escape(str(wf.get("workflowId") or ""))}" data-top="{MARGIN}" '
        f'data-per-col="{per_column}" data-col-w="{column_w}">'
        f'{_lines(1 + len(steps), per_column, column_w, MARGIN, MARGIN + NODE_H)}{root}{rows}</g></svg>'
    )
    return Markup(svg)  # noqa: S704 - every executor text is escaped in _step_row and _texts


def child_chain(workflow_id: str, steps: Sequence[Mapping[str, Any]], link: Callable[[str], str],
                child_status: Mapping[str, str] | None = None) -> tuple[Markup, int]:
    """A child workflow's steps as a chain to nest under its node (graph.js), and the chain's height."""
    rows = _chain(steps, link, child_status or {}, 0, 0, NESTED_ROWS, 0)
    chain = (f'<g class="chain" data-wf="{escape(workflow_id)}" data-top="0" data-per-col="{NESTED_ROWS}" '
             f'data-col-w="0">{_lines(len(steps), NESTED_ROWS, 0, 0, -GAP) if steps else ""}{rows}</g>')
    return Markup(chain), max(len(steps) * ROW_H - GAP, 0)  # noqa: S704 - escaped as in workflow_graph
