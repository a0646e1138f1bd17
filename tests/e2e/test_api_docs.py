"""GET /docs in a real browser: Redoc renders Relay's document from local files, nothing is requested anywhere
else (Redoc's CDN logo is Relay's favicon in the vendored bundle), the browser logs no error (a CSP violation
is one), the console's pages are not in it (no "Undocumented" group), and it follows the console's theme."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request, Response

from tests.e2e.console_support import WAIT_S
from tests.support.procs import RelayProcess

DARK_BACKGROUND = "rgb(18, 22, 29)"  # console.css --bg, dark
DARK_SIDEBAR = "rgb(27, 33, 43)"  # console.css --card, dark


@dataclass
class Seen:
    """What the browser did while showing /docs."""

    requested: list[str] = field(default_factory=list)
    answered: list[Response] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions


def _open_docs(context: BrowserContext, relay: RelayProcess) -> tuple[Page, Seen]:
    seen = Seen()
    page = context.new_page()
    page.on("request", lambda request: seen.requested.append(_url(request)))
    page.on("response", lambda response: seen.answered.append(response))  # noqa: PLW0108 - a builtin is refused
    page.on("console", lambda message: _console(seen, message))
    page.on("pageerror", lambda error: seen.errors.append(f"pageerror: {error}"))
    page.goto(f"{relay.base_url}/docs")
    page.get_by_text("Download OpenAPI specification").wait_for()  # Redoc read the document and rendered it
    page.get_by_text("List workflows").first.wait_for(state="attached")
    page.get_by_text("API docs by Redocly").wait_for(state="attached")  # the footer, where the CDN logo was
    page.wait_for_load_state("networkidle")
    return page, seen


def _url(request: Request) -> str:
    return request.url


def _console(seen: Seen, message: ConsoleMessage) -> None:
    if message.type == "error":
        seen.errors.append(f"console: {message.text}")


def _style(page: Page, selector: str, prop: str) -> str:
    return page.locator(selector).first.evaluate(f"e => getComputedStyle(e).{prop}")


def test_docs_render_from_relay_alone(context: BrowserContext, relay: RelayProcess) -> None:
    page, seen = _open_docs(context, relay)
    assert page.title() == "Relay API"
    here = urlsplit(relay.base_url).netloc
    # every request, answered or not (a request the CSP blocks has no response)
    assert [u for u in seen.requested if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).netloc != here] \
        == []
    urls = [r.url for r in seen.answered]
    assert f"{relay.base_url}/openapi.json" in urls and f"{relay.base_url}/static/redoc.standalone.js" in urls
    assert all(r.status == 200 for r in seen.answered), [(r.url, r.status) for r in seen.answered]
    assert seen.errors == []
    logo = page.locator('img[alt="redocly logo"]')
    assert logo.get_attribute("src") == "static/favicon.svg"
    assert logo.evaluate("img => img.complete && img.naturalWidth > 0")  # loaded, from Relay


def test_docs_show_only_the_api(context: BrowserContext, relay: RelayProcess) -> None:
    page, seen = _open_docs(context, relay)
    text = page.locator("body").inner_text()
    assert "Undocumented" not in text and "(undocumented)" not in text
    assert "console." not in text  # the console's endpoints (console.login, ...) were the group's entries
    page.get_by_text("Applications").first.wait_for(state="attached")  # the API's own groups are there
    assert seen.errors == []


@pytest.mark.parametrize(("scheme", "choice", "dark"), [
    ("light", None, False),
    ("dark", None, True),  # the system's preference, as the console follows it
    ("dark", "light", False),  # the console's toggle wins, as on the console's pages
    ("light", "dark", True),
])
def test_docs_follow_the_console_theme(browser: Browser, relay: RelayProcess, scheme: Literal["light", "dark"],
                                       choice: str | None, dark: bool) -> None:
    ctx = browser.new_context(viewport={"width": 1360, "height": 900}, color_scheme=scheme)
    ctx.set_default_timeout(WAIT_S * 1000)
    try:
        if choice is not None:
            ctx.add_init_script(f"window.localStorage.setItem('relay.theme', '{choice}')")
        page, seen = _open_docs(ctx, relay)
        background = _style(page, "body", "backgroundColor")
        sidebar = _style(page, ".menu-content", "backgroundColor")
        assert (background == DARK_BACKGROUND) is dark, background
        assert (sidebar == DARK_SIDEBAR) is dark, sidebar
        assert page.locator("html").get_attribute("data-theme") == ("dark" if dark else "light")
        if dark:
            heading = _style(page, "h1", "color")
            assert heading == "rgb(223, 228, 234)", heading  # console.css --fg, dark: readable on the background
        assert seen.errors == []
    finally:
        ctx.close()
