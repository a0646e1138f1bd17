"""Unmodified executors of the TypeScript (``@dbos-inc/dbos-sdk`` 5.2.11), Go (``dbos-transact-golang`` v1.6.0)
and Java (``dev.dbos:transact`` 1.1.0-m6) SDKs against a real ``relay serve``, through the Conductor API v2.

Each executor runs in its own process (tests/integration/sdk_apps.py) with its system database on PostgreSQL (a
fresh database per test, ``pg_url``). The tests start workflows through the app's own loopback control port (as
the app's users would), then read and manage them only through Relay's HTTP API, asserting what really
happened: statuses, outputs, steps, forks, schedules, versions, recovery. One test body serves the three SDKs;
where an SDK really differs (the cron's seconds field, whether a finished queued workflow keeps its dequeue
time) the difference is named where it is asserted.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.sdk_apps import ORG, SDKS, TERMINAL, Sdk, SdkApp, new_app
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

RUNTIME = {"typescript": "node", "go": "go", "java": "java"}


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    # Alert rules evaluated every second, so an alert test waits seconds, not minutes.
    return {"RELAY_ALERT_INTERVAL_S": "1"}


@pytest.fixture(params=SDKS, ids=[sdk.key for sdk in SDKS])
def sdk(request: pytest.FixtureRequest) -> Sdk:
    request.param.check_installed()
    return request.param


@pytest.fixture
def app(relay: RelayProcess, sdk: Sdk, pg_url: str, tmp_path: Path,
           request: pytest.FixtureRequest) -> Iterator[SdkApp]:  # fmt: skip
    """A fresh application on Relay, its key, and one executor of ``sdk`` (version v1), HEALTHY."""
    test = request.node.originalname.removeprefix("test_").replace("_", "-")
    app = new_app(relay, sdk, f"{sdk.key}-{test}"[:30].rstrip("-"), pg_url, tmp_path)
    try:
        app.launch("v1")
        yield app
    finally:
        app.stop()


# ----------------------------------------------------------------------------------------- tests


def test_executor_is_healthy_with_its_language_and_version(app: SdkApp) -> None:
    assert app.sdk.installed_version().removeprefix("v") == app.sdk.version.removeprefix("v")
    [executor] = app.ok("GET", "/executors")
    ready = app.ready[0]
    assert executor["executorId"] == ready["executor_id"]
    assert executor["status"] == "HEALTHY"
    assert executor["language"] == app.sdk.language
    assert executor["dbosVersion"] == app.sdk.version
    assert executor["appVersion"] == "v1" == ready["app_version"]
    assert executor["executorMetadata"]["runtime"] == RUNTIME[app.sdk.language]
    assert isinstance(executor["executorMetadata"]["pid"], int)
    found = app.ok("GET", "")
    assert found["status"] == "AVAILABLE" and found["language"] == app.sdk.language


def test_list_get_steps_children_events_and_export_import(app: SdkApp) -> None:
    greet = app.start("greet", "ts", workflow_id="ts-greet-1")
    done = app.wait_status(greet, "SUCCESS")
    assert done["workflowName"] == "greet" and done["appVersion"] == "v1"
    assert done["executorId"] == app.ready[0]["executor_id"]
    assert done["applicationName"] == app.name  # Java 1.1 sends none: Relay names the app
    assert "HELLO TS!" in (done["output"] or "")
    assert "ts" in (done["input"] or "")

    listed = app.ok("GET", "/workflows", params={"workflowName": "greet", "loadOutput": "true"})
    assert [w["workflowId"] for w in listed] == [greet]
    assert "HELLO TS!" in (listed[0]["output"] or "")
    assert app.ok("GET", "/workflows", params={"status": "ERROR"}) == []

    steps = app.ok("GET", f"/workflows/{greet}/steps")
    assert [(s["stepId"], s["stepName"]) for s in steps] == [(0, "shout"), (1, "exclaim")]
    assert "HELLO TS" in (steps[0]["output"] or "") and steps[0]["error"] is None
    assert steps[0]["startedAt"] and steps[0]["completedAt"]
    assert [s["stepId"] for s in app.ok("GET", f"/workflows/{greet}/steps", params={"limit": 1, "offset": 1})] == [1]

    parent = app.start("parent", "kid", workflow_id="ts-parent-1")
    assert "parent of HELLO KID!" in (app.wait_status(parent, "SUCCESS")["output"] or "")
    parent_steps = app.ok("GET", f"/workflows/{parent}/steps")
    children = [s["childWorkflowId"] for s in parent_steps if s["childWorkflowId"]]
    assert children, parent_steps
    found = app.ok("POST", "/workflows/search", json={"parentWorkflowId": [parent], "loadOutput": True})
    assert [w["workflowId"] for w in found] == [children[0]]
    assert found[0]["parentWorkflowId"] == parent and "HELLO KID!" in (found[0]["output"] or "")
    top_level = {w["workflowId"] for w in app.ok("POST", "/workflows/search", json={"hasParent": False})}
    assert top_level >= {greet, parent} and children[0] not in top_level

    chatty = app.start("chatty", "c1", workflow_id="ts-chatty-1")
    app.wait_status(chatty, "PENDING")
    app.send(chatty, "pong", "ping")
    assert "c1 got pong" in (app.wait_status(chatty, "SUCCESS")["output"] or "")
    events = app.ok("GET", f"/workflows/{chatty}/events")
    assert [e["key"] for e in events] == ["progress"] and "done c1" in events[0]["value"]
    [note] = app.ok("GET", f"/workflows/{chatty}/notifications")
    assert note["topic"] == "ping" and "pong" in note["message"] and note["consumed"] is True
    assert note["createdAt"]
    [stream] = app.ok("GET", f"/workflows/{chatty}/streams")
    assert stream["key"] == "log"
    assert [v.strip("'\"") for v in stream["values"]] == ["line-1", "line-2"]  # inspect()ed by the SDK

    exported = app.ok("GET", f"/workflows/{greet}/export")["serializedWorkflow"]
    assert exported
    assert app.api("DELETE", f"/workflows/{greet}").status_code == 204
    assert app.api("GET", f"/workflows/{greet}").status_code == 404
    assert app.api("POST", "/workflows/import", json={"serializedWorkflow": exported}).status_code == 201
    back = app.workflow(greet)
    assert back["status"] == "SUCCESS" and "HELLO TS!" in (back["output"] or "")
    assert [s["stepName"] for s in app.ok("GET", f"/workflows/{greet}/steps")] == ["shout", "exclaim"]


def test_cancel_resume_fork_delete_and_bulk_operations(app: SdkApp) -> None:
    gate = app.start("gate", "g1", workflow_id="ts-gate-1")
    app.wait_status(gate, "PENDING")
    assert app.api("POST", f"/workflows/{gate}/cancel", json={}).status_code == 204
    app.wait_status(gate, "CANCELLED")
    assert app.api("POST", f"/workflows/{gate}/resume", json={}).status_code == 204
    app.wait_status(gate, {"PENDING", "ENQUEUED"})
    app.send(gate, "go", "go")
    assert "g1:go" in (app.wait_status(gate, "SUCCESS")["output"] or "")

    greet = app.start("greet", "fork", workflow_id="ts-greet-fork")
    app.wait_status(greet, "SUCCESS")
    forked = app.ok("POST", f"/workflows/{greet}/fork", status=201, json={"startStep": 1})
    fork = app.wait_status(forked["workflowId"], "SUCCESS")
    assert fork["forkedFrom"] == greet and "HELLO FORK!" in (fork["output"] or "")
    assert [s["stepId"] for s in app.ok("GET", f"/workflows/{forked['workflowId']}/steps")] == [0, 1]
    assert app.workflow(greet)["wasForkedFrom"] is True
    named = app.ok("POST", f"/workflows/{greet}/fork", status=201,
                      json={"startStep": 0, "newWorkflowId": "ts-named-fork", "appVersion": "v1"})  # fmt: skip
    assert named == {"workflowId": "ts-named-fork"} or named["workflowId"] == "ts-named-fork"
    app.wait_status("ts-named-fork", "SUCCESS")
    found = app.ok("POST", "/workflows/search", json={"forkedFrom": [greet]})
    assert {w["workflowId"] for w in found} == {forked["workflowId"], "ts-named-fork"}

    assert app.api("DELETE", "/workflows/ts-named-fork").status_code == 204
    assert app.api("GET", "/workflows/ts-named-fork").status_code == 404

    gates = [app.start("gate", f"b{i}", workflow_id=f"ts-bulk-gate-{i}") for i in range(3)]
    for workflow_id in gates:
        app.wait_status(workflow_id, "PENDING")
    assert app.api("POST", "/workflows/bulk-cancel", json={"workflowIds": gates}).status_code == 204
    for workflow_id in gates:
        app.wait_status(workflow_id, "CANCELLED")
    assert app.api("POST", "/workflows/bulk-resume", json={"workflowIds": gates[:2]}).status_code == 204
    for workflow_id in gates[:2]:
        app.wait_status(workflow_id, {"PENDING", "ENQUEUED"})
        app.send(workflow_id, "go", "go")
        app.wait_status(workflow_id, "SUCCESS")
    assert app.workflow(gates[2])["status"] == "CANCELLED"
    assert app.api("POST", "/workflows/bulk-delete", json={"workflowIds": gates}).status_code == 204
    for workflow_id in gates:
        assert app.api("GET", f"/workflows/{workflow_id}").status_code == 404

    app.control("POST", "/flags", {"failing": True})
    flaky = [app.start("flaky", f"f{i}", workflow_id=f"ts-flaky-{i}") for i in range(2)]
    for workflow_id in flaky:
        failed = app.wait_status(workflow_id, TERMINAL)
        assert failed["status"] == "ERROR" and "fragile step failed" in (failed["error"] or "")
    app.control("POST", "/flags", {"failing": False})
    forks = app.ok("POST", "/workflows/bulk-fork-from-failure",
                      json={"workflowIds": flaky, "fromLastFailure": True})["workflowIds"]  # fmt: skip
    assert len(forks) == 2 and not set(forks) & set(flaky)
    for workflow_id in forks:
        recovered = app.wait_status(workflow_id, "SUCCESS")
        assert recovered["forkedFrom"] in flaky and "recovered" in (recovered["output"] or "")
        steps = app.ok("GET", f"/workflows/{workflow_id}/steps")
        assert [s["stepName"] for s in steps] == ["first", "fragile"] and steps[1]["error"] is None


def test_queues_schedules_versions_and_aggregates(app: SdkApp) -> None:
    started = datetime.now(UTC)
    queues = app.ok("GET", "/queues")
    [queue] = [q for q in queues if q["name"] == app.sdk.queue]
    assert queue["workerConcurrency"] == 2 and queue["applicationName"] == app.name
    assert app.ok("GET", f"/queues/{app.sdk.queue}")["workerConcurrency"] == 2
    assert app.api("GET", "/queues/no_such_queue").status_code == 404

    queued = app.start("greet", "queued", workflow_id="ts-queued-1", queue=app.sdk.queue)
    done = app.wait_status(queued, "SUCCESS")
    assert done["queueName"] == app.sdk.queue
    # Go v1.6.0 reports a dequeue time only while the workflow is PENDING (conductor.go's formatting), so a
    # finished queued workflow of a Go executor has none; the others keep it.
    assert bool(done["dequeuedAt"]) is (app.sdk.key != "go"), done
    on_queue = app.ok("POST", "/workflows/search", json={"queueName": [app.sdk.queue]})
    assert [w["workflowId"] for w in on_queue] == [queued]

    # Context only on request (loadContext): Java 1.1 honours the flag, the TypeScript and Go SDKs always send it.
    [schedule] = app.ok("GET", "/schedules", params={"loadContext": "true"})
    assert schedule["scheduleName"] == app.sdk.schedule and schedule["status"] == "ACTIVE"
    assert schedule["cronExpression"] == app.sdk.cron and schedule["workflowName"] == "tick"
    assert "relay-tests" in (schedule["context"] or "")
    assert app.api("POST", f"/schedules/{app.sdk.schedule}/pause").status_code == 204
    assert app.ok("GET", f"/schedules/{app.sdk.schedule}")["status"] == "PAUSED"
    assert [s["scheduleName"] for s in app.ok("GET", "/schedules", params={"status": "PAUSED"})] == [app.sdk.schedule]
    assert app.ok("GET", "/schedules", params={"status": "ACTIVE"}) == []
    assert app.api("POST", f"/schedules/{app.sdk.schedule}/resume").status_code == 204
    assert app.ok("GET", f"/schedules/{app.sdk.schedule}")["status"] == "ACTIVE"
    assert app.api("GET", "/schedules/no_such_schedule").status_code == 404

    triggered = app.ok("POST", f"/schedules/{app.sdk.schedule}/trigger", status=201)["workflowId"]
    tick = app.wait_status(triggered, "SUCCESS")
    assert tick["workflowName"] == "tick"
    # Midnight of January 1st 2024, 2025 and 2026: three runs, each its own workflow.
    backfill = app.ok("POST", f"/schedules/{app.sdk.schedule}/backfill",
                         json={"startTime": "2023-12-31T00:00:00Z", "endTime": "2026-01-02T00:00:00Z"})  # fmt: skip
    assert len(backfill["workflowIds"]) == 3 and len(set(backfill["workflowIds"])) == 3
    for workflow_id in backfill["workflowIds"]:
        assert app.wait_status(workflow_id, "SUCCESS")["workflowName"] == "tick"
    assert len(app.ok("POST", "/workflows/search", json={"scheduleName": [app.sdk.schedule]})) >= 3

    aggregates = app.ok("POST", "/workflows/aggregates",
                           json={"groupByWorkflowName": True, "selectCount": True, "status": ["SUCCESS"]})  # fmt: skip
    counts = {row["group"]["workflowName"]: row["count"] for row in aggregates}
    assert counts == {"greet": 1, "tick": 4}, aggregates
    step_rows = app.ok("POST", "/steps/aggregates", json={"groupByFunctionName": True, "selectCount": True})
    step_counts = {row["group"].get("functionName", row["group"].get("stepName")): row["count"] for row in step_rows}
    assert step_counts.get("shout") == 1 and step_counts.get("tick_step") == 4, step_rows

    window = {"startTime": (started - timedelta(minutes=1)).isoformat(), "endTime": datetime.now(UTC).isoformat()}
    metrics = app.ok("GET", "/metrics", params=window)
    app_id = app.ok("GET", "")["id"]
    assert metrics and all(m["appId"] == app_id for m in metrics), metrics
    by_type = {(m["metricType"], m["metricName"]): m["value"] for m in metrics}
    assert by_type.get(("workflow_count", "greet")) == 1 and by_type.get(("workflow_count", "tick")) == 4, metrics
    assert by_type.get(("step_count", "shout")) == 1, metrics

    # A second executor with a newer version shares the system database; then the first version is made latest.
    app.launch("v2")
    executors = app.ok("GET", "/executors")
    assert sorted(e["appVersion"] for e in executors if e["status"] == "HEALTHY") == ["v1", "v2"]
    versions = app.ok("GET", "/versions")
    by_name = {v["versionName"]: v for v in versions}
    assert {"v1", "v2"} <= set(by_name), versions
    assert by_name["v2"]["versionTimestamp"] > by_name["v1"]["versionTimestamp"]
    assert app.api("PATCH", "/versions/latest", json={"versionName": "v1"}).status_code == 204
    by_name = {v["versionName"]: v for v in app.ok("GET", "/versions")}
    assert by_name["v1"]["versionTimestamp"] > by_name["v2"]["versionTimestamp"]


def test_an_alert_rule_fires_into_the_apps_alert_handler(app: SdkApp) -> None:
    """A WorkflowFailure rule created through the API fires from a real failing workflow; Relay delivers the
    alert to the SDK's own alert handler (DBOS.setAlertHandler, dbos.SetAlertHandler, registerAlertHandler)."""
    rules = f"/v2/orgs/{ORG}/apps/{app.name}/alerting-rules"
    created = app.relay.api("POST", rules, json={
        "ruleType": "WorkflowFailure", "receivingAppName": app.name, "minIntervalSecs": 3600,
        "ruleMetadata": {"workflowName": "flaky", "threshold": 1, "periodSecs": 600}})  # fmt: skip
    assert created.status_code == 201, created.text
    app.control("POST", "/flags", {"failing": True})
    app.wait_status(app.start("flaky", "alert", workflow_id=f"{app.sdk.key}-alerting-flaky"), "ERROR")

    def handled() -> list[dict]:
        return [a for a in app.control("GET", "/alerts") if a["name"] == "WorkflowFailure"]

    [alert] = wait_until(handled, 45, message=f"no alert reached the handler:\n{app.executors[0].log_tail()}")
    assert alert["metadata"]["workflow_name"] == "flaky" and alert["metadata"]["failed_workflow_count"] == "1"
    assert app.name in alert["message"]
    executor_id = app.ready[0]["executor_id"]

    def recorded() -> list[dict]:  # the incident's opening (issue 32), delivered to the executor
        base = f"/relay/v1/orgs/{ORG}/apps/{app.name}/incidents"
        response = app.relay.api("GET", base)
        assert response.status_code == 200, response.text
        return [n for i in response.json()["incidents"] if i["ruleId"] == created.json()["id"]
                for n in app.relay.api("GET", f"{base}/{i['incidentId']}").json()["notifications"]
                if n["kind"] == "open" and n["deliveredTo"] == [executor_id]]  # fmt: skip

    wait_until(recorded, 30, message="the delivery to the executor was not recorded")


def test_a_killed_executors_workflows_are_recovered_by_its_peer(app: SdkApp) -> None:
    """SIGKILL one executor while its workflow waits: after the grace period Relay declares it DEAD,
    has the other (same version) recover it, and the workflow finishes on the peer; the dead record goes."""
    assert app.api("PATCH", "", json={"executorTimeoutSecs": 1}).status_code == 204
    peer = app.launch("v1", name="peer")
    doomed = app.ready[0]["executor_id"]
    workflow_id = app.start("gate", "recover-me", workflow_id="ts-recover-1")
    assert app.wait_status(workflow_id, "PENDING")["executorId"] == doomed
    # Killed only once `prepare` is checkpointed: a step whose body ran but whose output was not yet recorded runs
    # again on recovery (at least once, as DBOS promises), which is not what the step count below checks.
    wait_until(lambda: any("prepare" in (step.get("stepName") or "")
                           for step in app.ok("GET", f"/workflows/{workflow_id}/steps")), 30, interval=0.1,
               message="the doomed executor never recorded its prepare step")

    app.executors[0].kill()

    def recovered_by_peer() -> bool:
        found = app.workflow(workflow_id)
        return found["status"] == "PENDING" and found["executorId"] == peer["executor_id"]

    wait_until(recovered_by_peer, 60, interval=0.2,
               message=f"the peer never took {workflow_id} over:\n{app.executors[1].log_tail()}")
    # The message goes through the peer: the killed executor's control port died with it.
    app.control("POST", "/send", {"destination": workflow_id, "message": "after-recovery", "topic": "go"}, index=1)
    done = app.wait_status(workflow_id, TERMINAL)
    assert done["status"] == "SUCCESS" and "recover-me:after-recovery" in (done["output"] or ""), done
    # Each step ran once, across both processes: the killed executor ran `prepare`, the peer replayed it from the
    # system database and ran only `finish` (the apps print `STEP name tag` when a step body really runs).
    ran = [[line.split()[1] for line in process.log_text().splitlines() if line.startswith("STEP ") and
            line.endswith(" recover-me")] for process in app.executors]  # fmt: skip
    assert ran == [["prepare"], ["finish"]], ran
    names = [s["stepName"] for s in app.ok("GET", f"/workflows/{workflow_id}/steps")]
    # (Java also records its DBOS.recv as a step; only the application's own steps are counted.)
    assert [n for n in names if n in ("prepare", "finish")] == ["prepare", "finish"], names
    wait_until(lambda: doomed not in {e["executorId"] for e in app.ok("GET", "/executors")}, 30,
               message="the dead executor's record was not deleted after its recovery")
    recoveries = app.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app.name}/recoveries").json()["recoveries"]
    assert [(r["executorId"], r["peer"]) for r in recoveries if r["executorId"] == doomed] == [
        (doomed, peer["executor_id"])], recoveries



def _export_of(payload: bytes) -> dict[str, str]:
    return {"serializedWorkflow": base64.b64encode(gzip.compress(payload)).decode()}


def test_client_errors_are_4xx(app: SdkApp) -> None:
    """What each SDK reports as the caller's mistake is a 4xx with its message (actors/services/executor_errors.py);
    the texts differ per SDK, the answers do not."""
    greet = app.start("greet", "x", workflow_id=f"{app.sdk.key}-greet-4xx")
    app.wait_status(greet, "SUCCESS")
    # Bulk actions naming unknown ids: test_client_errors_sdks covers all four for every SDK.
    # Imports the SDK cannot read: base64 of gzip, but of something else than its export.
    for payload in (b"garbage", b'[{"x": 1}]'):
        response = app.api("POST", "/workflows/import", json=_export_of(payload))
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["location"] == "body.serializedWorkflow"
        assert "answered 'import_workflow'" in response.json()["detail"]
    # An export of a workflow that is still there.
    exported = app.ok("GET", f"/workflows/{greet}/export")
    response = app.api("POST", "/workflows/import", json=exported)
    assert response.status_code == 409, response.text
