"""Keyboard shortcuts and deep links of the console (issue 33, point 4), in Chromium against the session's real
`relay serve` and dbos executor (tests/e2e/console_app.py ran its scenario: workflows that succeeded and failed).

- "/" focuses the page's search; keys typed there stay in it; j/k move over the rows; Enter opens one.
- "?" opens the help dialog (also from the header's button); Esc closes it and the focus goes back; g a goes to
  Applications. Screenshots of the dialog at 1400 px, light and dark.
- A filtered URL shows its filter in the form and applies it; submitting a filter puts it in the URL.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.console_support import APP, WAIT_S, login, shot
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

WORKFLOWS = f"/orgs/local/apps/{APP}/workflows"


def pause_refresh(page: Page) -> None:
    """The list re-reads itself every few seconds (console.js): held still, so a highlighted row stays put."""
    toggle = page.locator("#refresh-toggle")
    if toggle.is_visible() and toggle.get_attribute("aria-pressed") != "true":
        toggle.click()


def focused(page: Page) -> str:
    """What has the focus: its id, else its text, else its tag."""
    return str(page.evaluate(
        "() => { const e = document.activeElement; return e.id || e.textContent.trim() || e.tagName; }"))


def test_search_rows_and_open_with_the_keyboard(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + WORKFLOWS)
    rows = page.locator("[data-testid=workflows] tbody tr[data-workflow]")
    expect(rows.nth(1)).to_be_visible()
    pause_refresh(page)
    page.keyboard.press("/")
    search = page.locator("[data-testid=search]")
    expect(search).to_be_focused()
    page.keyboard.type("jk?")  # typed into the field: no shortcut runs
    expect(search).to_have_value("jk?")
    expect(page.locator("[data-testid=shortcuts-help]")).to_be_hidden()
    search.fill("")
    page.evaluate("() => document.activeElement.blur()")

    page.keyboard.press("j")
    expect(rows.nth(0)).to_have_class(re.compile(r"\bkbd-current\b"))
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_class(re.compile(r"\bkbd-current\b"))
    expect(rows.nth(0)).not_to_have_class(re.compile(r"\bkbd-current\b"))
    page.keyboard.press("k")
    first = rows.nth(0)
    expect(first).to_have_class(re.compile(r"\bkbd-current\b"))
    expect(first.locator("a").first).to_be_focused()
    workflow_id = first.get_attribute("data-workflow")
    assert workflow_id
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(re.escape(f"{WORKFLOWS}/{workflow_id}") + "$"))

    # The URL changes when the new page's navigation commits, before its deferred script listens for keys.
    expect(page.locator("html[data-shortcuts=ready]")).to_have_count(1)
    page.keyboard.press("g")
    page.keyboard.press("a")
    expect(page).to_have_url(re.compile(r"/orgs/local/apps$"))
    expect(page.locator("html[data-shortcuts=ready]")).to_have_count(1)
    page.keyboard.press("g")
    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(r"attention"))


def test_the_help_dialog_opens_closes_and_gives_the_focus_back(
        browser: Browser, relay: RelayProcess, shop: dict[str, Any]) -> None:
    del shop
    for scheme in ("light", "dark"):
        context = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=scheme)  # type: ignore[arg-type]
        context.set_default_timeout(WAIT_S * 1000)
        try:
            page = context.new_page()
            login(page, relay, relay.admin_token, WORKFLOWS)
            help_dialog = page.locator("[data-testid=shortcuts-help]")
            pause_refresh(page)
            page.keyboard.press("j")  # a row's link has the focus: the dialog must give it back
            before = focused(page)
            page.keyboard.press("?")
            expect(help_dialog).to_be_visible()
            expect(help_dialog).to_contain_text("Focus the page's search or filter field")
            shot(page, f"shortcuts-help-{scheme}")
            page.keyboard.press("Escape")
            expect(help_dialog).to_be_hidden()
            assert focused(page) == before

            button = page.get_by_role("button", name="Keyboard shortcuts (?)")
            button.focus()
            page.keyboard.press("Enter")
            expect(help_dialog).to_be_visible()
            help_dialog.get_by_role("button", name="Close").click()
            expect(help_dialog).to_be_hidden()
            expect(button).to_be_focused()
        finally:
            context.close()


def test_filters_live_in_the_url(page: Page, relay: RelayProcess) -> None:
    page.goto(f"{relay.base_url}{WORKFLOWS}?status=ERROR")
    form = page.locator("[data-testid=filters]")
    expect(form.locator("select[name=status]")).to_have_value("ERROR")
    statuses = page.locator("[data-testid=workflows] tbody tr[data-workflow] .badge")
    expect(statuses.first).to_be_visible()
    assert set(statuses.all_inner_texts()) == {"ERROR"}
    form.locator("select[name=status]").select_option("SUCCESS")
    form.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"[?&]status=SUCCESS(&|$)"))
    expect(statuses.first).to_have_text("SUCCESS")

    page.goto(f"{relay.base_url}/orgs/local/apps/{APP}/alerts?state=resolved")
    state = page.locator("[data-testid=incident-filter] select[name=state]")
    expect(state).to_have_value("resolved")
    state.select_option("open")
    page.locator("[data-testid=incident-filter]").get_by_role("button", name="Show").click()
    expect(page).to_have_url(re.compile(r"[?&]state=open(&|$)"))

    page.goto(f"{relay.base_url}/orgs/local/audit?app={APP}")
    expect(page.get_by_label("application")).to_have_value(APP)
    assert set(page.locator("[data-testid=audit] tbody td:nth-child(4)").all_inner_texts()) == {APP}
