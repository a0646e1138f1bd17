"""GET /docs in a real browser: Redoc renders Relay's document from local files, and nothing is fetched from
anywhere else (its CDN logo is blocked by the page's Content-Security-Policy)."""

from __future__ import annotations

from urllib.parse import urlsplit

from playwright.sync_api import BrowserContext, Response

from tests.support.procs import RelayProcess


def test_docs_render_from_relay_alone(context: BrowserContext, relay: RelayProcess) -> None:
    answered: list[Response] = []
    page = context.new_page()
    page.on("response", lambda response: answered.append(response))  # noqa: PLW0108 - a bound builtin is refused
    page.goto(f"{relay.base_url}/docs")
    page.get_by_text("Download OpenAPI specification").wait_for()  # Redoc read the document and rendered it
    page.get_by_text("List workflows").first.wait_for(state="attached")
    assert page.title() == "Relay API"
    here = urlsplit(relay.base_url).netloc
    urls = [r.url for r in answered]
    assert [u for u in urls if urlsplit(u).scheme in ("http", "https") and urlsplit(u).netloc != here] == []
    assert f"{relay.base_url}/openapi.json" in urls and f"{relay.base_url}/static/redoc.standalone.js" in urls
    assert all(r.status == 200 for r in answered), [(r.url, r.status) for r in answered]
