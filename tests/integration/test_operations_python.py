"""Issue 3, end to end: every executor-served operation of the Conductor API v2 through a real `relay serve`,
against real DBOS 3.2.0 executors (tests/integration/executor_apps/catalog_app.py), two application versions
sharing one PostgreSQL system database. Each operation's effect is read back through the API, and every
answer is checked against the schema of Conductor's reference document.

The last tests use a scripted executor socket (tests/integration/fake_executor.py) on a second server with a
small RELAY_REQUEST_TIMEOUT_S: timeouts (504), version skew (501), answers out of order, an executor that
leaves mid-request, an executor error (502), and bad input answered before any frame is sent. What the real
SDK reports as the caller's mistake (a missing workflow, an unreadable import, an attributes filter on SQLite) is
a 4xx.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.fake_executor import FakeExecutor
from tests.support import pg
from tests.support.api_shapes import bad_times
from tests.support.openapi_ref import check, reference, response_schema
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "catalog_app.py"
MINIMAL_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "minimal_app.py"
ORG = "local"
APP = "catalog"
BASE = f"/v2/orgs/{ORG}/apps/{APP}"
DEADLINE_S = 30.0
QUEUE = "catalog-queue"


# ------------------------------------------------------------------------------------------ helpers


def _templates() -> list[tuple[re.Pattern[str], str]]:
    found = []
    for path in reference()["paths"]:
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path))
        found.append((re.compile(f"^{pattern}$"), path))
    # Literal segments win over parameters (/workflows/search before /workflows/{workflowId}).
    found.sort(key=lambda item: item[1].count("{"))
    return found


TEMPLATES = _templates()


def v2(relay: RelayProcess, method: str, path: str, expect: int, **kwargs: Any) -> Any:
    """Call the API, assert the status, check the body against the reference schema; return the JSON."""
    response = relay.api(method, path, **kwargs)
    assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text[:800]}"
    if response.status_code >= 400:
        assert response.headers["Content-Type"].startswith("application/problem+json"), response.headers
        problem = response.json()
        assert not check(reference(), {"$ref": "#/components/schemas/ErrorModel"}, problem)
        assert "Traceback" not in problem["detail"]
        return problem
    if not response.content:
        assert "Content-Type" not in response.headers, response.headers  # 204, or 201 without a body
        return None
    body = response.json()
    if not path.endswith("/requests"):  # the raw endpoint answers the executor's frame as it came
        assert not bad_times(body), f"{method} {path}: times not in the API's format: {bad_times(body)[:5]}"
    bare = path.split("?", 1)[0]
    template = next((t for pattern, t in TEMPLATES if pattern.match(bare)
                     and method.lower() in reference()["paths"][t]), None)
    if template is not None:
        schema = response_schema(reference(), template, method, str(expect))
        errors = check(reference(), schema, body)
        assert not errors, f"{method} {path} does not match the reference schema: {errors[:5]}"
    return body


def eventually(predicate: Any, what: str, timeout: float = DEADLINE_S) -> Any:
    return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))


def workflow(relay: RelayProcess, workflow_id: str) -> dict[str, Any]:
    return v2(relay, "GET", f"{BASE}/workflows/{workflow_id}", 200)


def wait_status(relay: RelayProcess, workflow_id: str, *statuses: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        response = relay.api("GET", f"{BASE}/workflows/{workflow_id}")
        if response.status_code == 200 and response.json()["status"] in statuses:
            return response.json()
        return None

    return eventually(reached, f"workflow {workflow_id} never reached {statuses}")


def search(relay: RelayProcess, **body: Any) -> list[dict[str, Any]]:
    return v2(relay, "POST", f"{BASE}/workflows/search", 200, json=body)


def read_ready(executor: ExecutorProcess) -> dict[str, Any]:
    executor.wait_for_log("READY ", timeout=60)
    line = next(line for line in executor.log_text().splitlines() if line.startswith("READY "))
    return json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]


@dataclass
class World:
    relay: RelayProcess
    run: str
    ids: dict[str, str]
    v1: str  # executor ids
    v2: str


@pytest.fixture(scope="module")
def world(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    database = pg.create_database(pg_server)
    relay = RelayProcess(tmp_path_factory.mktemp("relay-data"), env={"RELAY_REQUEST_TIMEOUT_S": "20"})
    executors: list[ExecutorProcess] = []
    try:
        relay.start()
        assert relay.api("PUT", f"{BASE}", json={}).status_code == 204
        key = relay.api("POST", f"/v2/orgs/{ORG}/tokens/catalog-key", json={"appNames": [APP]}).json()["token"]
        run = f"r{secrets.token_hex(3)}"
        env = {"APP_NAME": APP, "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key,
               "SYSTEM_DATABASE_URL": database, "RUN": run}
        # v1 first (it runs the scenario and creates the schedule), then v2: the latest version.
        for version, role in (("v1", "main"), ("v2", "peer")):
            executor = ExecutorProcess(APP_SCRIPT, name=f"catalog-{version}", cwd=tmp_path_factory.mktemp(version),
                                       env={**env, "APP_VERSION": version, "ROLE": role})
            executors.append(executor.start())
            ready = read_ready(executor)
            assert ready["app_version"] == version
        ids = read_ready(executors[0])["workflows"]
        v1_id, v2_id = (read_ready(e)["executor_id"] for e in executors)
        eventually(
            lambda: {e["executorId"]: e["status"] for e in relay.api("GET", f"{BASE}/executors").json()}
            == {v1_id: "HEALTHY", v2_id: "HEALTHY"},
            "both executors HEALTHY",
        )
        yield World(relay, run, ids, v1_id, v2_id)
    finally:
        # An SDK takes up to ~10 s to shut down (it joins its conductor thread): SIGKILL after 3 s, in parallel.
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda e: e.stop(timeout=3), executors))
        relay.stop()
        pg.drop_database(database)


def settled(w: World) -> None:
    """The scenario has run: everything finished but the waiters (PENDING, until a test cancels them) and the
    flaky one (ERROR)."""
    for name in ("greet", "queued", "parent", "messenger"):
        wait_status(w.relay, w.ids[name], "SUCCESS")
    wait_status(w.relay, w.ids["flaky"], "ERROR")
    for i in range(3):
        wait_status(w.relay, w.ids[f"waiter{i}"], "PENDING", "ENQUEUED", "CANCELLED")


# ------------------------------------------------------------------------------- reading workflows


def test_aggregates_and_metrics_count_what_ran(world: World) -> None:
    w = world
    settled(w)
    rows = v2(w.relay, "POST", f"{BASE}/workflows/aggregates", 200, json={
        "groupByStatus": True, "groupByWorkflowName": True, "selectCount": True, "selectMinCreatedAt": True,
        "workflowIdPrefix": [w.run],
    })
    counts = {(r["group"]["workflowName"], r["group"]["status"]): r["count"] for r in rows}
    assert counts == {
        ("greet", "SUCCESS"): 2, ("parent", "SUCCESS"): 1, ("child", "SUCCESS"): 2,
        ("messenger", "SUCCESS"): 1, ("flaky", "ERROR"): 1, ("waiter", "PENDING"): 3,
    }
    assert all(r["minCreatedAt"].endswith("Z") for r in rows)

    # Step aggregates agree with the steps each workflow lists.
    listed: dict[str, int] = {}
    for wf in search(w.relay, workflowIdPrefix=[w.run]):
        for step in v2(w.relay, "GET", f"{BASE}/workflows/{wf['workflowId']}/steps", 200):
            listed[step["stepName"]] = listed.get(step["stepName"], 0) + 1
    rows = v2(w.relay, "POST", f"{BASE}/steps/aggregates", 200,
              json={"groupByFunctionName": True, "workflowIdPrefix": [w.run]})
    assert {r["group"]["stepName"]: r["count"] for r in rows} == listed
    assert listed["shout"] == 5 and listed["count_letters"] == 2  # greet x2, child x2, flaky x1

    # Metrics: workflow and step counts since the test started, from get_metrics.
    window = {"startTime": "2020-01-01T00:00:00Z", "endTime": "2100-01-01T00:00:00Z"}
    metrics = v2(w.relay, "GET", f"{BASE}/metrics", 200, params=window)
    by_name = {(m["metricType"], m["metricName"]): m["value"] for m in metrics}
    assert by_name[("workflow_count", "waiter")] >= 3
    assert by_name[("workflow_count", "parent")] >= 1
    assert by_name[("step_count", "shout")] >= 5
    app_id = v2(w.relay, "GET", BASE, 200)["id"]
    assert {m["appId"] for m in metrics} == {app_id}


def test_list_search_get_and_workflow_data(world: World) -> None:
    w = world
    settled(w)
    listed = v2(w.relay, "GET", f"{BASE}/workflows", 200,
                params={"workflowName": "greet", "status": "SUCCESS", "sortDesc": "true", "loadOutput": "true"})
    ours = [wf for wf in listed if wf["workflowId"] in (w.ids["greet"], w.ids["queued"])]
    assert {wf["output"] for wf in ours} == {"HELLO RELAY:10", "HELLO QUEUE:10"}
    assert all(wf["input"] is None for wf in ours)  # loadInput not asked for
    created = [wf["createdAt"] for wf in listed]
    assert created == sorted(created, reverse=True)
    assert len(v2(w.relay, "GET", f"{BASE}/workflows", 200, params={"limit": 2})) == 2

    got = workflow(w.relay, w.ids["greet"])
    assert got["input"] and "relay" in got["input"] and got["output"] == "HELLO RELAY:10"
    assert got["appVersion"] == "v1" and got["executorId"] == w.v1 and got["workflowName"] == "greet"
    assert got["completedAt"] >= got["createdAt"]
    queued = workflow(w.relay, w.ids["queued"])
    assert queued["queueName"] == QUEUE and queued["dequeuedAt"] is not None

    found = search(w.relay, workflowIds=[w.ids["greet"], w.ids["flaky"]], loadInput=True, loadOutput=True)
    assert {wf["workflowId"]: wf["status"] for wf in found} == {w.ids["greet"]: "SUCCESS", w.ids["flaky"]: "ERROR"}
    assert all(wf["input"] is not None for wf in found)
    assert "always fails" in next(wf["error"] for wf in found if wf["workflowId"] == w.ids["flaky"])
    children = search(w.relay, parentWorkflowId=[w.ids["parent"]])
    assert len(children) == 2 and {c["workflowName"] for c in children} == {"child"}
    assert {c["workflowId"] for c in search(w.relay, workflowIdPrefix=[w.run], hasParent=True)} == {
        c["workflowId"] for c in children}
    # queuesOnly: workflows of queues, by default only those still waiting or running.
    assert [wf["workflowId"] for wf in search(w.relay, queueName=[QUEUE], workflowIdPrefix=[w.run],
                                              queuesOnly=True, status=["SUCCESS"])] == [w.ids["queued"]]
    assert search(w.relay, queueName=[QUEUE], workflowIdPrefix=[w.run], queuesOnly=True) == []
    assert [wf["workflowId"] for wf in search(w.relay, workflowIdPrefix=[w.run], status=["ERROR"])] == [
        w.ids["flaky"]]
    assert search(w.relay, workflowIdPrefix=[w.run], endTime="2000-01-01T00:00:00Z") == []
    assert len(search(w.relay, workflowIdPrefix=[w.run], startTime="2000-01-01T00:00:00+02:00", limit=3)) == 3

    steps = v2(w.relay, "GET", f"{BASE}/workflows/{w.ids['greet']}/steps", 200)
    assert [(s["stepId"], s["stepName"], s["output"]) for s in steps] == [
        (1, "shout", "HELLO RELAY"), (2, "count_letters", "10")]
    assert all(s["startedAt"] <= s["completedAt"] for s in steps)
    assert [s["stepId"] for s in v2(w.relay, "GET", f"{BASE}/workflows/{w.ids['greet']}/steps", 200,
                                    params={"limit": 1, "offset": 1})] == [2]
    parent_steps = v2(w.relay, "GET", f"{BASE}/workflows/{w.ids['parent']}/steps", 200)
    assert {s["childWorkflowId"] for s in parent_steps if s["stepName"] == "child"} == {
        c["workflowId"] for c in children}

    messenger = w.ids["messenger"]
    events = v2(w.relay, "GET", f"{BASE}/workflows/{messenger}/events", 200)
    assert {e["key"]: e["value"] for e in events} == {"progress": "started", "reply": "got hi there"}
    (note,) = v2(w.relay, "GET", f"{BASE}/workflows/{messenger}/notifications", 200)
    assert (note["topic"], note["message"], note["consumed"]) == ("greeting", "hi there", True)
    assert note["createdAt"].endswith("Z")
    assert v2(w.relay, "GET", f"{BASE}/workflows/{messenger}/streams", 200) == [
        {"key": "chunks", "values": ["alpha", "beta"]}]

    for suffix in ("", "/steps", "/events", "/notifications", "/streams", "/export"):
        problem = v2(w.relay, "GET", f"{BASE}/workflows/{w.run}-no-such{suffix}", 404)
        assert "not found" in problem["detail"]


# ----------------------------------------------------------------------------------- managing them


def test_cancel_and_resume_one_and_in_bulk(world: World) -> None:
    w = world
    settled(w)
    first, second, third = (w.ids[f"waiter{i}"] for i in range(3))
    v2(w.relay, "POST", f"{BASE}/workflows/{first}/cancel", 204, json={"cancelChildren": True})
    assert workflow(w.relay, first)["status"] == "CANCELLED"
    v2(w.relay, "POST", f"{BASE}/workflows/{first}/resume", 204, json={})
    wait_status(w.relay, first, "PENDING", "ENQUEUED")

    v2(w.relay, "POST", f"{BASE}/workflows/bulk-cancel", 204, json={"workflowIds": [first, second, third]})
    assert {wf["workflowId"]: wf["status"] for wf in search(w.relay, workflowIds=[first, second, third])} == {
        first: "CANCELLED", second: "CANCELLED", third: "CANCELLED"}
    v2(w.relay, "POST", f"{BASE}/workflows/bulk-resume", 204, json={"workflowIds": [second, third]})
    for workflow_id in (second, third):
        wait_status(w.relay, workflow_id, "PENDING", "ENQUEUED")
    assert workflow(w.relay, first)["status"] == "CANCELLED"
    v2(w.relay, "POST", f"{BASE}/workflows/bulk-cancel", 204,
       json={"workflowIds": [second, third], "cancelChildren": False})
    for workflow_id in (second, third):
        wait_status(w.relay, workflow_id, "CANCELLED")


def test_fork_and_fork_from_failure_run_to_success(world: World) -> None:
    w = world
    settled(w)
    forked = v2(w.relay, "POST", f"{BASE}/workflows/{w.ids['greet']}/fork", 201, json={})["workflowId"]
    done = wait_status(w.relay, forked, "SUCCESS", "ERROR")
    assert (done["status"], done["forkedFrom"], done["output"]) == ("SUCCESS", w.ids["greet"], "HELLO RELAY:10")
    assert workflow(w.relay, w.ids["greet"])["wasForkedFrom"] is True

    named = f"{w.run}-fork-from-2"
    body = {"startStep": 2, "newWorkflowId": named, "appVersion": "v2", "queueName": QUEUE}
    assert v2(w.relay, "POST", f"{BASE}/workflows/{w.ids['greet']}/fork", 201, json=body) == {"workflowId": named}
    done = wait_status(w.relay, named, "SUCCESS", "ERROR")
    assert (done["status"], done["appVersion"], done["queueName"]) == ("SUCCESS", "v2", QUEUE)
    steps = v2(w.relay, "GET", f"{BASE}/workflows/{named}/steps", 200)
    assert [s["stepName"] for s in steps] == ["shout", "count_letters"]  # step 1 copied, step 2 re-run

    out = v2(w.relay, "POST", f"{BASE}/workflows/bulk-fork-from-failure", 200,
             json={"workflowIds": [w.ids["flaky"]], "fromLastFailure": True, "appVersion": "v1"})
    (refork,) = out["workflowIds"]
    done = wait_status(w.relay, refork, "SUCCESS", "ERROR")
    assert (done["status"], done["output"], done["forkedFrom"], done["appVersion"]) == (
        "SUCCESS", "recovered", w.ids["flaky"], "v1")
    # From the last failure: the step before it is kept, the failed one ran again.
    assert [s["stepName"] for s in v2(w.relay, "GET", f"{BASE}/workflows/{refork}/steps", 200)] == [
        "shout", "fragile_step"]


def test_export_delete_import(world: World) -> None:
    w = world
    settled(w)
    parent = w.ids["parent"]
    before = workflow(w.relay, parent)
    steps_before = v2(w.relay, "GET", f"{BASE}/workflows/{parent}/steps", 200)
    exported = v2(w.relay, "GET", f"{BASE}/workflows/{parent}/export", 200, params={"exportChildren": "true"})
    children = [c["workflowId"] for c in search(w.relay, parentWorkflowId=[parent])]

    v2(w.relay, "DELETE", f"{BASE}/workflows/{parent}", 204, params={"deleteChildren": "true"})
    v2(w.relay, "GET", f"{BASE}/workflows/{parent}", 404)
    for child in children:
        v2(w.relay, "GET", f"{BASE}/workflows/{child}", 404)

    v2(w.relay, "POST", f"{BASE}/workflows/import", 201, json=exported)
    after = workflow(w.relay, parent)
    assert {k: after[k] for k in ("status", "output", "input", "createdAt", "workflowName")} == {
        k: before[k] for k in ("status", "output", "input", "createdAt", "workflowName")}
    assert v2(w.relay, "GET", f"{BASE}/workflows/{parent}/steps", 200) == steps_before
    assert {workflow(w.relay, c)["status"] for c in children} == {"SUCCESS"}

    # Bulk delete: gone, both of them.
    v2(w.relay, "POST", f"{BASE}/workflows/bulk-delete", 204, json={"workflowIds": children, "deleteChildren": False})
    for child in children:
        v2(w.relay, "GET", f"{BASE}/workflows/{child}", 404)


# ------------------------------------------------------------------------- queues, schedules, versions


def test_queues(world: World) -> None:
    w = world
    queues = v2(w.relay, "GET", f"{BASE}/queues", 200)
    (queue,) = [q for q in queues if q["name"] == QUEUE]
    assert (queue["concurrency"], queue["workerConcurrency"], queue["applicationName"]) == (4, 2, APP)
    assert v2(w.relay, "GET", f"{BASE}/queues/{QUEUE}", 200) == queue
    v2(w.relay, "GET", f"{BASE}/queues/no-such-queue", 404)


def test_schedules_pause_resume_trigger_backfill(world: World) -> None:
    w = world
    name = f"{w.run}-nightly"
    (listed,) = v2(w.relay, "GET", f"{BASE}/schedules", 200, params={"scheduleNamePrefix": w.run})
    assert (listed["scheduleName"], listed["workflowName"], listed["cronExpression"], listed["status"]) == (
        name, "nightly", "0 0 0 1 1 *", "ACTIVE")
    assert listed["context"] == "ctx"
    assert v2(w.relay, "GET", f"{BASE}/schedules", 200,
              params={"scheduleNamePrefix": w.run, "loadContext": "false"})[0]["context"] is None
    assert v2(w.relay, "GET", f"{BASE}/schedules/{name}", 200)["scheduleId"] == listed["scheduleId"]

    v2(w.relay, "POST", f"{BASE}/schedules/{name}/pause", 204)
    assert v2(w.relay, "GET", f"{BASE}/schedules/{name}", 200)["status"] == "PAUSED"
    assert [s["scheduleName"] for s in v2(w.relay, "GET", f"{BASE}/schedules", 200,
                                          params={"status": "PAUSED", "scheduleNamePrefix": w.run})] == [name]
    v2(w.relay, "POST", f"{BASE}/schedules/{name}/resume", 204)
    assert v2(w.relay, "GET", f"{BASE}/schedules/{name}", 200)["status"] == "ACTIVE"

    triggered = v2(w.relay, "POST", f"{BASE}/schedules/{name}/trigger", 201)["workflowId"]
    assert wait_status(w.relay, triggered, "SUCCESS")["scheduleName"] == name

    # Every January 1st, from 2020-01-01 (exclusive: the next fire time after the start) to mid-2024: 4 runs.
    backfilled = v2(w.relay, "POST", f"{BASE}/schedules/{name}/backfill", 200,
                    json={"startTime": "2020-01-01T00:00:00Z", "endTime": "2024-06-01T02:00:00+02:00"})
    assert len(backfilled["workflowIds"]) == 4
    outputs = sorted(wait_status(w.relay, wf, "SUCCESS")["output"] for wf in backfilled["workflowIds"])
    assert outputs == [f"{year}-01-01T00:00:00+00:00 ctx" for year in (2021, 2022, 2023, 2024)]
    ran = search(w.relay, scheduleName=[name])
    assert {wf["workflowId"] for wf in ran} == {triggered, *backfilled["workflowIds"]}

    for action in ("pause", "resume", "trigger"):
        v2(w.relay, "POST", f"{BASE}/schedules/no-such-schedule/{action}", 404)
    v2(w.relay, "GET", f"{BASE}/schedules/no-such-schedule", 404)


def test_versions_and_the_latest_version(world: World) -> None:
    w = world
    versions = v2(w.relay, "GET", f"{BASE}/versions", 200)
    assert [v["versionName"] for v in versions] == ["v2", "v1"]  # latest first
    v2(w.relay, "PATCH", f"{BASE}/versions/latest", 204, json={"versionName": "v1"})
    versions = v2(w.relay, "GET", f"{BASE}/versions", 200)
    assert [v["versionName"] for v in versions] == ["v1", "v2"]
    assert versions[0]["versionTimestamp"] > versions[1]["versionTimestamp"]
    v2(w.relay, "PATCH", f"{BASE}/versions/latest", 404, json={"versionName": "v9"})
    v2(w.relay, "PATCH", f"{BASE}/versions/latest", 204, json={"versionName": "v2"})
    assert v2(w.relay, "GET", f"{BASE}/versions", 200)[0]["versionName"] == "v2"


def test_raw_requests_to_one_executor(world: World) -> None:
    w = world
    raw = f"/relay/v1/orgs/{ORG}/apps/{APP}/executors/{w.v1}/requests"
    answer = v2(w.relay, "POST", raw, 200, json={"type": "list_application_versions"})
    assert answer["type"] == "list_application_versions" and answer["error_message"] is None
    assert {v["version_name"] for v in answer["output"]} == {"v1", "v2"}
    answer = v2(w.relay, "POST", raw, 200, json={"type": "get_workflow", "workflow_id": w.ids["greet"]})
    assert answer["output"]["WorkflowUUID"] == w.ids["greet"]  # the wire record, not translated
    answer = v2(w.relay, "POST", raw, 200, json={"type": "frobnicate_workflow", "workflow_id": "x"})
    assert answer == {"type": "frobnicate_workflow", "request_id": answer["request_id"],
                      "error_message": "Unknown message type"}
    v2(w.relay, "POST", raw, 422, json={"type": "get_workflow", "request_id": "mine"})
    v2(w.relay, "POST", f"/relay/v1/orgs/{ORG}/apps/{APP}/executors/nobody/requests", 404, json={"type": "x"})


def test_every_action_is_audited_with_who_what_where_and_outcome(world: World) -> None:
    """Issue 14: workflow actions, exports, bulk operations, raw requests that act, and refusals, each an
    Operation event with who (the key's name), what, the targets, the outcome and the caller's address; reads
    are not; a caller nobody authenticated leaves nothing."""
    w = world
    settled(w)
    name = f"auditor-{w.run}"
    key = v2(w.relay, "POST", f"/v2/orgs/{ORG}/tokens/{name}", 201, json={"appNames": [APP]})["token"]

    def as_key(method: str, path: str, **kwargs: Any) -> requests.Response:
        return w.relay.api(method, path, token=key, **kwargs)

    forked = as_key("POST", f"{BASE}/workflows/{w.ids['greet']}/fork", json={}).json()["workflowId"]
    wait_status(w.relay, forked, "SUCCESS", "ERROR")
    assert as_key("GET", f"{BASE}/workflows/{forked}/export").status_code == 200
    assert as_key("POST", f"{BASE}/workflows/{forked}/cancel", json={}).status_code == 204
    bulk_ids = [forked, f"{w.run}-x"]  # one unknown: the whole request is refused, nothing done
    assert as_key("POST", f"{BASE}/workflows/bulk-cancel", json={"workflowIds": bulk_ids}).status_code == 404
    assert as_key("DELETE", f"{BASE}/workflows/{forked}").status_code == 204
    raw = f"/relay/v1/orgs/{ORG}/apps/{APP}/executors/{w.v1}/requests"
    assert as_key("POST", raw, json={"type": "cancel", "workflow_id": f"{w.run}-raw"}).status_code == 200
    # Reads leave no entry: a search, a get, a raw read.
    assert as_key("POST", f"{BASE}/workflows/search", json={"workflowIds": [forked]}).status_code == 200
    assert as_key("GET", f"{BASE}/workflows/{w.ids['greet']}").status_code == 200
    assert as_key("POST", raw, json={"type": "get_workflow", "workflow_id": forked}).status_code == 200
    # Refused: a key may not act on an organization's keys (403), an invalid body (422).
    assert as_key("DELETE", f"/v2/orgs/{ORG}/tokens/{name}").status_code == 403
    assert as_key("POST", f"{BASE}/workflows/{forked}/fork", json={"startStep": -1}).status_code == 422
    # Nobody authenticated: nothing done, nothing recorded.
    assert w.relay.api("POST", f"{BASE}/workflows/{forked}/cancel", token="", json={}).status_code == 401

    entries = v2(w.relay, "GET", f"/v2/orgs/{ORG}/audit-logs", 200, params={"subject": name, "limit": 100})
    seen = [(e["operation"], e["status"], e["target"]["type"], e["target"]["id"]) for e in reversed(entries)]
    assert seen == [
        ("forkWorkflow", "success", "workflow", w.ids["greet"]),
        ("exportWorkflow", "success", "workflow", forked),
        ("cancelWorkflow", "success", "workflow", forked),
        ("bulkCancelWorkflows", "failure", "workflow", forked),
        ("deleteWorkflow", "success", "workflow", forked),
        ("sendRawExecutorRequest", "success", "application", APP),
        ("deleteToken", "failure", "token", name),
        ("forkWorkflow", "failure", "workflow", forked),
    ]
    assert {e["sourceIp"] for e in entries} == {"127.0.0.1"}
    assert {(e["subject"]["type"], e["subject"]["id"]) for e in entries} == {("api_key", name)}
    bulk = next(e for e in entries if e["operation"] == "bulkCancelWorkflows")
    assert bulk["details"]["targets"] == [forked, f"{w.run}-x"] and bulk["details"]["via"] == "api"
    assert bulk["details"]["status"] == 404 and f"'{w.run}-x'" in bulk["details"]["detail"]
    refused = next(e for e in entries if e["operation"] == "deleteToken")
    assert refused["details"]["status"] == 403 and refused["details"]["detail"]
    assert next(e for e in entries if e["operation"] == "sendRawExecutorRequest")["details"]["targets"] == [
        w.v1, f"{w.run}-raw"]
    assert key not in json.dumps(entries)
    # The same entries are events of the log (`relay events` reads /relay/v1/events).
    events = v2(w.relay, "GET", "/relay/v1/events", 200, params={"type": "Operation", "limit": 10000})["events"]
    performed = [e for e in events if e["details"]["by"] == f"api_key:{name}"]
    assert len(performed) == len(entries)


# ------------------------------------------------------------------------------- concurrency, errors


def test_many_requests_in_flight_over_one_socket(world: World) -> None:
    w = world
    settled(w)
    targets = [w.ids[n] for n in ("greet", "queued", "parent", "messenger", "flaky")] * 10

    def get(workflow_id: str) -> tuple[int, str]:
        response = requests.get(f"{w.relay.base_url}{BASE}/workflows/{workflow_id}", timeout=30,
                                headers={"Authorization": f"Bearer {w.relay.admin_token}"})
        return response.status_code, response.json().get("workflowId", "")

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(get, targets))
    elapsed = time.monotonic() - started
    assert results == [(200, t) for t in targets]
    assert elapsed < 20, f"50 concurrent GETs took {elapsed:.1f} s"


def test_errors_and_bad_input(world: World) -> None:
    w = world
    # Not an export at all: refused before any frame (every SDK exports base64 of gzip).
    problem = v2(w.relay, "POST", f"{BASE}/workflows/import", 422, json={"serializedWorkflow": "not an export"})
    assert problem["errors"][0]["location"] == "body.serializedWorkflow"

    # No executor connected: 503.
    v2(w.relay, "PUT", f"/v2/orgs/{ORG}/apps/empty-app", 204, json={})
    assert "no executor" in v2(w.relay, "GET", f"/v2/orgs/{ORG}/apps/empty-app/workflows", 503)["detail"]

    bad = [
        ("GET", f"{BASE}/workflows?limit=0", 422, "query.limit"),
        ("GET", f"{BASE}/workflows?limit=ten", 422, "query.limit"),
        ("GET", f"{BASE}/workflows?limit=-1", 422, "query.limit"),
        ("GET", f"{BASE}/workflows?offset=-1", 422, "query.offset"),
        ("GET", f"{BASE}/workflows?status=DONE", 422, "query.status"),
        ("GET", f"{BASE}/workflows?sortDesc=maybe", 422, "query.sortDesc"),
        ("GET", f"{BASE}/workflows/{w.ids['greet']}/steps?limit=-5", 422, "query.limit"),
        ("GET", f"{BASE}/metrics?startTime=2024-01-01T00:00:00Z", 422, "query.endTime"),
        ("GET", f"{BASE}/metrics?startTime=yesterday&endTime=2024-01-01T00:00:00Z", 422, "query.startTime"),
        ("GET", f"{BASE}/metrics?startTime=2024-01-02T00:00:00Z&endTime=2024-01-01T00:00:00Z", 422,
         "query.endTime"),
        ("GET", f"/v2/orgs/{ORG}/apps/no-such-app/workflows", 404, None),
        ("GET", f"/v2/orgs/nosuchorg/apps/{APP}/workflows", 404, None),
        ("GET", f"/v2/orgs/{ORG}/apps/A!/workflows", 422, "path.appName"),
    ]
    for method, path, status, location in bad:
        problem = v2(w.relay, method, path, status)
        if location:
            assert problem["errors"][0]["location"] == location, (path, problem)
    bodies = [
        ("workflows/search", {"status": "SUCCESS"}, "body.status"),
        ("workflows/search", {"status": ["SUCCESS", "FINISHED"]}, "body.status[1]"),
        ("workflows/search", {"startTime": "2024-13-01T00:00:00Z"}, "body.startTime"),
        ("workflows/search", {"endTime": "2024-01-01T00:00:00"}, "body.endTime"),
        ("workflows/search", {"limit": "5"}, "body.limit"),
        ("workflows/search", {"loadInput": "yes"}, "body.loadInput"),
        ("workflows/search", {"colour": "blue"}, "body.colour"),
        ("workflows/aggregates", {"selectCount": True}, "body"),
        ("steps/aggregates", {"groupByStatus": 1}, "body.groupByStatus"),
        ("workflows/bulk-cancel", {"cancelChildren": True}, "body.workflowIds"),
        ("workflows/bulk-resume", {"workflowIds": []}, "body.workflowIds"),
        ("workflows/bulk-delete", {"workflowIds": [7]}, "body.workflowIds[0]"),
        ("workflows/bulk-fork-from-failure", {"workflowIds": ["a"]}, "body"),
        ("workflows/bulk-fork-from-failure", {"workflowIds": ["a"], "fromStep": 1, "fromLastStep": True}, "body"),
        ("workflows/import", {}, "body.serializedWorkflow"),
        (f"workflows/{w.ids['greet']}/fork", {"startStep": -1}, "body.startStep"),
        (f"workflows/{w.ids['greet']}/cancel", {"cancelChildren": "no"}, "body.cancelChildren"),
        (f"schedules/{w.run}-nightly/backfill", {"startTime": "2024-01-02T00:00:00Z",
                                                 "endTime": "2024-01-01T00:00:00Z"}, "body.endTime"),
        (f"schedules/{w.run}-nightly/backfill", {"startTime": "2024-01-02T00:00:00Z"}, "body.endTime"),
    ]
    for path, body, location in bodies:
        problem = v2(w.relay, "POST", f"{BASE}/{path}", 422, json=body)
        assert problem["errors"][0]["location"] == location, (path, body, problem)
    v2(w.relay, "PATCH", f"{BASE}/versions/latest", 422, json={"versionName": 2})
    v2(w.relay, "POST", f"{BASE}/workflows/search", 400, data="{not json", headers={"Content-Type": "application/json"})
    v2(w.relay, "GET", f"{BASE}/workflows", 401, token="")
    assert requests.get(f"{w.relay.base_url}/openapi.json", timeout=10).json()["openapi"].startswith("3.1")


def test_client_errors_answered_by_the_executor_are_4xx(world: World) -> None:
    """What the SDK reports as the caller's mistake is a 4xx with its message, not a 502
    (actors/services/executor_errors.py)."""
    w = world
    settled(w)
    # One workflow: its existence is checked first (a GET), so the SDK is never asked.
    for action, status in (("resume", 404), ("fork", 404), ("cancel", 404)):
        v2(w.relay, "POST", f"{BASE}/workflows/{w.run}-nobody/{action}", status, json={})
    # Several (bulk resume and fork): one list request first, naming those missing.
    missing = [f"{w.run}-nobody", f"{w.run}-nobody-else"]
    problem = v2(w.relay, "POST", f"{BASE}/workflows/bulk-resume", 404,
                 json={"workflowIds": [w.ids["greet"], *missing]})
    assert f"'{missing[0]}', '{missing[1]}'" in problem["detail"] and w.ids["greet"] not in problem["detail"]
    problem = v2(w.relay, "POST", f"{BASE}/workflows/bulk-fork-from-failure", 404,
                 json={"workflowIds": missing[:1], "fromLastFailure": True})
    assert f"'{missing[0]}'" in problem["detail"]

    # An import the executor cannot read (base64 of gzip, but not of an export): 422 naming the field.
    for payload in (b"garbage", b"", json.dumps([{"workflow_uuid": "x"}]).encode()):
        body = {"serializedWorkflow": base64.b64encode(gzip.compress(payload)).decode()}
        problem = v2(w.relay, "POST", f"{BASE}/workflows/import", 422, json=body)
        assert problem["errors"][0]["location"] == "body.serializedWorkflow"
        assert "importing workflow" in problem["detail"]
    # An export of a workflow that is still there: 409.
    exported = v2(w.relay, "GET", f"{BASE}/workflows/{w.ids['greet']}/export", 200)
    problem = v2(w.relay, "POST", f"{BASE}/workflows/import", 409, json=exported)
    assert problem["errors"][0]["location"] == "body.serializedWorkflow"


def test_a_filter_the_system_database_cannot_do_is_422(world: World, tmp_path: Path) -> None:
    """Attributes filters need PostgreSQL: an executor on SQLite refuses them, and the API says which field."""
    w = world
    app = "sqlite-app"
    assert w.relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
    key = w.relay.api("POST", f"/v2/orgs/{ORG}/tokens/sqlite-key", json={"appNames": [app]}).json()["token"]
    executor = ExecutorProcess(MINIMAL_SCRIPT, name="sqlite-executor", cwd=tmp_path,
                               env={"APP_NAME": app, "CONDUCTOR_URL": w.relay.ws_url, "CONDUCTOR_KEY": key})
    executor.start()
    try:
        read_ready(executor)
        base = f"/v2/orgs/{ORG}/apps/{app}"
        eventually(lambda: w.relay.api("GET", f"{base}/workflows").status_code == 200, "the SQLite executor serves")
        for path, body in (("workflows/search", {"attributes": {"team": "a"}}),
                           ("workflows/aggregates", {"attributes": {"team": "a"}, "selectCount": True,
                                                     "groupByStatus": True})):
            problem = v2(w.relay, "POST", f"{base}/{path}", 422, json=body)
            assert problem["errors"][0]["location"] == "body.attributes"
            assert "not supported on SQLite" in problem["detail"]
        assert v2(w.relay, "POST", f"{base}/workflows/search", 200, json={}) == []
    finally:
        executor.stop(timeout=3)


# ------------------------------------------------------------------- a scripted executor: 504, 501, ...


def _connect(relay: RelayProcess, app: str, key: str, version: str) -> FakeExecutor:
    fake = FakeExecutor(relay, app, key)
    request = fake.connect()
    assert request["type"] == "executor_info"
    fake.identify(request, dbos_version=version)
    eventually(lambda: any(e["executorId"] == fake.executor_id and e["status"] == "HEALTHY"
                           for e in relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/executors").json()),
               f"fake executor {version} never HEALTHY")
    return fake


def test_timeouts_version_skew_and_failover_with_a_scripted_executor(tmp_path: Path) -> None:
    app, base = "skew-app", f"/v2/orgs/{ORG}/apps/skew-app"
    with RelayProcess(tmp_path / "relay", env={"RELAY_REQUEST_TIMEOUT_S": "2"}) as relay, \
            ThreadPoolExecutor(max_workers=4) as pool:
        assert relay.api("PUT", base, json={}).status_code == 204
        key = relay.api("POST", f"/v2/orgs/{ORG}/tokens/skew-key", json={"appNames": [app]}).json()["token"]

        # python 2.12.0 has no queues (2.20): 501 at once, no frame sent (checked below, by what arrives next).
        old = _connect(relay, app, key, "2.12.0")
        problem = v2(relay, "GET", f"{base}/queues", 501)
        assert "python 2.12.0" in problem["detail"] and "list_queues" in problem["detail"]

        # A 3.2.0 executor should have it; this one answers "Unknown message type": marked, then 501.
        new = _connect(relay, app, key, "3.2.0")
        pending = pool.submit(relay.api, "GET", f"{base}/queues")
        frame = new.recv_json()
        assert frame["type"] == "list_queues"
        new.send_text(json.dumps({"type": "list_queues", "request_id": frame["request_id"],
                                  "error_message": "Unknown message type"}))
        response = pending.result(timeout=10)
        assert response.status_code == 501, response.text
        assert "python 2.12.0" in response.json()["detail"] and "python 3.2.0" in response.json()["detail"]
        v2(relay, "GET", f"{base}/queues", 501)  # now known: nobody is asked

        # Bad input never reaches an executor...
        for path in ("workflows?limit=0", "workflows?status=NOPE", "workflows/x/steps?offset=x"):
            v2(relay, "GET", f"{base}/{path}", 422)
        v2(relay, "POST", f"{base}/workflows/search", 422, json={"sortDesc": "true"})
        # ...so the next frames the newest executor sees are these: two requests in flight on one socket,
        # answered in the opposite order, each reaching its own caller.
        first = pool.submit(relay.api, "GET", f"{base}/workflows/wf-a")
        frame_a = new.recv_json()
        second = pool.submit(relay.api, "GET", f"{base}/workflows/wf-b")
        frame_b = new.recv_json()
        assert (frame_a["workflow_id"], frame_b["workflow_id"]) == ("wf-a", "wf-b")
        for frame in (frame_b, frame_a):
            record = {"WorkflowUUID": frame["workflow_id"], "Status": "SUCCESS", "CreatedAt": "1712345678901",
                      "UpdatedAt": "1712345678901", "WasForkedFrom": False}
            new.send_text(json.dumps({"type": "get_workflow", "request_id": frame["request_id"], "output": record}))
        assert second.result(timeout=10).json()["workflowId"] == "wf-b"
        assert first.result(timeout=10).json()["workflowId"] == "wf-a"

        # No answer within RELAY_REQUEST_TIMEOUT_S (2 s): 504.
        started = time.monotonic()
        problem = v2(relay, "GET", f"{base}/workflows", 504)
        assert 2 <= time.monotonic() - started < 10
        assert "did not answer" in problem["detail"]
        late = new.recv_json()
        assert late["type"] == "list_workflows"
        new.send_text(json.dumps({"type": "list_workflows", "request_id": late["request_id"], "output": []}))

        # An executor error: 502 with its message (the traceback left out).
        pending = pool.submit(relay.api, "GET", f"{base}/workflows/wf-1")
        frame = new.recv_json()
        assert (frame["type"], frame["workflow_id"]) == ("get_workflow", "wf-1")
        new.send_text(json.dumps({
            "type": "get_workflow", "request_id": frame["request_id"], "output": None,
            "error_message": "Exception encountered when getting workflow wf-1: Traceback (most recent call last):"
                             "\n  File \"x.py\", line 1, in run\nValueError: database is on fire",
        }))
        response = pending.result(timeout=10)
        assert response.status_code == 502, response.text
        assert response.json()["detail"] == (
            f"python 3.2.0 executor '{new.executor_id}' answered 'get_workflow' with an error: "
            "Exception encountered when getting workflow wf-1: ValueError: database is on fire")

        # The newest executor leaves mid-request: the next candidate (the old one) answers.
        pending = pool.submit(relay.api, "GET", f"{base}/workflows/wf-2")
        assert new.recv_json()["type"] == "get_workflow"
        new.close()
        frame = old.recv_json()  # the first frame the old executor ever got
        assert (frame["type"], frame["workflow_id"]) == ("get_workflow", "wf-2")
        old.send_text(json.dumps({"type": "get_workflow", "request_id": frame["request_id"], "output": None}))
        response = pending.result(timeout=10)
        assert response.status_code == 404, response.text
        old.close()
        eventually(lambda: relay.api("GET", f"{base}/workflows").status_code == 503, "503 once both left")
        assert relay.running
