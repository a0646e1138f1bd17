"""The workflow page's explorable graph in Chromium (issue 33, point 2): pan and zoom, a child workflow expanded in
place and collapsed, the inspector by click and by keyboard, the critical path and retry marks, a 1,000-step
workflow's render time, and the step table's pages.

Runs against the session's `relay serve` and `shop` executor (tests/e2e/conftest.py); console_app.py's `mended`
has a retried step and a child, its `thousand` 1,000 steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from relay.web.console.graph import critical_path, epoch_ms
from tests.e2e.axe_audit import assert_accessible
from tests.e2e.console_support import APP, PREFIX, WAIT_S, shot
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

WF = f"/orgs/local/apps/{APP}"
API = f"/v2/orgs/local/apps/{APP}"
MAX_RENDER_MS = 1000  # issue 33's figure: a 1,000-step workflow renders in under 1 s in Chromium
MAX_PAGE_BYTES = 1_000_000  # point 6: a console page stays under 1 MB


def _open(page: Page, relay: RelayProcess, name: str, query: str = "") -> Locator:
    page.goto(relay.base_url + f"{WF}/workflows/{PREFIX}-{name}{query}")
    expect(page.locator("[data-graph]")).to_have_attribute("data-ready", "true")
    return page.locator("[data-testid=graph-svg]")


def _view(svg: Locator) -> list[float]:
    return [float(v) for v in str(svg.get_attribute("viewBox")).split()]


def _scale(svg: Locator) -> float:
    return float(str(svg.get_attribute("data-scale")))


def _wait_scale(svg: Locator, check: Callable[[float], bool], what: str) -> float:
    return wait_until(lambda: (lambda k: k if check(k) else None)(_scale(svg)), timeout=WAIT_S,
                      message=f"the graph's scale never {what}")


def _settled(page: Page) -> None:
    """Two animation frames later: a pending resize's observer has run (it runs before the next paint)."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def _view_until(svg: Locator, check: Callable[[list[float]], bool], what: str) -> list[float]:
    """The view once `check` holds: input events reach the page's handlers asynchronously."""
    def reached() -> list[float] | None:
        view = _view(svg)
        return view if check(view) else None

    return wait_until(reached, timeout=WAIT_S, message=f"the graph's view never {what}")


def _both_themes(page: Page, name: str) -> None:
    page.emulate_media(color_scheme="light")
    shot(page, f"{name}-light")
    page.emulate_media(color_scheme="dark")
    shot(page, f"{name}-dark")
    page.emulate_media(color_scheme="light")


def test_explore_a_graph_with_a_retry_and_a_child(page: Page, relay: RelayProcess) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    steps: list[dict[str, Any]] = relay.api("GET", f"{API}/workflows/{PREFIX}-mended/steps").json()
    assert [s["stepName"] for s in steps[:2]] == ["quote", "quote"] and steps[0]["error"] and not steps[1]["error"]
    svg = _open(page, relay, "mended")
    rows = svg.locator("[data-wf='e2e-mended'] > .row:not([data-i=root])")
    expect(rows).to_have_count(len(steps))

    # Marks: the second `quote` retries the first; the critical path is the one the pure function finds.
    expect(svg.locator(".row.retry")).to_have_count(1)
    expect(rows.nth(1)).to_have_attribute("data-attempt", "2")
    expect(rows.nth(1)).to_contain_text("↻2")
    path = critical_path([(epoch_ms(s["startedAt"]), epoch_ms(s["completedAt"])) for s in steps])
    assert path, steps
    assert [i for i in range(len(steps)) if "crit" in str(rows.nth(i).get_attribute("class"))] == sorted(path)
    expect(page.locator("[data-testid=graph-legend]")).to_contain_text("retry")

    # Keyboard: Tab from the toolbar to the graph, then to the workflow's node; Enter inspects it.
    page.locator("[data-zoom=reset]").focus()
    page.keyboard.press("Tab")
    expect(svg).to_be_focused()
    page.keyboard.press("Tab")
    root = svg.locator("[data-testid=graph-root]")
    expect(root).to_be_focused()
    page.keyboard.press("Enter")
    inspector = page.locator("[data-testid=inspector]")
    expect(inspector.locator("[data-testid=inspector-input]")).to_contain_text(f"{PREFIX}-mended")
    page.keyboard.press("ArrowDown")
    expect(rows.nth(0).locator("[data-testid=graph-step]")).to_be_focused()
    page.keyboard.press("Enter")
    expect(inspector.locator("[data-testid=inspector-error]")).to_contain_text("rate service timed out")
    page.keyboard.press("Escape")
    expect(inspector).to_be_hidden()

    # A click inspects: output, timing, the marks.
    rows.nth(1).locator("[data-testid=graph-step]").click()
    expect(inspector.locator("[data-testid=inspector-output]")).to_contain_text("on attempt 2")
    expect(inspector.locator("[data-testid=inspector-duration]")).to_have_text(re.compile(r"\d+(\.\d+)? (ms|s)$"))
    expect(inspector.locator("[data-testid=inspector-marks]")).to_contain_text("Retry: attempt 2")

    # The child expands in place (the rows below it move down), its steps inspectable, and collapses again.
    toggle = svg.locator("[data-testid=graph-expand]")
    expect(toggle).to_have_count(1)
    child_row = toggle.locator("xpath=..")
    below = rows.nth(int(str(child_row.get_attribute("data-i"))) + 1)
    before = below.get_attribute("transform")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    nest = svg.locator("[data-testid=graph-nest]")
    expect(nest.locator("[data-testid=graph-step]")).to_have_count(4)  # order: reserve, charge, setEvent, ship
    assert below.get_attribute("transform") != before
    nest.locator("[data-testid=graph-step]", has_text="ship").click()
    expect(inspector.locator("[data-testid=inspector-output]")).to_contain_text(f"shipped {PREFIX}-mended-child")
    _both_themes(page, "graph-mended-expanded")
    assert_accessible(page, "graph with a child expanded and the inspector open")
    toggle.focus()
    page.keyboard.press("Enter")
    expect(nest).to_have_count(0)
    expect(below).to_have_attribute("transform", str(before))

    # Pan and zoom: buttons, drag, wheel and keys all move the view. The scale (view width / viewBox width) is
    # what zooming changes: a resize (the inspector, a scrollbar coming or going after the collapse) changes the
    # viewBox's width too, but keeps the scale (graph.js's ResizeObserver), and may land at any moment.
    _settled(page)
    start = _scale(svg)
    page.click("[data-zoom=in]")
    _wait_scale(svg, lambda k: k == pytest.approx(start * 1.25, rel=0.01), "zoomed in by 1.25")
    _settled(page)
    zoomed, zoomed_scale = _view(svg), _scale(svg)
    box = svg.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 700, box["y"] + 60)
    page.mouse.down()
    page.mouse.move(box["x"] + 600, box["y"] + 20, steps=4)
    page.mouse.up()
    _view_until(svg, lambda v: v[0] > zoomed[0] and v[1] > zoomed[1], "panned with the drag")
    assert _scale(svg) == pytest.approx(zoomed_scale, rel=0.01)  # a drag pans, it does not zoom
    page.mouse.wheel(0, 300)
    _wait_scale(svg, lambda k: k < zoomed_scale * 0.99, "zoomed out with the wheel")
    svg.focus()
    before_key = _view(svg)
    page.keyboard.press("ArrowRight")
    _view_until(svg, lambda v: v[0] > before_key[0], "panned right with the arrow key")
    page.click("[data-zoom=fit]")
    height = float(svg.evaluate("s => s.querySelector('.chain').getBBox().height"))
    _view_until(svg, lambda v: v[1] <= 10 and v[3] >= height, "fitted the whole graph")


def test_a_thousand_steps_render_under_a_second_and_the_table_pages(page: Page, relay: RelayProcess) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    wid = f"{PREFIX}-thousand"
    wait_until(lambda: relay.api("GET", f"{API}/workflows/{wid}").json().get("status") == "SUCCESS",
               timeout=120, message=f"{wid} did not finish")
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    svg = _open(page, relay, "thousand")
    # The asserted figure is the page's main-thread CPU time up to graph.js's "ready" mark (after the first painted
    # frame): parsing, style, layout, paint and scripts, the whole page. CPU time, not wall time: on a loaded 2-core
    # machine the wall figures (graph.js's marks, printed) triple while this one stays put.
    cpu_ms = next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "ThreadTime") * 1000
    wrap = page.locator("[data-graph]")
    render_ms, load_ms = (int(str(wrap.get_attribute(f"data-{k}-ms"))) for k in ("render", "load"))
    html = page.evaluate("document.documentElement.outerHTML.length")
    print(f"1,000-step graph: main-thread CPU {cpu_ms:.0f} ms; wall: render {render_ms} ms (graph.js start to first "
          f"paint), load {load_ms} ms (from the response's end); page {html} chars")
    assert 0 < cpu_ms < MAX_RENDER_MS
    expect(svg.locator("[data-testid=graph-step]")).to_have_count(1000)
    assert html < MAX_PAGE_BYTES
    steps = page.locator("[data-testid=steps] ol.timeline > li")
    expect(steps).to_have_count(100)
    expect(steps.first).to_have_attribute("data-step", "1")
    _both_themes(page, "graph-thousand")
    page.locator("[data-testid=steps-pager] a[rel=next]").first.click()
    expect(page).to_have_url(re.compile(r"\?stepsPage=2#steps$"))
    expect(steps).to_have_count(100)
    expect(steps.first).to_have_attribute("data-step", "101")
    expect(page.locator("[data-testid=steps-pager]").first).to_contain_text("Steps 101\u2013200 of 1000")
    # The chain wraps into columns: Fit shows all 1,000 nodes at a scale where they are still boxes.
    page.click("[data-zoom=fit]")
    assert float(str(svg.get_attribute("data-scale"))) > 0.1
    shot(page, "graph-thousand-fit")
