"""Issue 36 (point 4 and the queues of point 5), the data plane: a workflow's events, notifications and streams,
and every setting of a queue, read from the application's system database when no executor is connected
(actors/adapters/dataplane/system_tables.py, docs/adr/0046).

A real dbos 3.4.0 app (executor_apps/communications_app.py, run from .venv-dbos-current and gone before Relay
asks: its SDK never connects to Relay) writes them on PostgreSQL and on SQLite; two more system databases are
built at the oldest schema Relay reads (109) with the SDK's own migrations and given rows the way that schema
stores them (the Python SDK's base64 pickles, ``portable_json``, a NULL serialization, the legacy raw stream
sentinel). One ``relay serve`` (.venv-relay, data plane in mode ``read``) answers them all: the values as the
other answers show them (JSON when plain data, the stored text otherwise), ``X-Relay-Served-From: database``,
every body against Conductor's reference schema; a workflow with none answers empty lists, an unknown one 404
(as its other routes do). The queues list and the console's queues page say what each queue's row says:
priority enabled, concurrency, per-worker concurrency, rate limit, partitioning, polling interval.
"""

from __future__ import annotations

import base64
import json
import pickle
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.sdk_apps import ready_info
from tests.support import pg
from tests.support.console_http import console_session
from tests.support.openapi_ref import check, reference, response_schema
from tests.support.procs import RELAY_PYTHON, REPO_ROOT, ExecutorProcess, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

APP_SCRIPT = Path(__file__).resolve().parent / "executor_apps" / "communications_app.py"
CURRENT_PYTHON = REPO_ROOT / ".venv-dbos-current" / "bin" / "python"
ORG = "local"
LIVE = ("commspg", "commslite")  # written by the real app, on PostgreSQL and on SQLite
OLDEST = ("comms109", "commslite109")  # built at schema 109, rows inserted as that schema stores them
SERVED_FROM = "X-Relay-Served-From"
OLD_WORKFLOW, OLD_QUIET = "old-chatty", "old-quiet"
BUILD_109 = """
import sys
from tests.support import sysdb_fill
url = sys.argv[1]
if url.startswith("sqlite:///"):
    print(sysdb_fill.migrate_sqlite(url.removeprefix("sqlite:///"), 109))
else:
    print(sysdb_fill.migrate(url, 109))
"""


class CurrentSdkApp(ExecutorProcess):
    """The app run by the current SDK's interpreter (.venv-dbos-current, built by `make test-deps`)."""

    def command(self) -> list[str]:
        if not CURRENT_PYTHON.exists():
            raise AssertionError(f"{CURRENT_PYTHON} is missing: `make test-deps` builds .venv-dbos-current")
        return [str(CURRENT_PYTHON), "-u", str(self.script), *self.args]


def env_name(app: str) -> str:
    return f"SYSDB_{app.upper()}"


def pickled(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


# ------------------------------------------------------------------------------ the oldest schema's rows

# (key, stored value, serialization) of OLD_WORKFLOW's events, messages and stream entries, as schema 109 holds them.
OLD_EVENTS = [("a-dict", pickled({"x": [1, 2]}), "py_pickle"), ("b-json", '{"y": "z"}', "portable_json"),
              ("c-unnamed", pickled("no serialization column value"), None)]  # fmt: skip
OLD_MESSAGES = [("greeting", pickled("hi"), "py_pickle", 1_780_000_000_000, True),
                ("__null__topic__", '["p", 1]', "portable_json", 1_780_000_000_500, False)]
OLD_STREAM = [("s", 0, pickled(1), "py_pickle"), ("s", 1, '"x"', "portable_json"),
              ("s", 2, "__DBOS_STREAM_CLOSED__", None),  # a legacy closed stream: the raw sentinel
              ("s", 3, pickled("after the end"), "py_pickle")]
OLD_QUEUE = {"name": "old_queue", "concurrency": 3, "worker_concurrency": None, "rate_limit_max": 7,
             "rate_limit_period_sec": 60.0, "priority_enabled": True, "partition_queue": False,
             "polling_interval_sec": 2.0}  # fmt: skip


def build_oldest(url: str, app: str) -> None:
    """A system database at schema 109, by the SDK's own migrations (dbos 3.4.0: .venv-relay), with OLD_WORKFLOW's
    rows and a queue."""
    built = subprocess.run([str(RELAY_PYTHON), "-c", BUILD_109, url], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=300, check=False)  # fmt: skip
    assert built.returncode == 0 and built.stdout.strip() == "109", built.stderr[-3000:]
    statements: list[tuple[str, list[tuple[Any, ...]]]] = [
        (("INSERT INTO {s}workflow_status (workflow_uuid, status, name, created_at, updated_at, application_name) "
         "VALUES (?, 'SUCCESS', 'chatty', 1780000000000, 1780000001000, ?)"),
         [(OLD_WORKFLOW, app), (OLD_QUIET, app)]),
        ("INSERT INTO {s}workflow_events (workflow_uuid, key, value, serialization) VALUES (?, ?, ?, ?)",
         [(OLD_WORKFLOW, *e) for e in OLD_EVENTS]),
        (("INSERT INTO {s}notifications (destination_uuid, topic, message, serialization, created_at_epoch_ms, "
         "consumed) VALUES (?, ?, ?, ?, ?, ?)"), [(OLD_WORKFLOW, *m) for m in OLD_MESSAGES]),
        (('INSERT INTO {s}streams (workflow_uuid, key, "offset", value, serialization, function_id) '
         "VALUES (?, ?, ?, ?, ?, 1)"), [(OLD_WORKFLOW, *e) for e in OLD_STREAM]),
        ((f"INSERT INTO {{s}}queues (queue_id, {', '.join(OLD_QUEUE)}, created_at, updated_at, application_name) "
         f"VALUES ('q1', {', '.join('?' * len(OLD_QUEUE))}, 1780000000000, 1780000000000, ?)"),
         [(*OLD_QUEUE.values(), app)]),
    ]
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            for sql, rows in statements:
                db.executemany(sql.format(s=""), rows)
        return
    with psycopg.connect(url, autocommit=True) as db, db.cursor() as cursor:
        for sql, rows in statements:
            cursor.executemany(sql.format(s="dbos.").replace("?", "%s"), rows)


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def sources(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Each application's system database URL, written (the real app has run and exited) before Relay starts,
    and the ids of the app's workflows."""
    folder = tmp_path_factory.mktemp("comms-sysdbs")
    pg_urls = [pg.create_database(pg_server), pg.create_database(pg_server)]
    urls = {"commspg": pg_urls[0], "commslite": f"sqlite:///{folder / 'live.sqlite'}", "comms109": pg_urls[1],
            "commslite109": f"sqlite:///{folder / 'oldest.sqlite'}"}
    apps = [CurrentSdkApp(APP_SCRIPT, name=app, cwd=folder / app,
                          env={"APP_NAME": app, "SYSTEM_DATABASE_URL": urls[app]}) for app in LIVE]  # fmt: skip
    try:
        for process in apps:
            process.start()  # both at once; the oldest databases are built meanwhile
        for app in OLDEST:
            build_oldest(urls[app], app)
        ids = {}
        for app, process in zip(LIVE, apps, strict=True):
            ready = ready_info(process, timeout=120)
            assert ready["dbos_version"] == "3.4.0", ready
            assert process.wait(60) == 0, process.log_tail()
            ids[app] = ready["workflows"]
        yield {"urls": urls, "ids": ids}
    finally:
        for process in apps:
            process.kill()
        for url in pg_urls:
            pg.drop_database(url)


@pytest.fixture(scope="module")
def relay_env(sources: dict[str, Any]) -> dict[str, str]:
    urls = sources["urls"]
    return {**{env_name(app): url for app, url in urls.items()},
            "RELAY_DATA_PLANE_REFERENCES": " ".join(f"{ORG}/{app}=env:{env_name(app)}" for app in urls)}


@pytest.fixture(scope="module")
def served(relay: RelayProcess, sources: dict[str, Any]) -> RelayProcess:
    """Relay with each application and its data plane (mode read: these are reads); no executor connected."""
    for app, url in sources["urls"].items():
        relay.remember_secret(url, "system database URL")
        assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
        answer = relay.api("PUT", f"/relay/v1/orgs/{ORG}/apps/{app}/data-plane",
                           json={"systemDatabaseUrlFrom": f"env:{env_name(app)}"})
        assert answer.status_code == 200, answer.text
        state = answer.json()["state"]
        assert state["status"] == "ready", state
        assert state["schemaVersion"] == (109 if app in OLDEST else 125), (app, state)
    return relay


# ------------------------------------------------------------------------------------------ helpers


def db(relay: RelayProcess, app: str, path: str, expect: int = 200) -> Any:
    """A v2 GET the system database answers: its status, the served-from header, the body against the
    reference's schema."""
    base = f"/v2/orgs/{ORG}/apps/{app}"
    response = relay.api("GET", base + path, timeout=30)
    assert response.status_code == expect, f"{app} {path}: {response.status_code} {response.text[:800]}"
    assert response.headers.get(SERVED_FROM) == "database", f"{app} {path}: {dict(response.headers)}"
    body = response.json()
    if expect >= 400:
        assert not check(reference(), {"$ref": "#/components/schemas/ErrorModel"}, body), body
        return body
    template = "/v2/orgs/{orgName}/apps/{appName}" + re.sub(
        r"^/workflows/[^/]+/", "/workflows/{workflowId}/", re.sub(r"^/queues/[^/]+$", "/queues/{queueName}", path))
    schema = response_schema(reference(), template, "get", str(expect))
    errors = check(reference(), schema, body)
    assert not errors, f"{app} {path} does not match the reference schema: {errors[:5]}"
    return body


def communications(relay: RelayProcess, app: str, workflow_id: str) -> dict[str, Any]:
    return {kind: db(relay, app, f"/workflows/{workflow_id}/{kind}")
            for kind in ("events", "notifications", "streams")}  # fmt: skip


# -------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("app", LIVE)
def test_what_a_current_sdk_wrote_is_read_from_its_system_database(served: RelayProcess, sources: dict[str, Any],
                                                                    app: str) -> None:
    ids = sources["ids"][app]
    found = communications(served, app, ids["chatty"])
    events = {e["key"]: e["value"] for e in found["events"]}
    receipt = events.pop("receipt")  # the app's own class: the stored pickle, never loaded by Relay
    assert b"Receipt" in base64.b64decode(receipt, validate=True), receipt
    assert events == {"status": json.dumps({"stage": 2, "ok": True}), "note": f"plain {app}",
                      "portable": json.dumps([1, "two"])}  # fmt: skip
    assert [e["key"] for e in found["events"]] == ["note", "portable", "receipt", "status"]  # by key

    messages = sorted(found["notifications"], key=lambda n: n["topic"] or "")
    assert [(n["topic"], n["message"], n["consumed"]) for n in messages] == [
        (None, json.dumps({"n": 1}), False), ("greeting", "hello relay", True)]
    assert all(re.match(r"^\d{4}-\d\d-\d\dT", n["createdAt"]) for n in messages), messages
    # A closed stream ends where it was closed (its sentinel is no value); an open one has what was written.
    assert found["streams"] == [{"key": "open", "values": [json.dumps({"k": "v"})]},
                                {"key": "progress", "values": ["1", "two"]}]  # fmt: skip

    assert communications(served, app, ids["quiet"]) == {"events": [], "notifications": [], "streams": []}
    for kind in ("events", "notifications", "streams"):  # as the workflow's other routes answer an unknown one
        assert "not" in db(served, app, f"/workflows/{app}-no-such/{kind}", 404)["detail"].lower()
        assert db(served, app, f"/workflows/{app}-no-such", 404)


@pytest.mark.parametrize("app", OLDEST)
def test_the_oldest_schema_read_as_it_stores_them(served: RelayProcess, app: str) -> None:
    found = communications(served, app, OLD_WORKFLOW)
    assert found["events"] == [{"key": "a-dict", "value": json.dumps({"x": [1, 2]})},
                               {"key": "b-json", "value": json.dumps({"y": "z"})},
                               {"key": "c-unnamed", "value": "no serialization column value"}]  # fmt: skip
    assert [(n["topic"], n["message"], n["consumed"], n["createdAt"]) for n in found["notifications"]] == [
        ("greeting", "hi", True, "2026-05-28T20:26:40.000Z"),
        (None, json.dumps(["p", 1]), False, "2026-05-28T20:26:40.500Z")]
    assert found["streams"] == [{"key": "s", "values": ["1", "x"]}]
    assert communications(served, app, OLD_QUIET) == {"events": [], "notifications": [], "streams": []}
    db(served, app, "/workflows/no-such-workflow/events", 404)

    (queue,) = db(served, app, "/queues")
    assert queue == db(served, app, "/queues/old_queue")
    assert {k: queue[k] for k in ("name", "concurrency", "workerConcurrency", "rateLimitMax", "rateLimitPeriodSecs",
                                  "priorityEnabled", "partitionQueue", "pollingIntervalSecs", "applicationName")} == {
        "name": "old_queue", "concurrency": 3, "workerConcurrency": None, "rateLimitMax": 7,
        "rateLimitPeriodSecs": 60.0, "priorityEnabled": True, "partitionQueue": False, "pollingIntervalSecs": 2.0,
        "applicationName": app}  # fmt: skip


@pytest.mark.parametrize("app", LIVE)
def test_queues_report_every_setting_their_rows_record(served: RelayProcess, app: str) -> None:
    queues = {q["name"]: q for q in db(served, app, "/queues")}
    expected = {
        "prio_queue": {"concurrency": 5, "workerConcurrency": 2, "rateLimitMax": 10, "rateLimitPeriodSecs": 2.5,
                       "priorityEnabled": True, "partitionQueue": False, "pollingIntervalSecs": 0.5,
                       "applicationName": app},
        "part_queue": {"concurrency": None, "workerConcurrency": None, "rateLimitMax": None,
                       "rateLimitPeriodSecs": None, "priorityEnabled": True, "partitionQueue": True,
                       "pollingIntervalSecs": 1.0, "applicationName": app},
    }  # fmt: skip
    for name, settings in expected.items():
        assert {k: queues[name].get(k) for k in settings} == settings, queues[name]
        assert db(served, app, f"/queues/{name}") == queues[name]
    assert "not found" in db(served, app, "/queues/no_such_queue", 404)["detail"]

    browser, _csrf = console_session(served)
    page = browser.get(f"{served.base_url}/orgs/{ORG}/apps/{app}/queues", timeout=30)
    assert page.status_code == 200 and 'data-served-from="database"' in page.text, page.text[:500]
    rows = {name: re.search(rf"<tr><td><a [^>]*>{name}</a></td>.*?</tr>", page.text, re.DOTALL) for name in expected}
    assert all(rows.values()), page.text
    prio, part = rows["prio_queue"].group(0), rows["part_queue"].group(0)  # type: ignore[union-attr]
    assert re.search(r'<td class="num">5</td>\s*<td class="num">2</td>\s*<td>10 / 2.5 s</td>\s*'
                     r"<td>yes</td><td>no</td>", prio), prio  # Priority: yes; Partitioned: no
    assert re.search(r"<td>yes</td><td>yes</td>", part), part
