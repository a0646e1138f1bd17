"""Live console pages (issue 33, point 1) in Chromium against a real `relay serve` and real DBOS executors: what
Relay owns is pushed (web/console/live.py, web/static/live.js) and shows within 1 s without polling; the
connection's state is shown; the workflow list refreshes at the rate a person chose and not in a hidden tab."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Request, expect

from tests.e2e.axe_audit import assert_accessible
from tests.e2e.console_support import WAIT_S, login, register_app, shot, start_executor
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

SHOWN_WITHIN_MS = 1000  # point 1: a page shows a change within 1 s


def _requests(page: Page) -> list[str]:
    """Every request the page makes from now on (its URL), the stream's included."""
    seen: list[str] = []

    def note(request: Request) -> None:
        seen.append(request.url)

    page.on("request", note)
    return seen


def test_executors_appear_and_go_down_live_without_polling(page: Page, relay: RelayProcess, tmp_path: Path) -> None:
    key = register_app(relay, "livex")
    page.set_viewport_size({"width": 1400, "height": 900})
    seen = _requests(page)
    page.goto(relay.base_url + "/orgs/local/apps/livex")
    state = page.locator("[data-testid=live-state]")
    expect(state).to_have_attribute("data-state", "live")
    expect(state).to_have_text("live")
    expect(page.locator("table#executors")).to_contain_text("No executor connected")
    page.evaluate("window.__sameDocument = true")
    proc, ready = start_executor(relay, "livex", key, tmp_path / "livex", prefix="livex", name="livex")
    try:
        row = page.locator(f"tr[data-executor='{ready['executor_id']}']")
        # start_executor returned once the API lists it HEALTHY: the page follows within 1 s.
        expect(row).to_contain_text("HEALTHY", timeout=SHOWN_WITHIN_MS)
        expect(page.locator("[data-count=HEALTHY]")).to_have_text("1", timeout=SHOWN_WITHIN_MS)
        shot(page, "120-live-app-light")
        page.emulate_media(color_scheme="dark")
        shot(page, "121-live-app-dark")
        page.emulate_media(color_scheme="light")
        assert_accessible(page, "live executors table")
    finally:
        proc.kill()
    expect(row).to_contain_text("DISCONNECTED")  # as soon as Relay records the socket's close
    expect(page.locator("[data-count=DISCONNECTED]")).to_have_text("1", timeout=SHOWN_WITHIN_MS)
    assert page.evaluate("window.__sameDocument") is True  # no reload
    # Pushed, not polled: no executors.json, and no re-read of the fragment without a change event before it.
    assert not [u for u in seen if "executors.json" in u]
    rereads = [u for u in seen if re.search(r"/apps/livex/executors(\?|$)", u)]
    changes = int(state.get_attribute("data-changes") or 0)
    assert 1 <= len(rereads) <= changes, (rereads, changes)
    assert len([u for u in seen if "/live?" in u]) == 1  # one stream, never reopened


def test_audit_entries_appear_live(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + "/orgs/local/audit")
    expect(page.locator("[data-testid=live-state]")).to_have_attribute("data-state", "live")
    assert relay.api("PUT", "/v2/orgs/local/apps/liveaudit").status_code == 204
    entry = page.locator("[data-testid=audit] tbody tr[data-kind=App]", has_text="liveaudit")
    expect(entry).to_contain_text("App.Registered", timeout=SHOWN_WITHIN_MS)
    asked = page.locator("[data-testid=audit] tbody tr[data-kind=Operation]", has_text="registerApp")
    expect(asked.first).to_be_visible()


def test_the_connection_state_shows_a_stopping_instance_and_a_refused_stream(browser: Browser, tmp_path: Path) -> None:
    """SIGTERM ends the open streams as the drain begins (they must not hold the stop); the page says it is
    reconnecting, then offline when the stream is refused."""
    with RelayProcess(tmp_path / "data", env={"RELAY_DRAIN_S": "3"}) as relay:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        try:
            page = context.new_page()
            login(page, relay, relay.admin_token)
            page.goto(relay.base_url + "/orgs/local/audit")
            state = page.locator("[data-testid=live-state]")
            expect(state).to_have_attribute("data-state", "live")
            page.evaluate("""() => { window.__states = [];
                const el = document.querySelector('[data-testid=live-state]');
                new MutationObserver(() => window.__states.push(el.getAttribute('data-state')))
                    .observe(el, {attributes: true, attributeFilter: ['data-state']}); }""")
            page.route("**/orgs/local/live?*", lambda route: route.fulfill(status=503, body="stopping"))
            assert relay.proc is not None
            relay.proc.send_signal(signal.SIGTERM)
            # The stream ends as the drain begins: the page knows while the instance still drains (3 s).
            expect(state).to_have_attribute("data-state", "offline", timeout=2500)
            assert relay.proc.poll() is None
            assert "reconnecting" in page.evaluate("window.__states")
            expect(state).to_have_text("offline · retrying")
            shot(page, "122-live-offline")
            assert relay.stop(timeout=WAIT_S) == 0
        finally:
            context.close()


def test_the_workflow_list_refreshes_at_the_chosen_rate_and_not_when_hidden(page: Page, relay: RelayProcess) -> None:
    seen = _requests(page)
    page.goto(relay.base_url + "/orgs/local/apps/shop/workflows?refresh=2")  # a deep link holds the rate
    table = page.locator("table[data-testid=workflows]")
    expect(page.locator("#refresh-rate")).to_have_value("2")
    expect(table).to_have_attribute("data-every", "2000")
    expect(table).to_have_attribute("data-updated", re.compile(r"\d+"))  # it refreshed

    def reads() -> int:
        return len([u for u in seen if "/apps/shop/workflows" in u]) - 1  # the page's own load left out

    page.evaluate("""() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
        document.dispatchEvent(new Event('visibilitychange')); }""")
    hidden_at = reads()
    expect(table).to_have_attribute("data-hidden-skipped", re.compile(r"^([2-9]|\d\d+)$"))  # two ticks skipped
    assert reads() == hidden_at  # a hidden tab asks the executors nothing
    with page.expect_request(lambda r: "/apps/shop/workflows" in r.url):  # shown again: it catches up at once
        page.evaluate("""() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
            document.dispatchEvent(new Event('visibilitychange')); }""")

    page.select_option("#refresh-rate", "60")
    expect(page).to_have_url(re.compile(r"refresh=60"))
    expect(table).to_have_attribute("data-every", "60000")
    assert page.evaluate("localStorage.getItem('relay.workflows.rate')") == "60"
    page.select_option("#refresh-rate", "off")
    expect(table).to_have_attribute("data-paused", "true")
    expect(page).to_have_url(re.compile(r"refresh=off"))
    expect(page.locator("#refresh-note")).to_have_text("auto-refresh paused")
    page.select_option("#refresh-rate", "3")  # as the other tests expect it (their contexts are new anyway)
