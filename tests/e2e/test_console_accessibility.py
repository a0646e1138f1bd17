"""The console is accessible (issue 33, point 5): axe-core finds no serious or critical WCAG 2.1 A/AA violation on
any page, in the light and the dark theme, and every interactive element of the main pages is reached with Tab.

"Every page" is a crawl: from the login page and the first page after logging in, same-origin GET links only, one
URL per route (ids and query strings collapse; Relay's own URL map names the route), bounded. New pages are audited
as soon as some page links to them. The audit opens every <details> (menus, collapsed values) before it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import Map, RequestRedirect

from tests.e2e.axe_audit import AXE_JS, violations
from tests.e2e.console_support import APP, PREFIX, WAIT_S, login, shot
from tests.support.flask_routes import url_rules
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

MAX_PAGES = 40
# Never followed: leaving the session, or a flow that leaves the console (SSO with an identity provider).
SKIPPED_ENDPOINTS = {"console.static", "console.logout", "console.sso_login", "console.oauth_callback"}
THEMES = ["light", "dark"]
# Pages shot in each theme (test-output/console/a11y-*.png), to look at what contrast changes did.
SCREENSHOT_ROUTES = {"console.app_overview", "console.workflows", "console.workflow", "console.app_settings",
                     "console.attention"}
WF = f"/orgs/local/apps/{APP}"
# The pages whose every interactive element must be reachable with Tab.
KEYBOARD_PAGES = [WF, f"{WF}/workflows", f"{WF}/workflows/{PREFIX}-batch", f"{WF}/settings", f"{WF}/alerts",
                  "/orgs/local/keys", "/orgs/local/attention"]


@pytest.fixture(scope="module")
def route_map() -> Map:
    """Relay's URL map, to name the route a crawled URL belongs to."""
    if not AXE_JS.exists():
        pytest.fail(f"{AXE_JS} is missing: `make test-deps` installs axe-core", pytrace=False)
    rules = url_rules()
    assert rules[0].map is not None
    return rules[0].map


@pytest.fixture(params=THEMES)
def themed(request: pytest.FixtureRequest, browser: Browser) -> Iterator[tuple[str, BrowserContext]]:
    """One browser context per theme (the system's preference: the console's default theme follows it)."""
    theme = str(request.param)
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=theme)  # type: ignore[arg-type]
    ctx.set_default_timeout(WAIT_S * 1000)
    try:
        yield theme, ctx
    finally:
        ctx.close()


def route_of(routes: Map, base: str, href: str) -> str | None:
    """The route (endpoint) a same-origin GET link goes to; None for a link not to crawl."""
    url = urlsplit(urljoin(base + "/", href))
    if f"{url.scheme}://{url.netloc}" != base:
        return None
    try:
        endpoint, _ = routes.bind("localhost").match(url.path, method="GET")
    except RequestRedirect:
        return url.path
    except MethodNotAllowed:
        return None
    except HTTPException:
        return url.path  # not a route of the throwaway app: crawl it under its own path
    return None if endpoint in SKIPPED_ENDPOINTS else str(endpoint)


def same_origin_links(page: Page) -> list[str]:
    hrefs: list[str] = page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))")
    return [h for h in hrefs if h and not h.startswith(("#", "mailto:", "javascript:"))]


def crawl(page: Page, relay: RelayProcess, routes: Map, start: str, theme: str) -> tuple[dict[str, str], list[str]]:
    """Breadth-first from `start`: audit one URL per route; return {route: url} and the violations found."""
    base = relay.base_url
    seen: dict[str, str] = {}
    queue = [start, f"{WF}/workflows/{PREFIX}-batch"]  # the workflow page: a workflow with steps and children
    problems: list[str] = []
    while queue and len(seen) < MAX_PAGES:
        url = queue.pop(0)
        route = route_of(routes, base, url)
        if route is None or route in seen:
            continue
        seen[route] = url
        # Headers first: a stream (the live page's server-sent events) never finishes loading.
        response = page.goto(urljoin(base + "/", url), wait_until="commit")
        if response is None or "text/html" not in response.headers.get("content-type", ""):
            page.goto("about:blank")
            continue
        page.wait_for_load_state("load")
        queue.extend(same_origin_links(page))
        if route in SCREENSHOT_ROUTES:
            shot(page, f"a11y-{route.removeprefix('console.')}-{theme}")
        problems += violations(page, f"{route} {url}")
    return seen, problems


def test_every_console_page_has_no_serious_axe_violation(
    themed: tuple[str, BrowserContext], relay: RelayProcess, shop: dict[str, Any], route_map: Map,
) -> None:
    del shop  # its executor gives the pages real workflows, steps, queues
    theme, ctx = themed
    page = ctx.new_page()
    page.goto(relay.base_url + "/login")
    problems = violations(page, "login")
    login(page, relay, relay.admin_token)
    first = urlsplit(page.url)
    crawled, found = crawl(page, relay, route_map, first.path + (f"?{first.query}" if first.query else ""), theme)
    problems += found
    print(f"audited ({theme}):", *crawled.values(), sep="\n  ")
    for needed in ("console.workflows", "console.workflow", "console.app_settings", "console.keys", "console.audit"):
        assert needed in crawled, f"the crawl never reached {needed}: {sorted(crawled)}"

    # The confirmation page (asked before any action): cancel a workflow, then keep it.
    page.goto(relay.base_url + f"{WF}/workflows")
    page.locator("[data-testid=workflows] tbody input[name=ids]").first.check()
    page.click("button:text('Cancel selected…')")
    expect(page.locator("[data-testid=confirm]")).to_be_visible()
    problems += violations(page, "confirmation page")
    page.click("[data-testid=keep-button]")

    # The error page.
    page.goto(relay.base_url + "/orgs/local/apps/no-such-app")
    expect(page.locator(".error-page")).to_contain_text("404")
    problems += violations(page, "404 page")

    # Dialogs (the keyboard shortcuts' help), each audited open.
    page.goto(relay.base_url + WF)
    for dialog in page.eval_on_selector_all("dialog[id]", "ds => ds.map(d => d.id)"):
        page.evaluate("id => document.getElementById(id).showModal()", dialog)
        problems += violations(page, f"dialog #{dialog}")
        shot(page, f"a11y-dialog-{dialog}-{theme}")
        page.keyboard.press("Escape")

    # The workflow graph explored: a child expanded in place, a step's inspector open.
    page.goto(relay.base_url + f"{WF}/workflows/{PREFIX}-batch")
    page.locator("[data-testid=graph-expand]").first.click()
    page.locator("[data-testid=graph-step]").first.click()
    expect(page.locator("[data-testid=inspector] [data-testid=inspector-duration]")).to_be_visible()
    problems += violations(page, "graph explored")
    shot(page, f"a11y-graph-explored-{theme}")

    # Focus shows in this theme: the skip link, then the main content's first link, each with an outline.
    page.goto(relay.base_url + WF)
    for key in ("Tab", "Enter", "Tab"):
        page.keyboard.press(key)
    focused = page.evaluate(_FOCUSED)
    assert focused and focused["outline"] and page.evaluate("() => !!document.activeElement.closest('main')"), focused
    shot(page, f"a11y-focus-{theme}")
    assert not problems, f"{len(problems)} serious/critical axe violation(s) ({theme}):\n" + "\n".join(problems)


# Every element a person can act on, visible and enabled; each is tagged so that the Tab walk can name it.
_TAG_INTERACTIVE = """() => {
  const sel = 'a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]';
  const shown = el => { const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && el.checkVisibility({visibilityProperty: true, contentVisibilityAuto: true})
      && !el.closest('[inert]'); };
  const all = [...document.querySelectorAll(sel)].filter(el => !el.disabled && el.tabIndex >= 0 && shown(el));
  all.forEach((el, i) => el.setAttribute('data-kb', String(i)));
  const positive = [...document.querySelectorAll('[tabindex]')].filter(el => el.tabIndex > 0)
    .map(el => el.outerHTML.slice(0, 80));
  return {count: all.length, positive};
}"""
# The focused element and whether its focus shows: an outline or a shadow, or (an SVG node) a thick stroke.
_FOCUSED = """() => { const el = document.activeElement; if (!el || el === document.body) return null;
  const s = getComputedStyle(el);
  const shape = el instanceof SVGElement && el.querySelector('rect, circle');
  const stroked = shape && parseFloat(getComputedStyle(shape).strokeWidth) >= 2;
  return {kb: el.getAttribute('data-kb'), html: el.outerHTML.slice(0, 80),
          outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 1 || s.boxShadow !== 'none'
                   || !!stroked}; }"""


def tab_walk(page: Page) -> list[str]:
    """Tab through the page from its top; the problems: unreached elements, positive tabindex, no focus outline."""
    tagged = page.evaluate(_TAG_INTERACTIVE)
    problems = [f"positive tabindex: {html}" for html in tagged["positive"]]
    reached: list[str] = []
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    # Date and time inputs take one Tab per field (day, month, ...): room for them.
    for _ in range(tagged["count"] + 60):
        page.keyboard.press("Tab")
        focused = page.evaluate(_FOCUSED)
        if focused is None or (reached and focused["kb"] == reached[0]):
            break  # past the last element (focus left the document), or wrapped around to the first
        if not focused["outline"]:
            problems.append(f"no visible focus outline: {focused['html']}")
        if focused["kb"] is not None and focused["kb"] not in reached:
            reached.append(focused["kb"])
    missed = [page.locator(f"[data-kb='{i}']").evaluate("el => el.outerHTML.slice(0, 100)")
              for i in range(tagged["count"]) if str(i) not in reached]
    return problems + [f"not reached with Tab: {html}" for html in missed]


def test_every_interactive_element_is_reached_with_tab(
    context: BrowserContext, relay: RelayProcess, shop: dict[str, Any],
) -> None:
    del shop
    page = context.new_page()
    login(page, relay, relay.admin_token, WF)
    problems: list[str] = []
    for path in KEYBOARD_PAGES:
        page.goto(relay.base_url + path)
        problems += [f"{path}: {p}" for p in tab_walk(page)]

    # The skip link comes first and moves focus to the main content.
    page.goto(relay.base_url + WF)
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to main content")
    shot(page, "a11y-skip-link-focused")
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "main"
    assert not problems, "\n".join(problems)
