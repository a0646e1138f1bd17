"""The data plane at scale (issue 34, points 8 and 11), against a real `relay serve` and real dbos 3.4.0 system
databases on a real PostgreSQL (and SQLite), filled with COPY into the SDK's own tables (tests/support/
sysdb_fill.py) after the SDK's own migrations:

- a list without `limit` is one page of 100, not every workflow; a limit above 10,000 is served as 10,000;
- /healthz keeps answering quickly while pages of 10,000 workflows with inputs and outputs are served;
- workflow aggregates equal a direct GROUP BY on every schema version Relay reads (109 to 125, PostgreSQL; the
  newest and the oldest on SQLite), with filters, and over 200,001 workflows (past the old cap of 200,000);
- a workflow's steps cost one query (counted by pg_stat_statements on the system database).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from relay.actors.adapters.dataplane.sql import AGGREGATE_SCHEMA_VERSIONS
from tests.support import pg, reliability_report
from tests.support.procs import RELAY_PYTHON, REPO_ROOT, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ORG = "local"
BIG_APP = "scaleapp"
BIG_COUNT = 200_001  # one past the cap the data plane's aggregates had (200,000)
VERSION_COUNT = 3_000
SERVED_FROM = "X-Relay-Served-From"
HEALTHZ_BUDGET_S = 0.25  # the slowest /healthz answer allowed while 10,000-workflow pages are served
AGGREGATE_BODY = {
    "groupByStatus": True, "groupByWorkflowName": True, "groupByQueueName": True, "groupByExecutorId": True,
    "groupByAppVersion": True, "groupByApplicationName": True, "timeBucketSizeMs": 3_600_000,
    "selectCount": True, "selectMinCreatedAt": True, "selectMaxQueueWaitMs": True, "selectMaxTotalLatencyMs": True,
}
GROUP_SQL = """
    SELECT status, name, queue_name, executor_id, application_version, application_name,
           created_at - created_at % 3600000, count(*), min(created_at), max(started_at_epoch_ms - created_at),
           max(completed_at - created_at)
    FROM {table} {where}
    GROUP BY 1, 2, 3, 4, 5, 6, 7
"""


# Times GET /healthz every 10 ms until told to stop on stdin; prints each latency (s).
HEALTHZ_PROBE = """
import sys, threading, time, requests
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
session = requests.Session()
session.get(sys.argv[1], timeout=30)
print("ready", flush=True)
times = []
while not stop.is_set():
    began = time.monotonic()
    assert session.get(sys.argv[1], timeout=30).status_code == 200
    times.append(time.monotonic() - began)
    time.sleep(0.01)  # the probe's pace, not a wait for anything
print("\\n".join(f"{t:.4f}" for t in times))
"""


@dataclass
class Scale:
    relay: RelayProcess
    big: str  # the 200,001-workflow database
    versions: dict[int, str]  # schema version -> its database (PostgreSQL)
    sqlite: dict[int, Path]  # schema version -> its file


def _app_of_version(version: int, engine: str = "pg") -> str:
    return f"{engine}-v{version}"


def _filling(jobs: list[tuple[str, int, str, int | None]]) -> subprocess.Popen[str]:
    """Fill these databases (url, count, app, schema version or None) in one process of their own: it starts, and
    imports the SDK, once for them all; the caller waits for it (_filled) and may fill others meanwhile."""
    argv = [str(RELAY_PYTHON), "-m", "tests.support.sysdb_fill"]
    for n, (url, count, app, version) in enumerate(jobs):
        argv += [*(["+"] if n else []), url, str(count), app, *([str(version)] if version is not None else [])]
    return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _filled(process: subprocess.Popen[str]) -> None:
    _out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]


@pytest.fixture(scope="module")
def scale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scale]:
    # Its own cluster: pg_stat_statements must be loaded at start (the steps query count).
    with pg.ThrowawayCluster(settings=("shared_preload_libraries=pg_stat_statements",)) as cluster:
        big = pg.create_database(cluster.url)
        big_filling = _filling([(big, BIG_COUNT, BIG_APP, None)])  # beside the small ones: two cores, two fills
        versions = {version: pg.create_database(cluster.url) for version in AGGREGATE_SCHEMA_VERSIONS}
        folder = tmp_path_factory.mktemp("sqlite-sysdbs")
        sqlite = {version: folder / f"v{version}.sqlite"
                  for version in (AGGREGATE_SCHEMA_VERSIONS[0], AGGREGATE_SCHEMA_VERSIONS[-1])}
        _filled(_filling(
            [(url, VERSION_COUNT, _app_of_version(version), version) for version, url in versions.items()]
            + [(f"sqlite:///{path}", VERSION_COUNT, _app_of_version(version, "lite"), version)
               for version, path in sqlite.items()]))
        _filled(big_filling)
        with psycopg.connect(big, autocommit=True) as connection:
            connection.execute("CREATE EXTENSION pg_stat_statements")
        sources = {BIG_APP: big, **{_app_of_version(v): url for v, url in versions.items()},
                   **{_app_of_version(v, "lite"): f"sqlite:///{path}" for v, path in sqlite.items()}}
        env = {f"SYSDB_{app.replace('-', '_').upper()}": url for app, url in sources.items()}
        env["RELAY_DATA_PLANE_REFERENCES"] = " ".join(
            f"{ORG}/{app}=env:SYSDB_{app.replace('-', '_').upper()}" for app in sources)
        relay = RelayProcess(tmp_path_factory.mktemp("relay-data"), env=env)
        for url in sources.values():
            relay.remember_secret(url, "system database URL")
        try:
            relay.start()
            for app in sources:
                assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
                answer = relay.api("PUT", f"/relay/v1/orgs/{ORG}/apps/{app}/data-plane",
                                   json={"systemDatabaseUrlFrom": f"env:SYSDB_{app.replace('-', '_').upper()}"})
                assert answer.status_code == 200 and answer.json()["state"]["status"] == "ready", answer.text
            yield Scale(relay, big, versions, sqlite)
        finally:
            relay.stop()
            relay.assert_no_secrets_logged()


def _get(relay: RelayProcess, app: str, path: str, **kwargs: Any) -> requests.Response:
    response = relay.api(kwargs.pop("method", "GET"), f"/v2/orgs/{ORG}/apps/{app}{path}", timeout=120, **kwargs)
    assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:500]}"
    assert response.headers.get(SERVED_FROM) == "database", dict(response.headers)
    return response


# ------------------------------------------------------------------------------------------ point 8: pages


def test_a_list_without_a_limit_is_one_default_page(scale: Scale) -> None:
    relay = scale.relay
    assert len(_get(relay, BIG_APP, "/workflows").json()) == 100
    assert len(_get(relay, BIG_APP, "/workflows/search", method="POST", json={}).json()) == 100
    assert len(_get(relay, BIG_APP, "/workflows/search", method="POST", json={"queuesOnly": True}).json()) == 100
    # Above the maximum: served at the maximum (Conductor's reference declares none; its clients get a page).
    assert len(_get(relay, BIG_APP, "/workflows?limit=50000").json()) == 10_000
    assert len(_get(relay, BIG_APP, "/workflows/search", method="POST", json={"limit": 10**9}).json()) == 10_000
    # Pages follow on with offset, and the last one is short.
    tail = _get(relay, BIG_APP, f"/workflows?limit=10000&offset={BIG_COUNT + 1 - 5}").json()
    assert len(tail) == 5
    for route in ("/relay/v1/events?limit=999999", f"/relay/v1/orgs/{ORG}/apps/{BIG_APP}/alerts?limit=999999",
                  f"/v2/orgs/{ORG}/audit-logs?limit=999999"):
        assert relay.api("GET", route).status_code == 200, route
    document = relay.api("GET", "/openapi.json").json()
    limit = next(p for p in document["paths"]["/v2/orgs/{orgName}/apps/{appName}/workflows"]["get"]["parameters"]
                 if p["name"] == "limit")
    assert "100 when unset" in limit["description"] and "10000" in limit["description"], limit


def test_healthz_answers_while_maximum_pages_are_served(scale: Scale) -> None:
    relay = scale.relay
    pages: list[tuple[float, requests.Response]] = []

    def serve_pages() -> None:  # the answers are read after: parsing 10 MB here would hold this process's GIL
        for offset in (0, 10_000, 20_000):
            began = time.monotonic()
            response = relay.api("GET", f"/v2/orgs/{ORG}/apps/{BIG_APP}/workflows?limit=10000&offset={offset}"
                                        "&loadInput=true&loadOutput=true", timeout=120)
            pages.append((time.monotonic() - began, response))

    # /healthz is timed from another process: this one's GIL is busy reading the pages.
    probe = subprocess.Popen([sys.executable, "-c", HEALTHZ_PROBE, f"{relay.base_url}/healthz"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert probe.stdout is not None and probe.stdout.readline().strip() == "ready"
        worker = threading.Thread(target=serve_pages)
        worker.start()
        worker.join(timeout=300)
        out, _ = probe.communicate("stop\n", timeout=30)
    finally:
        probe.kill()
    latencies = [float(line) for line in out.split()]
    for _, response in pages:
        assert response.status_code == 200 and len(response.json()) == 10_000, response.text[:300]
        assert response.json()[0]["input"], response.json()[0]  # inputs loaded, as asked
    assert len(latencies) >= 5, latencies  # /healthz was asked while the pages were served
    slowest = max(latencies)
    assert slowest < HEALTHZ_BUDGET_S, f"/healthz took {slowest:.3f} s while 10,000-workflow pages were served"
    reliability_report.record(
        "dataplane-max-page-healthz", area="exhaustion",
        tried={"workflows in the system database": BIG_COUNT, "pages of 10,000 with inputs and outputs": len(pages),
               "MB per page": round(statistics.mean(len(r.content) for _, r in pages) / 1e6, 1),
               "s per page": round(statistics.mean(t for t, _ in pages), 2),
               "/healthz asked meanwhile": len(latencies), "slowest /healthz (ms)": round(slowest * 1000, 1)},
        outcome=f"no limit: a page of 100; above 10,000: 10,000; /healthz under {HEALTHZ_BUDGET_S * 1000:.0f} ms "
                "throughout (answers streamed in chunks, the hub free between them)")


# ------------------------------------------------------------------------------------- point 11: aggregates


def _relay_rows(relay: RelayProcess, app: str, extra: dict[str, Any] | None = None) -> set[tuple[Any, ...]]:
    rows = _get(relay, app, "/workflows/aggregates", method="POST", json={**AGGREGATE_BODY, **(extra or {})}).json()

    def ms(text: str | None) -> int | None:
        return None if text is None else round(datetime.fromisoformat(text).timestamp() * 1000)

    return {(g["status"], g["workflowName"], g["queueName"], g["executorId"], g["appVersion"], g["applicationName"],
             ms(g["timeBucket"]), r["count"], ms(r["minCreatedAt"]), r.get("maxQueueWaitMs"),
             r.get("maxTotalLatencyMs"))
            for r in rows for g in [r["group"]]}


def _sql_rows(rows: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    return {tuple(None if v is None else int(v) if i >= 6 else str(v) for i, v in enumerate(row)) for row in rows}


def _pg_group_by(url: str, where: str = "") -> set[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as connection:
        return _sql_rows(connection.execute(GROUP_SQL.format(table="dbos.workflow_status", where=where)).fetchall())


def test_aggregates_equal_a_group_by_past_the_old_cap(scale: Scale) -> None:
    began = time.monotonic()
    answered = _relay_rows(scale.relay, BIG_APP)
    relay_s = time.monotonic() - began
    began = time.monotonic()
    direct = _pg_group_by(scale.big)
    direct_s = time.monotonic() - began
    assert answered == direct
    assert sum(row[7] for row in answered) == BIG_COUNT + 1  # and the workflow with steps
    # Filters mean what the SDK's list means by them.
    filtered = _relay_rows(scale.relay, BIG_APP, {"status": ["ERROR", "SUCCESS"], "queueName": ["orders"],
                                                   "workflowIdPrefix": ["wf-0001"]})
    assert filtered == _pg_group_by(scale.big, "WHERE status IN ('ERROR', 'SUCCESS') AND queue_name = 'orders' "
                                               "AND workflow_uuid LIKE 'wf-0001%'")
    assert filtered
    reliability_report.record(
        "dataplane-aggregates-at-scale", area="data plane",
        tried={"workflows": BIG_COUNT + 1, "groups": len(answered), "Relay (s)": round(relay_s, 2),
               "direct GROUP BY (s)": round(direct_s, 2)},
        outcome="aggregates equal the GROUP BY, past the old 200,000 cap (now none below 10,000,000)")


@pytest.mark.parametrize("version", list(AGGREGATE_SCHEMA_VERSIONS))
def test_aggregates_equal_a_group_by_on_every_supported_schema(scale: Scale, version: int) -> None:
    app = _app_of_version(version)
    state = scale.relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/{app}/data-plane").json()["state"]
    assert state["schemaVersion"] == version, state
    assert _relay_rows(scale.relay, app) == _pg_group_by(scale.versions[version])
    where = "WHERE status = 'SUCCESS' AND executor_id IN ('exec-a', 'exec-c')"
    assert _relay_rows(scale.relay, app, {"status": ["SUCCESS"], "executorId": ["exec-a", "exec-c"]}) \
        == _pg_group_by(scale.versions[version], where)


def test_aggregates_equal_a_group_by_on_sqlite(scale: Scale) -> None:
    import sqlite3

    for version, path in scale.sqlite.items():
        with sqlite3.connect(path) as connection:
            direct = _sql_rows(connection.execute(GROUP_SQL.format(table="workflow_status", where="")).fetchall())
        assert _relay_rows(scale.relay, _app_of_version(version, "lite")) == direct, version


# ------------------------------------------------------------------------------------------ point 11: steps


def _statements(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url, autocommit=True) as connection:
        return [(query, calls) for query, calls in connection.execute(
            "SELECT query, calls FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
            "WHERE datname = current_database()) AND query ILIKE '%dbos.%' AND query NOT ILIKE '%pg_stat_statements%'"
        ).fetchall()]


def test_a_workflows_steps_cost_one_query(scale: Scale) -> None:
    relay = scale.relay
    _get(relay, BIG_APP, "/workflows?limit=1")  # the data plane is open
    with psycopg.connect(scale.big, autocommit=True) as connection:
        connection.execute("SELECT pg_stat_statements_reset()")
    steps = _get(relay, BIG_APP, "/workflows/wf-steps/steps").json()
    assert [s["stepName"] if "stepName" in s else s.get("functionName") for s in steps][:1] and len(steps) == 5
    issued = _statements(scale.big)
    assert sum(calls for _, calls in issued) == 1, issued
    assert "operation_outputs" in issued[0][0], issued
    # An unknown workflow is still a 404 (its empty page then asks whether it exists).
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/{BIG_APP}/workflows/nope/steps").status_code == 404
