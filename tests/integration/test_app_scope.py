"""Issue 34, points 2, 3 and 9: a key limited to one application stays in it on every org-level route, alerts go
only to applications the rule's author may write to, and a lowered grace period reaches executors already waiting.

A real `relay serve` with two applications, alpha and bravo, each with a real DBOS 3.2.0 executor
(executor_apps/alerting_app.py) holding its own key (a-exec, b-exec), and an alpha-only key holding every
permission. Every org-level route (every Flask rule whose path names no application, taken from the URL map like
test_auth_matrix.py does, so a new route fails here until it is classified) is called with that key: it sees and
changes alpha's things only, gets 403 on Relay's own infrastructure, and cannot revoke bravo's executor key (which
stays connected) nor mint a key wider than itself.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from relay.events.application import MAX_EXECUTOR_TIMEOUT_SECS
from relay.events.organization import PERMISSIONS
from tests.support.console_http import console_session
from tests.support.flask_routes import url_rules
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

ORG = "local"
ALPHA, BRAVO = "alpha", "bravo"
APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "alerting_app.py"
MINIMAL_APP = Path(__file__).resolve().parent / "executor_apps" / "minimal_app.py"


@dataclass
class World:
    relay: RelayProcess
    tmp: Path
    alpha_key: str  # limited to alpha, every permission
    executors: dict[str, ExecutorProcess]
    executor_ids: dict[str, str]

    def alerts(self, app: str) -> list[dict[str, Any]]:
        path = self.tmp / f"{app}-alerts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def executor_rows(self, app: str) -> list[tuple[str, str]]:
        rows = self.relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/executors").json()
        return [(r["executorId"], r["status"]) for r in rows]


def eventually(predicate: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))


def read_ready(executor: ExecutorProcess) -> str:
    executor.wait_for_log("READY ", timeout=90)
    line = next(x for x in executor.log_text().splitlines() if x.startswith("READY "))
    return json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("app-scope")
    relay = RelayProcess(tmp / "relay-data", env={
        "RELAY_ALERT_INTERVAL_S": "1", "RELAY_PING_INTERVAL_S": "0.5", "RELAY_PONG_TIMEOUT_S": "2",
        "RELAY_LOGIN_FAILURES_PER_MIN": "1000",
    })
    executors: dict[str, ExecutorProcess] = {}
    try:
        relay.start()
        keys = {}
        for app, key_name in ((ALPHA, "a-exec"), (BRAVO, "b-exec")):
            assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
            made = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{key_name}", json={"appNames": [app]})
            assert made.status_code == 201, made.text
            keys[app] = made.json()["token"]
        alpha_key = relay.api("POST", f"/v2/orgs/{ORG}/tokens/alpha-owner",
                              json={"appNames": [ALPHA], "permissions": list(PERMISSIONS)}).json()["token"]
        for app in (ALPHA, BRAVO):
            executors[app] = ExecutorProcess(APP_SCRIPT, name=app, cwd=tmp / app, env={
                "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": keys[app], "APP_NAME": app,
                "ALERTS_FILE": str(tmp / f"{app}-alerts.jsonl"), "COMMANDS_DIR": str(tmp / f"{app}-commands"),
            }).start()
        ids = {app: read_ready(process) for app, process in executors.items()}
        world = World(relay, tmp, alpha_key, executors, ids)
        for app in (ALPHA, BRAVO):
            eventually(lambda a=app: world.executor_rows(a) == [(ids[a], "HEALTHY")], f"{app} HEALTHY")
        yield world
    finally:
        for process in executors.values():
            process.stop(timeout=3)
        relay.stop()


# -- point 2: every org-level route ------------------------------------------------------------------------------


def org_level_rules() -> list[tuple[str, str, str]]:
    """(method, path, endpoint) of every route of the Flask URL map whose path names no application."""
    rules = url_rules()
    return sorted((method, r.rule, r.endpoint) for r in rules if "<app>" not in r.rule
                  for method in r.methods or () if method not in ("HEAD", "OPTIONS"))


PUBLIC = {"relay.healthz", "relay.readyz", "openapi.docs", "openapi.openapi_json", "openapi.openapi_yaml",
          "openapi.openapi_30_json", "static", "console.static"}


PEOPLE_PAGES = {
    "console.members": f"/orgs/{ORG}/members", "console.grant_role": f"/orgs/{ORG}/members/someone/role",
    "console.remove_member": f"/orgs/{ORG}/members/someone/remove",
    "console.generate_secret": f"/orgs/{ORG}/join-secrets", "console.create_role": f"/orgs/{ORG}/roles",
    "console.delete_role": f"/orgs/{ORG}/roles/r/delete",
    # The organization's own settings (issue 33): OAuth mode only as well.
    "console.change_retention": f"/orgs/{ORG}/retention", "console.claim_domain": f"/orgs/{ORG}/domain-claims",
    "console.release_domain": f"/orgs/{ORG}/domain-claims/example.com/release",
}


class Calls:
    """The alpha key's calls: the API with its bearer, the console with a session it logged in with."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.relay = world.relay
        self.console, self.csrf = console_session(self.relay, world.alpha_key)
        self.count = 0

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        self.count += 1
        return self.relay.api(method, path, token=self.world.alpha_key, **kwargs)

    def page(self, method: str, path: str, data: dict[str, Any] | None = None) -> requests.Response:
        self.count += 1
        if method == "GET":
            return self.console.get(f"{self.relay.base_url}{path}", timeout=10, allow_redirects=False)
        return self.console.post(f"{self.relay.base_url}{path}", data={"csrf_token": self.csrf, **(data or {})},
                                 timeout=10, allow_redirects=True)


def active_keys(relay: RelayProcess) -> set[str]:
    return {t["tokenName"] for t in relay.api("GET", f"/v2/orgs/{ORG}/tokens").json()}


def check_route(c: Calls, method: str, endpoint: str) -> None:
    relay, w = c.relay, c.world
    if endpoint in PUBLIC:
        path = {"static": "/static/relay.css", "console.static": "/console/static/console.css"}.get(endpoint)
        rule_path = path or {"relay.healthz": "/healthz", "relay.readyz": "/readyz", "openapi.docs": "/docs",
                             "openapi.openapi_json": "/openapi.json", "openapi.openapi_yaml": "/openapi.yaml",
                             "openapi.openapi_30_json": "/openapi-3.0.json"}[endpoint]
        answer = c.api("GET", rule_path)
        assert answer.status_code in (200, 404), f"{endpoint}: {answer.status_code}"  # a static file may be absent
        assert BRAVO not in answer.text, endpoint
    elif endpoint == "v2_apps.get_org":
        assert c.api("GET", f"/v2/orgs/{ORG}").json()["name"] == ORG
    elif endpoint == "v2_apps.list_apps":
        assert [a["name"] for a in c.api("GET", f"/v2/orgs/{ORG}/apps").json()] == [ALPHA]
    elif endpoint == "v2_apps.list_permissions":
        assert set(c.api("GET", f"/v2/orgs/{ORG}/permissions").json()) == set(PERMISSIONS)
    elif endpoint == "v2_apps.list_tokens":
        listed = {t["tokenName"] for t in c.api("GET", f"/v2/orgs/{ORG}/tokens").json()}
        assert listed == {"a-exec", "alpha-owner"}, listed
        assert {"b-exec", "org-wide"} <= active_keys(relay)
    elif endpoint == "v2_apps.create_token" and method == "POST":
        for body in ({"appNames": [BRAVO]}, {"appNames": []}, {}, {"appNames": [ALPHA, BRAVO]}):
            answer = c.api("POST", f"/v2/orgs/{ORG}/tokens/wider", json=body)
            assert answer.status_code == 403, (body, answer.text)
        narrow = relay.api("POST", f"/v2/orgs/{ORG}/tokens/alpha-tokens",
                           json={"appNames": [ALPHA], "permissions": ["token.read", "token.write"]}).json()["token"]
        beyond = relay.api("POST", f"/v2/orgs/{ORG}/tokens/wider", token=narrow,
                           json={"appNames": [ALPHA], "permissions": ["application.write"]})
        assert beyond.status_code == 403, beyond.text
        assert "wider" not in active_keys(relay)
        made = c.api("POST", f"/v2/orgs/{ORG}/tokens/alpha-made", json={"appNames": [ALPHA]})
        assert made.status_code == 201, made.text
    elif endpoint == "v2_apps.delete_token":
        # The attack of issue 34: bravo's executor key revoked by an alpha key (bravo's executor disconnected).
        answer = c.api("DELETE", f"/v2/orgs/{ORG}/tokens/b-exec")
        assert answer.status_code == 404, answer.text
        assert c.api("DELETE", f"/v2/orgs/{ORG}/tokens/org-wide").status_code == 404
        assert {"b-exec", "org-wide"} <= active_keys(relay)
        made = c.api("POST", f"/v2/orgs/{ORG}/tokens/alpha-revoked", json={"appNames": [ALPHA]})
        assert made.status_code == 201, made.text
        assert c.api("DELETE", f"/v2/orgs/{ORG}/tokens/alpha-revoked").status_code == 204  # its own app's key
        assert "alpha-revoked" not in active_keys(relay)
    elif endpoint == "v2_audit.list_audit_logs":
        entries = c.api("GET", f"/v2/orgs/{ORG}/audit-logs", params={"limit": 1000}).json()
        assert entries and BRAVO not in json.dumps(entries) and w.executor_ids[BRAVO] not in json.dumps(entries)
        everyone = relay.api("GET", f"/v2/orgs/{ORG}/audit-logs", params={"limit": 1000}).json()
        assert BRAVO in json.dumps(everyone)  # there was something to hide
    elif endpoint == "relay.events":
        events = c.api("GET", "/relay/v1/events", params={"limit": 10_000}).json()["events"]
        assert events and all(e["app"] == ALPHA for e in events), {e["app"] for e in events}
        assert c.api("GET", "/relay/v1/events", params={"app": BRAVO}).status_code == 403
        everyone = relay.api("GET", "/relay/v1/events", params={"limit": 10_000}).json()["events"]
        assert any(e["app"] == BRAVO for e in everyone)
    elif endpoint == "cluster.instances":
        assert c.api("GET", "/relay/v1/instances").status_code == 403
    elif endpoint in ("relay_config.plan_config", "relay_config.apply_config"):
        action = endpoint.split(".")[1].removesuffix("_config")
        assert c.api("POST", f"/relay/v1/orgs/{ORG}/config/{action}", json={}).status_code == 403
    elif endpoint == "cluster.forward":
        assert c.api("POST", "/internal/v1/forward/some-app-id", json={}).status_code == 401  # signed, not bearer
    elif endpoint in ("metrics.scrape", "metrics.scrape_v1"):
        text = c.api("GET", "/metrics" if endpoint == "metrics.scrape" else "/v1/metrics").text
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        assert samples and all(f'app="{ALPHA}"' in line for line in samples), [
            s for s in samples if f'app="{ALPHA}"' not in s][:5]
    elif endpoint == "console.home":
        assert c.page("GET", "/").headers["Location"].endswith(f"/orgs/{ORG}/apps")
    elif endpoint in ("console.login", "console.logout"):
        assert c.page("GET", "/login").status_code in (200, 302)  # logged in above; logout is the last call
    elif endpoint == "console.apps" and method == "GET":
        page = c.page("GET", f"/orgs/{ORG}/apps")
        assert page.status_code == 200 and ALPHA in page.text and BRAVO not in page.text
    elif endpoint == "console.register_app":
        c.page("POST", f"/orgs/{ORG}/apps", {"name": "charlie"})
        assert relay.api("GET", f"/v2/orgs/{ORG}/apps/charlie").status_code == 404
    elif endpoint == "console.audit":
        page = c.page("GET", f"/orgs/{ORG}/audit")
        assert page.status_code == 200 and ALPHA in page.text and BRAVO not in page.text
        assert w.executor_ids[BRAVO] not in page.text
    elif endpoint == "console.cluster":
        assert c.page("GET", f"/orgs/{ORG}/cluster").status_code == 403
    elif endpoint == "console.keys" and method == "GET":
        page = c.page("GET", f"/orgs/{ORG}/keys")
        assert page.status_code == 200 and "a-exec" in page.text
        assert "b-exec" not in page.text and "org-wide" not in page.text
    elif endpoint == "console.create_key":
        c.page("POST", f"/orgs/{ORG}/keys", {"name": "console-wider", "apps": [BRAVO]})
        c.page("POST", f"/orgs/{ORG}/keys", {"name": "console-all"})
        assert not {"console-wider", "console-all"} & active_keys(relay)
    elif endpoint == "console.revoke_key":
        c.page("POST", f"/orgs/{ORG}/keys/b-exec/revoke", {"confirmed": "yes"})
        c.page("POST", f"/orgs/{ORG}/keys/org-wide/revoke", {"confirmed": "yes"})
        assert {"b-exec", "org-wide"} <= active_keys(relay)
    elif endpoint in ("console.sso_login", "console.oauth_callback"):  # no SSO without RELAY_OIDC_CLIENT_ID
        assert c.page("GET", "/oauth/login" if endpoint == "console.sso_login" else "/oauth/callback?code=x&state=y"
                      ).status_code == 404
    elif endpoint in ("console.register", "console.join"):  # a key's session is registering nobody
        path = "/register" if endpoint == "console.register" else "/join"
        answer = c.page(method, path, {"username": "alpha_person", "secret": "x"})
        if method == "GET":
            assert answer.status_code == 302 and answer.headers["Location"].startswith("/login"), answer.status_code
        else:
            assert "/login" in answer.url, answer.url
    elif endpoint in ("console.attention", "console.attention_own"):  # Needs attention (issue 33): its apps only
        page = c.page("GET", f"/orgs/{ORG}/attention" + ("/own" if endpoint.endswith("own") else ""))
        assert page.status_code == 200 and ALPHA in page.text and BRAVO not in page.text, page.status_code
    elif endpoint == "console.live":  # the live pages' stream (issue 33): as the pages it feeds
        def opened(query: str) -> int:
            with c.console.get(f"{c.relay.base_url}/orgs/{ORG}/live?{query}", stream=True, timeout=10,
                               allow_redirects=False) as answer:
                return answer.status_code
        assert opened(f"areas=executors&app={ALPHA}") == 200
        assert opened(f"areas=executors&app={BRAVO}") == 403  # as its console pages answer
        assert opened("areas=instances") == 403
        assert opened("areas=audit,attention") == 200
    elif endpoint in PEOPLE_PAGES:  # Members & roles exist in OAuth mode only (issue 31)
        path = PEOPLE_PAGES[endpoint]
        assert c.page(method, path, {"role": "Organization Admin", "name": "r", "confirmed": "yes"}).status_code == 404
    else:
        raise AssertionError(f"{method} {endpoint}: an org-level route this test does not know; say what an "
                             "app-scoped key gets there")


def test_an_app_scoped_key_sees_and_changes_only_its_app_on_every_org_level_route(world: World) -> None:
    relay = world.relay
    assert relay.api("POST", f"/v2/orgs/{ORG}/tokens/org-wide", json={}).status_code == 201
    # bravo has history of its own (audit entries, events) for the key to not see.
    assert relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{BRAVO}", json={"gcRowsThreshold": 5}).status_code == 204
    assert relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{ALPHA}", json={"gcRowsThreshold": 5}).status_code == 204
    calls = Calls(world)
    rules = org_level_rules()
    assert len({endpoint for _m, _p, endpoint in rules}) >= 30, rules  # the test cannot pass by checking nothing
    started = time.monotonic()
    for method, _path, endpoint in rules:
        check_route(calls, method, endpoint)
    # bravo's executor kept its key and its connection throughout.
    assert world.executor_rows(BRAVO) == [(world.executor_ids[BRAVO], "HEALTHY")]
    bravo_events = relay.api("GET", "/relay/v1/events", params={"app": BRAVO, "type": "Executor.Disconnected"}).json()
    assert bravo_events["events"] == []
    assert world.executors[BRAVO].running
    calls.page("POST", "/logout")
    record("isolation-2-org-level-routes", area="Isolation: an app-scoped key on org-level routes",
           tried={"org-level routes (Flask URL map)": len(rules), "calls with an alpha-only key": calls.count,
                  "revocations of bravo's executor key (API, console)": 2},
           outcome=f"alpha's keys, events, audit entries and metrics only; 403 on instances and configuration; "
                   f"bravo's key not revoked, its executor HEALTHY throughout ({time.monotonic() - started:.1f} s)")


# -- point 3: alerts to another application ----------------------------------------------------------------------


def test_an_alpha_key_cannot_send_alerts_to_bravo(world: World) -> None:
    relay, rules = world.relay, f"/v2/orgs/{ORG}/apps/{ALPHA}/alerting-rules"
    rule = {"ruleType": "WorkflowFailure", "minIntervalSecs": 0,
            "ruleMetadata": {"workflowName": "failing", "threshold": 1, "periodSecs": 600}}
    refused = relay.api("POST", rules, token=world.alpha_key, json={**rule, "receivingAppName": BRAVO})
    assert refused.status_code == 403, refused.text
    session = Calls(world)
    session.page("POST", f"/orgs/{ORG}/apps/{ALPHA}/alerting-rules",
                 {"ruleType": "WorkflowFailure", "receivingAppName": BRAVO, "minIntervalSecs": "0",
                  "workflowName": "failing", "threshold": "1", "periodSecs": "600"})
    assert relay.api("GET", rules).json() == []
    # The same rule to alpha itself is allowed and fires: the executors are listening, bravo's hears nothing.
    own = relay.api("POST", rules, token=world.alpha_key, json=rule)
    assert own.status_code == 201, own.text
    commands = world.tmp / f"{ALPHA}-commands"
    commands.mkdir(exist_ok=True)
    (commands / "001.json").write_text(json.dumps({"action": "fail", "count": 1}))
    eventually(lambda: [a for a in world.alerts(ALPHA) if a["name"] == "WorkflowFailure"], "alpha's own alert")
    assert world.alerts(BRAVO) == []
    incidents = relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{ALPHA}/incidents").json()["incidents"]
    assert incidents and {i["receivingApp"] for i in incidents} == {ALPHA}
    assert relay.api("DELETE", f"{rules}/{own.json()['id']}").status_code == 204
    record("isolation-3-cross-app-alerts", area="Isolation: alerting rules sending to another application",
           tried={"rules to bravo by an alpha key (API, console)": 2, "alpha incidents opened": len(incidents)},
           outcome="403 (API) and refused (console); bravo's executor received no alert frame")


# -- point 9: executorTimeoutSecs bounded, and a change reaches executors already waiting -------------------------


@pytest.mark.parametrize("how", ["patch", "config-apply"])
def test_the_grace_period_is_bounded_and_a_lowered_one_reaches_a_waiting_executor(world: World, how: str) -> None:
    relay, app = world.relay, {"patch": "gamma", "config-apply": "delta"}[how]
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
    path = f"/v2/orgs/{ORG}/apps/{app}"
    for too_long in (2**63 - 1, MAX_EXECUTOR_TIMEOUT_SECS + 1):
        answer = relay.api("PATCH", path, json={"executorTimeoutSecs": too_long})
        assert answer.status_code == 422 and "at most" in answer.text, answer.text
        document = {"apiVersion": "relay/v1", "kind": "Config", "org": ORG,
                    "apps": [{"name": app, "settings": {"executorTimeoutSecs": too_long}}]}
        answer = relay.api("POST", f"/relay/v1/orgs/{ORG}/config/apply", json={"config": document})
        assert answer.status_code == 422 and "at most" in answer.text, answer.text
    assert relay.api("PATCH", path, json={"executorTimeoutSecs": MAX_EXECUTOR_TIMEOUT_SECS}).status_code == 204
    key = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{app}-exec", json={"appNames": [app]}).json()["token"]
    executor = ExecutorProcess(MINIMAL_APP, name=app, cwd=world.tmp / app, env={
        "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key, "APP_NAME": app}).start()
    try:
        executor_id = read_ready(executor)
        eventually(lambda: world.executor_rows(app) == [(executor_id, "HEALTHY")], f"{app} HEALTHY")
        executor.kill()
        eventually(lambda: world.executor_rows(app) == [(executor_id, "DISCONNECTED")], f"{app} DISCONNECTED")
    finally:
        executor.stop(timeout=3)
    lowered_at = time.monotonic()
    new_timeout = 2
    if how == "patch":
        assert relay.api("PATCH", path, json={"executorTimeoutSecs": new_timeout}).status_code == 204
    else:
        document = {"apiVersion": "relay/v1", "kind": "Config", "org": ORG,
                    "apps": [{"name": app, "settings": {"executorTimeoutSecs": new_timeout}}]}
        applied = relay.api("POST", f"/relay/v1/orgs/{ORG}/config/apply", json={"config": document})
        assert applied.status_code == 200, applied.text
    eventually(lambda: world.executor_rows(app) == [(executor_id, "DEAD")], f"{app} declared DEAD",
               timeout=new_timeout + 15)
    took = time.monotonic() - lowered_at
    assert relay.api("GET", path).json()["executorTimeoutSecs"] == new_timeout
    record(f"limits-9-executor-timeout-{how}", area=f"Limits: executorTimeoutSecs ({how})",
           tried={"values refused (2^63-1, a day + 1 s), PATCH and config apply": 4,
                  "executor killed under a day's grace, then lowered to": f"{new_timeout} s"},
           outcome=f"422 above {MAX_EXECUTOR_TIMEOUT_SECS} s; the waiting executor declared DEAD {took:.1f} s "
                   "after the change")


def test_the_console_offers_an_app_key_neither_the_data_plane_nor_a_grace_beyond_a_day(world: World) -> None:
    relay, session = world.relay, Calls(world)
    page = session.page("GET", f"/orgs/{ORG}/apps/{ALPHA}/settings")
    assert page.status_code == 200
    plane_form = page.text[page.text.index('id="data-plane"'):]
    assert re.search(r'<input id="systemDatabaseUrlFrom"[^>]*disabled', plane_form), plane_form[:1500]
    assert "Save data plane" not in plane_form and "not limited to some applications" in plane_form
    assert f'max="{MAX_EXECUTOR_TIMEOUT_SECS}"' in page.text
    before = relay.api("GET", f"/v2/orgs/{ORG}/apps/{ALPHA}").json()["executorTimeoutSecs"]
    answer = session.page("POST", f"/orgs/{ORG}/apps/{ALPHA}/settings",
                          {"executorTimeoutSecs": str(MAX_EXECUTOR_TIMEOUT_SECS + 1), "confirmed": "yes"})
    assert "at most 86400 s" in answer.text, answer.text[:2000]
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/{ALPHA}").json()["executorTimeoutSecs"] == before
    admin, _csrf = console_session(relay)  # the admin's console offers the data plane
    assert "Save data plane" in admin.get(f"{relay.base_url}/orgs/{ORG}/apps/{ALPHA}/settings", timeout=10).text
