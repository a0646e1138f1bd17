"""The web console in a real browser (Debian's headless Chromium, Playwright) against a real `relay serve`
and a real DBOS Python executor (dbos 3.2.0, tests/e2e/console_app.py).

Each test leaves screenshots of the pages it visits in test-output/console/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.e2e.console_support import APP, PREFIX, WAIT_S, login, register_app, shot, start_executor
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

WF = f"/orgs/local/apps/{APP}"


def wf_id(name: str) -> str:
    return f"{PREFIX}-{name}"


def confirm(page: Page, screenshot: str | None = None) -> None:
    """Every action asks first: check the confirmation page, then confirm."""
    expect(page.locator("[data-testid=confirm]")).to_be_visible()
    if screenshot:
        shot(page, screenshot)
    page.click("[data-testid=confirm-button]")


def status_of(page: Page) -> str:
    return page.locator("[data-testid=workflow-status]").inner_text().strip()


def reload_until_status(page: Page, wanted: str) -> None:
    """The detail page is a snapshot: reload until the executor reports `wanted` (bounded)."""

    def reached() -> bool:
        if status_of(page) == wanted:
            return True
        page.reload()
        return False

    wait_until(reached, timeout=WAIT_S, interval=0.3, message=f"workflow never reached {wanted}")


def console_session(relay: RelayProcess, token: str) -> tuple[requests.Session, str]:
    """A logged-in console session outside the browser; returns it and its CSRF token."""
    session = relay.http_session()
    form = session.get(f"{relay.base_url}/login", timeout=10)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert csrf, form.text
    answer = session.post(f"{relay.base_url}/login", data={"csrf_token": csrf.group(1), "token": token},
                          timeout=10)
    assert answer.status_code == 200 and "/orgs/local/apps" in answer.url
    fresh = re.search(r'name="csrf_token" value="([^"]+)"', answer.text)
    assert fresh
    return session, fresh.group(1)


# -- login ----------------------------------------------------------------------------------------
def test_nothing_is_shown_before_login_and_logout_ends_the_session(
    context: BrowserContext, relay: RelayProcess, shop: dict[str, Any]
) -> None:
    page = context.new_page()
    page.goto(relay.base_url + f"{WF}/workflows")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    content = page.content()
    assert wf_id("order") not in content and shop["executor_id"] not in content
    assert page.locator("table").count() == 0
    shot(page, "01-login")

    # Nothing of the JSON endpoint either: it redirects to the login page.
    anonymous = requests.get(f"{relay.base_url}{WF}/executors.json", allow_redirects=False, timeout=10)
    assert anonymous.status_code == 302 and "/login" in anonymous.headers["Location"]

    page.fill("#token", "dbos_not-a-real-key")
    page.click("button[type=submit]")
    expect(page.locator(".flash.error")).to_contain_text("Unknown or revoked token")
    shot(page, "02-login-refused")

    page.fill("#token", relay.admin_token)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(rf"{WF}/workflows$"))  # back where the user was going
    expect(page.locator("[data-testid=workflows]")).to_contain_text(wf_id("order"))
    assert relay.admin_token not in page.content()

    page.click("text=Log out")
    expect(page).to_have_url(re.compile(r"/login$"))
    expect(page.locator(".flash")).to_contain_text("Logged out")
    page.goto(relay.base_url + f"{WF}/workflows")
    expect(page).to_have_url(re.compile(r"/login\?next="))


def test_posts_without_the_csrf_token_are_refused(relay: RelayProcess, shop: dict[str, Any]) -> None:
    del shop
    session, csrf = console_session(relay, relay.admin_token)
    url = f"{relay.base_url}/orgs/local/keys"
    missing = session.post(url, data={"name": "csrf-probe", "permissions": ["application.read"]}, timeout=10)
    wrong = session.post(url, data={"name": "csrf-probe", "csrf_token": csrf[::-1]}, timeout=10)
    assert missing.status_code == 403 and "CSRF" in missing.text
    assert wrong.status_code == 403
    assert "csrf-probe" not in [t["tokenName"] for t in relay.api("GET", "/v2/orgs/local/tokens").json()]
    # Logging out is a POST too; without the token the session survives it.
    assert session.post(f"{relay.base_url}/logout", timeout=10).status_code == 403
    assert session.get(f"{relay.base_url}/orgs/local/apps", allow_redirects=False, timeout=10).status_code == 200
    # And a login form posted from elsewhere (no token of this browser's session) is refused.
    assert requests.post(f"{relay.base_url}/login", data={"token": relay.admin_token}, timeout=10).status_code == 403
    # With the token, the same request works.
    ok = session.post(url, data={"name": "csrf-probe", "permissions": ["application.read"], "csrf_token": csrf},
                      timeout=10)
    assert ok.status_code == 200 and "csrf-probe" in ok.text


def test_login_sends_back_only_to_pages_of_the_console(relay: RelayProcess) -> None:
    for target, landing in (("/orgs/local/audit", "/orgs/local/audit"), ("//evil.example/x", "/"),
                            ("/\\evil.example", "/"), ("https://evil.example/", "/"), ("", "/")):
        session = relay.http_session()
        form = session.get(f"{relay.base_url}/login", timeout=10)
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert csrf
        answer = session.post(f"{relay.base_url}/login", allow_redirects=False, timeout=10,
                              data={"csrf_token": csrf.group(1), "token": relay.admin_token, "next": target})
        assert answer.status_code == 302
        assert answer.headers["Location"] == landing, (target, answer.headers["Location"])
        assert "Content-Security-Policy" in answer.headers


# -- workflows: find, open, cancel, fork ----------------------------------------------------------
def test_find_a_workflow_by_filter_open_it_and_cancel_it(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/workflows")
    shot(page, "10-workflows")
    page.fill("input[name=workflowIdPrefix]", wf_id("appr"))
    page.select_option("select[name=status]", "PENDING")
    page.click("form.filters button[type=submit]")
    rows = page.locator("[data-testid=workflows] tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(wf_id("approval"))
    expect(rows.first).to_contain_text("PENDING")
    shot(page, "11-workflows-filtered")

    page.click(f"text={wf_id('approval')}")
    expect(page.locator("[data-testid=workflow-status]")).to_have_text("PENDING")
    steps = page.locator("[data-testid=steps] li")
    expect(steps.first).to_contain_text("reserve")
    expect(page.locator("[data-testid=steps]")).to_contain_text("DBOS.writeStream")
    expect(page.locator("body")).to_contain_text("please hurry")  # the notification it has not consumed
    expect(page.locator("body")).to_contain_text(f"waiting for approval of {wf_id('approval')}")  # its stream
    shot(page, "12-workflow-pending")

    page.click("[data-testid=workflow-actions] button:text('Cancel workflow…')")
    confirm(page, "13-confirm-cancel")
    expect(page.locator(".flash.ok")).to_contain_text("cancel")
    reload_until_status(page, "CANCELLED")
    expect(page.locator("[data-testid=workflow-actions]")).to_contain_text("Resume workflow…")
    shot(page, "14-workflow-cancelled")
    api = relay.api("GET", f"/v2/orgs/local/apps/{APP}/workflows/{wf_id('approval')}").json()
    assert api["status"] == "CANCELLED"

    page.goto(relay.base_url + f"{WF}/workflows?status=CANCELLED&workflowIdPrefix={wf_id('')}")
    expect(page.locator("[data-testid=workflows]")).to_contain_text(wf_id("approval"))


def test_fork_a_workflow_from_a_chosen_step_and_see_the_new_run(page: Page, relay: RelayProcess) -> None:
    original = wf_id("order")
    page.goto(relay.base_url + f"{WF}/workflows/{original}")
    expect(page.locator("[data-testid=workflow-status]")).to_have_text("SUCCESS")
    expect(page.locator("[data-testid=steps] li")).to_have_count(4)  # reserve, charge, setEvent, ship
    shot(page, "20-workflow-success")

    page.select_option("select[name=start_step]", "2")
    page.click("form.fork button[type=submit]")
    expect(page.locator("[data-testid=confirm]")).to_contain_text("from step 2")
    confirm(page, "21-confirm-fork")

    flash = page.locator(".flash.ok")
    expect(flash).to_contain_text(f"Forked {original} from step 2")
    new_id = re.search(r"new workflow (\S+)\.", flash.inner_text())
    assert new_id and new_id.group(1) != original
    expect(page).to_have_url(re.compile(re.escape(new_id.group(1)) + "$"))
    expect(page.locator("[data-testid=workflow-fields]")).to_contain_text(
        re.compile(rf"Forked from\s*{re.escape(original)}"))
    reload_until_status(page, "SUCCESS")
    expect(page.locator("[data-testid=steps]")).to_contain_text("ship")
    expect(page.locator(".io")).to_contain_text(f"shipped {original} for 42")
    shot(page, "22-workflow-forked")

    page.goto(relay.base_url + f"{WF}/workflows?workflowName=order")
    expect(page.locator("[data-testid=workflows]")).to_contain_text(new_id.group(1))


def test_bulk_cancel_and_resume_a_selection(page: Page, relay: RelayProcess) -> None:
    # The queue holds one running and one waiting behind it (one at a time per worker).
    page.goto(relay.base_url + f"{WF}/queues")
    queue = page.locator("[data-testid=queues] tbody tr", has_text="orders")
    expect(queue.locator("td").nth(1)).to_have_text("1")
    expect(queue.locator("td").nth(2)).to_have_text("1")
    shot(page, "29-queue-depth")
    page.click("[data-testid=queues] a:text('orders')")
    expect(page.locator("[data-testid=workflows] tbody tr")).to_have_count(2)
    # Cancelling takes a workflow off its queue: select them by ID prefix instead.
    page.goto(relay.base_url + f"{WF}/workflows?workflowIdPrefix={wf_id('queued-')}")
    rows = page.locator("[data-testid=workflows] tbody tr")
    expect(rows).to_have_count(2)
    page.check("#select-all")
    expect(page.locator("#selected-count")).to_have_text("2 selected")
    page.click("button:text('Cancel selected…')")
    expect(page.locator("[data-testid=confirm]")).to_contain_text("2 workflow(s)")
    confirm(page, "30-confirm-bulk-cancel")
    expect(page.locator(".flash.ok")).to_contain_text("cancel 2 workflow(s)")
    expect(page.locator("[data-testid=workflows] tbody .badge.s-CANCELLED")).to_have_count(2)
    shot(page, "31-bulk-cancelled")

    page.check("#select-all")
    page.click("button:text('Resume selected…')")
    confirm(page)
    expect(page.locator(".flash.ok")).to_contain_text("resume 2 workflow(s)")
    expect(page.locator("[data-testid=workflows] tbody .badge.s-CANCELLED")).to_have_count(0)


# -- the other pages ------------------------------------------------------------------------------
def test_application_pages(page: Page, relay: RelayProcess, shop: dict[str, Any]) -> None:
    page.goto(relay.base_url + "/orgs/local/apps")
    row = page.locator("[data-testid=apps] tbody tr", has_text=APP)
    expect(row).to_contain_text("AVAILABLE")
    expect(row).to_contain_text(shop["app_version"])
    shot(page, "40-applications")

    page.click(f"[data-testid=apps] a:text('{APP}')")
    executor = page.locator(f"tr[data-executor='{shop['executor_id']}']")
    expect(executor).to_contain_text("HEALTHY")
    expect(executor).to_contain_text("python")
    expect(executor).to_contain_text("3.2.0")
    expect(page.locator("table#executors")).to_have_attribute("data-updated", re.compile(r"\d+"))  # live
    charts = page.locator("figure.chart svg")
    expect(charts).to_have_count(2)
    expect(charts.first).to_contain_text("SUCCESS")
    expect(charts.nth(1)).to_contain_text("reserve")
    shot(page, "41-application-overview")

    page.click("nav.tabs >> text=Queues")
    queue = page.locator("[data-testid=queues] tbody tr", has_text="orders")
    expect(queue).to_be_visible()
    shot(page, "42-queues")

    page.click("nav.tabs >> text=Versions")
    expect(page.locator("[data-testid=versions]")).to_contain_text(shop["app_version"])
    expect(page.locator("[data-testid=versions]")).to_contain_text("latest")
    shot(page, "43-versions")

    page.click("nav.tabs >> text=Recoveries")
    expect(page.locator("main")).to_contain_text("No recovery has been dispatched")
    shot(page, "44-recoveries")

    page.click("nav.tabs >> text=Alerts")
    expect(page.locator("[data-testid=no-rules]")).to_be_visible()
    expect(page.locator("[data-testid=not-available]")).to_have_count(0)
    # A rule made through the API: the scenario's `faulty` workflow failed, so it opens an incident (issue 32: one
    # notification while the condition holds).
    created = relay.api("POST", f"/v2/orgs/local/apps/{APP}/alerting-rules", json={
        "ruleType": "WorkflowFailure", "ruleMetadata": {"threshold": 1, "periodSecs": 86400},
        "minIntervalSecs": 3600,
    })
    assert created.status_code == 201, created.text
    rule_id = created.json()["id"]
    try:
        wait_until(lambda: relay.api("GET", f"/relay/v1/orgs/local/apps/{APP}/incidents").json()["incidents"],
                   timeout=WAIT_S, message="the WorkflowFailure rule never opened an incident")
        page.reload()
        rule = page.locator(f"[data-testid=alerting-rules] tr[data-rule='{rule_id}']")
        expect(rule).to_contain_text("WorkflowFailure")
        expect(rule).to_contain_text("86400")
        expect(rule).to_contain_text("3600")
        incident = page.locator(f"[data-testid=incidents] tr[data-rule='{rule_id}']")
        expect(incident).to_have_count(1)
        expect(incident).to_contain_text(f"of application '{APP}' failed in the last 86400 s")
        expect(incident).to_contain_text("open")

        def delivered() -> bool:  # the executor acknowledges the alert frame (or the page says why not)
            page.reload()
            return page.locator(f"[data-testid=incidents] tr[data-rule='{rule_id}'] "
                                "[data-testid=delivery] .badge").inner_text() != "pending"

        wait_until(delivered, timeout=WAIT_S, interval=0.3, message="the incident's notification was never recorded")
        expect(incident.locator("[data-testid=delivery] .badge")).to_have_text("open")
        expect(incident.locator("[data-testid=delivery] .badge")).to_have_class("badge d-delivered")
        expect(incident.locator("[data-testid=delivery]")).to_contain_text(shop["executor_id"])  # dbos 3.2.0 took it
        assert relay.admin_token not in page.content()
        shot(page, "45-alerts")
    finally:
        assert relay.api("DELETE", f"/v2/orgs/local/apps/{APP}/alerting-rules/{rule_id}").status_code == 204

    page.click("header >> text=Audit log")
    expect(page.locator("[data-testid=audit]")).to_contain_text("createAlertingRule")
    # The first page holds the newest 25 entries: other tests' actions may push the session's first events off it.
    audit_url = page.url
    for kind in ("App.Registered", "Executor.Connected"):
        page.goto(f"{audit_url}?app={APP}&type={kind}")
        expect(page.locator("[data-testid=audit]")).to_contain_text(kind)
    page.goto(audit_url)
    # Actions are Operations (issue 14): this test's own createAlertingRule through the API, with its outcome,
    # who asked and from where.
    created = page.locator("[data-testid=audit] tr[data-kind=Operation]", has_text="createAlertingRule").first
    expect(created).to_contain_text("success")
    expect(created).to_contain_text("admin")
    expect(created).to_contain_text("127.0.0.1")
    shot(page, "46-audit")

    page.click("header >> text=Cluster")
    expect(page.locator("[data-testid=instances]")).to_contain_text("RUNNING")
    expect(page.locator("[data-testid=instances]")).to_contain_text("(this one)")
    expect(page.locator("[data-testid=leases]").first).to_contain_text(shop["executor_id"])
    shot(page, "47-cluster")


def test_schedule_actions(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/schedules")
    row = page.locator("[data-testid=schedules] tbody tr", has_text="nightly-tidy")
    expect(row).to_contain_text("ACTIVE")
    expect(row).to_contain_text("0 0 3 * * *")
    shot(page, "50-schedules")

    row.locator("button:text('Pause…')").click()
    confirm(page)
    expect(row).to_contain_text("PAUSED")
    row.locator("button:text('Resume…')").click()
    confirm(page)
    expect(row).to_contain_text("ACTIVE")

    row.locator("button:text('Trigger…')").click()
    confirm(page)
    expect(page.locator(".flash.ok")).to_contain_text("Triggered nightly-tidy: workflow")

    row.locator("input[name=start]").fill("2024-01-01T02:00:00")
    row.locator("input[name=end]").fill("2024-01-01T04:00:00")
    row.locator("button:text('Backfill…')").click()
    confirm(page, "51-confirm-backfill")
    expect(page.locator(".flash.ok")).to_contain_text("Backfilled nightly-tidy: 1 workflow(s) started")


def test_keys_shown_once_and_permissions_respected(
    page: Page, relay: RelayProcess, browser: Browser
) -> None:
    page.goto(relay.base_url + "/orgs/local/keys")
    shot(page, "60-keys")
    page.fill("#key-name", "viewer")
    for box in page.locator("input[name=permissions]").all():
        box.uncheck()
    page.check("input[name=permissions][value='application.read']")
    page.check(f"input[name=apps][value='{APP}']")
    page.click("form >> text=Create key")
    created = page.locator("#new-key")
    expect(created).to_have_text(re.compile(r"^dbos_\S{20,}$"))
    key = created.inner_text().strip()
    shot(page, "61-key-created")
    page.goto(relay.base_url + "/orgs/local/keys")
    expect(page.locator("[data-testid=keys] tr[data-key=viewer]")).to_contain_text("application.read")
    assert key not in page.content()  # shown exactly once

    viewer_ctx = browser.new_context(viewport={"width": 1360, "height": 900})
    try:
        viewer = viewer_ctx.new_page()
        login(viewer, relay, key)
        expect(viewer.locator("[data-testid=principal]")).to_have_text("api_key:viewer")
        expect(viewer.locator("header")).not_to_contain_text("API keys")
        viewer.goto(relay.base_url + f"{WF}/workflows")
        expect(viewer.locator("[data-testid=workflows]")).to_contain_text(wf_id("order"))
        assert viewer.locator("input[name=ids]").count() == 0
        assert viewer.locator("text=Cancel selected…").count() == 0
        viewer.goto(relay.base_url + f"{WF}/workflows/{wf_id('order')}")
        expect(viewer.locator("[data-testid=workflow-status]")).to_have_text("SUCCESS")
        assert viewer.locator("[data-testid=workflow-actions]").count() == 0
        shot(viewer, "62-read-only-workflow")
        viewer.goto(relay.base_url + f"{WF}/settings")
        expect(viewer.locator("#executorTimeoutSecs")).to_be_disabled()
        # Not offered, and refused when forged with a valid session and CSRF token all the same.
        csrf = viewer.locator("header input[name=csrf_token]").get_attribute("value")
        forged = viewer.request.post(relay.base_url + f"{WF}/workflow-actions/cancel", form={
            "csrf_token": str(csrf), "workflow_id": wf_id("queued-wait"), "confirmed": "yes"})
        assert forged.status == 403
        assert viewer.request.get(relay.base_url + "/orgs/local/keys").status == 403

        page.goto(relay.base_url + "/orgs/local/keys")
        page.locator("tr[data-key=viewer] button:text('Revoke…')").click()
        confirm(page, "63-confirm-revoke")
        expect(page.locator(".flash.ok")).to_contain_text("Key 'viewer' revoked")
        viewer.goto(relay.base_url + f"{WF}/workflows")
        expect(viewer).to_have_url(re.compile(r"/login"))
        expect(viewer.locator(".flash.error")).to_contain_text("session ended")
    finally:
        viewer_ctx.close()


def test_edit_grace_period_and_retention(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + f"{WF}/settings")
    page.fill("#executorTimeoutSecs", "90")
    page.fill("#gcRowsThreshold", "5000")
    page.click("form.settings button[type=submit]")
    expect(page.locator("[data-testid=confirm]")).to_contain_text("executorTimeoutSecs → 90")
    confirm(page, "70-confirm-settings")
    expect(page.locator(".flash.ok")).to_contain_text("Settings saved")
    expect(page.locator("#executorTimeoutSecs")).to_have_value("90")
    shot(page, "71-settings")
    settings = relay.api("GET", f"/v2/orgs/local/apps/{APP}").json()
    assert settings["executorTimeoutSecs"] == 90 and settings["gcRowsThreshold"] == 5000


def test_no_executor_connected_and_executor_errors(page: Page, relay: RelayProcess) -> None:
    page.goto(relay.base_url + "/orgs/local/apps")
    page.fill("input[name=name]", "idle")
    page.click("form >> text=Register")
    expect(page.locator(".flash.ok")).to_contain_text("Application 'idle' registered")
    page.goto(relay.base_url + "/orgs/local/apps/idle/workflows")
    expect(page.locator("[data-testid=executor-problem]")).to_contain_text("No executor connected")
    shot(page, "80-no-executor")
    page.goto(relay.base_url + "/orgs/local/apps/idle")
    expect(page.locator("table#executors")).to_contain_text("No executor connected")

    # A workflow deleted (in another tab) after the list was shown: the executor's error is shown as such.
    page.goto(relay.base_url + f"{WF}/workflows?status=CANCELLED&workflowIdPrefix={wf_id('')}")
    expect(page.locator("[data-testid=workflows]")).to_contain_text(wf_id("stale"))
    page.check("#select-all")
    other = page.context.new_page()
    other.goto(relay.base_url + f"{WF}/workflows/{wf_id('stale')}")
    other.click("[data-testid=workflow-actions] button:text('Delete workflow…')")
    confirm(other)
    expect(other.locator(".flash.ok")).to_contain_text(f"delete {wf_id('stale')}")
    other.goto(relay.base_url + f"{WF}/workflows/{wf_id('stale')}")
    expect(other.locator("main")).to_contain_text("know no workflow")
    other.close()
    page.click("button:text('Resume selected…')")
    confirm(page)
    expect(page.locator(".flash.error")).to_contain_text(re.compile(r"resume failed: .*"))
    shot(page, "81-executor-error")


def test_executors_table_refreshes_without_a_reload(
    page: Page, relay: RelayProcess, tmp_path: Path
) -> None:
    key = register_app(relay, "tick")
    page.goto(relay.base_url + "/orgs/local/apps/tick")
    expect(page.locator("table#executors")).to_contain_text("No executor connected")
    page.evaluate("window.__sameDocument = true")
    proc, ready = start_executor(relay, "tick", key, tmp_path / "tick", prefix="tick", name="tick")
    try:
        row = page.locator(f"tr[data-executor='{ready['executor_id']}']")
        expect(row).to_contain_text("HEALTHY")
        expect(page.locator("[data-count=HEALTHY]")).to_have_text("1")
        shot(page, "90-executor-live-healthy")
    finally:
        proc.kill()
    expect(row).to_contain_text("DISCONNECTED")
    expect(page.locator("[data-count=DISCONNECTED]")).to_have_text("1")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    shot(page, "91-executor-live-disconnected")


# -- issue 36: the same pages through executors --------------------------------------------------------
def test_a_running_workflow_is_followed_through_its_executor(relay: RelayProcess, shop: dict[str, Any]) -> None:
    """A followed page asks the executor for the status row and the steps past those it shows, nothing more."""
    del shop
    session, _ = console_session(relay, relay.admin_token)
    changes = f"{relay.base_url}/orgs/local/apps/{APP}/workflow-changes/{wf_id('queued-wait')}"
    first = session.get(changes, params={"steps": 0}, timeout=30)
    assert first.status_code == 200 and first.headers["X-Relay-Served-From"] == "executor"
    answer = first.json()
    assert answer["status"] == "PENDING" and answer["ended"] is False and "io" not in answer
    assert answer["stepCount"] >= 1 and answer["steps"].count("<li ") == answer["stepCount"]
    again = session.get(changes, params={"steps": answer["stepCount"]}, timeout=30).json()
    assert again["steps"] == "" and again["stepCount"] == answer["stepCount"]  # nothing new: nothing sent
    page = session.get(f"{relay.base_url}/orgs/local/apps/{APP}/workflows/{wf_id('queued-wait')}", timeout=30)
    assert 'data-follow-url="' in page.text and f'data-steps="{answer["stepCount"]}"' in page.text
    ended = session.get(f"{relay.base_url}/orgs/local/apps/{APP}/workflows/{wf_id('order')}", timeout=30)
    assert ended.status_code == 200 and "data-follow-url" not in ended.text  # an ended workflow is not followed
    assert session.get(changes, params={"steps": "x"}, timeout=30).status_code == 400


def test_the_overview_through_executors_links_its_figures(relay: RelayProcess, shop: dict[str, Any]) -> None:
    del shop
    session, _ = console_session(relay, relay.admin_token)
    page = session.get(f"{relay.base_url}/orgs/local/apps/{APP}", timeout=30)
    assert page.status_code == 200 and 'data-served-from="executor"' in page.text
    totals = dict(re.findall(r'data-status="(\w+)">.*?<b>([^<]+)</b>', page.text, re.DOTALL))
    assert int(totals["SUCCESS"].replace("\u202f", "")) >= 1 and "ERROR" in totals
    search = session.get(f"{relay.base_url}/orgs/local/apps/{APP}/workflows", params={"q": "PPROV"}, timeout=30)
    assert search.status_code == 200 and 'data-testid="search-scope"' in search.text
    assert "among the newest" in search.text and '<mark class="hit">pprov</mark>' in search.text
