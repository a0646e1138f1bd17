"""The TypeScript SDK (``@dbos-inc/dbos-sdk`` 5.2.11, unmodified) as a Relay executor, through the Conductor API v2.

The application is tests/integration/ts_app/app.mjs (plain ES module, no build step), run by ``node`` with its
system database on PostgreSQL (a fresh database per test, ``pg_url``). The test starts workflows through the
app's own loopback control port (as the app's users would), then reads and manages them only through
Relay's HTTP API, asserting what really happened: statuses, outputs, steps, forks, schedules, versions.

``npm ci`` in ts_app (``make test-deps``) installs the SDK from the committed package-lock.json.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.ports import wait_until
from tests.support.procs import ManagedProcess, RelayProcess, clean_env

pytestmark = pytest.mark.integration

TS_APP_DIR = Path(__file__).parent / "ts_app"
TS_APP = TS_APP_DIR / "app.mjs"
SDK_PACKAGE = TS_APP_DIR / "node_modules" / "@dbos-inc" / "dbos-sdk" / "package.json"
SDK_VERSION = "5.2.11"
ORG = "local"
QUEUE = "ts_queue"
SCHEDULE = "ts_yearly"
TERMINAL = {"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"}


class NodeExecutorProcess(ManagedProcess):
    """``node ts_app/app.mjs`` in its own process; configured by environment (see app.mjs)."""

    def __init__(self, env: dict[str, str], cwd: Path, name: str = "ts-executor") -> None:
        self.name = name
        self.env = env
        self.cwd = cwd
        cwd.mkdir(parents=True, exist_ok=True)
        super().__init__(cwd / f"{name}.log")

    def command(self) -> list[str]:
        return ["node", str(TS_APP)]

    def environment(self) -> dict[str, str]:
        return clean_env(self.env)

    def workdir(self) -> Path:
        return TS_APP_DIR

    def ready_info(self, timeout: float = 60) -> dict[str, Any]:
        self.wait_for_log("READY ", timeout=timeout)
        return json.loads(self.log_text().split("READY ", 1)[1].splitlines()[0])


@dataclass
class TsApp:
    """One application on Relay with TypeScript executors; ``api``/``control`` talk to Relay and to the app."""

    relay: RelayProcess
    name: str
    key: str
    pg_url: str
    workdir: Path
    executors: list[NodeExecutorProcess] = field(default_factory=list)
    ready: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"/v2/orgs/{ORG}/apps/{self.name}"

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.relay.api(method, self.base + path, timeout=30, **kwargs)

    def ok(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = self.api(method, path, **kwargs)
        assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text[:800]}"
        return response.json() if response.content else None

    def launch(self, version: str, name: str | None = None) -> dict[str, Any]:
        """Start one more executor of the app, running application version ``version``; wait until HEALTHY."""
        name = name or f"ts-{version}"
        process = NodeExecutorProcess(
            {"APP_NAME": self.name, "CONDUCTOR_URL": self.relay.ws_url, "CONDUCTOR_KEY": self.key,
             "SYSTEM_DATABASE_URL": self.pg_url, "APP_VERSION": version, "CONTROL_PORT": "0"},
            self.workdir / name, name=name,
        )  # fmt: skip
        process.start()
        self.executors.append(process)
        info = process.ready_info()
        self.ready.append(info)

        def healthy() -> bool:
            executors = self.ok("GET", "/executors")
            return any(e["executorId"] == info["executor_id"] and e["status"] == "HEALTHY" for e in executors)

        wait_until(healthy, 30, message=f"executor {info['executor_id']} never HEALTHY:\n{process.log_tail()}")
        return info

    def control(self, method: str, path: str, body: dict[str, Any] | None = None, index: int = 0) -> Any:
        port = self.ready[index]["control_port"]
        response = requests.request(method, f"http://127.0.0.1:{port}{path}", json=body, timeout=30)
        assert response.status_code == 200, f"control {path}: {response.status_code} {response.text}"
        return response.json()

    def start(self, workflow: str, *args: Any, workflow_id: str | None = None, queue: str | None = None) -> str:
        body: dict[str, Any] = {"workflow": workflow, "args": list(args)}
        if workflow_id:
            body["workflowId"] = workflow_id
        if queue:
            body["queueName"] = queue
        return self.control("POST", "/start", body)["workflowId"]

    def send(self, workflow_id: str, message: str, topic: str) -> None:
        self.control("POST", "/send", {"destination": workflow_id, "message": message, "topic": topic})

    def workflow(self, workflow_id: str) -> dict[str, Any]:
        return self.ok("GET", f"/workflows/{workflow_id}")

    def wait_status(self, workflow_id: str, statuses: set[str] | str, timeout: float = 30) -> dict[str, Any]:
        wanted = {statuses} if isinstance(statuses, str) else statuses

        def reached() -> dict[str, Any] | None:
            response = self.api("GET", f"/workflows/{workflow_id}")
            if response.status_code != 200:
                return None
            found = response.json()
            return found if found["status"] in wanted else None

        return wait_until(reached, timeout, interval=0.1, message=f"{workflow_id} never reached {wanted}")

    def stop(self) -> None:
        for process in self.executors:
            process.stop()


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    if shutil.which("node") is None:
        pytest.fail("node is needed for the TypeScript executor")
    if not SDK_PACKAGE.exists():
        pytest.fail(f"{SDK_PACKAGE} is missing: `make test-deps` runs `npm ci` in {TS_APP_DIR}")
    with RelayProcess(tmp_path_factory.mktemp("relay-ts")) as server:
        yield server


@pytest.fixture
def ts_app(relay: RelayProcess, pg_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TsApp]:
    """A fresh application on Relay, its key, and one TypeScript executor (version ts-v1) connected and HEALTHY."""
    name = "ts-" + request.node.name.removeprefix("test_").replace("_", "-")[:27]
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{name}", json={}).status_code == 204
    created = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}-key", json={"appNames": [name]})
    assert created.status_code == 201, created.text
    app = TsApp(relay, name, created.json()["token"], pg_url, tmp_path)
    try:
        app.launch("ts-v1")
        yield app
    finally:
        app.stop()


# ----------------------------------------------------------------------------------------- tests


def test_typescript_executor_is_healthy_with_its_language_and_version(ts_app: TsApp) -> None:
    assert json.loads(SDK_PACKAGE.read_text())["version"] == SDK_VERSION
    [executor] = ts_app.ok("GET", "/executors")
    ready = ts_app.ready[0]
    assert executor["executorId"] == ready["executor_id"]
    assert executor["status"] == "HEALTHY"
    assert executor["language"] == "typescript"
    assert executor["dbosVersion"] == SDK_VERSION
    assert executor["appVersion"] == "ts-v1" == ready["app_version"]
    assert executor["executorMetadata"]["runtime"] == "node"
    assert isinstance(executor["executorMetadata"]["pid"], int)
    app = ts_app.ok("GET", "")
    assert app["status"] == "AVAILABLE" and app["language"] == "typescript"


def test_list_get_steps_children_events_and_export_import(ts_app: TsApp) -> None:
    greet = ts_app.start("greet", "ts", workflow_id="ts-greet-1")
    done = ts_app.wait_status(greet, "SUCCESS")
    assert done["workflowName"] == "greet" and done["appVersion"] == "ts-v1"
    assert done["executorId"] == ts_app.ready[0]["executor_id"]
    assert "HELLO TS!" in (done["output"] or "")
    assert "ts" in (done["input"] or "")

    listed = ts_app.ok("GET", "/workflows", params={"workflowName": "greet", "loadOutput": "true"})
    assert [w["workflowId"] for w in listed] == [greet]
    assert "HELLO TS!" in (listed[0]["output"] or "")
    assert ts_app.ok("GET", "/workflows", params={"status": "ERROR"}) == []

    steps = ts_app.ok("GET", f"/workflows/{greet}/steps")
    assert [(s["stepId"], s["stepName"]) for s in steps] == [(0, "shout"), (1, "exclaim")]
    assert "HELLO TS" in (steps[0]["output"] or "") and steps[0]["error"] is None
    assert steps[0]["startedAt"] and steps[0]["completedAt"]
    assert [s["stepId"] for s in ts_app.ok("GET", f"/workflows/{greet}/steps", params={"limit": 1, "offset": 1})] == [1]

    parent = ts_app.start("parent", "kid", workflow_id="ts-parent-1")
    assert "parent of HELLO KID!" in (ts_app.wait_status(parent, "SUCCESS")["output"] or "")
    parent_steps = ts_app.ok("GET", f"/workflows/{parent}/steps")
    children = [s["childWorkflowId"] for s in parent_steps if s["childWorkflowId"]]
    assert children, parent_steps
    found = ts_app.ok("POST", "/workflows/search", json={"parentWorkflowId": [parent], "loadOutput": True})
    assert [w["workflowId"] for w in found] == [children[0]]
    assert found[0]["parentWorkflowId"] == parent and "HELLO KID!" in (found[0]["output"] or "")
    top_level = {w["workflowId"] for w in ts_app.ok("POST", "/workflows/search", json={"hasParent": False})}
    assert top_level >= {greet, parent} and children[0] not in top_level

    chatty = ts_app.start("chatty", "c1", workflow_id="ts-chatty-1")
    ts_app.wait_status(chatty, "PENDING")
    ts_app.send(chatty, "pong", "ping")
    assert "c1 got pong" in (ts_app.wait_status(chatty, "SUCCESS")["output"] or "")
    events = ts_app.ok("GET", f"/workflows/{chatty}/events")
    assert [e["key"] for e in events] == ["progress"] and "done c1" in events[0]["value"]
    [note] = ts_app.ok("GET", f"/workflows/{chatty}/notifications")
    assert note["topic"] == "ping" and "pong" in note["message"] and note["consumed"] is True
    assert note["createdAt"]
    [stream] = ts_app.ok("GET", f"/workflows/{chatty}/streams")
    assert stream["key"] == "log"
    assert [v.strip("'\"") for v in stream["values"]] == ["line-1", "line-2"]  # inspect()ed by the SDK

    exported = ts_app.ok("GET", f"/workflows/{greet}/export")["serializedWorkflow"]
    assert exported
    assert ts_app.api("DELETE", f"/workflows/{greet}").status_code == 204
    assert ts_app.api("GET", f"/workflows/{greet}").status_code == 404
    assert ts_app.api("POST", "/workflows/import", json={"serializedWorkflow": exported}).status_code == 201
    back = ts_app.workflow(greet)
    assert back["status"] == "SUCCESS" and "HELLO TS!" in (back["output"] or "")
    assert [s["stepName"] for s in ts_app.ok("GET", f"/workflows/{greet}/steps")] == ["shout", "exclaim"]


def test_cancel_resume_fork_delete_and_bulk_operations(ts_app: TsApp) -> None:
    gate = ts_app.start("gate", "g1", workflow_id="ts-gate-1")
    ts_app.wait_status(gate, "PENDING")
    assert ts_app.api("POST", f"/workflows/{gate}/cancel", json={}).status_code == 204
    ts_app.wait_status(gate, "CANCELLED")
    assert ts_app.api("POST", f"/workflows/{gate}/resume", json={}).status_code == 204
    ts_app.wait_status(gate, {"PENDING", "ENQUEUED"})
    ts_app.send(gate, "go", "go")
    assert "g1:go" in (ts_app.wait_status(gate, "SUCCESS")["output"] or "")

    greet = ts_app.start("greet", "fork", workflow_id="ts-greet-fork")
    ts_app.wait_status(greet, "SUCCESS")
    forked = ts_app.ok("POST", f"/workflows/{greet}/fork", status=201, json={"startStep": 1})
    fork = ts_app.wait_status(forked["workflowId"], "SUCCESS")
    assert fork["forkedFrom"] == greet and "HELLO FORK!" in (fork["output"] or "")
    assert [s["stepId"] for s in ts_app.ok("GET", f"/workflows/{forked['workflowId']}/steps")] == [0, 1]
    assert ts_app.workflow(greet)["wasForkedFrom"] is True
    named = ts_app.ok("POST", f"/workflows/{greet}/fork", status=201,
                      json={"startStep": 0, "newWorkflowId": "ts-named-fork", "appVersion": "ts-v1"})  # fmt: skip
    assert named == {"workflowId": "ts-named-fork"} or named["workflowId"] == "ts-named-fork"
    ts_app.wait_status("ts-named-fork", "SUCCESS")
    found = ts_app.ok("POST", "/workflows/search", json={"forkedFrom": [greet]})
    assert {w["workflowId"] for w in found} == {forked["workflowId"], "ts-named-fork"}

    assert ts_app.api("DELETE", "/workflows/ts-named-fork").status_code == 204
    assert ts_app.api("GET", "/workflows/ts-named-fork").status_code == 404

    gates = [ts_app.start("gate", f"b{i}", workflow_id=f"ts-bulk-gate-{i}") for i in range(3)]
    for workflow_id in gates:
        ts_app.wait_status(workflow_id, "PENDING")
    assert ts_app.api("POST", "/workflows/bulk-cancel", json={"workflowIds": gates}).status_code == 204
    for workflow_id in gates:
        ts_app.wait_status(workflow_id, "CANCELLED")
    assert ts_app.api("POST", "/workflows/bulk-resume", json={"workflowIds": gates[:2]}).status_code == 204
    for workflow_id in gates[:2]:
        ts_app.wait_status(workflow_id, {"PENDING", "ENQUEUED"})
        ts_app.send(workflow_id, "go", "go")
        ts_app.wait_status(workflow_id, "SUCCESS")
    assert ts_app.workflow(gates[2])["status"] == "CANCELLED"
    assert ts_app.api("POST", "/workflows/bulk-delete", json={"workflowIds": gates}).status_code == 204
    for workflow_id in gates:
        assert ts_app.api("GET", f"/workflows/{workflow_id}").status_code == 404

    ts_app.control("POST", "/flags", {"failing": True})
    flaky = [ts_app.start("flaky", f"f{i}", workflow_id=f"ts-flaky-{i}") for i in range(2)]
    for workflow_id in flaky:
        failed = ts_app.wait_status(workflow_id, TERMINAL)
        assert failed["status"] == "ERROR" and "fragile step failed" in (failed["error"] or "")
    ts_app.control("POST", "/flags", {"failing": False})
    forks = ts_app.ok("POST", "/workflows/bulk-fork-from-failure",
                      json={"workflowIds": flaky, "fromLastFailure": True})["workflowIds"]  # fmt: skip
    assert len(forks) == 2 and not set(forks) & set(flaky)
    for workflow_id in forks:
        recovered = ts_app.wait_status(workflow_id, "SUCCESS")
        assert recovered["forkedFrom"] in flaky and "recovered" in (recovered["output"] or "")
        steps = ts_app.ok("GET", f"/workflows/{workflow_id}/steps")
        assert [s["stepName"] for s in steps] == ["first", "fragile"] and steps[1]["error"] is None


def test_queues_schedules_versions_and_aggregates(ts_app: TsApp) -> None:
    started = datetime.now(UTC)
    queues = ts_app.ok("GET", "/queues")
    [queue] = [q for q in queues if q["name"] == QUEUE]
    assert queue["workerConcurrency"] == 2 and queue["applicationName"] == ts_app.name
    assert ts_app.ok("GET", f"/queues/{QUEUE}")["workerConcurrency"] == 2
    assert ts_app.api("GET", "/queues/no_such_queue").status_code == 404

    queued = ts_app.start("greet", "queued", workflow_id="ts-queued-1", queue=QUEUE)
    done = ts_app.wait_status(queued, "SUCCESS")
    assert done["queueName"] == QUEUE and done["dequeuedAt"]
    assert [w["workflowId"] for w in ts_app.ok("POST", "/workflows/search", json={"queueName": [QUEUE]})] == [queued]

    [schedule] = ts_app.ok("GET", "/schedules")
    assert schedule["scheduleName"] == SCHEDULE and schedule["status"] == "ACTIVE"
    assert schedule["cronExpression"] == "0 0 1 1 *" and schedule["workflowName"] == "tick"
    assert "relay-tests" in (schedule["context"] or "")
    assert ts_app.api("POST", f"/schedules/{SCHEDULE}/pause").status_code == 204
    assert ts_app.ok("GET", f"/schedules/{SCHEDULE}")["status"] == "PAUSED"
    assert [s["scheduleName"] for s in ts_app.ok("GET", "/schedules", params={"status": "PAUSED"})] == [SCHEDULE]
    assert ts_app.ok("GET", "/schedules", params={"status": "ACTIVE"}) == []
    assert ts_app.api("POST", f"/schedules/{SCHEDULE}/resume").status_code == 204
    assert ts_app.ok("GET", f"/schedules/{SCHEDULE}")["status"] == "ACTIVE"
    assert ts_app.api("GET", "/schedules/no_such_schedule").status_code == 404

    triggered = ts_app.ok("POST", f"/schedules/{SCHEDULE}/trigger", status=201)["workflowId"]
    tick = ts_app.wait_status(triggered, "SUCCESS")
    assert tick["workflowName"] == "tick"
    # Midnight of January 1st 2024, 2025 and 2026: three runs, each its own workflow.
    backfill = ts_app.ok("POST", f"/schedules/{SCHEDULE}/backfill",
                         json={"startTime": "2023-12-31T00:00:00Z", "endTime": "2026-01-02T00:00:00Z"})  # fmt: skip
    assert len(backfill["workflowIds"]) == 3 and len(set(backfill["workflowIds"])) == 3
    for workflow_id in backfill["workflowIds"]:
        assert ts_app.wait_status(workflow_id, "SUCCESS")["workflowName"] == "tick"
    assert len(ts_app.ok("POST", "/workflows/search", json={"scheduleName": [SCHEDULE]})) >= 3

    aggregates = ts_app.ok("POST", "/workflows/aggregates",
                           json={"groupByWorkflowName": True, "selectCount": True, "status": ["SUCCESS"]})  # fmt: skip
    counts = {row["group"]["workflowName"]: row["count"] for row in aggregates}
    assert counts == {"greet": 1, "tick": 4}, aggregates
    step_rows = ts_app.ok("POST", "/steps/aggregates", json={"groupByFunctionName": True, "selectCount": True})
    step_counts = {row["group"].get("functionName", row["group"].get("stepName")): row["count"] for row in step_rows}
    assert step_counts.get("shout") == 1 and step_counts.get("tick_step") == 4, step_rows

    window = {"startTime": (started - timedelta(minutes=1)).isoformat(), "endTime": datetime.now(UTC).isoformat()}
    metrics = ts_app.ok("GET", "/metrics", params=window)
    app_id = ts_app.ok("GET", "")["id"]
    assert metrics and all(m["appId"] == app_id for m in metrics), metrics
    by_type = {(m["metricType"], m["metricName"]): m["value"] for m in metrics}
    assert by_type.get(("workflow_count", "greet")) == 1 and by_type.get(("workflow_count", "tick")) == 4, metrics
    assert by_type.get(("step_count", "shout")) == 1, metrics

    # A second executor with a newer version shares the system database; then the first version is made latest.
    ts_app.launch("ts-v2")
    executors = ts_app.ok("GET", "/executors")
    assert sorted(e["appVersion"] for e in executors if e["status"] == "HEALTHY") == ["ts-v1", "ts-v2"]
    versions = ts_app.ok("GET", "/versions")
    by_name = {v["versionName"]: v for v in versions}
    assert {"ts-v1", "ts-v2"} <= set(by_name), versions
    assert by_name["ts-v2"]["versionTimestamp"] > by_name["ts-v1"]["versionTimestamp"]
    assert ts_app.api("PATCH", "/versions/latest", json={"versionName": "ts-v1"}).status_code == 204
    by_name = {v["versionName"]: v for v in ts_app.ok("GET", "/versions")}
    assert by_name["ts-v1"]["versionTimestamp"] > by_name["ts-v2"]["versionTimestamp"]


def test_a_killed_executors_workflows_are_recovered_by_its_peer(ts_app: TsApp) -> None:
    """SIGKILL one TypeScript executor while its workflow waits: after the grace period Relay declares it DEAD,
    has the other (same version) recover it, and the workflow finishes on the peer; the dead record goes."""
    app = ts_app
    assert app.api("PATCH", "", json={"executorTimeoutSecs": 1}).status_code == 204
    peer = app.launch("ts-v1", name="ts-peer")
    doomed = app.ready[0]["executor_id"]
    workflow_id = app.start("gate", "recover-me", workflow_id="ts-recover-1")
    assert app.wait_status(workflow_id, "PENDING")["executorId"] == doomed

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
    wait_until(lambda: doomed not in {e["executorId"] for e in app.ok("GET", "/executors")}, 30,
               message="the dead executor's record was not deleted after its recovery")
    recoveries = app.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app.name}/recoveries").json()["recoveries"]
    assert [(r["executorId"], r["peer"]) for r in recoveries if r["executorId"] == doomed] == [
        (doomed, peer["executor_id"])], recoveries
