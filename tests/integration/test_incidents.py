"""Issue 32, end to end: alerts as incidents, through a real `relay serve` (SQLite store, RELAY_ALERT_INTERVAL_S=1) and
a real DBOS 3.2.0 executor (executor_apps/alerting_app.py) whose `@DBOS.alert_handler` writes every alert it gets to a
file. A webhook, a Slack and a PagerDuty receiver (http.server on 127.0.0.1, random ports) record every POST.

- one failed workflow under a WorkflowFailure rule (threshold 1, a 5 s period): exactly one open notification over
  several evaluations, then the resolution once the window passes: the webhook gets open then resolved (one incident
  id), PagerDuty `trigger` then `resolve` with one dedup_key, Slack says Resolved, the executor's handler is called
  once; the incident is listed resolved with its duration;
- renotify only when opted in (renotifyIntervalSecs), the handler called for each repeat; acknowledged through the
  CLI, the repeats stop;
- silenced through the CLI: nothing is sent, and the resolution reaches PagerDuty alone; errors: 404, 409, 400.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.ports import free_port, wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "alerting_app.py"
ORG, APP = "local", "incidents-src"
RULES = f"/v2/orgs/{ORG}/apps/{APP}/alerting-rules"
INCIDENTS = f"/relay/v1/orgs/{ORG}/apps/{APP}/incidents"
DEADLINE_S = 60.0
ROUTING_KEY = secrets.token_hex(16)
SLACK_PATH = f"/services/T0RELAY/B0RELAY/{secrets.token_hex(12)}"


class Receiver(BaseHTTPRequestHandler):
    """Records every POST's JSON body; answers as the service does."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server: Any = self.server
        with server.lock:
            server.received.append(json.loads(body))
        self.send_response(server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def receiver(status: int) -> Any:
    server: Any = ThreadingHTTPServer(("127.0.0.1", free_port()), Receiver)
    server.lock, server.received, server.status = threading.Lock(), [], status
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class World:
    relay: RelayProcess
    executor_id: str
    tmp: Path
    hook: Any
    slack: Any
    pagerduty: Any
    commands: int = 0

    def fail(self, count: int = 1) -> None:
        self.commands += 1
        path = self.tmp / "commands" / f"{self.commands:04d}.json"
        path.write_text(json.dumps({"action": "fail", "count": count}))
        eventually(lambda: path.with_suffix(".done").exists(), "the executor ran its failing workflow")

    def handled(self, period: int) -> list[dict[str, Any]]:
        """What the executor's alert handler got for the rule of this period."""
        path = self.tmp / "alerts.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
        return [a for a in lines if a["metadata"].get("period_secs") == str(period)]

    def hooked(self, rule_id: str) -> list[dict[str, Any]]:
        with self.hook.lock:
            return [p for p in self.hook.received if p["ruleId"] == rule_id]

    def paged(self, rule_id: str) -> list[dict[str, Any]]:
        with self.pagerduty.lock:
            events = list(self.pagerduty.received)
        keys = {p["incidentId"] for p in self.hooked(rule_id)}
        return [e for e in events if e["dedup_key"].removeprefix("relay/incident/") in keys]

    def rule(self, body: dict[str, Any]) -> str:
        response = self.relay.api("POST", RULES, json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def incidents(self, state: str = "all") -> list[dict[str, Any]]:
        response = self.relay.api("GET", INCIDENTS, params={"state": state})
        assert response.status_code == 200, response.text
        return list(response.json()["incidents"])

    def evaluations(self) -> float:
        text = self.relay.api("GET", "/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("relay_executor_requests_total{") and f'app="{APP}"' in line
                   and 'type="get_workflow_aggregates"' in line)

    def wait_evaluations(self, count: int) -> None:
        start = self.evaluations()
        eventually(lambda: self.evaluations() >= start + count, f"{count} more evaluations")

    def cli(self, *args: str) -> str:
        result = self.relay.run_cli(["incidents", *args])
        assert result.returncode == 0, f"exit {result.returncode}: {result.stdout} {result.stderr}"
        return result.stdout


def eventually(predicate: Any, what: str, timeout: float = DEADLINE_S) -> Any:
    return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("incidents")
    hook, slack, pagerduty = receiver(200), receiver(200), receiver(202)
    relay = RelayProcess(tmp / "relay-data", env={
        "RELAY_ALERT_INTERVAL_S": "1", "RELAY_PING_INTERVAL_S": "0.5", "RELAY_REQUEST_TIMEOUT_S": "10",
        "RELAY_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{hook.server_port}/hook", "RELAY_ALERT_WEBHOOK_TIMEOUT_S": "2",
        "RELAY_ALERT_SLACK_WEBHOOK_URL": f"http://127.0.0.1:{slack.server_port}{SLACK_PATH}",
        "RELAY_ALERT_PAGERDUTY_URL": f"http://127.0.0.1:{pagerduty.server_port}/v2/enqueue",
        "RELAY_ALERT_PAGERDUTY_ROUTING_KEY": ROUTING_KEY,
    })
    executor: ExecutorProcess | None = None
    try:
        relay.start()
        assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{APP}", json={}).status_code == 204
        key = relay.api("POST", f"/v2/orgs/{ORG}/tokens/incidents-key", json={"appNames": [APP]}).json()["token"]
        executor = ExecutorProcess(APP_SCRIPT, name="src", cwd=tmp / "src", env={
            "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key, "APP_NAME": APP,
            "ALERTS_FILE": str(tmp / "alerts.jsonl"), "COMMANDS_DIR": str(tmp / "commands")}).start()
        executor.wait_for_log("READY ", timeout=60)
        line = next(x for x in executor.log_text().splitlines() if x.startswith("READY "))
        executor_id = json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"]
        eventually(lambda: [x["status"] for x in relay.api("GET", f"/v2/orgs/{ORG}/apps/{APP}/executors").json()]
                   == ["HEALTHY"], "the executor HEALTHY")
        yield World(relay, executor_id, tmp, hook, slack, pagerduty)
    finally:
        if executor is not None:
            executor.stop(timeout=3)
        relay.stop()
        for server in (hook, slack, pagerduty):
            server.shutdown()


def test_one_failed_workflow_is_one_incident_notified_once_then_resolved(world: World) -> None:
    w = world
    rule_id = w.rule({"ruleType": "WorkflowFailure", "ruleMetadata": {"threshold": 1, "periodSecs": 5}})
    w.fail(1)
    [opened] = eventually(lambda: w.hooked(rule_id), "the webhook got the opening")
    assert (opened["state"], opened["notification"], opened["sequence"]) == ("open", "open", 1)
    # The condition holds for the 5 s period: evaluations go on every second, and send nothing more.
    w.wait_evaluations(3)
    assert len(w.hooked(rule_id)) == 1 or w.hooked(rule_id)[1]["state"] == "resolved"
    hooked = eventually(lambda: (got := w.hooked(rule_id)) and len(got) >= 2 and got, "the resolution")
    assert [(p["state"], p["notification"]) for p in hooked] == [("open", "open"), ("resolved", "resolve")]
    assert hooked[0]["incidentId"] == hooked[1]["incidentId"] and hooked[1]["resolvedAt"]

    paged = eventually(lambda: (got := w.paged(rule_id)) and len(got) >= 2 and got, "PagerDuty's resolve")
    assert [p["event_action"] for p in paged] == ["trigger", "resolve"]
    assert paged[0]["dedup_key"] == paged[1]["dedup_key"] == f"relay/incident/{hooked[0]['incidentId']}"
    assert paged[0]["routing_key"] == ROUTING_KEY and paged[0]["payload"]["class"] == "WorkflowFailure"
    with w.slack.lock:
        headers = [m["blocks"][0]["text"]["text"] for m in w.slack.received]
    assert any(h.startswith("Resolved: WorkflowFailure") for h in headers)

    [handled] = w.handled(5)  # the executor's handler: the opening only, never the resolution
    assert handled["name"] == "WorkflowFailure" and handled["metadata"]["failed_workflow_count"] == "1"

    [incident] = [i for i in w.incidents("resolved") if i["ruleId"] == rule_id]
    assert (incident["state"], incident["number"], incident["incidentId"]) == ("resolved", 1, hooked[0]["incidentId"])
    assert incident["resolvedAt"] and incident["durationSecs"] >= 3 and incident["renotified"] == 0
    detail = w.relay.api("GET", f"{INCIDENTS}/{incident['incidentId']}").json()
    assert [n["kind"] for n in detail["notifications"]] == ["open", "resolve"]
    assert detail["notifications"][0]["deliveredTo"] == [w.executor_id]
    assert detail["notifications"][1]["sinks"]["pagerduty"]["outcome"] == "delivered"
    assert ROUTING_KEY not in json.dumps(detail) and SLACK_PATH not in json.dumps(detail)
    # Resolved: nothing more to acknowledge or silence.
    for action, body in (("acknowledge", None), ("silence", {"seconds": 60})):
        refused = w.relay.api("POST", f"{INCIDENTS}/{incident['incidentId']}/{action}", json=body)
        assert refused.status_code == 409 and "resolved" in refused.json()["detail"], refused.text
    assert w.relay.api("DELETE", f"{RULES}/{rule_id}").status_code == 204


def test_renotify_only_when_opted_in_until_acknowledged_through_the_cli(world: World) -> None:
    w = world
    rule_id = w.rule({"ruleType": "WorkflowFailure", "renotifyIntervalSecs": 2,
                      "ruleMetadata": {"threshold": 1, "periodSecs": 30}})
    w.fail(1)
    repeats = eventually(lambda: [p for p in w.hooked(rule_id) if p["notification"] == "renotify"], "a repeat")
    assert repeats[0]["state"] == "open" and w.hooked(rule_id)[0]["notification"] == "open"
    eventually(lambda: len(w.handled(30)) >= 2, "the handler called for the repeat too")
    [incident] = [i for i in w.incidents("open") if i["ruleId"] == rule_id]
    listed = w.cli("list", APP)
    assert incident["incidentId"] in listed and "open" in listed.splitlines()[1]
    assert "acknowledged" in w.cli("ack", APP, incident["incidentId"])
    sent = len(w.hooked(rule_id))
    w.wait_evaluations(4)  # 2 s repeats, acknowledged: none
    assert len(w.hooked(rule_id)) == sent
    [acked] = [i for i in w.incidents("open") if i["ruleId"] == rule_id]
    assert acked["state"] == "acknowledged" and acked["acknowledgedBy"] == "admin"
    assert w.relay.api("DELETE", f"{RULES}/{rule_id}").status_code == 204


def test_a_silenced_incident_sends_nothing_and_errors_are_clear(world: World) -> None:
    w = world
    rule_id = w.rule({"ruleType": "WorkflowFailure", "renotifyIntervalSecs": 2,
                      "ruleMetadata": {"threshold": 1, "periodSecs": 8}})
    w.fail(1)
    [opened] = eventually(lambda: w.hooked(rule_id), "the opening")
    incident_id = opened["incidentId"]
    one = f"{INCIDENTS}/{incident_id}"
    for body in ({"seconds": 0}, {"seconds": "10"}, {"until": "yesterday"}, {}, {"seconds": 5, "until": "x"}):
        bad = w.relay.api("POST", f"{one}/silence", json=body)
        assert bad.status_code == 400, (body, bad.text)
    assert w.relay.api("POST", f"{INCIDENTS}/no-such-incident/acknowledge").status_code == 404
    assert w.relay.api("GET", INCIDENTS, params={"state": "nope"}).status_code == 400
    assert "silenced" in w.cli("silence", APP, incident_id, "--seconds", "3600")
    sent, paged = len(w.hooked(rule_id)), len(w.paged(rule_id))
    assert sent <= 2  # at most one repeat got out before the silence
    # Silenced: no repeat, and the resolution reaches PagerDuty alone (its page closes; nobody is paged).
    eventually(lambda: [i for i in w.incidents("resolved") if i["incidentId"] == incident_id], "resolved")
    resolves = eventually(lambda: [p for p in w.paged(rule_id) if p["event_action"] == "resolve"], "PD resolve")
    assert len(resolves) == 1 and len(w.paged(rule_id)) == paged + 1
    assert len(w.hooked(rule_id)) == sent
    events = w.relay.api("GET", "/relay/v1/events", params={"type": "Incident", "limit": 1000}).json()["events"]
    kinds = {e["event"] for e in events}
    assert {"Incident.Opened", "Incident.Notified", "Incident.Silenced", "Incident.Resolved",
            "Incident.Acknowledged"} <= kinds
    audited = w.relay.api("GET", f"/v2/orgs/{ORG}/audit-logs", params={"limit": 1000})
    assert audited.status_code == 200 and "silenceRelayIncident" in audited.text and incident_id in audited.text
    assert w.relay.api("DELETE", f"{RULES}/{rule_id}").status_code == 204


def test_cli_refuses_a_silence_without_its_length(world: World) -> None:
    result: subprocess.CompletedProcess[str] = world.relay.run_cli(["incidents", "silence", APP, "some-id"])
    assert result.returncode == 2 and "--seconds N or --until TIME" in result.stderr
