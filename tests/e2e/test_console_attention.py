"""Needs attention (issue 33, point 3) in a real browser, over a real `relay serve` and real dbos 3.2.0 executors:
`limbo` has two executors on one PostgreSQL system database, v1 (kept) and v2 (killed: DEAD, with no executor of
its version to recover it, so v2's waiting workflows are stranded), a WorkflowFailure rule whose incident opens
while the page is open (and appears on it: the change stream);
`shop` (the session's executor) failed and queued workflows too; `quiet` has no executor, so it is not asked.
Each section shows them and links to where they can be dealt with; the sections with nothing say so.
Screenshots at 1400 px, light and dark.

Runs against the same `relay serve` and `shop` executor as the other console tests (tests/e2e/conftest.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.axe_audit import assert_accessible
from tests.e2e.console_support import APP, PREFIX, WAIT_S, register_app, shot, start_executor
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

LIMBO = "limbo"
QUIET = "quiet"
ATTENTION = "/orgs/local/attention"


def test_needs_attention_across_applications(page: Page, relay: RelayProcess, shop: dict[str, Any],
                                             pg_url: str, tmp_path: Path) -> None:
    key = register_app(relay, LIMBO)
    register_app(relay, QUIET)  # no executor, no data plane: nothing to ask
    assert relay.api("PATCH", f"/v2/orgs/local/apps/{LIMBO}", json={"executorTimeoutSecs": 1}).status_code in (200, 204)
    kept, _ = start_executor(relay, LIMBO, key, tmp_path / "v1", prefix="limbo1", name="limbo-v1",
                             env={"APP_VERSION": "v1", "SYSTEM_DATABASE_URL": pg_url})
    rule_id = ""
    try:
        lost, ready = start_executor(relay, LIMBO, key, tmp_path / "v2", prefix="limbo2", name="limbo-v2",
                                     env={"APP_VERSION": "v2", "SYSTEM_DATABASE_URL": pg_url})
        lost.kill()
        wait_until(lambda: any(e["executorId"] == ready["executor_id"] and e["status"] == "DEAD"
                               for e in relay.api("GET", f"/v2/orgs/local/apps/{LIMBO}/executors").json()),
                   timeout=WAIT_S, message="the killed v2 executor never became DEAD")

        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(relay.base_url + "/orgs/local/apps")
        page.click("header >> text=Needs attention")
        expect(page).to_have_url(re.compile(ATTENTION + "$"))
        # The definition of stuck is on the page; a person sets it, and the URL holds it.
        expect(page.locator("[data-testid=attention-stuck]")).to_contain_text("waited longer than 300 s")
        page.fill("[data-testid=stuck-form] input[name=stuckAfterSecs]", "1")
        page.click("[data-testid=stuck-form] button")
        expect(page).to_have_url(re.compile(r"stuckAfterSecs=1$"))
        expect(page.locator("[data-served-from=many]")).to_be_visible()

        # An incident opened while the page is open appears on it: pushed, not reloaded.
        expect(page.locator("[data-testid=live-state]")).to_have_attribute("data-state", "live")
        page.evaluate("window.loadedOnce = true")
        incident = page.locator(f"[data-testid=attention-incidents] tr[data-app={LIMBO}]")
        expect(incident).to_have_count(0)
        created = relay.api("POST", f"/v2/orgs/local/apps/{LIMBO}/alerting-rules", json={
            "ruleType": "WorkflowFailure", "ruleMetadata": {"threshold": 1, "periodSecs": 3600}})
        assert created.status_code == 201, created.text
        rule_id = created.json()["id"]
        expect(incident).to_contain_text("WorkflowFailure")
        assert page.evaluate("window.loadedOnce") is True

        failed = page.locator("[data-testid=attention-failed]")
        expect(failed.locator(f"tr[data-app={LIMBO}] a[data-workflow=limbo1-faulty]")).to_be_visible()
        expect(failed.locator(f"tr[data-app={LIMBO}] a[data-workflow=limbo2-faulty]")).to_be_visible()
        expect(failed.locator(f"tr[data-app={APP}] a[data-workflow={PREFIX}-faulty]")).to_be_visible()

        stuck = page.locator(f"[data-testid=attention-stuck] tr[data-app={LIMBO}][data-queue=orders]")
        expect(stuck).to_be_visible()
        assert stuck.locator("a", has_text="orders").get_attribute("href") == \
            f"/orgs/local/apps/{LIMBO}/workflows?queueName=orders&status=ENQUEUED"

        dead = page.locator(f"[data-testid=attention-dead] tr[data-executor='{ready['executor_id']}']")
        expect(dead.locator("[data-testid=why]")).to_contain_text("no executor of version v2 connected")
        assert dead.locator("a").first.get_attribute("href") == f"/orgs/local/apps/{LIMBO}"

        stranded = page.locator("[data-testid=attention-stranded] tr[data-version=v2]")
        expect(stranded).to_contain_text(LIMBO)
        expect(page.locator("[data-testid=attention-stranded] tr[data-version=v1]")).to_have_count(0)

        assert incident.locator("a", has_text="WorkflowFailure").get_attribute("href") == \
            f"/orgs/local/apps/{LIMBO}/alerts?state=open"
        expect(page.locator("[data-testid=attention-data-planes] [data-testid=nothing]")).to_be_visible()
        expect(page.locator(f"[data-testid=attention-problems] li[data-app={QUIET}]")).to_contain_text(
            "not asked: no executor connected and no data plane configured")
        expect(page.locator(f"[data-testid=attention-problems] li[data-app={LIMBO}]")).to_have_count(0)
        assert relay.admin_token not in page.content() and pg_url not in page.content()
        shot(page, "300-needs-attention")
        page.emulate_media(color_scheme="dark")
        shot(page, "301-needs-attention-dark")
        page.emulate_media(color_scheme="light")
        assert_accessible(page, "needs attention, every section filled")

        # The failed count is a deep link: the workflows list with the filter in its URL.
        failed.locator(f"tr[data-app={LIMBO}] [data-testid=failed-list]").click()
        expect(page).to_have_url(re.compile(rf"/apps/{LIMBO}/workflows\?status=ERROR&startTime="))
        expect(page.locator("[data-testid=workflows] tbody tr")).to_have_count(2)
        page.go_back()
        pending = page.locator("[data-testid=attention-stranded] tr[data-version=v2] a[aria-label*='pending']")
        count = int(pending.inner_text())
        assert count >= 1  # its approval waits for ever (its queued one too, once dequeued before the kill)
        pending.click()
        expect(page).to_have_url(re.compile(rf"/apps/{LIMBO}/workflows\?appVersion=v2&status=PENDING$"))
        expect(page.locator("[data-testid=workflows] tbody tr")).to_have_count(count)
    finally:
        if rule_id:
            relay.api("DELETE", f"/v2/orgs/local/apps/{LIMBO}/alerting-rules/{rule_id}")
        kept.kill()
