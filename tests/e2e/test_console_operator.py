"""The console's operator experience in a real browser: confirmations that say what they do, the workflow
list refreshing itself (and pausing), formatted JSON, the workflow graph, fork lineage, dead executors with
their recovery, alert rules made and deleted from the Alerts tab, favicon, dark theme, identifiers that do
not wrap, filter names as the API's, and where the admin token lives.

Runs after test_console.py against the same `relay serve` and `shop` executor (tests/e2e/conftest.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.console_support import APP, PREFIX, WAIT_S, register_app, shot, start_executor
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

WF = f"/orgs/local/apps/{APP}"
API = f"/v2/orgs/local/apps/{APP}"


def wf_id(name: str) -> str:
    return f"{PREFIX}-{name}"


def fork(relay: RelayProcess, workflow_id: str) -> str:
    answer = relay.api("POST", f"{API}/workflows/{workflow_id}/fork", json={"startStep": 1})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["workflowId"])


# -- 1. confirmations ---------------------------------------------------------------------------------
def test_confirmation_buttons_say_what_they_do(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/workflows/{wf_id('order')}")
    page.click("[data-testid=workflow-actions] button:text('Delete workflow…')")
    expect(page.locator("[data-testid=confirm] h1")).to_have_text(f"Delete workflow {wf_id('order')}?")
    expect(page.locator("[data-testid=confirm-button]")).to_have_text("Delete workflow")
    expect(page.locator("[data-testid=keep-button]")).to_have_text("Keep it")
    for generic in ("OK", "Cancel", "Confirm", "Go back"):
        assert page.locator(f"[data-testid=confirm] :text-is('{generic}')").count() == 0
    shot(page, "100-confirm-delete")
    page.click("[data-testid=keep-button]")  # nothing happens: back on the workflow, still there
    expect(page).to_have_url(re.compile(re.escape(wf_id("order")) + "$"))
    expect(page.locator("[data-testid=workflow-status]")).to_have_text("SUCCESS")

    page.click("form.fork button[type=submit]")
    expect(page.locator("[data-testid=confirm-button]")).to_have_text("Fork workflow")
    expect(page.locator("[data-testid=keep-button]")).to_have_text("Don't fork")

    page.goto(relay.base_url + f"{WF}/settings")
    page.fill("#executorTimeoutSecs", "61")
    page.click("form.settings button[type=submit]")
    expect(page.locator("[data-testid=confirm-button]")).to_have_text("Save settings")
    expect(page.locator("[data-testid=keep-button]")).to_have_text("Don't change")
    page.click("[data-testid=keep-button]")
    expect(page.locator("#executorTimeoutSecs")).not_to_have_value("61")


# -- 2. the workflow list refreshes itself, and pauses ---------------------------------------------------
def test_workflow_list_refreshes_by_itself_and_can_be_paused(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/workflows?workflowName=order")
    table = page.locator("table[data-testid=workflows]")
    expect(table).to_have_attribute("data-paused", "false")
    expect(page.locator("#refresh-toggle")).to_have_text("Pause auto-refresh")
    page.evaluate("window.__sameDocument = true")
    first = fork(relay, wf_id("order"))
    expect(table.locator(f"tr[data-workflow='{first}']")).to_be_visible()  # no reload
    assert page.evaluate("window.__sameDocument") is True
    shot(page, "110-workflows-refreshed")

    # A ticked box survives a refresh.
    box = table.locator(f"tr[data-workflow='{first}'] input[name=ids]")
    box.check()
    updated = table.get_attribute("data-updated")
    expect(table).not_to_have_attribute("data-updated", str(updated))
    expect(table.locator(f"tr[data-workflow='{first}'] input[name=ids]")).to_be_checked()
    expect(page.locator("#selected-count")).to_have_text("1 selected")

    page.click("#refresh-toggle")
    expect(page.locator("#refresh-toggle")).to_have_text("Resume auto-refresh")
    expect(table).to_have_attribute("data-paused", "true")
    second = fork(relay, wf_id("order"))
    # Two refreshes skipped while paused (counted by console.js), and the new fork is still not shown.
    expect(table).to_have_attribute("data-skipped", re.compile(r"^([2-9]|\d\d+)$"))
    assert table.locator(f"tr[data-workflow='{second}']").count() == 0
    shot(page, "111-workflows-paused")
    page.reload()  # the choice is remembered
    expect(page.locator("#refresh-toggle")).to_have_text("Resume auto-refresh")
    page.click("#refresh-toggle")
    expect(page.locator("#refresh-toggle")).to_have_text("Pause auto-refresh")
    expect(table.locator(f"tr[data-workflow='{second}']")).to_be_visible()


# -- 3. formatted, collapsible JSON ------------------------------------------------------------------
def test_inputs_outputs_and_events_are_formatted_collapsible_json(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/workflows/{wf_id('order')}")
    given = page.locator("[data-testid=input] details.json")
    expect(given.locator("summary")).to_contain_text("object · 2 keys")
    text = given.locator("pre").inner_text()
    assert '"args": [' in text and f'"{wf_id("order")}"' in text and '"kwargs": {}' in text
    assert "('" not in text  # not a Python repr
    expect(page.locator("[data-testid=output] pre")).to_contain_text(f"shipped {wf_id('order')} for 42")
    charge = page.locator("[data-testid=steps] li[data-step='2'] details.json")
    expect(charge.locator("summary")).to_contain_text("number")
    expect(charge.locator("pre")).to_have_text("42")
    expect(page.locator("section:has(h3:text('Events')) details.json pre")).to_contain_text("charged")
    # Collapsible: a click on the summary folds it, another unfolds it.
    given.locator("summary").click()
    expect(given.locator("pre")).to_be_hidden()
    given.locator("summary").click()
    expect(given.locator("pre")).to_be_visible()
    shot(page, "120-workflow-json")


# -- 4. the graph ----------------------------------------------------------------------------------------
def test_steps_and_child_workflows_as_a_graph(page: Page, relay: RelayProcess) -> None:
    batch = wf_id("batch")
    steps = relay.api("GET", f"{API}/workflows/{batch}/steps").json()
    # Two steps name each child (starting it, then waiting for its result): one node per child.
    children = list(dict.fromkeys(s["childWorkflowId"] for s in steps if s.get("childWorkflowId")))
    assert len(children) == 2 and len([s for s in steps if s.get("childWorkflowId")]) == 4
    page.goto(relay.base_url + f"{WF}/workflows/{batch}")
    graph = page.locator("[data-testid=graph] svg")
    expect(graph.locator("[data-testid=graph-root]")).to_contain_text("batch")
    expect(graph.locator("[data-testid=graph-step]")).to_have_count(len(steps))
    for index, step in enumerate(steps):
        expect(graph.locator("[data-testid=graph-step]").nth(index)).to_contain_text(
            f"{step['stepId']} · {step['stepName']}")
    nodes = graph.locator("a:has([data-testid=graph-child])")
    expect(nodes).to_have_count(2)
    expect(graph.locator("line.edge.child")).to_have_count(4)  # every step that names a child points to it
    expect(nodes.first).to_contain_text(children[0])
    expect(nodes.first).to_contain_text("SUCCESS")
    shot(page, "130-workflow-graph")
    nodes.first.click()
    expect(page).to_have_url(re.compile(re.escape(children[0]) + "$"))
    expect(page.locator("[data-testid=workflow-fields]")).to_contain_text(batch)  # its parent


# -- 5. fork lineage ---------------------------------------------------------------------------------------
def test_a_fork_links_to_its_origin_and_the_origin_lists_its_forks(page: Page, relay: RelayProcess) -> None:
    origin = wf_id("faulty")
    forked = fork(relay, origin)
    page.goto(relay.base_url + f"{WF}/workflows/{forked}")
    lineage = page.locator("[data-testid=forks]")
    expect(lineage).to_contain_text(f"This workflow is a fork of {origin}")
    shot(page, "140-fork-of")
    lineage.locator("a", has_text=origin).click()
    expect(page).to_have_url(re.compile(re.escape(origin) + "$"))
    row = page.locator(f"[data-testid=forks] tr[data-fork='{forked}']")
    expect(row).to_be_visible()
    shot(page, "141-forks-listed")
    # The same filter on the list page, under the API's name.
    page.goto(relay.base_url + f"{WF}/workflows?forkedFrom={origin}")
    expect(page.locator("[data-testid=workflows] tbody tr")).to_contain_text([forked])


# -- 6. dead executors and their recovery ----------------------------------------------------------------
def test_dead_executors_stay_visible_with_their_recovery(
    page: Page, relay: RelayProcess, tmp_path: Path
) -> None:
    app = "ghost"
    key = register_app(relay, app)
    assert relay.api("PATCH", f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": 6}).status_code in (200, 204)
    first, ready = start_executor(relay, app, key, tmp_path / "one", prefix="ghost1", name="ghost1")
    dead_id = ready["executor_id"]
    page.goto(relay.base_url + f"/orgs/local/apps/{app}")
    row = page.locator(f"#executors tr[data-executor='{dead_id}']")
    expect(row).to_contain_text("HEALTHY")
    first.kill()
    expect(row.locator("[data-testid=recovery]")).to_contain_text(re.compile(r"grace period: \d s of 6 s"))
    shot(page, "150-executor-grace")
    expect(row).to_contain_text("DEAD")
    expect(row.locator("[data-testid=recovery]")).to_have_text("no executor connected")
    shot(page, "151-executor-dead-waiting")

    second, peer = start_executor(relay, app, key, tmp_path / "two", prefix="ghost2", name="ghost2")
    try:
        # The peer recovers it; its record is deleted, and the page keeps it in the history.
        wait_until(lambda: all(e["executorId"] != dead_id for e in
                               relay.api("GET", f"/v2/orgs/local/apps/{app}/executors").json()),
                   timeout=WAIT_S, message="the dead executor was never recovered")
        page.reload()
        expect(page.locator(f"#executors tr[data-executor='{dead_id}']")).to_have_count(0)
        history = page.locator(f"[data-testid=executor-history] tr[data-executor='{dead_id}']")
        expect(history).to_contain_text(f"recovered by {peer['executor_id']}")
        shot(page, "152-executor-history")
    finally:
        second.kill()


# -- 7. alert rules from the Alerts tab --------------------------------------------------------------------
def test_alert_rules_created_and_deleted_from_the_alerts_tab(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/alerts")
    form = page.locator("form[data-rule-type=WorkflowFailure]")
    form.locator("input[name=workflowName]").fill("checkout")
    form.locator("input[name=threshold]").fill("3")
    form.locator("input[name=periodSecs]").fill("600")
    form.locator("input[name=minIntervalSecs]").fill("120")
    form.locator("button[type=submit]").click()
    expect(page.locator(".flash.ok")).to_contain_text("WorkflowFailure rule")
    rules = relay.api("GET", f"{API}/alerting-rules").json()
    made = next(r for r in rules if r["ruleMetadata"].get("workflowName") == "checkout")
    assert made["ruleMetadata"] == {"workflowName": "checkout", "threshold": 3, "periodSecs": 600}
    assert made["minIntervalSecs"] == 120
    row = page.locator(f"[data-testid=alerting-rules] tr[data-rule='{made['id']}']")
    expect(row).to_contain_text("checkout")
    shot(page, "160-alert-rule-created")

    # The API's own checks apply: an UnresponsiveApplication rule must go to another application.
    page.locator("form[data-rule-type=UnresponsiveApplication] button[type=submit]").click()
    expect(page.locator(".flash.error")).to_contain_text("Rule not created")

    row.locator("button:text('Delete rule…')").click()
    expect(page.locator("[data-testid=confirm-button]")).to_have_text("Delete rule")
    expect(page.locator("[data-testid=keep-button]")).to_have_text("Keep the rule")
    shot(page, "161-confirm-delete-rule")
    page.click("[data-testid=confirm-button]")
    expect(page.locator(".flash.ok")).to_contain_text(f"Rule {made['id']} deleted")
    expect(page.locator(f"[data-testid=alerting-rules] tr[data-rule='{made['id']}']")).to_have_count(0)
    assert made["id"] not in [r["id"] for r in relay.api("GET", f"{API}/alerting-rules").json()]


# -- 8. favicon, no developer notes, ids that do not wrap, dark theme --------------------------------------
def test_favicon_no_notes_nowrap_ids_and_dark_theme(
    page: Page, relay: RelayProcess, context: BrowserContext, shop: dict[str, Any]
) -> None:
    page.goto(relay.base_url + f"{WF}/workflows")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon
    answer = requests.get(relay.base_url + icon, timeout=10)
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("image/svg+xml")
    assert "<svg" in answer.text
    whitespace = page.eval_on_selector("[data-testid=workflows] tbody td.id code",
                                       "el => getComputedStyle(el).whiteSpace")
    assert whitespace == "nowrap"

    page.goto(relay.base_url + "/orgs/local/cluster")
    expect(page.locator("main")).not_to_contain_text("will show here")
    expect(page.locator("main")).not_to_contain_text("once Relay")

    # Dark: the system's preference...
    page.emulate_media(color_scheme="dark")
    page.goto(relay.base_url + f"/orgs/local/apps/{APP}")
    expect(page.locator(f"tr[data-executor='{shop['executor_id']}']")).to_be_visible()
    dark = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    assert _luma(dark) < 60, dark
    shot(page, "170-dark-overview")
    page.goto(relay.base_url + f"{WF}/workflows/{wf_id('batch')}")
    shot(page, "171-dark-workflow")
    # ...and the toggle: auto → light → dark, remembered across pages.
    page.click("#theme-toggle")
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    assert _luma(page.evaluate("getComputedStyle(document.documentElement).backgroundColor")) > 200
    page.emulate_media(color_scheme="light")
    page.click("#theme-toggle")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.goto(relay.base_url + f"{WF}/alerts")
    expect(page.locator("#theme-toggle")).to_have_text("Theme: dark")
    assert _luma(page.evaluate("getComputedStyle(document.documentElement).backgroundColor")) < 60
    shot(page, "172-dark-alerts")
    page.click("#theme-toggle")
    expect(page.locator("html")).to_have_attribute("data-theme", "auto")


def _luma(css: str) -> float:
    red, green, blue = (int(x) for x in re.findall(r"\d+", css)[:3])
    return 0.299 * red + 0.587 * green + 0.114 * blue


# -- 9. filter names are the API's ----------------------------------------------------------------------
def test_filter_names_are_the_apis(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/workflows")
    names = page.eval_on_selector_all("form.filters [name]", "els => els.map(e => e.name)")
    assert {"status", "workflowName", "workflowIdPrefix", "queueName", "appVersion", "executorId", "startTime",
            "endTime"} <= set(names)
    assert not {"name", "id", "queue", "version", "executor", "start", "end"} & set(names)
    page.fill("input[name=workflowName]", "faulty")
    page.select_option("select[name=status]", "ERROR")
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"[?&]workflowName=faulty(&|$)"))
    shown = page.locator("[data-testid=workflows] tbody tr").evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-workflow'))")
    # The same query string, to the API (the filters left empty dropped: the API refuses parameters it does
    # not declare, and GET /workflows declares only the reference's).
    query = "&".join(p for p in page.url.split("?", 1)[1].split("&") if not p.endswith("="))
    answer = relay.api("GET", f"{API}/workflows?{query}")
    assert answer.status_code == 200, answer.text
    listed = answer.json()
    assert sorted(shown) == sorted(w["workflowId"] for w in listed) and shown
    shot(page, "180-filters-api-names")


# -- 10. the login page says where the admin token is ------------------------------------------------------
def test_login_page_says_where_the_admin_token_is(context: BrowserContext, relay: RelayProcess) -> None:
    page = context.new_page()
    page.goto(relay.base_url + "/login")
    hint = page.locator("[data-testid=token-hint]")
    expect(hint).to_contain_text("RELAY_DATA_DIR/admin_token")
    assert str(relay.data_dir.resolve()) not in page.content()  # shown before login: no absolute path
    assert relay.admin_token not in page.content()
    expect(page.locator("#theme-toggle")).to_be_visible()  # the theme is a choice before logging in too
    shot(page, "190-login-token-hint")
