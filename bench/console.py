"""Part `console` (issue 33, point 6): the console at fleet size. `python -m bench.run --only console`.

One `relay serve` on a PostgreSQL store (RELAY_WORKERS=2, as the fleet part) with two applications: `bench`,
with N executors connected (10,000; bench/loadgen.py's simulated executors, real WebSocket sessions), and `plane`,
whose data plane is a dbos 3.4.0 system database of M workflows (1,000,000) and no executor, so the data plane
answers. Every console page is fetched, logged in, `repeats` times after a warm-up, over one keep-alive
connection on loopback: the time until the whole answer is read bounds Relay's own time from above (Relay logs
none per request). Per page: p50 / p95 and the answer's size. The same pages are measured in the same run on a
reference Relay of 10 executors and a 1,000-workflow data plane: ratio = fleet / reference.

The system database is filled in SQL (generate_series into the SDK's own tables, after the SDK's migrations) once
per size as a template database on the bench's server, cloned per run (CREATE DATABASE ... TEMPLATE); a template
older than TEMPLATE_MAX_AGE_S is filled again, so "the last hour" and "24 h" hold what they would in a live one.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

from bench.dataplane import RELAY_PYTHON, DataPlaneRelay
from bench.procs import APP, ORG, REPO, LoadGen, children, cpu_seconds, wait_healthy

PLANE = "plane"  # the data-plane application
TEMPLATE_PREFIX = "relay_bench_console_tpl_"
TEMPLATE_MAX_AGE_S = 6 * 3600
SPAN_MS = 30 * 24 * 3600 * 1000  # the workflows' creation times spread over the last 30 days
STEPPED_EVERY = 1000  # every 1000th workflow has STEPS steps; the 3 after it are its children
STEPS = 10
TARGET_MS = 300.0
TARGET_BYTES = 1_000_000
NAMES = ("process_order", "send_email", "charge_card", "refund", "sync_inventory", "nightly_report",
         "resize_image", "notify_slack", "import_csv", "reconcile", "ship_parcel", "score_lead")
QUEUES = ("orders", "emails", "reports", "imports")

# Buckets of (i * 7919) % 1000: a realistic spread, mostly SUCCESS, a few per cent failed, a little in flight.
FILL_SQL = """
INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, executor_id, application_version,
    created_at, updated_at, started_at_epoch_ms, completed_at, inputs, output, error, serialization,
    application_name, recovery_attempts, parent_workflow_id, class_name, config_name, authenticated_user)
SELECT 'wf-' || lpad(i::text, 8, '0'), s.status, (%(names)s::text[])[1 + (i * 31) %% %(n_names)s],
    CASE WHEN s.status IN ('ENQUEUED', 'PENDING') OR i %% 2 = 1
         THEN (%(queues)s::text[])[1 + (i / 2) %% %(n_queues)s] END,
    'exec-' || lpad((i %% 40)::text, 3, '0'), 'v' || (1 + (i::bigint * 5) / %(n)s), c.created,
    coalesce(c.completed, c.started, c.created), c.started, c.completed, %(inputs)s,
    CASE WHEN s.status = 'SUCCESS' THEN %(output)s END, CASE WHEN s.status = 'ERROR' THEN %(error)s END,
    'py_pickle', %(app)s, 1,
    CASE WHEN i %% %(every)s BETWEEN 1 AND 3 THEN 'wf-' || lpad((i - i %% %(every)s)::text, 8, '0') END,
    NULL, NULL, CASE WHEN i %% 5 = 0 THEN 'alice' END
FROM generate_series(0::bigint, %(n)s - 1) AS i
CROSS JOIN LATERAL (SELECT CASE
    WHEN (i * 7919) %% 1000 < 900 THEN 'SUCCESS' WHEN (i * 7919) %% 1000 < 960 THEN 'ERROR'
    WHEN (i * 7919) %% 1000 < 975 THEN 'CANCELLED' WHEN (i * 7919) %% 1000 < 977 THEN 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
    WHEN (i * 7919) %% 1000 < 992 THEN 'ENQUEUED' ELSE 'PENDING' END AS status) AS s
CROSS JOIN LATERAL (SELECT %(now)s - ((%(n)s - 1 - i)::bigint * %(span)s / %(n)s) AS created) AS t
CROSS JOIN LATERAL (SELECT t.created,
    CASE WHEN s.status <> 'ENQUEUED' THEN t.created + i %% 500 END AS started,
    CASE WHEN s.status NOT IN ('ENQUEUED', 'PENDING') THEN t.created + i %% 500 + 20 + (i * 13) %% 5000 END
        AS completed) AS c
"""
STEPS_SQL = """
INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name, output, error, child_workflow_id,
    started_at_epoch_ms, completed_at_epoch_ms, serialization, application_name)
SELECT w.workflow_uuid, f, 'step_' || f, %(output)s, NULL,
    CASE WHEN f BETWEEN 1 AND 3 THEN 'wf-' || lpad((substr(w.workflow_uuid, 4)::bigint + f)::text, 8, '0') END,
    w.started_at_epoch_ms + f * 10, w.started_at_epoch_ms + f * 10 + 8, 'py_pickle', %(app)s
FROM dbos.workflow_status w CROSS JOIN generate_series(0, %(steps)s - 1) AS f
WHERE substr(w.workflow_uuid, 4)::bigint %% %(every)s = 0 AND w.started_at_epoch_ms IS NOT NULL
"""


def _pickled_constants() -> dict[str, str]:
    import base64
    import pickle

    def pickled(value: Any) -> str:
        return base64.b64encode(pickle.dumps(value)).decode("ascii")

    return {"inputs": pickled({"args": ("order-1234", 42), "kwargs": {"note": "bench"}}),
            "output": pickled({"result": "ok", "count": 7}), "error": pickled(RuntimeError("card declined"))}


def with_database(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of a non-empty list."""
    data = sorted(values)
    rank = max(1, -(-len(data) * p // 100))
    return data[min(len(data), int(rank)) - 1]


def fill(url: str, count: int, app: str, now_ms: int) -> None:
    """The SDK's schema (dbos 3.4.0's migrations, run by the SDK) and `count` workflows in `url`."""
    import psycopg

    migrate = "import sys; from tests.support.sysdb_fill import migrate; migrate(sys.argv[1])"
    subprocess.run([str(RELAY_PYTHON), "-c", migrate, url], cwd=REPO, check=True, capture_output=True, timeout=600)
    params = {**_pickled_constants(), "names": list(NAMES), "n_names": len(NAMES), "queues": list(QUEUES),
              "n_queues": len(QUEUES), "n": count, "now": now_ms, "span": SPAN_MS, "app": app,
              "every": STEPPED_EVERY, "steps": STEPS}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FILL_SQL, params)
        conn.execute(STEPS_SQL, params)
        for name, concurrency in zip(QUEUES, (10, None, 2, 5), strict=True):
            conn.execute("INSERT INTO dbos.queues (name, concurrency, application_name) VALUES (%s, %s, %s)",
                         (name, concurrency, app))
        for k in range(1, 6):
            conn.execute("INSERT INTO dbos.application_versions (version_id, version_name, version_timestamp, "
                         "created_at, application_name) VALUES (%s, %s, %s, %s, %s)",
                         (f"version-{k}", f"v{k}", now_ms - (6 - k) * SPAN_MS // 5, now_ms - (6 - k) * SPAN_MS // 5,
                          app))
        conn.execute("VACUUM ANALYZE")


def ensure_template(server: str, count: int, say: Callable[[str], None]) -> str:
    """The template database of `count` workflows on `server` (filled now if missing or stale): its name."""
    import psycopg
    from psycopg import sql

    name = f"{TEMPLATE_PREFIX}{count}"
    now_ms = int(time.time() * 1000)
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                           (name,)).fetchone()
        filled = int(str(row[0]).removeprefix("filled_ms=")) if row and row[0] else None
        if filled is not None and now_ms - filled < TEMPLATE_MAX_AGE_S * 1000:
            return name
        if row is not None:
            conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
        building = name + "_building"
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(building)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
        began = time.monotonic()
        fill(with_database(server, building), count, PLANE, now_ms)
        say(f"console: {count:,} workflows filled in {time.monotonic() - began:.1f} s")
        # Renamed only when complete: a template under its own name is always a whole one.
        conn.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(building), sql.Identifier(name)))
        conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name),
                                                                      sql.Literal(f"filled_ms={now_ms}")))
    return name


@contextmanager
def system_database(server: str, count: int, say: Callable[[str], None]) -> Iterator[str]:
    """A copy of the template of `count` workflows (its URL), dropped afterwards."""
    import secrets

    import psycopg
    from psycopg import sql

    template = ensure_template(server, count, say)
    name = f"relay_bench_console_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name),
                                                                       sql.Identifier(template)))
    try:
        yield with_database(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


# ------------------------------------------------------------------------------------------- the pages
def pages(stepped_workflow: str) -> dict[str, str]:
    """Every console page, by the name the report gives it (paths under the org `ORG`)."""
    org = f"/orgs/{ORG}"
    fleet, plane = f"{org}/apps/{APP}", f"{org}/apps/{PLANE}"
    return {
        "apps": f"{org}/apps",
        "attention": f"{org}/attention",
        "cluster": f"{org}/cluster",
        "members": f"{org}/members",
        "keys": f"{org}/keys",
        "audit": f"{org}/audit",
        "fleet: overview": fleet,
        "fleet: workflows": f"{fleet}/workflows",
        "fleet: recoveries": f"{fleet}/recoveries",
        "fleet: alerts": f"{fleet}/alerts",
        "fleet: settings": f"{fleet}/settings",
        "fleet: queues": f"{fleet}/queues",
        "plane: overview": plane,
        "plane: overview 30d": f"{plane}?range=30d",
        "plane: workflows": f"{plane}/workflows",
        "plane: workflows ERROR": f"{plane}/workflows?status=ERROR",
        "plane: workflows name+queue": f"{plane}/workflows?name=send_email&queueName=emails",
        "plane: workflows ENQUEUED on a queue": f"{plane}/workflows?queueName=orders&status=ENQUEUED",
        "plane: workflows search": f"{plane}/workflows?q=4999",
        "plane: workflows version": f"{plane}/workflows?applicationVersion=v2",
        "plane: workflow": f"{plane}/workflows/{stepped_workflow}",
        "plane: queues": f"{plane}/queues",
        "plane: schedules": f"{plane}/schedules",
        "plane: versions": f"{plane}/versions",
        "plane: recoveries": f"{plane}/recoveries",
        "plane: alerts": f"{plane}/alerts",
        "plane: settings": f"{plane}/settings",
    }


@dataclass
class PageTimes:
    status: int
    bytes: int
    times_ms: list[float]
    cpu_ms: float  # Relay's CPU per answer, its background (pings) taken out: little moved by others' load
    first_ms: float = 0.0  # the warm-up: a page that keeps an answer (a long range's chart) pays here only

    def row(self) -> dict[str, Any]:
        return {"status": self.status, "bytes": self.bytes, "p50_ms": pct(self.times_ms, 50),
                "p95_ms": pct(self.times_ms, 95), "max_ms": max(self.times_ms), "n": len(self.times_ms),
                "cpu_ms": self.cpu_ms, "first_ms": self.first_ms}


def cpu_per_answer(cpu_s: float, wall_s: float, background_per_s: float, answers: int) -> float:
    """Relay's CPU milliseconds per answer: what its processes used over `wall_s`, less what they use at rest
    (`background_per_s`: pings to thousands of executors), shared by `answers`; never below 0."""
    return max(0.0, (cpu_s - background_per_s * wall_s) * 1000 / answers)


class RelayCpu:
    """utime + stime of `relay serve` and its workers."""

    def __init__(self, pid: int) -> None:
        self.pids = [pid, *children(pid)]

    def read(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def background(self, seconds: float = 3.0) -> float:
        """CPU seconds per second while nothing is asked of it."""
        began, cpu = time.monotonic(), self.read()
        time.sleep(seconds)  # the measurement's own window
        return (self.read() - cpu) / (time.monotonic() - began)


def console_cookie(port: int, token: str) -> str:
    """A console session logged in with the admin token through the login form: its Cookie header."""
    import requests

    session = requests.Session()
    base = f"http://127.0.0.1:{port}"
    form = re.search(r'name="csrf_token" value="([^"]+)"', session.get(f"{base}/login", timeout=30).text)
    if form is None:
        raise RuntimeError("the login page carries no CSRF token")
    answer = session.post(f"{base}/login", data={"token": token, "csrf_token": form.group(1)}, timeout=30)
    if answer.status_code != 200:
        raise RuntimeError(f"console login: HTTP {answer.status_code}")
    return "; ".join(f"{c.name}={c.value}" for c in session.cookies)


def measure(port: int, cookie: str, paths: dict[str, str], repeats: int, cpu: RelayCpu,
            say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Each page once to warm up, then `repeats` times, over one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    background = cpu.background()
    out: dict[str, dict[str, Any]] = {}

    def get(path: str) -> tuple[int, int, float]:
        began = time.perf_counter()
        conn.request("GET", path, headers={"Cookie": cookie, "Accept-Encoding": "identity"})
        answer = conn.getresponse()
        body = answer.read()
        return answer.status, len(body), (time.perf_counter() - began) * 1000

    try:
        for name, path in paths.items():
            status, size, first = get(path)
            if status == 404 and name in ("attention", "members"):
                continue  # members: OAuth mode only (RELAY_OIDC_ISSUER); attention: a Relay before issue 33
            times = []
            began, used = time.monotonic(), cpu.read()
            for _ in range(repeats):
                status, size, ms = get(path)
                times.append(ms)
            spent = cpu_per_answer(cpu.read() - used, time.monotonic() - began, background, repeats)
            out[name] = PageTimes(status, size, times, spent, first).row() | {"path": path}
            say(f"console: {name}: HTTP {status}, {size:,} B, first {first:.1f} ms, "
                f"p50 {out[name]['p50_ms']:.1f} ms, p95 {out[name]['p95_ms']:.1f} ms, CPU {spent:.1f} ms")
    finally:
        conn.close()
    return out


def _stepped_workflow(count: int) -> str:
    newest = (count - 1) // STEPPED_EVERY * STEPPED_EVERY
    return f"wf-{newest:08d}"


def run_one(work: Path, name: str, store_url: str, sysdb_url: str, executors: int, workflows: int, repeats: int,
            say: Callable[[str], None], workers: int = 2) -> dict[str, Any]:
    reference = f"CONSOLE_{name.upper()}_SYSDB"
    relay = DataPlaneRelay(work, f"console-{name}", database_url=store_url, max_files=executors + 4096, env={
        "RELAY_WORKERS": str(workers), "RELAY_MAX_HANDSHAKES_IN_FLIGHT": "1024", reference: sysdb_url,
        "RELAY_DATA_PLANE_REFERENCES": f"{ORG}/{PLANE}=env:{reference}"})
    gen: LoadGen | None = None
    try:
        relay.start(timeout=120)
        relay.setup_app()
        relay.http.ok("PUT", f"/v2/orgs/{ORG}/apps/{PLANE}", {})
        relay.http.ok("PUT", f"/relay/v1/orgs/{ORG}/apps/{PLANE}/data-plane",
                      {"systemDatabaseUrlFrom": f"env:{reference}", "mode": "read"})
        gen = LoadGen(work, f"console-{name}-loadgen", open_timeout=60.0, max_attempts=30,
                      max_executors=executors + 10, backoff_max=1.0)
        began = time.monotonic()
        gen.start(relay.ws_url, f"c{name[:1]}", executors, concurrency=200)
        reached, _, counts = wait_healthy(relay, executors, timeout=900, interval=3.0)
        say(f"console ({name}): {counts.get('HEALTHY', 0):,} HEALTHY in {time.monotonic() - began:.0f} s")
        if not reached:
            raise RuntimeError(f"only {counts.get('HEALTHY', 0)} of {executors} executors HEALTHY")
        cookie = console_cookie(relay.port, relay.token)
        measured = measure(relay.port, cookie, pages(_stepped_workflow(workflows)), repeats, RelayCpu(relay.pid),
                           say)
        return {"executors": executors, "workflows": workflows, "healthy": counts.get("HEALTHY", 0),
                "pages": measured}
    finally:
        if gen is not None:
            gen.stop()
        relay.stop()


def bench_console(work: Path, server: str, say: Callable[[str], None], *, executors: int = 10_000,
                  workflows: int = 1_000_000, repeats: int = 10, reference: tuple[int, int] = (10, 1_000),
                  workers: int = 2) -> dict[str, Any]:
    from bench.stores import fresh_database

    out: dict[str, Any] = {"repeats": repeats, "workers": workers}
    for name, (n_exec, n_wf) in (("reference", reference), ("fleet", (executors, workflows))):
        with system_database(server, n_wf, say) as sysdb, fresh_database(server) as store:
            out[name] = run_one(work, name, store, sysdb, n_exec, n_wf, repeats, say, workers)
    return out


# -------------------------------------------------------------------------------------------- report
def verdict(row: dict[str, Any]) -> str:
    """Whether a page meets the point's targets (server-side p95 and size)."""
    misses = []
    if row["status"] != 200:
        misses.append(f"HTTP {row['status']}")
    if row["p95_ms"] >= TARGET_MS:
        misses.append(f"p95 ≥ {TARGET_MS:.0f} ms")
    if row["bytes"] >= TARGET_BYTES:
        misses.append("≥ 1 MB")
    return "missed: " + ", ".join(misses) if misses else "met"


def details(d: dict[str, Any], add: Callable[[str], None]) -> None:
    fleet, ref = d["fleet"], d["reference"]
    add("### Console at fleet size (issue 33, point 6)")
    add("")
    add(f"`relay serve` (RELAY_WORKERS={d['workers']}, PostgreSQL store) with {fleet['healthy']:,} executors "
        f"HEALTHY in `{APP}` (bench/loadgen.py) and `{PLANE}`, a data plane of {fleet['workflows']:,} workflows "
        f"(dbos 3.4.0 system database, no executor); reference in the same run: {ref['healthy']:,} executors and "
        f"{ref['workflows']:,} workflows. Each page logged in, {d['repeats']} times after a warm-up, one keep-alive "
        "connection on loopback (the time to read the whole answer: an upper bound of Relay's own); Relay CPU ms: its "
        "processes' CPU per answer less their CPU at rest (pings), which the machine's other load moves little. "
        f"Targets: p95 < {TARGET_MS:.0f} ms, < 1 MB.")
    add("")
    add("| page | path | first ms | p50 ms | p95 ms | Relay CPU ms | size KiB | reference p50 ms | ratio (p50) "
        "| target |")
    add("|---|---|---|---|---|---|---|---|---|---|")
    for name, row in fleet["pages"].items():
        base = ref["pages"].get(name)
        ref_p50 = f"{base['p50_ms']:.1f}" if base else "—"
        ratio = f"{row['p50_ms'] / base['p50_ms']:.1f}x" if base and base["p50_ms"] else "—"
        add(f"| {name} | `{row['path']}` | {row.get('first_ms', 0.0):.1f} | {row['p50_ms']:.1f} | "
            f"{row['p95_ms']:.1f} | {row['cpu_ms']:.1f} | "
            f"{row['bytes'] / 1024:,.1f} | "
            f"{ref_p50} | {ratio} | {verdict(row)} |")
    add("")
