"""Issue 17 (sharper alerting), end to end: Relay's own rule types and the Slack and PagerDuty sinks, through a real
`relay serve` (SQLite store, RELAY_ALERT_INTERVAL_S=1, short liveness timings) and real DBOS 3.2.0 executors
(executor_apps/recovery_app.py) on a PostgreSQL system database of the test's own. A Slack receiver and a
PagerDuty receiver (http.server on 127.0.0.1, random ports) record every POST; each answers its first one 500,
so Relay must retry.

- RecoveryFlapping: executors are killed and Relay recovers them on a live peer; a rule with threshold 2 stays
  quiet after one recovery (while a threshold-1 rule with renotifyIntervalSecs 1 repeats its incident every second,
  proving the evaluations ran), opens one incident after the second, notified once; then every executor of the app
  is killed, and a rule created now opens an incident with no executor connected anywhere: Slack and PagerDuty
  still get it, in the shapes those services document; the Slack hook URL and the routing key are in no log, API
  answer or event;
- StrandedVersion: an executor of v1 starts a workflow that stays PENDING and is killed while an executor of v2
  stays connected: the rule (quiet while v1 ran) fires once, naming v1 and its pending count, read from the v2
  executor (the system database is shared by both versions);
- StrandedVersion with every executor down: the application's data plane (its system database, through the
  DBOS client of `.venv-relay`) is the source, and Slack and PagerDuty get the alert.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.fake_executor import create_key, executors, register_app
from tests.support import pg
from tests.support.ports import free_port, wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "recovery_app.py"
ORG = "local"
DEADLINE_S = 30.0
SLACK_TOKEN = secrets.token_hex(12)  # the secret part of a Slack hook URL
ROUTING_KEY = secrets.token_hex(16)  # PagerDuty's integration keys are 32 characters
SLACK_PATH = f"/services/T0RELAY/B0RELAY/{SLACK_TOKEN}"


# ------------------------------------------------------------------------------------------- receivers


class Receiver(BaseHTTPRequestHandler):
    """Records every POST (path, JSON body); answers the very first one 500, then as the service does."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server: Any = self.server
        with server.lock:
            first = server.seen == 0
            server.seen += 1
            if not first:
                server.received.append((self.path, dict(self.headers), json.loads(body)))
        status, answer = (500, b"") if first else server.answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


def receiver(answer: tuple[int, bytes]) -> ThreadingHTTPServer:
    server: Any = ThreadingHTTPServer(("127.0.0.1", free_port()), Receiver)
    server.lock, server.seen, server.received, server.answer = threading.Lock(), 0, [], answer
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ------------------------------------------------------------------------------------------- the scene

DATA_PLANE_APP = "dbstrand"  # the one application whose data plane (env:FLEET_SYSDB) the operator binds


@dataclass
class World:
    relay: RelayProcess
    slack: Any
    pagerduty: Any
    tmp: Path
    data_plane_db: str  # a system database Relay reads through the data plane (from env:FLEET_SYSDB)
    procs: list[ExecutorProcess] = field(default_factory=list)
    apps: list[str] = field(default_factory=list)

    def app(self, prefix: str, grace_s: int = 1, exact: bool = False) -> tuple[str, str]:
        app = prefix if exact else f"{prefix}-{secrets.token_hex(3)}"
        register_app(self.relay, app)
        self.apps.append(app)
        patched = self.relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{app}", json={"executorTimeoutSecs": grace_s})
        assert patched.status_code == 204, patched.text
        return app, create_key(self.relay, f"{app}-key", appNames=[app])

    def executors(self, app: str, key: str, sysdb: str, *specs: tuple[str, str, dict[str, str]]) -> list[
            tuple[ExecutorProcess, str]]:
        """Start executors (name, version, extra env) at once; their processes and executor ids, once HEALTHY."""
        started = []
        for name, version, extra in specs:
            env = {"APP_NAME": app, "CONDUCTOR_URL": self.relay.ws_url, "CONDUCTOR_KEY": key,
                   "SYSTEM_DATABASE_URL": sysdb, "APP_VERSION": version,
                   "EFFECTS_FILE": str(self.tmp / f"{app}-effects.txt"), **extra}
            proc = ExecutorProcess(APP_SCRIPT, cwd=self.tmp / app / name, name=name, env=env)
            self.procs.append(proc)
            started.append(proc.start())
        ids = []
        for proc in started:
            proc.wait_for_log("READY ", timeout=60)
            line = next(x for x in proc.log_text().splitlines() if x.startswith("READY "))
            ids.append(json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]["executor_id"])
        for executor_id in ids:
            eventually(lambda e=executor_id: executors(self.relay, app).get(e, {}).get("status") == "HEALTHY",
                       f"{executor_id} HEALTHY")
        return list(zip(started, ids, strict=True))

    def rule(self, app: str, body: dict[str, Any], expect: int = 201) -> dict[str, Any]:
        response = self.relay.api("POST", f"/v2/orgs/{ORG}/apps/{app}/alerting-rules", json=body)
        assert response.status_code == expect, response.text
        return response.json()

    def alerts(self, app: str, rule_id: str | None = None) -> list[dict[str, Any]]:
        """Every notification that opened or repeated an incident (issue 32; what release 0.1.0 fired as an alert),
        oldest first, with where it went once recorded (``deliveredAt``)."""
        base = f"/relay/v1/orgs/{ORG}/apps/{app}/incidents"
        response = self.relay.api("GET", base, params={"limit": 1000})
        assert response.status_code == 200, response.text
        out = []
        for incident in reversed(response.json()["incidents"]):
            if rule_id is not None and incident["ruleId"] != rule_id:
                continue
            detail = self.relay.api("GET", f"{base}/{incident['incidentId']}").json()
            sent = [n for n in detail["notifications"] if n["kind"] != "resolve"]
            for k in range(1 + detail["renotified"]):  # each claimed before it is sent, its outcome recorded after
                note = sent[k] if k < len(sent) else {}
                out.append({"ruleId": incident["ruleId"], "incidentId": incident["incidentId"],
                            "sequence": incident["number"], "message": incident["message"],
                            "metadata": incident["metadata"], "firedAt": incident["openedAt"],
                            "deliveredAt": note.get("at"), "deliveredTo": note.get("deliveredTo"),
                            "failed": note.get("failed"), "sinks": note.get("sinks")})
        return out

    def acknowledged(self, app: str, executor_id: str) -> bool:
        response = self.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app}/recoveries")
        assert response.status_code == 200, response.text
        return any(r["executorId"] == executor_id and r["outcome"] == "acknowledged"
                   for r in response.json()["recoveries"])

    def received(self, server: Any, rule_id: str) -> list[dict[str, Any]]:
        with server.lock:
            return [body for _, _, body in server.received if rule_id in json.dumps(body)]

    def aggregate_requests(self, app: str) -> float:
        text = self.relay.api("GET", "/metrics").text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "relay_executor_requests_total" and s.labels.get("app") == app
                   and s.labels.get("type") == "get_workflow_aggregates")


def eventually(predicate: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))


def migrated(url: str) -> str:
    return pg.migrate_dbos(url)  # once, so executors can launch together


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("alerting-fleet")
    data_plane_db = migrated(pg.create_database(pg_server))
    slack = receiver((200, b"ok"))
    pagerduty = receiver((202, b'{"status":"success","message":"Event processed"}'))
    relay = RelayProcess(tmp / "relay-data", env={
        "RELAY_ALERT_INTERVAL_S": "1", "RELAY_PING_INTERVAL_S": "0.5", "RELAY_PONG_TIMEOUT_S": "2",
        "RELAY_RECOVERY_TIMEOUT_S": "2", "RELAY_REQUEST_TIMEOUT_S": "10", "RELAY_ALERT_WEBHOOK_TIMEOUT_S": "2",
        "RELAY_ALERT_SLACK_WEBHOOK_URL": f"http://127.0.0.1:{slack.server_port}{SLACK_PATH}",
        "RELAY_ALERT_PAGERDUTY_URL": f"http://127.0.0.1:{pagerduty.server_port}/v2/enqueue",
        "RELAY_ALERT_PAGERDUTY_ROUTING_KEY": ROUTING_KEY, "FLEET_SYSDB": data_plane_db,
        "RELAY_DATA_PLANE_REFERENCES": f"{ORG}/{DATA_PLANE_APP}=env:FLEET_SYSDB",  # bound by the operator
    })
    world = World(relay, slack, pagerduty, tmp, data_plane_db)
    try:
        relay.start()
        yield world
    finally:
        for proc in world.procs:
            proc.kill()
        relay.stop()  # fails when a secret it knows (the Slack URL, the routing key among them) is in its log
        slack.shutdown()
        pagerduty.shutdown()
        pg.drop_database(data_plane_db)


@pytest.fixture
def sysdb(pg_url: str) -> str:
    return migrated(pg_url)


def assert_no_secrets(w: World, app: str) -> None:
    """Neither the Slack hook's token nor the routing key anywhere Relay shows or keeps."""
    shown = [
        w.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app}/alerts", params={"limit": 1000}).text,
        w.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app}/incidents", params={"limit": 1000}).text,
        *(w.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app}/incidents/{i['incidentId']}").text
          for i in w.alerts(app)),
        w.relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/alerting-rules").text,
        w.relay.api("GET", "/relay/v1/events", params={"limit": 10000}).text,
        w.relay.api("GET", "/metrics").text,
        w.relay.log_text(),
    ]
    for text in shown:
        assert SLACK_TOKEN not in text and ROUTING_KEY not in text


# ------------------------------------------------------------------------------------------------ tests


def test_recovery_flapping_fires_once_and_the_sinks_get_alerts_with_every_executor_down(
        world: World, sysdb: str) -> None:
    w = world
    app, key = w.app("flap")
    for bad, where in (({"threshold": 0}, "ruleMetadata.threshold"), ({"periodSecs": "600"}, "ruleMetadata.periodSecs"),
                       ({"queueName": "q"}, "not a setting of RecoveryFlapping")):
        problem = w.rule(app, {"ruleType": "RecoveryFlapping", "ruleMetadata": bad}, expect=422)
        assert where in problem["detail"] and problem["errors"][0]["location"] == "body.ruleMetadata", problem
    (a1, a1_id), (a2, a2_id), (b, b_id) = w.executors(app, key, sysdb, ("a1", "v1", {}), ("a2", "v1", {}),
                                                      ("b", "v1", {}))
    # Notified again every second once one recovery is in the window (renotifyIntervalSecs): its notifications count
    # the evaluations.
    ticks = w.rule(app, {"ruleType": "RecoveryFlapping", "renotifyIntervalSecs": 1, "ruleMetadata": {"threshold": 1}})
    flap = w.rule(app, {"ruleType": "RecoveryFlapping", "minIntervalSecs": 3600,
                        "ruleMetadata": {"threshold": 2, "period_secs": 600}})
    assert flap["ruleMetadata"] == {"threshold": 2, "periodSecs": 600}
    assert [r["ruleType"] for r in w.relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/alerting-rules").json()] == [
        "RecoveryFlapping", "RecoveryFlapping"]

    a1.kill()
    eventually(lambda: w.acknowledged(app, a1_id), "a1 recovered")
    eventually(lambda: len(w.alerts(app, ticks["id"])) >= 3, "three evaluations after one recovery")
    assert w.alerts(app, flap["id"]) == []  # one recovery: under the threshold of 2

    a2.kill()
    eventually(lambda: w.acknowledged(app, a2_id), "a2 recovered")
    [fired] = eventually(lambda: w.alerts(app, flap["id"]), "the flapping alert")
    seen = len(w.alerts(app, ticks["id"]))
    eventually(lambda: len(w.alerts(app, ticks["id"])) >= seen + 3, "three more evaluations")
    assert len(w.alerts(app, flap["id"])) == 1  # one incident, notified once
    assert fired["metadata"] == {"application_name": app, "recovery_count": "2", "threshold": "2",
                                 "period_secs": "600", "executor_ids": ",".join(sorted([a1_id, a2_id]))}
    assert "recovered 2 times in the last 600 s" in fired["message"]
    [delivered] = eventually(lambda: [a for a in w.alerts(app, flap["id"]) if a["deliveredAt"]], "delivered")
    assert delivered["deliveredTo"] == [b_id]
    assert w.relay.api("DELETE", f"/v2/orgs/{ORG}/apps/{app}/alerting-rules/{ticks['id']}").status_code == 204

    # Every executor of the app down (and the app receives its own alerts): the sinks still get a new rule's alert.
    b.kill()
    eventually(lambda: not any(e["status"] == "HEALTHY" for e in executors(w.relay, app).values()), "no executor")
    down = w.rule(app, {"ruleType": "RecoveryFlapping", "minIntervalSecs": 3600, "ruleMetadata": {"threshold": 2}})
    [alert] = eventually(lambda: [a for a in w.alerts(app, down["id"]) if a["deliveredAt"]], "alert, all down")
    assert alert["deliveredTo"] == [] and alert["failed"] == [
        {"executorId": "*", "reason": f"no executor of '{app}' is connected"}]
    outcomes = {name: s["outcome"] for name, s in alert["sinks"].items()}
    assert outcomes == {"slack": "delivered", "pagerduty": "delivered"}
    [slack] = eventually(lambda: w.received(w.slack, down["id"]), "Slack got the alert")
    [page] = eventually(lambda: w.received(w.pagerduty, down["id"]), "PagerDuty got the alert")

    # Slack: an incoming-webhook message, {text, blocks}.
    assert set(slack) == {"text", "blocks"}
    assert slack["text"] == f"[Relay] RecoveryFlapping on {ORG}/{app}: {alert['message']}"
    assert [block["type"] for block in slack["blocks"]] == ["header", "section", "section", "context"]
    assert slack["blocks"][0]["text"] == {"type": "plain_text", "text": f"RecoveryFlapping on {ORG}/{app}"}
    assert slack["blocks"][1]["text"] == {"type": "mrkdwn", "text": alert["message"]}
    assert {"type": "mrkdwn", "text": "*recovery_count*\n2"} in slack["blocks"][2]["fields"]
    assert f"rule `{down['id']}` · incident 1 · received by {app}" in slack["blocks"][3]["elements"][0]["text"]
    # PagerDuty: an Events API v2 trigger.
    assert set(page) == {"routing_key", "event_action", "dedup_key", "client", "payload"}
    assert (page["routing_key"], page["event_action"], page["dedup_key"], page["client"]) == (
        ROUTING_KEY, "trigger", f"relay/incident/{alert['incidentId']}", "Relay")
    assert {k: v for k, v in page["payload"].items() if k != "custom_details"} == {
        "summary": f"RecoveryFlapping on {ORG}/{app}: {alert['message']}", "source": f"{ORG}/{app}",
        "severity": "warning", "timestamp": alert["firedAt"], "component": app, "group": ORG,
        "class": "RecoveryFlapping"}
    details = page["payload"]["custom_details"]
    assert (details["ruleId"], details["sequence"], details["metadata"]) == (down["id"], 1, alert["metadata"])
    with w.slack.lock, w.pagerduty.lock:
        assert {path for path, _, _ in w.slack.received} == {SLACK_PATH}
        assert {path for path, _, _ in w.pagerduty.received} == {"/v2/enqueue"}
        assert all(h["Content-Type"] == "application/json" for _, h, _ in w.slack.received + w.pagerduty.received)
    # Each receiver answered its very first POST 500 (whichever test's alert that was): that one alert went on
    # the second attempt, every other on the first.
    sent = [a["sinks"] for name in w.apps for a in w.alerts(name) if a["deliveredAt"]]
    for sink, status in (("slack", 200), ("pagerduty", 202)):
        assert sorted(s[sink]["attempts"] for s in sent).count(2) == 1, sent
        assert {s[sink]["attempts"] for s in sent} == {1, 2} and {s[sink]["status"] for s in sent} == {status}
    assert_no_secrets(w, app)


def test_a_version_left_without_executors_with_pending_workflows_is_stranded(world: World, sysdb: str) -> None:
    w = world
    app, key = w.app("strand")
    problem = w.rule(app, {"ruleType": "StrandedVersion", "ruleMetadata": {"minPending": 0}}, expect=422)
    assert "ruleMetadata.minPending must be a positive integer" in problem["detail"], problem
    workflow_id = f"wf-{secrets.token_hex(4)}"
    (v1, _), (_, v2_id) = w.executors(app, key, sysdb, ("v1", "v1", {"START_WORKFLOW": workflow_id, "PAUSE_S": "600"}),
                                      ("v2", "v2", {}))

    def pending() -> list[tuple[str, str]]:
        listed = w.relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/workflows", params={"limit": 100}).json()
        return [(x["workflowId"], x["appVersion"]) for x in listed if x["status"] == "PENDING"]

    eventually(lambda: pending() == [(workflow_id, "v1")], "the v1 workflow PENDING")
    rule = w.rule(app, {"ruleType": "StrandedVersion", "minIntervalSecs": 3600,
                        "ruleMetadata": {"thresholdSecs": 1, "minPending": 1}})
    # Repeated every second (renotifyIntervalSecs) once v1 is stranded: its notifications count the evaluations.
    ticks = w.rule(app, {"ruleType": "StrandedVersion", "renotifyIntervalSecs": 1,
                         "ruleMetadata": {"thresholdSecs": 1}})
    asked = w.aggregate_requests(app)
    eventually(lambda: w.aggregate_requests(app) >= asked + 6, "three evaluations (of both rules) while v1 runs")
    assert w.alerts(app) == []

    v1.kill()
    [fired] = eventually(lambda: w.alerts(app, rule["id"]), "the StrandedVersion alert")
    assert fired["metadata"] == {"application_name": app, "stranded_versions": '{"v1": 1}',
                                 "stranded_workflow_count": "1", "connected_versions": '["v2"]', "min_pending": "1",
                                 "threshold_secs": "1", "source": "executor"}
    assert "'v1' (1)" in fired["message"]
    seen = len(w.alerts(app, ticks["id"]))
    eventually(lambda: len(w.alerts(app, ticks["id"])) >= seen + 3, "three more evaluations")
    assert len(w.alerts(app, rule["id"])) == 1
    [delivered] = eventually(lambda: [a for a in w.alerts(app, rule["id"]) if a["deliveredAt"]], "delivered")
    assert delivered["deliveredTo"] == [v2_id]
    [slack] = eventually(lambda: w.received(w.slack, rule["id"]), "Slack got it")
    assert {"type": "mrkdwn", "text": '*stranded_versions*\n{"v1": 1}'} in slack["blocks"][2]["fields"]
    [page] = eventually(lambda: w.received(w.pagerduty, rule["id"]), "PagerDuty got it")
    assert (page["payload"]["severity"], page["payload"]["class"]) == ("error", "StrandedVersion")
    assert_no_secrets(w, app)


def test_with_every_executor_down_stranded_version_reads_the_system_database(world: World) -> None:
    w = world
    app, key = w.app(DATA_PLANE_APP, exact=True)
    plane = w.relay.api("PUT", f"/relay/v1/orgs/{ORG}/apps/{app}/data-plane",
                        json={"systemDatabaseUrlFrom": "env:FLEET_SYSDB"})
    assert plane.status_code == 200 and plane.json()["state"]["status"] == "ready", plane.text
    workflow_id = f"wf-{secrets.token_hex(4)}"
    (v1, _), (v2, _) = w.executors(app, key, w.data_plane_db,
                                   ("v1", "v1", {"START_WORKFLOW": workflow_id, "PAUSE_S": "600"}), ("v2", "v2", {}))
    eventually(lambda: (w.tmp / f"{app}-effects.txt").exists() and "waiting" in (
        w.tmp / f"{app}-effects.txt").read_text(), "the v1 workflow reached its pause")
    v1.kill()
    v2.kill()
    eventually(lambda: not any(e["status"] == "HEALTHY" for e in executors(w.relay, app).values()), "no executor")
    rule = w.rule(app, {"ruleType": "StrandedVersion", "minIntervalSecs": 3600, "ruleMetadata": {"thresholdSecs": 1}})
    [alert] = eventually(lambda: [a for a in w.alerts(app, rule["id"]) if a["deliveredAt"]], "the alert, all down")
    assert alert["metadata"] == {"application_name": app, "stranded_versions": '{"v1": 1}',
                                 "stranded_workflow_count": "1", "connected_versions": "[]", "min_pending": "1",
                                 "threshold_secs": "1", "source": "database"}
    assert alert["deliveredTo"] == [] and alert["failed"][0]["executorId"] == "*"
    assert {name: s["outcome"] for name, s in alert["sinks"].items()} == {"slack": "delivered",
                                                                          "pagerduty": "delivered"}
    [slack] = eventually(lambda: w.received(w.slack, rule["id"]), "Slack got it")
    assert slack["blocks"][0]["text"]["text"] == f"StrandedVersion on {ORG}/{app}"
    [page] = eventually(lambda: w.received(w.pagerduty, rule["id"]), "PagerDuty got it")
    assert page["payload"]["custom_details"]["metadata"] == alert["metadata"]
    assert_no_secrets(w, app)
