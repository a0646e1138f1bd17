"""The console's alerts page over a real (not served) Relay app and store: the app's alerting rules, the
alerts they fired (newest first, with their delivery outcome) and its managed retention runs, from the alerts
view; and nothing secret on it (webhook URL and secret, Slack hook URL, PagerDuty routing key, the admin token,
API keys)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from relay.actors.alerting import fire_alert
from relay.actors.application import register_app
from relay.actors.configuration.settings import Settings
from relay.actors.runtime import Runtime
from relay.events.alerting import AlertingRule
from relay.events.organization import Organization
from relay.events.refs import alert_ref, org_ref, retention_ref, rule_ref
from relay.events.retention import RetentionRun
from relay.projections.identity import hash_key
from relay.web.wsgi import create_app
from tests.unit.store_cases import at

ADMIN = "console-alerts-admin-token"
HOOK_URL = "https://hookuser:hunter2-pass@hooks.example.test/relay"
HOOK_SECRET = "whsec-do-not-show-0123456789"
OTHER_KEY = "dbos_other_app_key_0123456789abcdef0123"
SLACK_URL = "https://hooks.slack.example/services/T0/B0/slack-token-do-not-show"
ROUTING_KEY = "pd0123456789abcdef0123456789abcd"


def login(client: FlaskClient, token: str) -> None:
    form = client.get("/login")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.get_data(as_text=True))
    assert csrf, form.get_data(as_text=True)
    answer = client.post("/login", data={"csrf_token": csrf.group(1), "token": token})
    assert answer.status_code in (302, 303), answer.get_data(as_text=True)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Runtime, FlaskClient]]:
    rt = Runtime(Settings(data_dir=tmp_path, admin_token=ADMIN, alert_webhook_url=HOOK_URL,
                          alert_webhook_secret=HOOK_SECRET, alert_slack_webhook_url=SLACK_URL,
                          alert_pagerduty_routing_key=ROUTING_KEY))
    try:
        log = rt.log
        log.ensure(org_ref("acme"), lambda: Organization.create("acme", at(0)))
        for name in ("shop", "pager", "empty"):
            register_app(log, "acme", name, at(1))
        log.change(org_ref("acme"),
                   lambda organization: organization.issue_key(
                       "other", hash_key(OTHER_KEY), ["empty"], ["application.read"], at(2)),
                   create=lambda: Organization.create("acme", at(2)))
        log.create(rule_ref("acme", "shop", "rule-fail"),
                   lambda: AlertingRule.create(
                       "acme", "shop", "rule-fail", "WorkflowFailure", {"workflowName": "checkout", "threshold": 2},
                       None, 600, at(3)))
        log.create(rule_ref("acme", "shop", "rule-dead"),
                   lambda: AlertingRule.create(
                       "acme", "shop", "rule-dead", "UnresponsiveApplication", {}, "pager", None, at(4)))
        log.create(rule_ref("acme", "shop", "rule-gone"),
                   lambda: AlertingRule.create("acme", "shop", "rule-gone", "SlowQueue", {}, None, None, at(4)))
        log.change(rule_ref("acme", "shop", "rule-gone"), lambda rule_: rule_.delete(at(5)))
        fire_alert(log, "acme", "shop", "rule-fail", 1, "3 workflows named 'checkout' failed",
                   {"workflow_name": "checkout", "failed_workflow_count": "3"}, "relay-a", at(10))
        log.change(alert_ref("acme", "shop", "rule-fail", 1), lambda alert: alert.deliver(["exec-1"], [], {
            "outcome": "delivered", "attempts": 2, "status": 200, "error": None}, at(11), {
            "slack": {"outcome": "delivered", "attempts": 1, "status": 200, "error": None},
            "pagerduty": {"outcome": "delivered", "attempts": 2, "status": 202, "error": None}}))
        fire_alert(log, "acme", "shop", "rule-dead", 2, "application 'shop' is unresponsive", {}, "relay-a", at(20))
        log.change(alert_ref("acme", "shop", "rule-dead", 1), lambda alert: alert.deliver([], [
            {"executorId": "*", "reason": "no executor of 'pager' is connected"}], {
            "outcome": "failed", "attempts": 3, "status": 503, "error": "HTTP 503"}, at(21)))
        fire_alert(log, "acme", "shop", "rule-fail", 3, "2 workflows named 'checkout' failed", {}, "relay-a",
                   at(2000))  # not delivered yet
        log.create(retention_ref("acme", "shop", 7),
                   lambda: RetentionRun.start(
                       "acme", "shop", 7, "exec-1", {"gc_rows_threshold": 100, "gc_cutoff_epoch_ms": None},
                       {"gcRowsThreshold": 100}, "relay-a", at(30)))
        log.change(retention_ref("acme", "shop", 7),
                   lambda run: run.finish("failed", "executor exec-1 did not answer", at(31)))
        app = create_app(rt)
        rt.views.catch_up()
        client = app.test_client()
        login(client, ADMIN)
        yield rt, client
    finally:
        rt.stop()


def test_the_page_lists_rules_alerts_and_retention_runs(served: tuple[Runtime, FlaskClient]) -> None:
    _, client = served
    response = client.get("/orgs/acme/apps/shop/alerts")
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "not available yet" not in html
    assert 'data-testid="not-available"' not in html

    rules = html.split('data-testid="alerting-rules"', 1)[1].split("</table>", 1)[0]
    assert 'data-rule="rule-fail"' in rules and 'data-rule="rule-dead"' in rules
    assert "rule-gone" not in rules  # deleted rules are not listed
    assert "WorkflowFailure" in rules and "UnresponsiveApplication" in rules
    assert "checkout" in rules and "pager" in rules and "600" in rules

    fired = html.split('data-testid="alerts"', 1)[1].split("</table>", 1)[0]
    order = [m.group(1) + "/" + m.group(2) for m in re.finditer(r'data-rule="([^"]+)" data-sequence="(\d+)"', fired)]
    assert order == ["rule-fail/2", "rule-dead/1", "rule-fail/1"]  # newest first
    rows = fired.split("<tr data-rule=")[1:]
    assert "d-pending" in rows[0]
    assert "d-failed" in rows[1] and "no executor of &#39;pager&#39; is connected" in rows[1]
    assert "webhook: failed after 3 attempt(s), HTTP 503" in rows[1]
    assert "d-delivered" in rows[2] and "exec-1" in rows[2] and "webhook: delivered after 2 attempt(s)" in rows[2]
    assert "slack: delivered after 1 attempt(s), HTTP 200" in rows[2]
    assert "pagerduty: delivered after 2 attempt(s), HTTP 202" in rows[2]

    runs = html.split('data-testid="retention-runs"', 1)[1].split("</table>", 1)[0]
    assert "exec-1" in runs and "d-failed" in runs and "did not answer" in runs and "gc_rows_threshold" in runs


def test_no_secret_on_the_page(served: tuple[Runtime, FlaskClient]) -> None:
    _, client = served
    html = client.get("/orgs/acme/apps/shop/alerts").get_data(as_text=True)
    assert "webhook configured on this instance" in html and "to Slack and PagerDuty (configured" in html
    for secret in (HOOK_URL, "hunter2", "hookuser", "hooks.example.test", HOOK_SECRET, ADMIN, OTHER_KEY,
                   hash_key(OTHER_KEY), hash_key(ADMIN), SLACK_URL, "slack-token", ROUTING_KEY):
        assert secret not in html


def test_an_app_without_alerting_and_a_key_without_access(served: tuple[Runtime, FlaskClient]) -> None:
    _, client = served
    html = client.get("/orgs/acme/apps/empty/alerts").get_data(as_text=True)
    assert 'data-testid="no-rules"' in html and 'data-testid="no-alerts"' in html
    assert 'data-testid="no-retention-runs"' in html
    other = client.application.test_client()
    login(other, OTHER_KEY)
    assert other.get("/orgs/acme/apps/shop/alerts").status_code == 403
    assert other.get("/orgs/acme/apps/empty/alerts").status_code == 200


def _csrf(client: FlaskClient, path: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).get_data(as_text=True))
    assert found
    return found.group(1)


def test_rules_made_and_deleted_from_the_page_go_through_the_api_checks(served: tuple[Runtime, FlaskClient]) -> None:
    rt, client = served
    page = "/orgs/acme/apps/empty/alerts"
    assert 'data-testid="new-rule"' in client.get(page).get_data(as_text=True)
    token = _csrf(client, page)
    bad = client.post("/orgs/acme/apps/empty/alerting-rules", follow_redirects=True, data={
        "csrf_token": token, "ruleType": "SlowQueue", "thresholdSecs": "0"})
    assert "Rule not created" in bad.get_data(as_text=True)
    made = client.post("/orgs/acme/apps/empty/alerting-rules", follow_redirects=True, data={
        "csrf_token": token, "ruleType": "SlowQueue", "queueName": "orders", "thresholdSecs": "90",
        "workflowName": "ignored: not a SlowQueue setting"})
    assert "SlowQueue rule" in made.get_data(as_text=True)
    rt.views.catch_up()
    [rule] = rt.views.alerting.rules("acme", "empty")
    assert rule["metadata"] == {"queueName": "orders", "thresholdSecs": 90}
    delete = f"/orgs/acme/apps/empty/alerting-rules/{rule['rule_id']}/delete"
    asked = client.post(delete, data={"csrf_token": token}).get_data(as_text=True)
    assert "Delete rule" in asked and "Keep the rule" in asked and rt.views.alerting.rules("acme", "empty")
    client.post(delete, data={"csrf_token": token, "confirmed": "yes"})
    rt.views.catch_up()
    assert rt.views.alerting.rules("acme", "empty") == []

    reader = client.application.test_client()
    login(reader, OTHER_KEY)  # application.read only
    assert 'data-testid="new-rule"' not in reader.get(page).get_data(as_text=True)
    refused = reader.post("/orgs/acme/apps/empty/alerting-rules", data={
        "csrf_token": _csrf(reader, page), "ruleType": "SlowQueue"})
    assert refused.status_code == 403
