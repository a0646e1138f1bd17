"""Server-rendered SVG charts from the executors' aggregates: workflows by status over time, step latency.

Pure functions from aggregate rows (v2 `WorkflowAggregate` / `StepAggregate`) to an SVG string; no
front-end library. Every text that comes from an executor is escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

from relay.web.console import remote

WINDOW_MS = 3600 * 1000

# Colours by workflow status; any other status gets the last one.
STATUS_COLOURS = {
    "SUCCESS": "#2f9e44",
    "ERROR": "#e03131",
    "PENDING": "#1c7ed6",
    "ENQUEUED": "#7048e8",
    "CANCELLED": "#868e96",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "#e8590c",
}
OTHER_COLOUR = "#f08c00"

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 46


def _group(row: dict[str, Any], *names: str) -> object:
    group = row.get("group") or {}
    for name in names:
        if name in group:
            return group[name]
    return None


def _bucket_ms(value: object) -> int | None:
    """A time bucket as executors report it: epoch milliseconds (number or digits) or an RFC 3339 time."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    text = str(value)
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return int((parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp() * 1000)


def _svg(body: list[str], label: str) -> Markup:
    # An image's content is presentational: a chart whose bars are links is a group, so they stay reachable.
    role = "group" if any(part.startswith("<a ") for part in body) else "img"
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="{role}" '
            f'aria-label="{escape(label)}" class="svgchart">')
    return Markup(head + "".join(body) + "</svg>")  # noqa: S704 - every dynamic text is escaped above


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return float(step * magnitude)
    return float(10 * magnitude)


def workflows_by_status(rows: list[dict[str, Any]], start_ms: int, end_ms: int, bucket_ms: int, *,
                        label_format: str = "%H:%M", link: Callable[..., str] | None = None,
                        empty: str = "no workflow in this window",
                        label: str = "workflows by status over time") -> Markup:
    """Stacked bars: how many workflows were created in each time bucket, by status; with `link`, each bar's
    part is a link to the workflows it counts (`link(status=..., startTime=..., endTime=...)`)."""
    buckets = list(range(start_ms - start_ms % bucket_ms, end_ms, bucket_ms))
    counts: dict[int, dict[str, int]] = {b: {} for b in buckets}
    statuses: set[str] = set()
    for row in rows:
        bucket = _bucket_ms(_group(row, "timeBucket"))
        status = str(_group(row, "status") or "UNKNOWN")
        if bucket is None or bucket not in counts:
            continue
        counts[bucket][status] = counts[bucket].get(status, 0) + int(row.get("count") or 0)
        statuses.add(status)
    top = _nice_max(max((sum(c.values()) for c in counts.values()), default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(buckets))
    order = [s for s in STATUS_COLOURS if s in statuses] + sorted(statuses - set(STATUS_COLOURS))
    body = _axes(top, plot_h, plot_w)
    for index, bucket in enumerate(buckets):
        x = LEFT + index * slot + slot * 0.15
        y: float = TOP + plot_h
        for status in order:
            n = counts[bucket].get(status, 0)
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            colour = STATUS_COLOURS.get(status, OTHER_COLOUR)
            when = datetime.fromtimestamp(bucket / 1000, tz=UTC).strftime(f"{label_format} UTC")
            rect = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                    f'fill="{colour}"><title>{escape(status)} from {when}: {n}</title></rect>')
            if link is not None:
                href = link(status=status, startTime=_iso(bucket), endTime=_iso(bucket + bucket_ms))
                rect = f'<a href="{escape(href)}" aria-label="{escape(status)} from {when}: {n}">{rect}</a>'
            body.append(rect)
        if index % max(1, len(buckets) // 6) == 0:
            tick = datetime.fromtimestamp(bucket / 1000, tz=UTC).strftime(label_format)
            body.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 14}" class="tick">{tick}</text>')
    if not statuses:
        body.append(f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" class="none" '
                    f'text-anchor="middle">{escape(empty)}</text>')
    body += _legend(order)
    return _svg(body, label)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _axes(top: float, plot_h: float, plot_w: float) -> list[str]:
    body = [f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" class="axis"/>']
    for fraction in (0, 0.5, 1):
        y = TOP + plot_h * (1 - fraction)
        value = top * fraction
        text = f"{value:g}" if value < 10_000 else f"{value / 1000:g}k"
        body.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{text}</text>')
        if fraction:
            body.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" class="grid"/>')
    return body


def _legend(statuses: list[str]) -> list[str]:
    body = []
    x = LEFT
    for status in statuses:
        colour = STATUS_COLOURS.get(status, OTHER_COLOUR)
        body.append(f'<rect x="{x}" y="{HEIGHT - 16}" width="10" height="10" fill="{colour}"/>')
        body.append(f'<text x="{x + 14}" y="{HEIGHT - 7}" class="legend">{escape(status)}</text>')
        x += 24 + 7 * len(status)
    return body


def step_latency(rows: list[dict[str, Any]]) -> Markup:
    """Horizontal bars: the slowest completion of each step function, with how many ran."""
    items = []
    for row in rows:
        name = str(_group(row, "stepName") or "?")
        items.append((name, float(row.get("maxDurationMs") or 0),
                      int(row.get("count") or 0)))
    items.sort(key=lambda item: -item[1])
    items = items[:8]
    body: list[str] = []
    if not items:
        body.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="none" text-anchor="middle">'
                    'no step completed in this window</text>')
        return _svg(body, "step latency")
    top = _nice_max(max(item[1] for item in items))
    label_w, bar_x = 150, 160
    bar_w = WIDTH - bar_x - 90
    row_h = min(24.0, (HEIGHT - TOP - 10) / len(items))
    for index, (name, ms, count) in enumerate(items):
        y = TOP + index * row_h
        w = bar_w * ms / top
        short = name if len(name) <= 22 else name[:21] + "…"
        body.append(f'<text x="{label_w}" y="{y + row_h * 0.65:.1f}" class="tick" text-anchor="end">'
                    f'{escape(short)}<title>{escape(name)}</title></text>')
        body.append(f'<rect x="{bar_x}" y="{y + row_h * 0.15:.1f}" width="{max(w, 1):.1f}" '
                    f'height="{row_h * 0.7:.1f}" fill="#1c7ed6"><title>{escape(name)}: max {ms:.0f} ms, '
                    f'{count} run(s)</title></rect>')
        body.append(f'<text x="{bar_x + max(w, 1) + 4:.1f}" y="{y + row_h * 0.65:.1f}" class="tick">'
                    f'{ms:.0f} ms · {count} run{"" if count == 1 else "s"}</text>')
    return _svg(body, "step latency")


def step_chart(org: str, app: str, now: datetime | None = None) -> dict[str, Any]:
    """The step-latency chart of an application's last hour, or `problem` when its executors cannot answer."""
    end = now or datetime.now(UTC)
    start_iso = _iso(int(end.timestamp() * 1000) - WINDOW_MS)
    try:
        step_rows = remote.step_aggregates(org, app, {
            "groupByFunctionName": True, "selectCount": True, "selectMaxDurationMs": True,
            "completedAfter": start_iso,
        })
    except remote.ExecutorProblem as problem:
        return {"problem": problem, "chart": None}
    return {"problem": None, "chart": step_latency(step_rows)}
