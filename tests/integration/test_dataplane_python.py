"""Issue 15, the data plane, with the current DBOS Python release: an app on dbos 3.4.0
(executor_apps/current_app.py, run from .venv-dbos-current), whose SDK has no open conductor client, so it never
connects to Relay. Relay manages it through its system database alone (``PUT .../data-plane``): workflows,
steps, queues, schedules and versions, every answer marked ``X-Relay-Served-From: database``, and every change
read back in the app itself (its control server reports what ran there and what its own SDK sees). Killed, the app
stays readable. In "read" mode a write is refused (503) and nothing changes; a ``file:`` reference works like an
``env:`` one.

Relay loads no Python code from a pickle (an output of the app's own class comes back as the stored text), so
what ran is checked in the app, not decoded here.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from tests.integration.sdk_apps import ready_info
from tests.support import pg
from tests.support.api_shapes import bad_times
from tests.support.console_http import console_session, csrf_token
from tests.support.openapi_ref import check, reference, response_schema
from tests.support.ports import wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "current_app.py"
CURRENT_PYTHON = REPO_ROOT / ".venv-dbos-current" / "bin" / "python"
ORG = "local"
APP = "pyapp"  # also the DBOS app's name: the SDK scopes its rows (schedules, versions, queues) by it
BASE = f"/v2/orgs/{ORG}/apps/{APP}"
DATA_PLANE = f"/relay/v1/orgs/{ORG}/apps/{APP}/data-plane"
URL_ENV = "PYAPP_SYSTEM_DATABASE_URL"  # the variable Relay reads the app's system database URL from
QUEUE = "current_queue"
DEADLINE_S = 20.0
SERVED_FROM = "X-Relay-Served-From"


class CurrentSdkExecutor(ExecutorProcess):
    """A Python app run by the current SDK's interpreter (.venv-dbos-current, built by `make test-deps`)."""

    def command(self) -> list[str]:
        if not CURRENT_PYTHON.exists():
            raise AssertionError(f"{CURRENT_PYTHON} is missing: `make test-deps` builds .venv-dbos-current")
        return [str(CURRENT_PYTHON), "-u", str(self.script), *self.args]


# ------------------------------------------------------------------------------------------ helpers


def _templates() -> list[tuple[re.Pattern[str], str]]:
    found = []
    for path in reference()["paths"]:
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path))
        found.append((re.compile(f"^{pattern}$"), path))
    found.sort(key=lambda item: item[1].count("{"))  # literal segments win over parameters
    return found


TEMPLATES = _templates()


def db(relay: RelayProcess, method: str, path: str, expect: int, **kwargs: Any) -> Any:
    """A v2 call that the system database must answer: the status, the served-from header, and the body against
    Conductor's reference schema; returns the JSON (None for an empty body)."""
    response = relay.api(method, BASE + path, timeout=30, **kwargs)
    assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text[:800]}"
    assert response.headers.get(SERVED_FROM) == "database", f"{method} {path}: {dict(response.headers)}"
    if not response.content:
        return None
    body = response.json()
    if response.status_code >= 400:
        assert response.headers["Content-Type"].startswith("application/problem+json"), response.headers
        assert not check(reference(), {"$ref": "#/components/schemas/ErrorModel"}, body), body
        return body
    assert not bad_times(body), f"{method} {path}: times not in the API's format: {bad_times(body)[:5]}"
    template = next((t for pattern, t in TEMPLATES if pattern.match(BASE + path.split("?", 1)[0])
                     and method.lower() in reference()["paths"][t]), None)  # fmt: skip
    if template is not None:
        errors = check(reference(), response_schema(reference(), template, method, str(expect)), body)
        assert not errors, f"{method} {path} does not match the reference schema: {errors[:5]}"
    return body


def eventually(predicate: Any, what: str, timeout: float = DEADLINE_S) -> Any:
    return wait_until(predicate, timeout, interval=0.1, message=what, ignore=(requests.RequestException,))


def wait_status(relay: RelayProcess, workflow_id: str, *statuses: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = db(relay, "GET", f"/workflows/{workflow_id}", 200)
        return found if found["status"] in statuses else None

    return eventually(reached, f"workflow {workflow_id} never reached {statuses} (as Relay reads it)")


def configure(relay: RelayProcess, source: str, mode: str | None = None, **extra: Any) -> dict[str, Any]:
    """Point Relay's data plane for the app at its system database; return the answer (the state is ready)."""
    body: dict[str, Any] = {"systemDatabaseUrlFrom": source, **extra}
    if mode is not None:
        body["mode"] = mode
    response = relay.api("PUT", DATA_PLANE, json=body)
    assert response.status_code == 200, f"PUT data-plane {body}: {response.status_code} {response.text}"
    answer = response.json()
    assert answer["systemDatabaseUrlFrom"] == source and answer["mode"] == (mode or "read"), answer
    assert answer["state"]["status"] == "ready", answer
    assert isinstance(answer["state"]["schemaVersion"], int), answer
    return answer


@dataclass
class World:
    relay: RelayProcess
    app: CurrentSdkExecutor
    ready: dict[str, Any]
    database: str  # the app's system database URL: Relay must never store or show it
    urls: Path  # where the `file:` references the operator bound to the app are

    @property
    def ids(self) -> dict[str, str]:
        return self.ready["workflows"]

    def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = requests.request(method, f"http://127.0.0.1:{self.ready['control_port']}{path}",
                                    json=body, timeout=10)  # fmt: skip
        assert response.status_code == 200, f"control {method} {path}: {response.status_code} {response.text}"
        return response.json()

    def seen(self, event: str, workflow_id: str | None = None) -> list[dict[str, Any]]:
        """What the app's workflows recorded as they ran, of one kind (and one workflow)."""
        return [s for s in self.control("GET", "/seen")["seen"]
                if s["event"] == event and workflow_id in (None, s["workflow_id"])]  # fmt: skip

    def wait_seen(self, event: str, workflow_id: str | None = None, count: int = 1) -> list[dict[str, Any]]:
        return eventually(lambda: (found := self.seen(event, workflow_id)) and len(found) >= count and found,
                          f"the app never recorded {count} {event!r} for {workflow_id}:\n{self.app.log_tail()}")

    def app_view(self, path: str) -> Any:
        """What the app's own SDK reads (a workflow's status, a schedule's, the latest version)."""
        return self.control("GET", path)


@pytest.fixture(scope="module")
def world(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    database = pg.create_database(pg_server)
    workdir = tmp_path_factory.mktemp("current-app")
    env = {"APP_NAME": APP, "SYSTEM_DATABASE_URL": database}
    urls = tmp_path_factory.mktemp("pyapp-urls")
    bound = [f"env:{URL_ENV}", "env:PYAPP_NOT_SET", f"file:{urls / 'empty-url'}",
             f"file:{urls / 'system-database-url'}"]
    relay = RelayProcess(tmp_path_factory.mktemp("relay-data"), env={
        URL_ENV: database, "RELAY_DATA_PLANE_REFERENCES": " ".join(f"{ORG}/{APP}={r}" for r in bound)})
    relay.remember_secret(database, "system database URL")  # never in Relay's log
    app = CurrentSdkExecutor(APP_SCRIPT, name="current-v1", cwd=workdir, env={**env, "APP_VERSION": "v1"})
    try:
        # v0 first, registered and gone (it migrates the system database too): the version v1 may go back to.
        first = CurrentSdkExecutor(APP_SCRIPT, name="current-v0", cwd=workdir,
                                   env={**env, "APP_VERSION": "v0", "REGISTER_ONLY": "1"}).start()  # fmt: skip
        assert first.wait(60) == 0 and "REGISTERED" in first.log_text(), first.log_tail()
        app.start()
        relay.start()
        assert relay.api("PUT", BASE, json={}).status_code == 204
        ready = ready_info(app, timeout=60)
        assert (ready["dbos_version"], ready["app_version"]) == ("3.4.0", "v1"), ready
        yield World(relay, app, ready, database, urls)
    finally:
        app.kill()
        relay.stop()
        pg.drop_database(database)


# -------------------------------------------------------------------------------------------- tests


def test_read_mode_reads_and_refuses_writes(world: World) -> None:
    w = world
    configure(w.relay, f"env:{URL_ENV}", "read")
    greet, flaky, held = w.ids["greet"], w.ids["flaky"], w.ids["held"]
    assert db(w.relay, "GET", f"/workflows/{held}", 200)["status"] == "PENDING"
    before = {wf["workflowId"]: wf["status"] for wf in db(w.relay, "GET", "/workflows", 200)}
    assert before[greet] == "SUCCESS" and before[flaky] == "ERROR"
    assert db(w.relay, "GET", "/schedules/yearly", 200)["status"] == "ACTIVE"
    versions = db(w.relay, "GET", "/versions", 200)

    writes: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", f"/workflows/{held}/cancel", {}), ("POST", f"/workflows/{flaky}/resume", {}),
        ("POST", f"/workflows/{greet}/fork", {}), ("DELETE", f"/workflows/{flaky}", None),
        ("POST", "/workflows/bulk-cancel", {"workflowIds": [held]}), ("POST", "/schedules/yearly/pause", None),
        ("POST", "/schedules/yearly/trigger", None),
        ("POST", "/schedules/yearly/backfill",
         {"startTime": "2020-01-01T00:00:00Z", "endTime": "2022-01-02T00:00:00Z"}),
        ("PATCH", "/versions/latest", {"versionName": "v0"}),
    ]  # fmt: skip
    for method, path, body in writes:
        response = w.relay.api(method, BASE + path, json=body)
        assert response.status_code == 503, f"{method} {path}: {response.status_code} {response.text}"
        assert response.headers["Content-Type"].startswith("application/problem+json")
        detail = response.json()["detail"]
        assert "read" in detail.lower() and "Traceback" not in detail, detail

    # Nothing changed, in the database or in the app (still waiting at its gate, not stopped).
    assert {wf["workflowId"]: wf["status"] for wf in db(w.relay, "GET", "/workflows", 200)} == before
    assert db(w.relay, "GET", "/schedules/yearly", 200)["status"] == "ACTIVE"
    assert db(w.relay, "GET", "/versions", 200) == versions
    if w.app.running:
        assert w.app_view(f"/status/{held}") == {"status": "PENDING"}
        assert w.seen("gate-stopped", held) == []


def test_references_a_file_reference_and_the_url_never_shown(world: World, pg_server: str) -> None:
    w = world
    # The URL itself is refused (and not echoed); a reference that points nowhere is configured but unresolved.
    given = w.relay.api("PUT", DATA_PLANE, json={"systemDatabaseUrlFrom": w.database})
    assert given.status_code == 422 and w.database not in given.text, given.text
    unset = w.relay.api("PUT", DATA_PLANE, json={"systemDatabaseUrlFrom": "env:PYAPP_NOT_SET"})
    assert unset.status_code == 200 and unset.json()["state"]["status"] == "unresolved", unset.text
    refused = w.relay.api("GET", f"{BASE}/workflows")  # why is in Relay's log, not the caller's to learn
    assert refused.status_code == 503 and "cannot be used" in refused.json()["detail"], refused.text
    assert "PYAPP_NOT_SET" not in refused.text and "PYAPP_NOT_SET of the Relay server is not set" in w.relay.log_text()
    unbound = w.relay.api("PUT", DATA_PLANE, json={"systemDatabaseUrlFrom": "env:OTHER_APP_SYSDB"})
    assert unbound.status_code == 422 and "RELAY_DATA_PLANE_REFERENCES" in unbound.text, unbound.text
    # A database that is not a DBOS system database is refused, not written to.
    empty = pg.create_database(pg_server)
    try:
        (w.urls / "empty-url").write_text(empty)
        state = w.relay.api("PUT", DATA_PLANE, json={"systemDatabaseUrlFrom": f"file:{w.urls / 'empty-url'}"})
        assert state.status_code == 200 and state.json()["state"]["status"] == "refused", state.text
        assert empty not in state.text
        with psycopg.connect(empty, autocommit=True) as conn:
            tables = conn.execute("SELECT table_schema, table_name FROM information_schema.tables"
                                  " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')").fetchall()
        assert tables == [], tables
    finally:
        w.relay.api("DELETE", DATA_PLANE)
        pg.drop_database(empty)

    url_file = w.urls / "system-database-url"
    url_file.write_text(w.database + "\n")  # as `echo "$URL" > file` writes it
    url_file.chmod(0o600)
    answer = configure(w.relay, f"file:{url_file}", statementTimeoutMs=5000, poolSize=1)  # mode: "read" by default
    assert (answer["statementTimeoutMs"], answer["poolSize"]) == (5000, 1)
    got = w.relay.api("GET", DATA_PLANE)
    assert got.status_code == 200 and got.json()["systemDatabaseUrlFrom"] == f"file:{url_file}", got.text
    for text in (json.dumps(answer), got.text):
        assert w.database not in text

    steps = db(w.relay, "GET", f"/workflows/{w.ids['greet']}/steps", 200)
    assert [(s["stepId"], s["stepName"]) for s in steps] == [(1, "shout"), (2, "exclaim")]

    # Unconfigured: 404 for the configuration, and the app has nothing left to answer from.
    assert w.relay.api("DELETE", DATA_PLANE).status_code == 204
    assert w.relay.api("GET", DATA_PLANE).status_code == 404
    assert w.relay.api("GET", f"{BASE}/workflows").status_code == 503
    # Never stored: not in the event log, nor anywhere in Relay's data directory.
    events = w.relay.api("GET", "/relay/v1/events", params={"app": APP, "limit": 1000})
    assert events.status_code == 200 and w.database not in events.text
    for path in w.relay.data_dir.rglob("*"):
        if path.is_file() and path != w.relay.log_path:
            assert w.database.encode() not in path.read_bytes(), f"the system database URL is stored in {path}"


def _console(relay: RelayProcess) -> tuple[requests.Session, str]:
    """A console session of the admin, and its CSRF token."""
    browser, _login_csrf = console_session(relay)
    page = browser.get(f"{relay.base_url}/orgs/{ORG}/apps/{APP}/settings", timeout=10).text
    assert 'id="data-plane"' in page
    return browser, csrf_token(page)


def test_the_console_shows_and_manages_the_app_through_its_system_database(world: World) -> None:
    w = world
    configure(w.relay, f"env:{URL_ENV}", "read-write")
    browser, csrf = _console(w.relay)
    console = f"{w.relay.base_url}/orgs/{ORG}/apps/{APP}"
    settings = browser.get(f"{console}/settings", timeout=10).text
    assert f"env:{URL_ENV}" in settings and "ready" in settings and w.database not in settings
    # Every page says where its answer came from.
    listed = browser.get(f"{console}/workflows", timeout=10).text
    assert 'data-served-from="database"' in listed and w.ids["greet"] in listed
    page = browser.get(f"{console}/workflows/{w.ids['greet']}", timeout=10).text
    assert 'data-served-from="database"' in page and "shout" in page and "exclaim" in page
    schedules = browser.get(f"{console}/schedules", timeout=10).text
    assert 'data-served-from="database"' in schedules and "yearly" in schedules
    versions = browser.get(f"{console}/versions", timeout=10).text
    assert 'data-served-from="database"' in versions and "v1" in versions
    # A cancel through the console's own form and its confirmation: the app sees it stop.
    run = f"c{secrets.token_hex(3)}"
    gated = w.control("POST", "/start", {"workflow": "gate", "args": [run], "workflowId": f"{run}-gate"})["workflowId"]
    w.wait_seen("gate-started", gated)
    form = {"workflow_id": gated, "csrf_token": csrf}
    asked = browser.post(f"{console}/workflow-actions/cancel", data=form, timeout=10)
    assert asked.status_code == 200 and "Cancel workflow" in asked.text  # the confirmation step
    done = browser.post(f"{console}/workflow-actions/cancel", data={**form, "confirmed": "yes"}, timeout=10)
    assert done.status_code == 200, done.text[:300]
    w.wait_seen("gate-stopped", gated)
    assert w.app_view(f"/status/{gated}") == {"status": "CANCELLED"}


def test_the_app_is_managed_through_its_system_database(world: World) -> None:
    w = world
    configure(w.relay, f"env:{URL_ENV}", "read-write", statementTimeoutMs=10000, poolSize=2)
    run = f"r{secrets.token_hex(3)}"
    greet, flaky, held = w.ids["greet"], w.ids["flaky"], w.ids["held"]

    # Reading: the scenario as the system database holds it.
    listed = {wf["workflowId"]: wf for wf in db(w.relay, "GET", "/workflows", 200)}
    assert {i: listed[i]["status"] for i in (greet, flaky, held)} == {
        greet: "SUCCESS", flaky: "ERROR", held: "PENDING"}
    assert {listed[i]["appVersion"] for i in (greet, flaky, held)} == {"v1"}
    got = db(w.relay, "GET", f"/workflows/{greet}", 200)
    assert (got["workflowName"], got["status"], got["appVersion"]) == ("greet", "SUCCESS", "v1")
    assert [(s["stepId"], s["stepName"]) for s in db(w.relay, "GET", f"/workflows/{greet}/steps", 200)] == [
        (1, "shout"), (2, "exclaim")]
    flaky_steps = db(w.relay, "GET", f"/workflows/{flaky}/steps", 200)
    assert [s["stepName"] for s in flaky_steps] == ["first", "fragile"] and flaky_steps[1]["error"]
    # An instance of the app's own class: handed back as the stored text (a string), never loaded by Relay.
    receipt = db(w.relay, "GET", f"/workflows/{w.ids['receipt']}", 200)
    assert receipt["status"] == "SUCCESS", receipt
    stored = base64.b64decode(receipt["output"], validate=True)  # the SDK's pickle, base64 as stored
    assert stored.startswith(b"\x80") and b"Receipt" in stored, receipt["output"]
    db(w.relay, "GET", f"/workflows/{run}-no-such", 404)

    # Queues: the app's queue, and a workflow it ran from it.
    (queue,) = [q for q in db(w.relay, "GET", "/queues", 200) if q["name"] == QUEUE]
    assert queue["workerConcurrency"] == 2
    assert db(w.relay, "GET", f"/queues/{QUEUE}", 200)["name"] == QUEUE
    queued = w.control("POST", "/start", {"workflow": "greet", "args": ["queue"], "workflowId": f"{run}-queued",
                                          "queue": QUEUE})["workflowId"]  # fmt: skip
    assert wait_status(w.relay, queued, "SUCCESS")["queueName"] == QUEUE
    found = db(w.relay, "POST", "/workflows/search", 200, json={"workflowIdPrefix": [run], "queueName": [QUEUE]})
    assert [wf["workflowId"] for wf in found] == [queued]
    rows = db(w.relay, "POST", "/workflows/aggregates", 200,
              json={"groupByStatus": True, "selectCount": True, "workflowIdPrefix": ["scenario-"]})
    assert {r["group"]["status"]: r["count"] for r in rows} == {"SUCCESS": 2, "ERROR": 1, "PENDING": 1}
    # Delete: gone from the database, so gone for the app's SDK too.
    db(w.relay, "DELETE", f"/workflows/{queued}", 204)
    db(w.relay, "GET", f"/workflows/{queued}", 404)
    assert w.app_view(f"/status/{queued}") == {"status": None}

    # Cancel: the app's run stops at its next step and the app sees its workflow CANCELLED.
    gated = w.control("POST", "/start", {"workflow": "gate", "args": [run], "workflowId": f"{run}-gate"})["workflowId"]
    w.wait_seen("gate-started", gated)
    db(w.relay, "POST", f"/workflows/{gated}/cancel", 204, json={})
    assert db(w.relay, "GET", f"/workflows/{gated}", 200)["status"] == "CANCELLED"
    w.wait_seen("gate-stopped", gated)
    assert w.app_view(f"/status/{gated}") == {"status": "CANCELLED"}

    # Resume: the app runs it again; opened, it completes there.
    db(w.relay, "POST", f"/workflows/{gated}/resume", 204, json={})
    w.wait_seen("gate-started", gated, count=2)
    w.control("POST", "/open", {"label": run})
    w.wait_seen("gate-finished", gated)
    assert wait_status(w.relay, gated, "SUCCESS")["workflowId"] == gated
    assert w.app_view(f"/status/{gated}") == {"status": "SUCCESS"}

    # Fork: a new workflow from the completed one, run by the app.
    forked = db(w.relay, "POST", f"/workflows/{greet}/fork", 201, json={})["workflowId"]
    assert forked != greet
    (ran,) = w.wait_seen("greet", forked)
    assert ran["result"] == "HELLO RELAY!"
    done = wait_status(w.relay, forked, "SUCCESS")
    assert (done["forkedFrom"], done["workflowName"]) == (greet, "greet")

    # Schedules: listed and read; paused and resumed (the app's SDK sees it); a resumed one fires in the app.
    schedules = {s["scheduleName"]: s for s in db(w.relay, "GET", "/schedules", 200)}
    assert {(n, s["workflowName"], s["cronExpression"], s["status"]) for n, s in schedules.items()} == {
        ("yearly", "tick", "0 0 0 1 1 *", "ACTIVE"), ("pulse", "pulse", "* * * * * *", "PAUSED")}
    assert db(w.relay, "GET", "/schedules/yearly", 200)["scheduleId"] == schedules["yearly"]["scheduleId"]
    db(w.relay, "GET", "/schedules/no-such-schedule", 404)
    db(w.relay, "POST", "/schedules/yearly/pause", 204)
    assert db(w.relay, "GET", "/schedules/yearly", 200)["status"] == "PAUSED"
    assert w.app_view("/schedules/yearly") == {"status": "PAUSED"}
    db(w.relay, "POST", "/schedules/yearly/resume", 204)
    assert w.app_view("/schedules/yearly") == {"status": "ACTIVE"}

    resumed_at = datetime.now(UTC)
    db(w.relay, "POST", "/schedules/pulse/resume", 204)
    eventually(lambda: [p for p in w.seen("pulse") if datetime.fromisoformat(p["scheduled_at"]) > resumed_at],
               f"the resumed schedule never fired in the app:\n{w.app.log_tail()}")
    db(w.relay, "POST", "/schedules/pulse/pause", 204)
    assert w.app_view("/schedules/pulse") == {"status": "PAUSED"}

    triggered = db(w.relay, "POST", "/schedules/yearly/trigger", 201)["workflowId"]
    (tick,) = w.wait_seen("tick", triggered)
    assert tick["context"] == "ctx"
    assert wait_status(w.relay, triggered, "SUCCESS")["scheduleName"] == "yearly"
    # Every January 1st after 2020-01-01 (exclusive) and before mid-2022: two runs, each in the app.
    backfilled = db(w.relay, "POST", "/schedules/yearly/backfill", 200,
                    json={"startTime": "2020-01-01T00:00:00Z", "endTime": "2022-06-01T00:00:00Z"})["workflowIds"]
    assert len(backfilled) == 2
    ticks = [w.wait_seen("tick", workflow_id)[0]["scheduled_at"] for workflow_id in backfilled]
    assert sorted(ticks) == ["2021-01-01T00:00:00+00:00", "2022-01-01T00:00:00+00:00"]

    # Versions: v1 (running) is the latest, v0 before it; the app's SDK sees the latest change both ways.
    assert [v["versionName"] for v in db(w.relay, "GET", "/versions", 200)] == ["v1", "v0"]
    db(w.relay, "PATCH", "/versions/latest", 204, json={"versionName": "v0"})
    assert [v["versionName"] for v in db(w.relay, "GET", "/versions", 200)] == ["v0", "v1"]
    assert w.app_view("/latest-version") == {"versionName": "v0"}
    db(w.relay, "PATCH", "/versions/latest", 204, json={"versionName": "v1"})
    assert w.app_view("/latest-version") == {"versionName": "v1"}

    # The app killed: the database still answers, and shows the run the app left behind.
    w.app.kill()
    listed = {wf["workflowId"]: wf["status"] for wf in db(w.relay, "GET", "/workflows", 200)}
    assert (listed[greet], listed[gated], listed[forked], listed[held]) == ("SUCCESS", "SUCCESS", "SUCCESS", "PENDING")
    assert db(w.relay, "GET", f"/workflows/{gated}", 200)["status"] == "SUCCESS"
    assert [s["stepName"] for s in db(w.relay, "GET", f"/workflows/{forked}/steps", 200)] == ["shout", "exclaim"]
    assert db(w.relay, "GET", "/schedules/yearly", 200)["status"] == "ACTIVE"
