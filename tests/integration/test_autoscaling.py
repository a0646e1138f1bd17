"""Issue 17, autoscaling, end to end: a real `relay serve` and a real DBOS 3.2.0 executor
(tests/integration/executor_apps/autoscale_app.py) with a backlog that stays put: 5 workflows of v2 (the latest) and
3 of v1 on ``scale-q`` (worker_concurrency 2), all waiting for a message that never comes.

The policy's API (GET/PUT/DELETE, the 404s, the 422s naming the field, 503 without an executor, 403 without
application.write), the recommendation of GET .../autoscale (ceil(backlog / worker_concurrency), old versions by the
rollout), the relay_autoscale_* gauges of /metrics (refreshed by the periodic job, not by the scrape), the console's
application page, the audit log, `relay autoscale` and `relay replay --verify`; last, the executor gone (503).
Every body is checked against the reference's schema.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.console_http import console_session
from tests.support.openapi_ref import check, reference, response_schema
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = [pytest.mark.integration]

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "autoscale_app.py"
ORG, APP, IDLE_APP = "local", "scaled", "idle-app"
BASE = f"/v2/orgs/{ORG}/apps/{APP}"
POLICY = f"{BASE}/autoscaling-policy"
AUTOSCALE = f"{BASE}/autoscale"
DEADLINE_S = 30.0


@dataclass
class World:
    relay: RelayProcess
    reader: str  # a key with application.read only
    executor: ExecutorProcess


def v2(relay: RelayProcess, method: str, path: str, expect: int, template: str | None = None, **kwargs: Any) -> Any:
    """Call the API, assert the status, check the body against the reference (its ``template`` path)."""
    response = relay.api(method, path, **kwargs)
    assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text[:800]}"
    if expect == 204:
        assert not response.content
        return None
    body = response.json()
    if expect >= 400:
        assert response.headers["Content-Type"].startswith("application/problem+json")
        assert not check(reference(), {"$ref": "#/components/schemas/ErrorModel"}, body)
        return body
    if template is not None:
        errors = check(reference(), response_schema(reference(), template, method, str(expect)), body)
        assert not errors, errors[:5]
    return body


def put_policy(relay: RelayProcess, body: Any, expect: int, **kwargs: Any) -> Any:
    return v2(relay, "PUT", POLICY, expect, "/v2/orgs/{orgName}/apps/{appName}/autoscaling-policy", json=body, **kwargs)


def autoscale(relay: RelayProcess) -> list[dict[str, Any]]:
    return v2(relay, "GET", AUTOSCALE, 200, "/v2/orgs/{orgName}/apps/{appName}/autoscale")


def gauges(relay: RelayProcess) -> dict[tuple[str, str, str], float]:
    """The relay_autoscale_* samples of the app: (name, version, queue) → value."""
    response = relay.api("GET", "/metrics")
    assert response.status_code == 200, response.text
    return {
        (s.name, s.labels["version"], s.labels["queue"]): s.value
        for family in text_string_to_metric_families(response.text) for s in family.samples
        if s.name.startswith("relay_autoscale_") and s.labels.get("app") == APP
    }


def eventually(predicate: Any, what: str) -> Any:
    return wait_until(predicate, DEADLINE_S, interval=0.1, message=what, ignore=(requests.RequestException,))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    relay = RelayProcess(tmp_path_factory.mktemp("relay-data"), env={"RELAY_AUTOSCALE_INTERVAL_S": "0.5"})
    executor: ExecutorProcess | None = None
    try:
        relay.start()
        for app in (APP, IDLE_APP):
            assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
        key = relay.api("POST", f"/v2/orgs/{ORG}/tokens/scaled-key", json={"appNames": [APP]}).json()["token"]
        reader = relay.api("POST", f"/v2/orgs/{ORG}/tokens/reader", json={
            "appNames": [APP], "permissions": ["application.read"]}).json()["token"]
        relay.remember_secret(key, "executor key")
        relay.remember_secret(reader, "reader key")
        executor = ExecutorProcess(APP_SCRIPT, name="autoscale-app", cwd=tmp_path_factory.mktemp("executor"),
                                   env={"APP_NAME": APP, "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key})
        executor.start()
        executor.wait_for_log("READY ", timeout=60)
        eventually(lambda: [e["status"] for e in relay.api("GET", f"{BASE}/executors").json()] == ["HEALTHY"],
                   "the executor HEALTHY")
        yield World(relay, reader, executor)
    finally:
        if executor is not None:
            executor.stop(timeout=3)
        relay.stop()


def test_without_a_policy_there_is_nothing_to_show_and_deleting_succeeds(world: World) -> None:
    relay = world.relay
    assert "no autoscaling policy" in v2(relay, "GET", POLICY, 404)["detail"]
    assert "no autoscaling policy" in v2(relay, "GET", AUTOSCALE, 404)["detail"]
    v2(relay, "DELETE", POLICY, 204)
    v2(relay, "GET", f"/v2/orgs/{ORG}/apps/no-such-app/autoscaling-policy", 404)


@pytest.mark.parametrize(("body", "location", "words"), [
    ({"queue": "scale-q", "surprise": 1}, "body.surprise", "unknown field"),
    ({"rollout": {}}, "body.queue", "is required"),
    ({"queue": 7}, "body.queue", "queue name"),
    ({"queue": "scale-q", "rollout": {"maxOldApplicationVersions": -1}}, "body.rollout.maxOldApplicationVersions",
     ">= 0"),
    ({"queue": "scale-q", "rollout": {"maxExecutorsForOldApplicationVersions": -3}},
     "body.rollout.maxExecutorsForOldApplicationVersions", ">= 0"),
    ({"queue": "scale-q", "rollout": {"maxOld": 1}}, "body.rollout.maxOld", "unknown field"),
    ({"queue": "no-such-q"}, "body.queue", "does not exist"),
    ({"queue": "parted-q"}, "body.queue", "partitioned"),
    ({"queue": "plain-q"}, "body.queue", "worker_concurrency"),
])
def test_a_bad_policy_is_a_422_naming_the_field(world: World, body: Any, location: str, words: str) -> None:
    problem = put_policy(world.relay, body, 422)
    assert [e["location"] for e in problem["errors"]] == [location]
    assert words in problem["detail"]
    v2(world.relay, "GET", POLICY, 404)  # nothing stored


def test_writing_needs_application_write_and_an_executor_to_check_the_queue(world: World) -> None:
    relay = world.relay
    put_policy(relay, {"queue": "scale-q"}, 403, token=world.reader)
    v2(relay, "DELETE", POLICY, 403, token=world.reader)
    problem = v2(relay, "PUT", f"/v2/orgs/{ORG}/apps/{IDLE_APP}/autoscaling-policy", 503, json={"queue": "scale-q"})
    assert "no executor" in problem["detail"]


def test_the_recommendation_follows_the_backlog_per_version(world: World) -> None:
    relay = world.relay
    stored = put_policy(relay, {"queue": "scale-q"}, 200)
    assert stored == {"policy": {"queue": "scale-q"}}
    assert v2(relay, "GET", POLICY, 200, "/v2/orgs/{orgName}/apps/{appName}/autoscaling-policy", token=world.reader) \
        == stored

    # The latest version only (maxOldApplicationVersions defaults to 0): 5 waiting on worker_concurrency 2 → 3.
    # The periodic job publishes it to /metrics before anyone asks GET .../autoscale.
    eventually(lambda: gauges(relay) == {("relay_autoscale_desired_executors", "v2", "scale-q"): 3.0,
                                         ("relay_autoscale_queue_depth", "v2", "scale-q"): 5.0},
               "the gauges of v2 from the periodic refresh")
    [latest] = autoscale(relay)
    assert {k: v for k, v in latest.items() if k != "observedAt"} == {
        "applicationVersion": "v2", "isLatest": True, "desiredExecutors": 3, "queueDepth": 5, "queueName": "scale-q"}
    assert abs(latest["observedAt"] / 1000 - time.time()) < 60

    # One old version, capped at 1 executor (its 3 would want 2).
    rollout = {"maxOldApplicationVersions": 1, "maxExecutorsForOldApplicationVersions": 1}
    assert put_policy(relay, {"queue": "scale-q", "rollout": rollout}, 200) == {
        "policy": {"queue": "scale-q", "rollout": rollout}}
    entries = autoscale(relay)
    assert [(e["applicationVersion"], e["isLatest"], e["queueDepth"], e["desiredExecutors"]) for e in entries] == [
        ("v2", True, 5, 3), ("v1", False, 3, 1)]
    # Uncapped, the old version is sized to its own backlog.
    put_policy(relay, {"queue": "scale-q", "rollout": {"maxOldApplicationVersions": 4}}, 200)
    assert [(e["applicationVersion"], e["desiredExecutors"]) for e in autoscale(relay)] == [("v2", 3), ("v1", 2)]
    eventually(lambda: gauges(relay).get(("relay_autoscale_desired_executors", "v1", "scale-q")) == 2.0,
               "the gauge of v1")

    # The console's application page shows the policy and the recommendation (server-rendered).
    page = console_page(relay, f"/orgs/{ORG}/apps/{APP}")
    section = page.split('data-testid="autoscaling"', 1)[1].split("</section>", 1)[0]
    assert '<code data-testid="autoscaling-queue">scale-q</code>' in section
    rows = re.findall(r'<tr data-version="([^"]+)">.*?data-testid="queue-depth">(\d+)<.*?'
                      r'data-testid="desired-executors">(\d+)<', section, re.DOTALL)
    assert rows == [("v2", "5", "3"), ("v1", "3", "2")]

    # Cleared: 404 again, the gauges withdrawn, and every write in the audit log.
    v2(relay, "DELETE", POLICY, 204)
    v2(relay, "GET", POLICY, 404)
    v2(relay, "GET", AUTOSCALE, 404)
    eventually(lambda: gauges(relay) == {}, "the gauges withdrawn")
    assert "No autoscaling policy" in console_page(relay, f"/orgs/{ORG}/apps/{APP}")
    audit = [(e["operation"], e["status"]) for e in relay.api("GET", f"/v2/orgs/{ORG}/audit-logs").json()
             if e["operation"].endswith("AutoscalingPolicy")]
    assert audit[:4] == [("deleteAutoscalingPolicy", "success"), ("setAutoscalingPolicy", "success"),
                         ("setAutoscalingPolicy", "success"), ("setAutoscalingPolicy", "success")]
    assert ("setAutoscalingPolicy", "failure") in audit  # the refused ones too
    events = relay.api("GET", "/relay/v1/events", params={"app": APP}).json()["events"]
    kinds = [e["event"] for e in events if "Autoscaling" in e["event"]]
    assert kinds == ["App.AutoscalingPolicySet"] * 3 + ["App.AutoscalingPolicyCleared"]
    assert relay.admin_token not in json.dumps(events)
    # The views rebuilt from the log (policy events included) equal the live ones, beside the running server.
    verified = relay.run_cli(["replay", "--verify"])
    assert verified.returncode == 0, f"{verified.stdout} {verified.stderr}"


def test_the_cli_sets_shows_and_deletes_the_policy(world: World) -> None:
    relay = world.relay

    def cli(*args: str) -> str:
        result = relay.run_cli(["autoscale", *args])
        assert result.returncode == 0, f"exit {result.returncode}: {result.stdout} {result.stderr}"
        return result.stdout

    assert "maxExecutorsForOldApplicationVersions" in cli("set", APP, "--queue", "scale-q", "--max-old-versions", "1",
                                                          "--max-old-executors", "0")
    header, *rows = [line.split("\t") for line in cli("show", APP).splitlines()]
    assert header == ["VERSION", "LATEST", "QUEUE", "QUEUE_DEPTH", "DESIRED_EXECUTORS"]
    assert rows == [["v2", "yes", "scale-q", "5", "3"], ["v1", "no", "scale-q", "3", "0"]]
    refused = relay.run_cli(["autoscale", "set", APP, "--queue", "plain-q"])
    assert refused.returncode == 2 and "HTTP 422" in refused.stderr and "worker_concurrency" in refused.stderr
    assert "deleted" in cli("delete", APP)
    assert relay.run_cli(["autoscale", "show", APP]).returncode == 2  # 404: no policy
    v2(relay, "GET", POLICY, 404)


def test_without_an_executor_the_policy_stays_and_the_recommendation_is_a_503(world: World) -> None:
    """Last: it stops the executor."""
    relay = world.relay
    put_policy(relay, {"queue": "scale-q"}, 200)
    eventually(lambda: gauges(relay).get(("relay_autoscale_queue_depth", "v2", "scale-q")) == 5.0, "the gauge")
    # Gone, not away for a moment: with a grace period of 1 s it is DEAD at once, so no read waits (5 s each) for
    # it to reconnect, as a read does for an executor still DISCONNECTED (actors/services/executor_calls.py).
    v2(relay, "PATCH", BASE, 204, json={"executorTimeoutSecs": 1})
    world.executor.stop(timeout=3)
    eventually(lambda: [e["status"] for e in relay.api("GET", f"{BASE}/executors").json()] == ["DEAD"], "it DEAD")
    eventually(lambda: relay.api("GET", AUTOSCALE).status_code == 503, "GET autoscale 503 once the executor left")
    assert "no executor" in v2(relay, "GET", AUTOSCALE, 503)["detail"]
    assert v2(relay, "GET", POLICY, 200) == {"policy": {"queue": "scale-q"}}
    eventually(lambda: gauges(relay) == {}, "the gauges withdrawn without an executor to ask")
    page = console_page(relay, f"/orgs/{ORG}/apps/{APP}")
    assert "No recommendation yet" in page and '<code data-testid="autoscaling-queue">scale-q</code>' in page


def console_page(relay: RelayProcess, path: str) -> str:
    browser, _csrf = console_session(relay)
    page = browser.get(f"{relay.base_url}{path}", timeout=10)
    assert page.status_code == 200, page.status_code
    return page.text
