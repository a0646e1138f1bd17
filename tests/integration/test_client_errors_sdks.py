"""Issue 29: what Conductor accepts is not refused, and the caller's mistakes are 4xx the same way whatever the
SDK: Python ``dbos`` 3.2.0, TypeScript 5.2.11, Go v1.6.0 and Java 1.1.0-m6, each one real, unmodified executor
(module-scoped: one per SDK, one at a time) against a real ``relay serve``, its system database on PostgreSQL.

- A query parameter the operation does not declare (``GET .../workflows/{id}?loadOutput=true``) is ignored.
- ``POST .../workflows/{id}/fork`` to a ``newWorkflowId`` that already exists is a 409 (every SDK answers it
  with its database's unique violation; actors/services/executor_errors.py).
- The four bulk actions follow one rule (docs/adr/0002-bulk-actions-all-or-nothing.md): an unknown id makes the
  whole request a 404 naming the missing ids, nothing is done, and the audit log records it as refused.
- Every workflow names its application (Java 1.1 sends none: Relay fills it in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.sdk_apps import ORG, SDKS, SKEW_APP, TERMINAL, SdkApp, new_app, ready_info
from tests.support import pg
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, ManagedProcess, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

PYTHON = "py"
KEYS = (PYTHON, *(sdk.key for sdk in SDKS))
BULK = ("bulk-cancel", "bulk-resume", "bulk-delete", "bulk-fork-from-failure")
BULK_OPERATIONS = {"bulk-cancel": "bulkCancelWorkflows", "bulk-resume": "bulkResumeWorkflows",
                   "bulk-delete": "bulkDeleteWorkflows", "bulk-fork-from-failure": "bulkForkWorkflowsFromFailure"}


@dataclass
class Target:
    """One SDK's application on Relay with one executor, a finished ``greet`` and a failed ``flaky``."""

    key: str
    app: SdkApp
    greet: str
    flaky: str
    hold: Callable[[str], str]  # starts a workflow that stays PENDING, under the given id

    def all_ids(self) -> set[str]:
        return {w["workflowId"] for w in self.app.ok("GET", "/workflows", params={"limit": 1000})}


def _python(app: SdkApp, workdir: Path) -> tuple[ManagedProcess, str, str, Callable[[str], str]]:
    """The Python skew app (executor_apps/skew_app.py): its scenario runs greet, chatty and flaky before READY."""
    env = {"APP_NAME": app.name, "CONDUCTOR_URL": app.relay.ws_url, "CONDUCTOR_KEY": app.key,
           "SYSTEM_DATABASE_URL": app.db_url, "APP_VERSION": "v1", "SCENARIO_PREFIX": "py-errors"}
    process = ExecutorProcess(SKEW_APP, name="py-errors", cwd=workdir, env=env)
    process.start()
    try:
        ready = ready_info(process)
    except Exception as exc:
        process.stop()
        raise AssertionError(f"the Python executor never became READY:\n{process.log_tail()}") from exc
    wait_until(lambda: any(e["executorId"] == ready["executor_id"] and e["status"] == "HEALTHY"
                           for e in app.ok("GET", "/executors")), 30, message="the Python executor never HEALTHY")
    chatty = ready["workflows"]["chatty"]

    def hold(workflow_id: str) -> str:
        # chatty run again waits up to 60 s for a message nobody sends: PENDING meanwhile.
        app.ok("POST", f"/workflows/{chatty}/fork", 201, json={"startStep": 0, "newWorkflowId": workflow_id})
        return workflow_id

    return process, ready["workflows"]["greet"], ready["workflows"]["flaky"], hold


def _sdk(app: SdkApp) -> tuple[str, str, Callable[[str], str]]:
    """The TypeScript/Go/Java app: greet finished, flaky failed in its second step, gate waits for a message."""
    app.launch("v1")
    key = app.sdk.key if app.sdk else ""
    greet = app.start("greet", "errors", workflow_id=f"{key}-errors-greet")
    app.control("POST", "/flags", {"failing": True})  # flaky's second step fails only while this is set
    flaky = app.start("flaky", "errors", workflow_id=f"{key}-errors-flaky")
    app.wait_status(greet, "SUCCESS")
    app.wait_status(flaky, "ERROR")
    app.control("POST", "/flags", {"failing": False})
    return greet, flaky, lambda workflow_id: app.start("gate", "held", workflow_id=workflow_id)


@pytest.fixture(scope="module", params=KEYS)
def target(request: pytest.FixtureRequest, relay: RelayProcess, pg_server: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    key: str = request.param
    sdk = next((s for s in SDKS if s.key == key), None)
    if sdk is not None:
        sdk.check_installed()
    db_url = pg.create_database(pg_server)
    workdir = tmp_path_factory.mktemp(f"errors-{key}")
    app = new_app(relay, sdk, f"{key}-client-errors", db_url, workdir)
    python: ManagedProcess | None = None
    try:
        if sdk is None:
            python, greet, flaky, hold = _python(app, workdir)
        else:
            greet, flaky, hold = _sdk(app)
        yield Target(key, app, greet, flaky, hold)
    finally:
        app.stop()
        if python is not None:
            python.stop()
        pg.drop_database(db_url)


def test_a_get_with_a_parameter_relay_does_not_declare_is_answered(target: Target) -> None:
    """Conductor clients send ``loadOutput`` on a get too: ignored (and counted), not a 400."""
    app = target.app
    plain = app.ok("GET", f"/workflows/{target.greet}")
    loaded = app.ok("GET", f"/workflows/{target.greet}", params={"loadOutput": "true", "newerClientFlag": "1"})
    assert loaded["workflowId"] == target.greet and loaded["status"] == "SUCCESS"
    assert loaded["output"] == plain["output"] and loaded["output"]
    listed = app.ok("GET", "/workflows", params={"workflowName": "greet", "newerClientFilter": "x"})
    assert target.greet in {w["workflowId"] for w in listed}
    # A declared parameter with a bad value is still the caller's mistake.
    response = app.api("GET", "/workflows", params={"limit": "many", "newerClientFilter": "x"})
    assert response.status_code == 422 and response.json()["errors"][0]["location"] == "query.limit", response.text
    scrape = app.relay.api("GET", "/metrics").text
    counted = [line for line in scrape.splitlines()
               if line.startswith(('relay_api_ignored_query_params_total{operation="getWorkflow"}',
                                   'relay_api_ignored_query_params_total{operation="listWorkflows"}'))]
    assert len(counted) == 2 and all(float(line.split()[-1]) >= 1 for line in counted), counted
    assert "newerClientFilter" not in scrape


def test_every_workflow_names_its_application(target: Target) -> None:
    """Java 1.1 sends no application name with a workflow: Relay names the app, as for queues and schedules."""
    app = target.app
    assert app.workflow(target.greet)["applicationName"] == app.name
    listed = app.ok("GET", "/workflows")
    searched = app.ok("POST", "/workflows/search", json={"workflowIds": [target.greet, target.flaky]})
    assert listed and {w["applicationName"] for w in [*listed, *searched]} == {app.name}


def test_a_fork_to_a_workflow_id_that_exists_is_409(target: Target) -> None:
    app = target.app
    fork_id = f"{target.key}-fork-once"
    assert app.ok("POST", f"/workflows/{target.greet}/fork", 201,
                  json={"startStep": 1, "newWorkflowId": fork_id}) == {"workflowId": fork_id}
    app.wait_status(fork_id, TERMINAL)
    for taken in (fork_id, target.greet):
        response = app.api("POST", f"/workflows/{target.greet}/fork", json={"startStep": 1, "newWorkflowId": taken})
        assert response.status_code == 409, response.text
        problem = response.json()
        assert problem["errors"][0]["location"] == "body.newWorkflowId", problem
        assert "answered 'fork_workflow'" in problem["detail"]
    assert app.workflow(target.greet)["status"] == "SUCCESS"


def test_a_bulk_action_naming_an_unknown_id_does_nothing_and_names_it(target: Target) -> None:
    """One rule for the four bulk actions: every id is checked first; one unknown and the whole request is a
    404 naming the missing ids, nothing is done, and the audit log has it refused."""
    app = target.app
    held = target.hold(f"{target.key}-held")
    app.wait_status(held, "PENDING")
    missing = f"{target.key}-nobody"
    before = target.all_ids()
    bodies: dict[str, dict[str, Any]] = {
        "bulk-cancel": {"workflowIds": [held, missing]},
        "bulk-resume": {"workflowIds": [target.flaky, missing]},
        "bulk-delete": {"workflowIds": [target.greet, missing]},
        "bulk-fork-from-failure": {"workflowIds": [target.flaky, missing], "fromLastFailure": True},
    }
    for path in BULK:
        response = app.api("POST", f"/workflows/{path}", json=bodies[path])
        assert response.status_code == 404, (path, response.text)
        detail = response.json()["detail"]
        assert f"'{missing}'" in detail and all(f"'{known}'" not in detail for known in bodies[path]["workflowIds"]
                                                if known != missing), (path, detail)
    # Nothing was done: nothing cancelled, resumed, deleted or forked.
    assert app.workflow(held)["status"] == "PENDING"
    assert app.workflow(target.flaky)["status"] == "ERROR"
    assert app.workflow(target.greet)["status"] == "SUCCESS"
    assert target.all_ids() == before
    entries = app.relay.api("GET", f"/v2/orgs/{ORG}/audit-logs", params={"limit": 500}).json()
    refused = {e["operation"]: e for e in entries if missing in (e["details"].get("targets") or [])}
    assert set(refused) == set(BULK_OPERATIONS.values()), refused
    assert all(e["status"] == "failure" and e["details"]["status"] == 404 for e in refused.values()), refused
    # Known ids only: done.
    assert app.api("POST", "/workflows/bulk-cancel", json={"workflowIds": [held]}).status_code == 204
    app.wait_status(held, "CANCELLED")
    assert app.api("POST", "/workflows/bulk-delete", json={"workflowIds": [held]}).status_code == 204
    assert app.api("GET", f"/workflows/{held}").status_code == 404

