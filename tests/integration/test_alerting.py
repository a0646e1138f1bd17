"""Issue 7, end to end: alerting rules, managed retention and the Prometheus scrape, through a real `relay serve`
(SQLite store, RELAY_ALERT_INTERVAL_S=1, RELAY_RETENTION_INTERVAL_S=1) and real DBOS 3.2.0 executors
(executor_apps/alerting_app.py): a source application that fails, clogs a queue and succeeds on command, and
a sink application whose ``@DBOS.alert_handler`` writes every alert it receives to a file. A webhook receiver
(http.server on 127.0.0.1) gets every alert as JSON; it answers its first POST 500, so Relay must retry.

- the rules API: create, list, delete, validation (and the reference's schemas);
- WorkflowFailure: failing workflows trip two rules; the sink's handler gets the documented metadata, once per
  rule however many evaluations the condition holds (one incident each, issue 32); deleting a rule resolves it;
- SlowQueue: workflows stuck behind a blocker on a queue of concurrency 1;
- managed retention: gcRowsThreshold set with PATCH removes old workflows from the executor's system database;
- UnresponsiveApplication: killing the source's only executor alerts the sink;
- the /metrics scrape parses with prometheus_client's parser, is guarded by metric.read, and its counters move.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.openapi_ref import check, reference, response_schema
from tests.support.ports import free_port, wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "alerting_app.py"
ORG = "local"
SRC, SINK = "alerts-src", "alerts-sink"
RULES = f"/v2/orgs/{ORG}/apps/{SRC}/alerting-rules"
DEADLINE_S = 45.0
WEBHOOK_SECRET = f"hook-{secrets.token_hex(8)}"
WORKFLOW_FAILURE_KEYS = {"workflow_name", "failed_workflow_count", "threshold", "period_secs"}


# ------------------------------------------------------------------------------------------- the scene


class Hook(BaseHTTPRequestHandler):
    """Records every POST (headers, body); answers the very first one 500 (Relay must retry), then 200."""

    received: list[tuple[dict[str, str], bytes]]
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            first = not self.server.seen  # type: ignore[attr-defined]
            self.server.seen += 1  # type: ignore[attr-defined]
            if not first:
                self.server.received.append((dict(self.headers), body))  # type: ignore[attr-defined]
        self.send_response(500 if first else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class World:
    relay: RelayProcess
    src: ExecutorProcess
    sink: ExecutorProcess
    src_id: str
    sink_id: str
    tmp: Path
    hook: ThreadingHTTPServer
    key: str
    commands: int = 0
    rules: dict[str, str] = field(default_factory=dict)

    @property
    def alerts_file(self) -> Path:
        return self.tmp / "sink-alerts.jsonl"

    def command(self, action: str, count: int) -> None:
        """Have the source app run a command; wait until it has."""
        self.commands += 1
        path = self.tmp / "src-commands" / f"{self.commands:04d}.json"
        path.write_text(json.dumps({"action": action, "count": count}))
        eventually(lambda: path.with_suffix(".done").exists(), f"the source ran {action}")

    def received(self) -> list[dict[str, Any]]:
        if not self.alerts_file.exists():
            return []
        return [json.loads(line) for line in self.alerts_file.read_text().splitlines() if line.strip()]

    def alerts(self, app: str = SRC) -> list[dict[str, Any]]:
        response = self.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app}/alerts", params={"limit": 1000})
        assert response.status_code == 200, response.text
        return response.json()["alerts"]

    def alerts_of(self, rule_id: str) -> list[dict[str, Any]]:
        return [a for a in self.alerts() if a["ruleId"] == rule_id]

    def incidents_of(self, rule_id: str) -> list[dict[str, Any]]:
        response = self.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{SRC}/incidents", params={"limit": 1000})
        assert response.status_code == 200, response.text
        return [i for i in response.json()["incidents"] if i["ruleId"] == rule_id]

    def notifications(self, incident: dict[str, Any]) -> list[dict[str, Any]]:
        path = f"/relay/v1/orgs/{ORG}/apps/{SRC}/incidents/{incident['incidentId']}"
        response = self.relay.api("GET", path)
        assert response.status_code == 200, response.text
        return list(response.json()["notifications"])

    def create_rule(self, body: dict[str, Any]) -> dict[str, Any]:
        return v2(self.relay, "POST", RULES, 201, json=body)

    def scrape(self, path: str = "/metrics", token: str | None = None) -> dict[tuple[str, tuple], float]:
        response = self.relay.api("GET", path, token=token)
        assert response.status_code == 200, response.text
        return samples(response.text)


def eventually(predicate: Any, what: str, timeout: float = DEADLINE_S) -> Any:
    return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))


def v2(relay: RelayProcess, method: str, path: str, expect: int, **kwargs: Any) -> Any:
    """Call the API, assert the status, check a success body against the reference's schema."""
    response = relay.api(method, path, **kwargs)
    assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text[:500]}"
    if expect >= 400:
        assert response.headers["Content-Type"].startswith("application/problem+json")
        return response.json()
    if not response.content:
        return None
    body = response.json()
    template = path.replace(f"/{ORG}/", "/{orgName}/").replace(f"/{SRC}/", "/{appName}/")
    if template.endswith("/alerting-rules"):
        errors = check(reference(), response_schema(reference(), template, method, str(expect)), body)
        assert not errors, errors
    return body


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape, by (sample name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def value(scraped: dict[tuple[str, tuple], float], name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in scraped.items() if n == name and set(labels.items()) <= set(ls))


def read_ready(executor: ExecutorProcess) -> str:
    executor.wait_for_log("READY ", timeout=60)
    line = next(x for x in executor.log_text().splitlines() if x.startswith("READY "))
    return json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("alerting")
    hook = ThreadingHTTPServer(("127.0.0.1", free_port()), Hook)
    hook.received, hook.seen = [], 0  # type: ignore[attr-defined]
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    relay = RelayProcess(tmp / "relay-data", env={
        "RELAY_ALERT_INTERVAL_S": "1", "RELAY_RETENTION_INTERVAL_S": "1", "RELAY_PING_INTERVAL_S": "0.5",
        "RELAY_PONG_TIMEOUT_S": "2", "RELAY_REQUEST_TIMEOUT_S": "10",
        "RELAY_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{hook.server_port}/hook",
        "RELAY_ALERT_WEBHOOK_SECRET": WEBHOOK_SECRET, "RELAY_ALERT_WEBHOOK_TIMEOUT_S": "2",
    })
    executors: list[ExecutorProcess] = []
    try:
        relay.start()
        for app in (SRC, SINK):
            assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
        key = relay.api("POST", f"/v2/orgs/{ORG}/tokens/alerting-key", json={"appNames": [SRC, SINK]}).json()["token"]
        env = {"CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key, "ALERTS_FILE": str(tmp / "sink-alerts.jsonl")}
        src = ExecutorProcess(APP_SCRIPT, name="src", cwd=tmp / "src",
                              env={**env, "APP_NAME": SRC, "COMMANDS_DIR": str(tmp / "src-commands")})
        sink = ExecutorProcess(APP_SCRIPT, name="sink", cwd=tmp / "sink",
                               env={**env, "APP_NAME": SINK, "COMMANDS_DIR": str(tmp / "sink-commands")})
        executors += [src.start(), sink.start()]
        src_id, sink_id = read_ready(src), read_ready(sink)
        for app, executor_id in ((SRC, src_id), (SINK, sink_id)):
            eventually(lambda a=app, e=executor_id: [(x["executorId"], x["status"]) for x in relay.api(
                "GET", f"/v2/orgs/{ORG}/apps/{a}/executors").json()] == [(e, "HEALTHY")], f"{app} HEALTHY")
        yield World(relay, src, sink, src_id, sink_id, tmp, hook, key)
    finally:
        for executor in executors:
            executor.stop(timeout=3)
        relay.stop()
        hook.shutdown()


# ----------------------------------------------------------------------------------------- the rules API


def test_rules_are_created_listed_validated_and_deleted(world: World) -> None:
    w = world
    assert v2(w.relay, "GET", RULES, 200) == []
    rule = w.create_rule({"ruleType": "SlowQueue", "ruleMetadata": {"queue_name": "q1", "thresholdSecs": 30},
                          "minIntervalSecs": 60})
    src_app = w.relay.api("GET", f"/v2/orgs/{ORG}/apps/{SRC}").json()
    assert rule["appId"] == rule["receivingAppId"] == src_app["id"]  # received by the app itself by default
    assert (rule["ruleType"], rule["ruleMetadata"], rule["minIntervalSecs"], rule["lastFiredAt"]) == (
        "SlowQueue", {"queueName": "q1", "thresholdSecs": 30}, 60, None)
    assert v2(w.relay, "GET", RULES, 200) == [rule]

    problems = [
        ({"ruleType": "Nope", "ruleMetadata": {}}, "body.ruleType"),
        ({"ruleType": "SlowQueue"}, "body.ruleMetadata"),
        ({"ruleType": "WorkflowFailure", "ruleMetadata": {"threshold": 0}}, "threshold"),
        ({"ruleType": "WorkflowFailure", "ruleMetadata": {"colour": "red"}}, "colour"),
        ({"ruleType": "UnresponsiveApplication", "ruleMetadata": {}}, "another application"),
        ({"ruleType": "UnresponsiveApplication", "ruleMetadata": {}, "receivingAppName": SRC}, "another application"),
        ({"ruleType": "SlowQueue", "ruleMetadata": {}, "receivingAppName": "no-such-app"}, "body.receivingAppName"),
        ({"ruleType": "SlowQueue", "ruleMetadata": {}, "minIntervalSecs": -1}, "body.minIntervalSecs"),
        ({"ruleType": "SlowQueue", "ruleMetadata": {}, "extra": 1}, "body.extra"),
    ]
    for body, where in problems:
        problem = v2(w.relay, "POST", RULES, 422, json=body)
        assert where in problem["detail"], (body, problem)

    reader = w.relay.api("POST", f"/v2/orgs/{ORG}/tokens/rules-reader",
                         json={"permissions": ["application.read"]}).json()["token"]
    assert w.relay.api("GET", RULES, token=reader).status_code == 200
    denied = w.relay.api("POST", RULES, token=reader, json={"ruleType": "SlowQueue", "ruleMetadata": {}})
    assert denied.status_code == 403
    assert w.relay.api("DELETE", f"{RULES}/{rule['id']}", token=reader).status_code == 403

    assert v2(w.relay, "DELETE", f"{RULES}/{rule['id']}", 204) is None
    assert v2(w.relay, "GET", RULES, 200) == []
    v2(w.relay, "DELETE", f"{RULES}/{rule['id']}", 404)
    v2(w.relay, "DELETE", f"{RULES}/no-such-rule", 404)
    created = [e["event"] for e in w.relay.api("GET", "/relay/v1/events", params={"type": "AlertingRule"}).json()[
        "events"]]
    assert created == ["AlertingRule.Created", "AlertingRule.Deleted"]


# -------------------------------------------------------------------------------------------- firing


def test_failing_workflows_open_one_incident_per_rule_notified_once(world: World) -> None:
    w = world
    before = w.scrape()
    every = w.create_rule({"ruleType": "WorkflowFailure", "receivingAppName": SINK, "minIntervalSecs": 0,
                           "ruleMetadata": {"workflowName": "failing", "threshold": 3, "periodSecs": 600}})
    once = w.create_rule({"ruleType": "WorkflowFailure", "receivingAppName": SINK, "minIntervalSecs": 3600,
                          "ruleMetadata": {"threshold": 3, "period_secs": 600}})
    assert every["receivingAppId"] != every["appId"]
    # The per-app workflow counts (get_metrics windows, checked at the end) start where the app's alerting job
    # started, which the rules start asynchronously: wait for its first window, so the workflows below are in one.
    windows = value(before, "relay_executor_requests_total", app=SRC, type="get_metrics")
    eventually(lambda: value(w.scrape(), "relay_executor_requests_total", app=SRC, type="get_metrics") > windows,
               "the first window of per-app counts")
    w.command("fail", 2)  # under the threshold: nothing fires
    w.command("fail", 1)

    def named(received: list[dict[str, Any]], workflow_name: str) -> list[dict[str, Any]]:
        return [a for a in received
                if a["name"] == "WorkflowFailure" and a["metadata"]["workflow_name"] == workflow_name]

    eventually(lambda: named(w.received(), "failing") and named(w.received(), "*"), "both rules' openings")
    # Both conditions keep holding (a 600 s period) while evaluations go on every second: nothing more is sent
    # (issue 32: one notification per incident).
    ticks = value(w.scrape(), "relay_executor_requests_total", app=SRC, type="get_metrics")
    eventually(lambda: value(w.scrape(), "relay_executor_requests_total", app=SRC, type="get_metrics") >= ticks + 3,
               "three more evaluations")
    received = w.received()
    [alert] = named(received, "*")
    [failing] = named(received, "failing")
    assert alert["metadata"] == {"workflow_name": "*", "failed_workflow_count": "3", "threshold": "3",
                                 "period_secs": "600"}
    assert set(failing["metadata"]) == WORKFLOW_FAILURE_KEYS
    assert all(isinstance(v, str) for v in failing["metadata"].values())
    assert failing["metadata"]["failed_workflow_count"] == "3"
    assert "3 workflows named 'failing'" in failing["message"] and SRC in failing["message"]

    # Recorded: one open incident per rule, number 1, notified to the sink's executor.
    [opened] = w.incidents_of(every["id"])
    assert (opened["number"], opened["state"], opened["receivingApp"]) == (1, "open", SINK)
    eventually(lambda: w.notifications(opened)[:1] and w.notifications(opened)[0]["deliveredTo"] == [w.sink_id],
               "the delivery recorded")
    [single] = w.incidents_of(once["id"])
    assert (single["number"], single["metadata"]["workflow_name"]) == (1, "*")
    assert w.alerts_of(every["id"]) == []  # release 0.1.0's alerts: only while such an instance is live
    rules = {r["id"]: r for r in v2(w.relay, "GET", RULES, 200)}
    assert rules[every["id"]]["lastFiredAt"] and rules[once["id"]]["lastFiredAt"] == single["openedAt"]

    # Deleting a rule resolves its open incident (the resolution goes to the sinks, not to executors).
    v2(w.relay, "DELETE", f"{RULES}/{every['id']}", 204)
    eventually(lambda: w.incidents_of(every["id"])[0]["state"] == "resolved", "the deleted rule's incident resolved")
    assert len(named(w.received(), "failing")) == 1
    assert len(w.incidents_of(once["id"])) == 1
    v2(w.relay, "DELETE", f"{RULES}/{once['id']}", 204)

    # The webhook: every notification, as JSON without secrets, signed; its first POST was answered 500 and retried.
    hooked = eventually(lambda: [json.loads(body) for _, body in w.hook.received  # type: ignore[attr-defined]
                                 if json.loads(body)["ruleId"] == once["id"]], "the webhook got the opening")
    assert hooked[0]["metadata"] == single["metadata"] and hooked[0]["ruleType"] == "WorkflowFailure"
    assert hooked[0]["app"] == SRC and hooked[0]["receivingApp"] == SINK
    assert (hooked[0]["incidentId"], hooked[0]["state"]) == (single["incidentId"], "open")
    for headers, body in w.hook.received:  # type: ignore[attr-defined]
        assert WEBHOOK_SECRET.encode() not in body and w.key.encode() not in body
        expected = hmac.new(WEBHOOK_SECRET.encode(), headers["X-Relay-Timestamp"].encode() + b"." + body,
                            hashlib.sha256).hexdigest()
        assert headers["X-Relay-Signature"] == f"sha256={expected}"
    sent = eventually(lambda: [n for i in (opened, single) for n in w.notifications(i) if n["webhook"]],
                      "webhook outcomes recorded")
    assert all(n["webhook"]["outcome"] == "delivered" for n in sent)
    assert any(n["webhook"]["attempts"] == 2 for n in sent)  # the 500, then the retry

    # The scrape moved with it: one alert fired per incident.
    after = w.scrape()
    assert value(after, "relay_alerts_fired_total", app=SRC, rule_type="WorkflowFailure") - value(
        before, "relay_alerts_fired_total", app=SRC, rule_type="WorkflowFailure") == 2
    assert value(after, "relay_alert_deliveries_total", app=SRC, channel="executor", outcome="delivered") >= 2
    assert value(after, "relay_alert_deliveries_total", app=SRC, channel="webhook", outcome="delivered") >= 1
    aggregates = ("relay_executor_requests_total", {"app": SRC, "type": "get_workflow_aggregates", "outcome": "ok"})
    assert value(after, aggregates[0], **aggregates[1]) > value(before, aggregates[0], **aggregates[1])
    assert value(after, "relay_executor_request_seconds_count", app=SINK, type="alert") >= 2
    eventually(lambda: value(w.scrape(), "relay_app_workflows_total", app=SRC, workflow_name="failing") >= 3,
               "the per-app workflow count of 'failing'")


def test_a_stuck_queue_trips_slow_queue(world: World) -> None:
    w = world
    w.command("clog", 2)  # a blocker runs (PENDING), two more wait behind it (ENQUEUED)

    def statuses() -> dict[str, str]:
        listed = w.relay.api("GET", f"/v2/orgs/{ORG}/apps/{SRC}/workflows", params={"limit": 1000}).json()
        return {x["workflowId"]: x["status"] for x in listed if x["workflowName"] in ("blocker", "quick")}

    eventually(lambda: sorted(statuses().values()) == ["ENQUEUED", "ENQUEUED", "PENDING"], "the queue clogged")
    rule = w.create_rule({"ruleType": "SlowQueue", "receivingAppName": SINK, "minIntervalSecs": 3600,
                          "ruleMetadata": {"queueName": "stuck-queue", "thresholdSecs": 1}})
    got = eventually(lambda: [a for a in w.received() if a["name"] == "SlowQueue"], "a SlowQueue alert")
    assert got[0]["metadata"] == {"queue_name": "stuck-queue", "stuck_workflow_count": "2", "threshold_secs": "1"}
    assert "stuck-queue" in got[0]["message"]
    [recorded] = w.incidents_of(rule["id"])
    assert recorded["ruleType"] == "SlowQueue" and recorded["metadata"] == got[0]["metadata"]
    v2(w.relay, "DELETE", f"{RULES}/{rule['id']}", 204)


# ----------------------------------------------------------------------------------------- retention


def test_a_retention_setting_removes_old_workflows(world: World) -> None:
    w = world
    base = f"/v2/orgs/{ORG}/apps/{SRC}"
    w.command("succeed", 3)

    def finished() -> list[dict[str, Any]]:
        listed = w.relay.api("GET", f"{base}/workflows", params={"limit": 1000})
        assert listed.status_code == 200, listed.text
        return [x for x in listed.json() if x["status"] in ("SUCCESS", "ERROR")]

    before = finished()
    assert {x["workflowName"] for x in before} == {"failing", "quick"}  # 3 failed, then 3 succeeded
    assert w.relay.api("PATCH", base, json={"gcRowsThreshold": 2}).status_code == 204
    # The SDK keeps the newest finished workflows (the threshold's, and those finished at the same time):
    # the older, failed ones go.
    kept = eventually(lambda: (left := finished()) and all(x["workflowName"] == "quick" for x in left) and left,
                      "retention removes the old failed workflows")
    assert 2 <= len(kept) <= 3 and len(kept) < len(before)
    statuses = {x["status"] for x in w.relay.api("GET", f"{base}/workflows", params={"limit": 1000}).json()}
    assert {"PENDING", "ENQUEUED"} <= statuses  # what has not finished is never collected

    runs = w.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{SRC}/retention-runs").json()["runs"]
    assert runs and runs[-1]["executorId"] == w.src_id
    done = [r for r in runs if r["outcome"] == "succeeded"]
    assert done and done[0]["policy"]["gc_rows_threshold"] == 2 and done[0]["settings"]["gcRowsThreshold"] == 2
    assert len({r["slot"] for r in runs}) == len(runs)  # one run per interval
    events = w.relay.api("GET", "/relay/v1/events", params={"type": "RetentionRun", "limit": 1000}).json()["events"]
    kinds = [e["event"] for e in events]
    assert kinds.count("RetentionRun.Started") >= len(runs)  # (more may have run since the runs were read)
    assert "RetentionRun.Finished" in kinds
    assert value(w.scrape(), "relay_retention_runs_total", app=SRC, outcome="succeeded") >= 1


# ------------------------------------------------------------------------------------- unresponsive


def test_killing_every_executor_of_an_app_alerts_another(world: World) -> None:
    w = world
    bad = v2(w.relay, "POST", RULES, 422, json={"ruleType": "UnresponsiveApplication", "ruleMetadata": {}})
    assert "another application" in bad["detail"]
    rule = w.create_rule({"ruleType": "UnresponsiveApplication", "receivingAppName": SINK, "minIntervalSecs": 3600,
                          "ruleMetadata": {}})
    # While the source answers, the rule is evaluated (its executor probed) and stays quiet.
    probes = value(w.scrape(), "relay_executor_requests_total", app=SRC, type="executor_info", outcome="ok")
    eventually(lambda: value(w.scrape(), "relay_executor_requests_total", app=SRC, type="executor_info",
                             outcome="ok") >= probes + 2, "two probes answered")
    assert w.incidents_of(rule["id"]) == []
    disconnects = value(w.scrape(), "relay_executor_disconnects_total", app=SRC)

    w.src.kill()
    got = eventually(lambda: [a for a in w.received() if a["name"] == "UnresponsiveApplication"],
                     "an UnresponsiveApplication alert at the sink")
    assert got[0]["metadata"] == {"application_name": SRC, "connected_executor_count": "0"}
    assert SRC in got[0]["message"]
    [incident] = w.incidents_of(rule["id"])
    [recorded] = eventually(lambda: w.notifications(incident), "delivery recorded")
    assert (recorded["kind"], recorded["deliveredTo"], recorded["failed"]) == ("open", [w.sink_id], [])
    scraped = w.scrape()
    assert value(scraped, "relay_executor_disconnects_total", app=SRC) == disconnects + 1
    assert value(scraped, "relay_executors", app=SRC, status="HEALTHY") == 0
    assert value(scraped, "relay_executors", app=SINK, status="HEALTHY", app_version="v1") == 1


# --------------------------------------------------------------------------------------------- scrape


def test_the_scrape_parses_and_is_guarded_by_metric_read(world: World) -> None:
    w = world
    text = w.relay.api("GET", "/metrics").text
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    for name, kind in {
        "relay_executor_connects": "counter", "relay_executor_disconnects": "counter",
        "relay_executor_requests": "counter", "relay_executor_request_seconds": "histogram",
        "relay_alerts_fired": "counter", "relay_recoveries": "counter", "relay_event_store_append_seconds": "histogram",
        "relay_projection_lag_events": "gauge", "relay_instances": "gauge", "relay_executors": "gauge",
        "relay_app_workflows": "counter", "relay_app_steps": "counter", "relay_retention_runs": "counter",
    }.items():
        assert families.get(name) == kind, (name, families.get(name))
    scraped = samples(text)
    assert value(scraped, "relay_executor_connects_total", app=SINK) >= 1
    assert value(scraped, "relay_event_store_append_seconds_count") > 0
    assert value(scraped, "relay_instances", status="RUNNING") == 1
    assert {dict(ls)["view"] for (n, ls) in scraped if n == "relay_projection_lag_events"} == {
        "registry", "applications", "audit", "alerting", "operations", "instances", "people"}

    openmetrics = w.relay.api("GET", "/v1/metrics", headers={"Accept": "application/openmetrics-text"})
    assert openmetrics.headers["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.text.rstrip().endswith("# EOF")

    assert w.relay.api("GET", "/metrics", token="").status_code == 401
    no_metrics = w.relay.api("POST", f"/v2/orgs/{ORG}/tokens/no-metrics",
                             json={"permissions": ["application.read"]}).json()["token"]
    assert w.relay.api("GET", "/v1/metrics", token=no_metrics).status_code == 403
    sink_only = w.relay.api("POST", f"/v2/orgs/{ORG}/tokens/sink-metrics",
                            json={"appNames": [SINK], "permissions": ["metric.read"]}).json()["token"]
    seen = w.scrape("/v1/metrics", token=sink_only)
    assert seen and {dict(ls).get("app") for (_, ls) in seen} == {SINK}
    # Relay's own series are everyone's infrastructure: not shown to a key limited to an application (ADR 0012).
    assert value(seen, "relay_event_store_append_seconds_count") == 0
