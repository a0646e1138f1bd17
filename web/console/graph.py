"""A workflow's steps and child workflows as a server-rendered SVG graph (no front-end library).

The workflow is the first node; its steps follow in order, one node each, joined by arrows; a step whose
record names a child workflow (`childWorkflowId`) has that child as a linked node beside it. Pure: from the
v2 `Step` records (and the children's statuses when known) to an SVG string; every executor text is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

NODE_W, NODE_H, GAP = 250, 38, 18
CHILD_X, CHILD_W = NODE_W + 90, 290
MARGIN = 10
MAX_STEPS = 200  # beyond this a page would be all graph; the timeline below still lists every step


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _node(x: int, y: int, w: int, cls: str, title: str, sub: str, href: str | None = None,
          testid: str = "") -> str:
    label = (f'<text x="{x + 10}" y="{y + 16}">{escape(_clip(title, w // 7))}</text>'
             f'<text class="sub" x="{x + 10}" y="{y + 31}">{escape(_clip(sub, w // 7))}</text>')
    data = f' data-testid="{testid}"' if testid else ""
    body = (f'<g class="node {cls}"{data}>'
            f'<rect x="{x}" y="{y}" width="{w}" height="{NODE_H}" rx="6"/>'
            f'<title>{escape(title)}: {escape(sub)}</title>{label}</g>')
    return f'<a href="{escape(href)}">{body}</a>' if href else body


def workflow_graph(wf: Mapping[str, object], steps: Sequence[Mapping[str, Any]], link: Callable[[str], str],
                   child_status: Mapping[str, str] | None = None) -> Markup:
    """The SVG of `wf` and its `steps` (timeline rows: their `durationMs` is shown when present); `link`
    gives a workflow's console URL, `child_status` a child's status when the page knows it."""
    statuses = child_status or {}
    shown = list(steps[:MAX_STEPS])
    rows = 1 + len(shown)
    height = MARGIN * 2 + rows * NODE_H + (rows - 1) * GAP
    width = MARGIN * 2 + CHILD_X + CHILD_W
    parts = [_node(MARGIN, MARGIN, NODE_W, "root", str(wf.get("workflowName") or "workflow"),
                   f"{wf.get('status') or ''} · {wf.get('workflowId') or ''}", testid="graph-root")]
    placed: dict[str, int] = {}  # child workflow id → the middle of its node
    for index, step in enumerate(shown, start=1):
        y = MARGIN + index * (NODE_H + GAP)
        top = y - GAP
        parts.append(f'<line class="edge" x1="{MARGIN + 24}" y1="{top}" x2="{MARGIN + 24}" y2="{y - 2}" '
                     'marker-end="url(#arrow)"/>')
        failed = bool(step.get("error"))
        duration = step.get("durationMs")
        state = "error" if failed else ("done" if step.get("completedAt") or step.get("output") is not None
                                        else "running" if step.get("startedAt") else "")
        timing = f"{duration:.0f} ms" if isinstance(duration, int | float) else ""
        sub = " · ".join(x for x in (state, timing) if x)
        parts.append(_node(MARGIN, y, NODE_W, "err" if failed else "step",
                           f"{step.get('stepId')} · {step.get('stepName') or ''}", sub or " ",
                           testid="graph-step"))
        child = step.get("childWorkflowId")
        if child:
            # The first step naming a child gets its node; later ones (e.g. waiting for its result) point at it.
            middle = y + NODE_H // 2
            target = placed.setdefault(str(child), middle)
            parts.append(f'<line class="edge child" x1="{MARGIN + NODE_W}" y1="{middle}" '
                         f'x2="{MARGIN + CHILD_X - 2}" y2="{target}" marker-end="url(#arrow)"/>')
            if target == middle:
                parts.append(_node(MARGIN + CHILD_X, y, CHILD_W, "child", str(child),
                                   f"child workflow{' · ' + statuses[child] if child in statuses else ''}",
                                   href=link(str(child)), testid="graph-child"))
    defs = ('<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
            'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="currentColor"/></marker></defs>')
    more = len(steps) - len(shown)
    caption = f'<desc>{len(shown)} steps{f", {more} more not drawn" if more > 0 else ""}</desc>'
    svg = (
        f'<svg class="wfgraph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="steps and child workflows">'
        f'{caption}{defs}{"".join(parts)}</svg>'
    )
    return Markup(svg)  # noqa: S704 - every executor text is escaped in _node
