"""Issue 15, the data plane, against system databases real SDKs wrote: TypeScript 5.2.11, Go v1.6.0 and Java
1.1.0-m6 on PostgreSQL, Python 3.2.0 on its default SQLite file.

Each case runs a real executor of the SDK connected to a real ``relay serve``: a few workflows (a finished
``greet``, a finished queued one, two ``gate`` workflows left PENDING) and the app's schedule. While it is
connected the v2 API answers from it (``X-Relay-Served-From: executor``); then it stops, and with the data
plane configured (read-write) Relay answers the same questions from the system database through dbos 3.4.0's
``DBOSClient`` (``database``), and the answers must agree with what the executor said. One gate is cancelled
through Relay; when the SDK's executor starts again Relay recovers the dead executor's workflows onto it: the
other gate resumes and finishes, the cancelled one stays CANCELLED. Without an executor or a data plane, 503.
Java 1.1.0-m6 writes a schema (41) the client cannot query: its data plane is refused, and says so (422).

Inputs and outputs are the SDK's raw serialized text (Relay never unpickles), so they are compared loosely.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.sdk_apps import ORG, SDKS, Sdk, SdkApp, new_app, readable, ready_info
from tests.support import pg
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SERVED_FROM = "X-Relay-Served-From"
CATALOG_APP = Path(__file__).resolve().parent / "executor_apps" / "catalog_app.py"
DEADLINE_S = 60.0
# The schema version (dbos.dbos_migrations) each SDK release writes, measured. dbos 3.4.0's DBOSClient cannot query
# Java 1.1.0-m6's: it has no workflow_input/workflow_output tables and no application_name columns.
SCHEMA_VERSION = {"ts": 123, "go": 123, "java": 41}
REFUSED = {"java"}


def env_name(sdk: Sdk) -> str:
    """The environment variable of `relay serve` that holds ``sdk``'s system database URL."""
    return f"DATA_PLANE_TEST_DB_{sdk.key.upper()}"


@pytest.fixture(scope="module")
def databases(pg_server: str) -> Iterator[dict[str, str]]:
    """One fresh system database per SDK, made before Relay starts: `env:` references are read from the
    environment `relay serve` was started with."""
    with pg.fresh_databases(pg_server, [sdk.key for sdk in SDKS]) as urls:
        yield urls


@pytest.fixture(scope="module")
def python_url_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the `file:` reference of dp-python's system database is (bound to it before Relay starts)."""
    return tmp_path_factory.mktemp("dp-python-url") / "system-database-url"


@pytest.fixture(scope="module")
def relay_env(databases: dict[str, str], python_url_file: Path) -> dict[str, str]:
    env = {env_name(sdk): databases[sdk.key] for sdk in SDKS}
    # The operator binds each reference to its application (RELAY_DATA_PLANE_REFERENCES).
    env["RELAY_DATA_PLANE_REFERENCES"] = " ".join(
        [f"local/dp-{sdk.key}=env:{env_name(sdk)}" for sdk in SDKS] + [f"local/dp-python=file:{python_url_file}"])
    return env


@pytest.fixture(scope="module", autouse=True)
def _urls_are_secrets(relay: RelayProcess, databases: dict[str, str]) -> None:
    for url in databases.values():
        relay.remember_secret(url, "system database URL")  # never in its log


@pytest.fixture(params=SDKS, ids=[sdk.key for sdk in SDKS])
def sdk(request: pytest.FixtureRequest) -> Sdk:
    request.param.check_installed()
    return request.param


# ------------------------------------------------------------------------------------------------ helpers


def answer(app: SdkApp, method: str, path: str, source: str, status: int = 200, **kwargs: Any) -> Any:
    """One v2 call that must be answered with ``status`` by ``source`` (``executor`` or ``database``)."""
    response = app.api(method, path, **kwargs)
    assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text[:800]}"
    assert response.headers.get(SERVED_FROM) == source, (method, path, response.headers.get(SERVED_FROM))
    return response.json() if response.content else None


def data_plane_path(app: SdkApp) -> str:
    return f"/relay/v1/orgs/{ORG}/apps/{app.name}/data-plane"


def configure(app: SdkApp, reference: str) -> dict[str, Any]:
    body = {"systemDatabaseUrlFrom": reference, "mode": "read-write", "statementTimeoutMs": 10000, "poolSize": 2}
    response = app.relay.api("PUT", data_plane_path(app), json=body)
    assert response.status_code == 200, response.text
    return response.json()


def wait_state(app: SdkApp, status: str) -> dict[str, Any]:
    """The data plane's state once it tried the database (the PUT may answer before it connected)."""

    def reached() -> dict[str, Any] | None:
        response = app.relay.api("GET", data_plane_path(app))
        assert response.status_code == 200, response.text
        state = response.json()["state"]
        return state if state["status"] == status else None

    return wait_until(reached, 30, interval=0.2, message=f"the data plane never became {status}")


def wait_served_from(app: SdkApp, source: str) -> None:
    """Routing follows the executor's connection: wait until the answers come from ``source``."""

    def served() -> bool:
        response = app.api("GET", "/workflows")
        return response.status_code == 200 and response.headers.get(SERVED_FROM) == source

    wait_until(served, DEADLINE_S, interval=0.1, message=f"the answers never came from the {source}",
               ignore=(requests.RequestException,))  # fmt: skip


def wait_status(app: SdkApp, workflow_id: str, statuses: set[str], source: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = answer(app, "GET", f"/workflows/{workflow_id}", source)
        return found if found["status"] in statuses else None

    return wait_until(reached, DEADLINE_S, interval=0.1, message=f"{workflow_id} never reached {statuses}")


# Fields each source renders its own way: inputs, outputs, errors and contexts are the SDK's stored text from the
# database (decoded by the executor); a TypeScript queue reports priorityEnabled true whatever its row says (5.2.11:
# "vestigial, every queue dispatches in priority order"); Go reports a dequeue time only while PENDING.
RAW = {"input", "output", "error", "context", "priorityEnabled", "dequeuedAt"}
EMPTY = ("", "[]", [])  # an SDK's unset user, roles, class, time zone: None from one source, empty from the other


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: None if v in EMPTY else v for k, v in record.items() if k not in RAW}


def snapshot(app: SdkApp, source: str, steps_of: str) -> dict[str, Any]:
    """What the v2 API says about the app, every field but the raw ones, in a form both sources must agree on."""
    workflows = answer(app, "GET", "/workflows", source)
    return {
        "workflows": {w["workflowId"]: comparable(w) for w in workflows},
        "pending": sorted(w["workflowId"] for w in answer(app, "POST", "/workflows/search", source,
                                                           json={"status": ["PENDING"]})),
        "steps": [(s["stepId"], s["stepName"]) for s in answer(app, "GET", f"/workflows/{steps_of}/steps", source)],
        "queues": {q["name"]: comparable(q) for q in answer(app, "GET", "/queues", source)},
        "schedules": {s["scheduleName"]: comparable(s) for s in answer(app, "GET", "/schedules", source)},
        "versions": {v["versionName"]: comparable(v) for v in answer(app, "GET", "/versions", source)},
    }


def assert_unavailable(app: SdkApp) -> None:
    """No executor and no data plane: 503, as before the data plane existed."""
    for path in ("/workflows", "/queues", "/schedules", "/versions"):
        response = app.api("GET", path)
        assert response.status_code == 503, f"{path}: {response.status_code} {response.text[:300]}"


def reads_from_database(app: SdkApp, seen: dict[str, Any], greet: str, argument: str, greeting: str) -> None:
    """The executor is gone: every answer comes from the database and agrees with what the executor said."""
    wait_served_from(app, "database")
    assert snapshot(app, "database", steps_of=greet) == seen
    found = answer(app, "GET", f"/workflows/{greet}", "database")
    assert (found["workflowName"], found["status"]) == ("greet", "SUCCESS")
    assert greeting in readable(found["output"]), found  # the stored text, never unpickled
    assert argument in readable(found["input"]), found
    listed = answer(app, "GET", "/workflows", "database", params={"workflowName": "greet", "loadOutput": "true"})
    assert greet in {w["workflowId"] for w in listed} and all(w["workflowName"] == "greet" for w in listed)
    assert answer(app, "GET", "/workflows/no-such-workflow", "database", status=404) is not None


def cancel_through_database(app: SdkApp, doomed: str, kept: str) -> None:
    assert answer(app, "POST", f"/workflows/{doomed}/cancel", "database", status=204, json={}) is None
    assert answer(app, "GET", f"/workflows/{doomed}", "database")["status"] == "CANCELLED"
    assert answer(app, "GET", f"/workflows/{kept}", "database")["status"] == "PENDING"


def refused_when_gone(app: SdkApp, sdk: Sdk) -> None:
    """A schema dbos 3.4.0's DBOSClient cannot query is refused up front: the executor keeps answering everything
    while connected, and once it is gone the API says why the database cannot answer instead."""
    state = wait_state(app, "refused")
    assert state["schemaVersion"] == SCHEMA_VERSION[sdk.key] and "older than" in state["detail"], state
    body = {"groupByWorkflowName": True, "selectCount": True}
    assert answer(app, "POST", "/workflows/aggregates", "executor", json=body)  # (read from the database first)
    app.executors[0].stop()

    def refusal() -> list[requests.Response]:  # (a Response is falsy when it is an error)
        response = app.api("GET", "/workflows")
        return [response] if response.status_code != 200 else []

    [response] = wait_until(refusal, DEADLINE_S, interval=0.1, message="the executor never went away")
    assert (response.status_code, response.headers.get(SERVED_FROM)) == (422, "database"), response.text
    assert f"schema version {SCHEMA_VERSION[sdk.key]}" in response.json()["detail"], response.text
    assert "upgrade the application's DBOS SDK" in response.json()["detail"], response.text
    assert app.relay.api("DELETE", data_plane_path(app)).status_code == 204
    assert_unavailable(app)


# ------------------------------------------------------------------------------------------------ tests


def test_an_sdks_system_database_is_served_when_its_executor_is_gone(
    relay: RelayProcess, sdk: Sdk, databases: dict[str, str], tmp_path: Path
) -> None:
    app = new_app(relay, sdk, f"dp-{sdk.key}", databases[sdk.key], tmp_path)
    # Relay declares a stopped executor DEAD after a second, so its restart recovers the kept gate at once.
    assert app.api("PATCH", "", json={"executorTimeoutSecs": 1}).status_code == 204
    try:
        assert_unavailable(app)
        app.launch("v1")
        greet = app.start("greet", "dp", workflow_id=f"dp-{sdk.key}-greet")
        queued = app.start("greet", "queued", workflow_id=f"dp-{sdk.key}-queued", queue=sdk.queue)
        doomed, kept = (app.start("gate", tag, workflow_id=f"dp-{sdk.key}-{tag}") for tag in ("doomed", "kept"))
        for workflow_id, status in ((greet, "SUCCESS"), (queued, "SUCCESS"), (doomed, "PENDING"), (kept, "PENDING")):
            wait_status(app, workflow_id, {status}, "executor")

        # A configured data plane does not take over from a connected executor.
        state = configure(app, f"env:{env_name(sdk)}")["state"]
        assert state["status"] in {"ready", "refused", "unreachable"}, state  # (it may still be connecting)
        seen = snapshot(app, "executor", steps_of=greet)
        workflows = seen["workflows"]
        assert {(w, workflows[w]["workflowName"], workflows[w]["status"]) for w in workflows} == {
            (greet, "greet", "SUCCESS"), (queued, "greet", "SUCCESS"), (doomed, "gate", "PENDING"),
            (kept, "gate", "PENDING")}
        assert workflows[queued]["queueName"] == sdk.queue and workflows[greet]["appVersion"] == "v1"
        assert seen["pending"] == sorted([doomed, kept])
        assert seen["steps"] == [(0, "shout"), (1, "exclaim")]
        assert seen["queues"][sdk.queue]["workerConcurrency"] == 2
        [schedule] = seen["schedules"].values()
        assert (schedule["scheduleName"], schedule["workflowName"], schedule["cronExpression"], schedule["status"]) \
            == (sdk.schedule, "tick", sdk.cron, "ACTIVE")
        assert list(seen["versions"]) == ["v1"]
        if sdk.key in REFUSED:
            refused_when_gone(app, sdk)
            return
        assert wait_state(app, "ready")["schemaVersion"] == SCHEMA_VERSION[sdk.key]

        app.executors[0].stop()
        reads_from_database(app, seen, greet, "dp", "HELLO DP!")
        cancel_through_database(app, doomed, kept)

        # The SDK itself sees the cancellation: Relay recovers the dead executor's PENDING workflows onto the
        # restarted one, which resumes the kept gate (it finishes on its message) and leaves the cancelled one.
        app.launch("v1", name=f"{sdk.key}-again")
        wait_served_from(app, "executor")
        app.send(kept, "go", "go", index=1)
        assert "kept:go" in (wait_status(app, kept, {"SUCCESS"}, "executor")["output"] or "")
        assert answer(app, "GET", f"/workflows/{doomed}", "executor")["status"] == "CANCELLED"
        assert app.control("GET", f"/result/{doomed}", index=1)["status"] == "CANCELLED"
        assert "STEP finish doomed" not in "".join(p.log_text() for p in app.executors)

        # Without the data plane, a stopped app is unavailable again.
        app.executors[1].stop()
        wait_served_from(app, "database")
        assert app.relay.api("DELETE", data_plane_path(app)).status_code == 204
        assert_unavailable(app)
    finally:
        app.stop()


def test_a_python_apps_default_sqlite_system_database_is_served(relay: RelayProcess, tmp_path: Path,
                                                               python_url_file: Path) -> None:
    """dbos 3.2.0 (the harness's interpreter) with no SYSTEM_DATABASE_URL: a SQLite file in its working
    directory, referenced by a `file:` that holds its sqlite:/// URL."""
    app = new_app(relay, None, "dp-python", "", tmp_path)
    assert app.api("PATCH", "", json={"executorTimeoutSecs": 1}).status_code == 204
    workdir = tmp_path / "app"
    env = {"APP_NAME": app.name, "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": app.key, "RUN": "dp"}
    first = ExecutorProcess(CATALOG_APP, name="python-main", cwd=workdir, env={**env, "ROLE": "main"})
    again = ExecutorProcess(CATALOG_APP, name="python-again", cwd=workdir, env=env)
    try:
        assert_unavailable(app)
        first.start()
        ids = ready_info(first)["workflows"]
        # Every workflow of the scenario settled, so that both sources are asked about the same state.
        done = {ids["greet"]: "SUCCESS", ids["queued"]: "SUCCESS", ids["parent"]: "SUCCESS",
                ids["messenger"]: "SUCCESS", ids["flaky"]: "ERROR", ids["waiter0"]: "PENDING",
                ids["waiter1"]: "PENDING", ids["waiter2"]: "PENDING"}  # fmt: skip
        for workflow_id, status in done.items():
            wait_status(app, workflow_id, {status}, "executor")
        sqlite_file = workdir / "dbos_system.sqlite"
        assert sqlite_file.exists()
        reference = python_url_file
        reference.write_text(f"sqlite:///{sqlite_file}\n")

        configure(app, f"file:{reference}")
        assert wait_state(app, "ready")["schemaVersion"] == 123
        seen = snapshot(app, "executor", steps_of=ids["greet"])
        assert [name for _, name in seen["steps"]] == ["shout", "count_letters"]
        assert seen["queues"]["catalog-queue"]["workerConcurrency"] == 2
        assert seen["schedules"]["dp-nightly"]["cronExpression"] == "0 0 0 1 1 *"
        assert {wid: seen["workflows"][wid]["status"] for wid in done} == done

        first.kill()  # (SIGTERM waits for its PENDING waiters: DBOS.destroy)
        reads_from_database(app, seen, ids["greet"], "relay", "HELLO RELAY")
        cancel_through_database(app, ids["waiter0"], ids["waiter1"])

        again.start()
        restarted = ready_info(again)["executor_id"]
        wait_served_from(app, "executor")
        # Relay gives the dead executor's PENDING workflows to the new one: the kept waiter moves, the other not.
        wait_until(lambda: answer(app, "GET", f"/workflows/{ids['waiter1']}", "executor")["executorId"] == restarted,
                   DEADLINE_S, interval=0.2, message="the kept waiter was never recovered")  # fmt: skip
        cancelled = answer(app, "GET", f"/workflows/{ids['waiter0']}", "executor")
        assert cancelled["status"] == "CANCELLED" and cancelled["executorId"] != restarted, cancelled
    finally:
        first.kill()
        again.kill()

