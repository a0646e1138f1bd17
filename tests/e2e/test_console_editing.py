"""What the console edits that it did not before (issue 33, point 4), in Chromium against the session's real
`relay serve` and dbos executor: the autoscaling policy's editor and an alerting rule's edit, each behind its
confirmation, seen through the API and in the audit log. Screenshots of the editor at 1400 px, light and dark.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.axe_audit import assert_accessible
from tests.e2e.console_support import APP, PREFIX, WAIT_S, login, shot
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

SETTINGS = f"/orgs/local/apps/{APP}/settings"
POLICY = f"/v2/orgs/local/apps/{APP}/autoscaling-policy"
RULES = f"/v2/orgs/local/apps/{APP}/alerting-rules"


def wide_page(browser: Browser, relay: RelayProcess, scheme: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=scheme)  # type: ignore[arg-type]
    context.set_default_timeout(WAIT_S * 1000)
    try:
        page = context.new_page()
        login(page, relay, relay.admin_token)
        yield page
    finally:
        context.close()


@pytest.fixture
def light(browser: Browser, relay: RelayProcess, shop: dict[str, Any]) -> Iterator[Page]:
    del shop
    yield from wide_page(browser, relay, "light")


def confirm(page: Page, says: str) -> None:
    box = page.locator("[data-testid=confirm]")
    expect(box).to_contain_text(says)
    page.click("[data-testid=confirm-button]")


def console_operations(relay: RelayProcess, operation: str) -> list[dict[str, Any]]:
    entries = relay.api("GET", "/v2/orgs/local/audit-logs", params={"operation": operation}).json()
    return [e for e in entries if e["operation"] == operation and e["details"]["via"] == "console"]


def test_the_autoscaling_policy_is_set_refused_and_removed_in_its_editor(
        light: Page, browser: Browser, relay: RelayProcess) -> None:
    page = light
    page.goto(relay.base_url + SETTINGS)
    editor = page.locator("[data-testid=autoscaling-editor]")
    expect(editor).to_contain_text("No policy is set.")
    # A queue the application does not have: the executor is asked, and the service refuses it as the API does.
    page.fill("#autoscaling-queue", "no-such-queue")
    editor.get_by_role("button", name="Save policy…").click()
    confirm(page, "queue no-such-queue")
    expect(page.locator(".flash.error")).to_contain_text("queue 'no-such-queue' does not exist")
    assert relay.api("GET", POLICY).status_code == 404

    page.fill("#autoscaling-queue", "orders")
    page.fill("#maxOldApplicationVersions", "1")
    editor.get_by_role("button", name="Save policy…").click()
    confirm(page, "queue orders, old versions reported: 1")
    expect(page.locator(".flash.ok")).to_contain_text("Autoscaling policy saved.")
    try:
        assert relay.api("GET", POLICY).json() == {"policy": {"queue": "orders",
                                                              "rollout": {"maxOldApplicationVersions": 1}}}
        expect(editor).to_contain_text("Current policy: queue orders.")
        expect(page.locator("#maxOldApplicationVersions")).to_have_value("1")
        assert console_operations(relay, "setAutoscalingPolicy"), "the console's change is not in the audit log"
        editor.scroll_into_view_if_needed()
        shot(page, "editing-autoscaling-light")
        for dark in wide_page(browser, relay, "dark"):
            dark.goto(relay.base_url + SETTINGS + "#autoscaling")
            expect(dark.locator("[data-testid=autoscaling-state]")).to_contain_text("queue orders")
            shot(dark, "editing-autoscaling-dark")

        editor.get_by_role("button", name="Remove policy…").click()
        confirm(page, "Remove the autoscaling policy")
        expect(page.locator(".flash.ok")).to_contain_text("Autoscaling policy removed.")
        assert relay.api("GET", POLICY).status_code == 404
        assert console_operations(relay, "deleteAutoscalingPolicy")
    finally:
        relay.api("DELETE", POLICY)


def test_an_alerting_rule_is_edited_by_replacing_it(page: Page, relay: RelayProcess) -> None:
    created = relay.api("POST", RULES, json={"ruleType": "WorkflowFailure",
                                             "ruleMetadata": {"threshold": 50, "periodSecs": 60}})
    assert created.status_code == 201, created.text
    old = created.json()["id"]
    new: str | None = None
    try:
        page.goto(f"{relay.base_url}/orgs/local/apps/{APP}/alerts")
        page.locator(f"[data-testid=alerting-rules] tr[data-rule='{old}']").get_by_role("link", name="Edit…").click()
        form = page.locator("[data-testid=edit-rule]")
        expect(page.locator("#rule-threshold")).to_have_value("50")
        assert_accessible(page, "alerting rule editor")  # a page the accessibility crawl finds no rule to reach
        page.fill("#rule-threshold", "7")
        page.fill("#rule-renotifyIntervalSecs", "900")
        form.get_by_role("button", name="Save rule…").click()
        confirm(page, f"rule {old} is deleted")
        expect(page.locator(".flash.ok")).to_contain_text(f"Rule {old} replaced by rule")
        rules = relay.api("GET", RULES).json()
        assert [r["id"] for r in rules if r["id"] == old] == []
        edited = [r for r in rules if r["ruleMetadata"].get("threshold") == 7]
        assert len(edited) == 1, rules
        new = edited[0]["id"]
        assert edited[0]["ruleMetadata"]["periodSecs"] == 60  # kept: the form was filled with the rule's values
        assert [e["details"]["targets"] for e in console_operations(relay, "deleteAlertingRule")][-1] == [old]
        # renotifyIntervalSecs is Relay's own field: the v2 rule does not carry it, the rules table does.
        expect(page.locator(f"[data-testid=alerting-rules] tr[data-rule='{new}'] td").nth(5)).to_have_text("900")
    finally:
        for rule in (old, new):
            if rule:
                relay.api("DELETE", f"{RULES}/{rule}")


def test_app_deleted_private_mode_bulk_fork_delete_and_import(page: Page, relay: RelayProcess) -> None:
    """The rest of what the console newly does, once each, through the API's eyes."""
    assert relay.api("PUT", "/v2/orgs/local/apps/doomed").status_code == 204
    page.goto(relay.base_url + "/orgs/local/apps/doomed/settings")
    page.get_by_role("button", name="Delete doomed…").click()
    confirm(page, "Delete the application doomed?")
    expect(page.locator(".flash.ok")).to_contain_text("Application 'doomed' deleted.")
    assert relay.api("GET", "/v2/orgs/local/apps/doomed").status_code == 404

    page.goto(relay.base_url + SETTINGS)
    page.check("#privateMode")
    page.get_by_role("button", name="Save…").click()
    confirm(page, "privateMode → True")
    try:
        expect(page.locator(".flash.ok")).to_contain_text("Settings saved.")
        assert relay.api("GET", f"/v2/orgs/local/apps/{APP}").json()["privateMode"] is True
    finally:
        relay.api("PATCH", f"/v2/orgs/local/apps/{APP}", json={"privateMode": False})

    # The scenario's failed workflow forked from its failure, the fork deleted, then imported back from its export.
    workflows = f"{relay.base_url}/orgs/local/apps/{APP}/workflows"
    page.goto(f"{workflows}?status=ERROR")
    page.check(f"input[name=ids][value='{PREFIX}-faulty']")
    page.get_by_role("button", name="Fork selected from failure…").click()
    confirm(page, f"{PREFIX}-faulty")
    done = page.locator(".flash.ok")
    expect(done).to_contain_text("Forked 1 workflow(s) from their last failure: ")
    fork = done.inner_text().rsplit(": ", 1)[1].rstrip(".")
    one = f"/v2/orgs/local/apps/{APP}/workflows/{fork}"
    try:
        export = relay.api("GET", f"{one}/export").json()["serializedWorkflow"]
        page.goto(f"{workflows}?workflowIdPrefix={fork}")
        page.check(f"input[name=ids][value='{fork}']")
        page.get_by_role("button", name="Delete selected…").click()
        confirm(page, fork)
        expect(page.locator(".flash.ok")).to_contain_text("Asked the executor to delete 1 workflow(s).")
        assert relay.api("GET", one).status_code == 404
        page.locator("[data-testid=import-workflow] summary").click()
        page.fill("#serializedWorkflow", export)
        page.get_by_role("button", name="Import…").click()
        confirm(page, "Import a workflow into")
        expect(page.locator(".flash.ok")).to_contain_text("Workflow imported.")
        assert relay.api("GET", one).status_code == 200
        for operation in ("deleteApp", "updateApp", "bulkForkWorkflowsFromFailure", "bulkDeleteWorkflows",
                          "importWorkflow"):
            assert console_operations(relay, operation), operation
    finally:
        relay.api("DELETE", one)  # the shop's workflows as the other tests know them
