"""Relay's data-plane console beside dbos-argus 0.0.41 (issue 36, point 7): `python -m bench.run --only argus`
(not in the default set; `--argus-million` adds the overview at 1,000,000 workflows).

dbos-argus (PyPI, MIT) is a free read-only web viewer of a DBOS system database: FastAPI + a SvelteKit single-page
app, started as `dbos-argus --db-url URL --dbos-system-schema dbos --port P`; its pages read `/api/*` (and the
same queries over its `/ws` socket). It needs Python >= 3.12: it runs from its own venv, `.venv-argus`, made from a
Python >= 3.12 found on the machine (`make bench-argus-peer`, or this bench when the venv is missing; the pin is
bench/argus-requirements.txt). Without such a Python the bench says so and leaves argus' columns empty.

One dbos 3.4.0 system database on PostgreSQL (tests/support/sysdb_fill.py, run by .venv-relay's python: 50,000
workflows of every status, a third on queues, one workflow with 5 steps), its times moved to the last 30 days
(the filler writes a fixed day in 2026; the throughput series ask for the last 24 h / 7 d / 30 d), read by both
in the same run: a real `relay serve` from .venv-relay whose data plane reads it (mode `read`, no executor
connected) and argus. Each question is timed over HTTP on loopback, a new connection per request, medians of
REPEATS after a warm-up, Relay and argus alternating; the pages are loaded in Debian's Chromium by Playwright.
"""

from __future__ import annotations

import contextlib
import glob
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.dataplane import DataPlaneRelay
from bench.procs import ORG, REPO, clean_env, free_port, stop_process

PEER = "dbos-argus"
PEER_VERSION = "0.0.41"
PEER_VENV = REPO / ".venv-argus"
PEER_REQUIREMENTS = REPO / "bench" / "argus-requirements.txt"
RELAY_PYTHON = REPO / ".venv-relay" / "bin" / "python"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WORKFLOWS = 50_000
MILLION = 1_000_000
APP = "side"
REPEATS = 11
BROWSER_REPEATS = 5
STEP_WORKFLOW = "wf-steps"  # tests/support/sysdb_fill.py's workflow with steps
SEARCH_TEXT = "4999"  # a substring of 20 workflow ids in 50,000 (wf-00004999, wf-00014999, ...), never a prefix
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SPREAD_MS = 29 * DAY_MS  # the fill's times spread over the last 29 days
RANGES = {"24h": (HOUR_MS, DAY_MS), "7d": (DAY_MS, 7 * DAY_MS), "30d": (DAY_MS, 30 * DAY_MS)}
# What argus' dashboard reads (its "stats", "stats_timeseries", "workflows" {limit 8, flat} and "queues" channels).
DASHBOARD_READS = ("/api/stats", "/api/stats/timeseries?range=24h", "/api/workflows?limit=8&grouped=false",
                   "/api/queues")
RELAY_ROW = "table[data-testid=workflows] tbody tr[data-workflow]"
ARGUS_ROW = 'tbody tr a[href*="#/workflows/wf-"]'


# ------------------------------------------------------------------------------------------ the peer
def python_version(exe: str) -> tuple[int, int] | None:
    """(major, minor) of an interpreter, None when it does not run (a pyenv shim without that version)."""
    try:
        out = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2:
        return None
    return int(parts[0]), int(parts[1])


def candidates() -> list[str]:
    """python3.12 / python3.13 / python3 on PATH, then every pyenv version's python3.1x."""
    found = [exe for name in ("python3.13", "python3.12", "python3") if (exe := shutil.which(name))]
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found += sorted(glob.glob(f"{root}/versions/*/bin/python3.1[2-9]"), reverse=True)
    return list(dict.fromkeys(found))


def find_python(options: list[str] | None = None) -> str | None:
    """The first interpreter of `options` (default: candidates()) that is Python >= 3.12, else None."""
    for exe in candidates() if options is None else options:
        version = python_version(exe)
        if version is not None and version >= (3, 12):
            return exe
    return None


def peer_installed(venv: Path = PEER_VENV) -> bool:
    exe = venv / "bin" / "python"
    if not (venv / "bin" / PEER).exists() or not exe.exists():
        return False
    out = subprocess.run([str(exe), "-c", "from importlib.metadata import version; print(version('dbos-argus'))"],
                         capture_output=True, text=True, timeout=30, check=False)
    return out.returncode == 0 and out.stdout.strip() == PEER_VERSION


def ensure_peer(say: Callable[[str], None], venv: Path = PEER_VENV,
                options: list[str] | None = None) -> tuple[Path | None, str]:
    """The peer's command (`.venv-argus/bin/dbos-argus`), installed if need be; else None and why."""
    if peer_installed(venv):
        return venv / "bin" / PEER, f"{PEER} {PEER_VERSION} in {venv.name}"
    python = find_python(options)
    if python is None:
        return None, f"no Python >= 3.12 on this machine ({PEER} needs one): argus' columns are left empty"
    say(f"argus: installing {PEER}=={PEER_VERSION} into {venv.name} with {python}")
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    (venv / ".gitignore").write_text("*\n")  # git ignores the venv (as Python 3.13's venv does by itself)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                           "-r", str(PEER_REQUIREMENTS)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0 or not peer_installed(venv):
        return None, f"{PEER} did not install: {(done.stderr or done.stdout).strip()[-300:]}"
    return venv / "bin" / PEER, f"{PEER} {PEER_VERSION} in {venv.name} (Python {python_version(python)})"


class Argus:
    """`dbos-argus` as a process on a free loopback port, reading one system database."""

    def __init__(self, command: Path, work: Path, database_url: str, name: str = "argus") -> None:
        self.command = command
        self.database_url = database_url
        self.port = free_port()
        self.log_path = work / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> Argus:
        env = clean_env({k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")})
        env = {k: v for k, v in env.items() if not k.startswith("ARGUS_")}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.command), "--db-url", self.database_url, "--dbos-system-schema", "dbos", "--host",
                 "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
                cwd=self.log_path.parent, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"argus exited ({self.proc.returncode}); see {self.log_path}")
            with contextlib.suppress(OSError, ValueError):
                status, body = fetch(self.port, "GET", "/healthz", timeout=5)
                if status == 200 and json.loads(body).get("database") == "up":
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"argus not ready within {timeout:g} s; see {self.log_path}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


# ------------------------------------------------------------------------------------------ HTTP
def fetch(port: int, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
          timeout: float = 120.0) -> tuple[int, bytes]:
    """One request on a new loopback connection; (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        sent = dict(headers or {})
        if data is not None:
            sent["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


Ask = Callable[[], Any]


def ok(port: int, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> bytes:
    status, data = fetch(port, method, path, body, headers)
    if status >= 300:
        raise RuntimeError(f"{method} {path}: HTTP {status} {data[:300]!r}")
    return data


def timed_pair(relay: Ask, argus: Ask | None, repeats: int = REPEATS) -> dict[str, Any]:
    """Medians (ms) of `repeats` runs of each after one warm-up, alternating which goes first."""
    relay()
    if argus is not None:
        argus()
    times: dict[str, list[float]] = {"relay": [], "argus": []}
    for i in range(repeats):
        order = [("relay", relay), ("argus", argus)]
        for name, fn in order if i % 2 == 0 else order[::-1]:
            if fn is None:
                continue
            began = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - began) * 1000)
    relay_ms = statistics.median(times["relay"])
    argus_ms = statistics.median(times["argus"]) if times["argus"] else None
    return {"relay_ms": relay_ms, "argus_ms": argus_ms,
            "ratio": relay_ms / argus_ms if argus_ms else None}


# ------------------------------------------------------------------------------------ the database
def fill(database_url: str, count: int, say: Callable[[str], None]) -> dict[str, Any]:
    """`count` workflows (+ the one with steps) by tests/support/sysdb_fill.py, then their times moved so that
    they spread over the last SPREAD_MS (oldest first, the newest created 10 minutes ago), durations kept."""
    import psycopg

    began = time.monotonic()
    subprocess.run([str(RELAY_PYTHON), "-m", "tests.support.sysdb_fill", database_url, str(count), APP],
                   cwd=REPO, check=True, capture_output=True, timeout=3600)
    filled_s = time.monotonic() - began
    now_ms = int(time.time() * 1000) - 600_000
    with psycopg.connect(database_url, autocommit=True) as conn:
        low, high = conn.execute("SELECT min(created_at), max(created_at) FROM dbos.workflow_status").fetchone() \
            or (0, 0)
        scale = SPREAD_MS / max(1, high - low)
        new_created = "CAST(%(now)s - (%(high)s - created_at) * %(scale)s AS bigint)"
        params = {"now": now_ms, "high": high, "scale": scale}
        (step_shift,) = conn.execute(f"SELECT {new_created} - created_at FROM dbos.workflow_status "
                                     "WHERE workflow_uuid = %(id)s", {**params, "id": STEP_WORKFLOW}).fetchone() \
            or (0,)
        conn.execute(
            f"UPDATE dbos.workflow_status SET created_at = {new_created}, "
            f"updated_at = updated_at - created_at + {new_created}, "
            f"started_at_epoch_ms = started_at_epoch_ms - created_at + {new_created}, "
            f"completed_at = completed_at - created_at + {new_created}", params)
        conn.execute("UPDATE dbos.operation_outputs SET started_at_epoch_ms = started_at_epoch_ms + %(s)s, "
                     "completed_at_epoch_ms = completed_at_epoch_ms + %(s)s", {"s": step_shift})
        # The filler's queue names as declared queues (what dbos 3.4.0 records for a declared queue): both read
        # their queues from this table.
        conn.execute("INSERT INTO dbos.queues (name, concurrency, worker_concurrency, application_name) VALUES "
                     "('orders', 10, 2, %(app)s), ('emails', NULL, NULL, %(app)s)", {"app": APP})
        conn.execute("VACUUM ANALYZE dbos.workflow_status")
        (matching,) = conn.execute("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE %(p)s "
                                   "OR name LIKE %(p)s", {"p": f"%{SEARCH_TEXT}%"}).fetchone() or (0,)
        counted = conn.execute("SELECT status, count(*) FROM dbos.workflow_status GROUP BY status").fetchall()
        statuses: dict[str, int] = {str(status): int(n) for status, n in counted}
    say(f"argus: {count:,} workflows written in {filled_s:.1f} s, times moved in "
        f"{time.monotonic() - began - filled_s:.1f} s")
    return {"workflows": sum(statuses.values()), "statuses": statuses, "fill_s": filled_s, "matching": matching,
            "prepare_s": time.monotonic() - began}


@contextlib.contextmanager
def servers(work: Path, database_url: str, peer: Path | None, name: str) -> Iterator[tuple[DataPlaneRelay,
                                                                                          Argus | None]]:
    reference = f"SIDE_{name.upper()}_SYSDB"
    relay = DataPlaneRelay(work, f"argus-relay-{name}", env={
        reference: database_url, "RELAY_DATA_PLANE_REFERENCES": f"{ORG}/{APP}=env:{reference}"})
    argus: Argus | None = None
    try:
        relay.start()
        relay.http.ok("PUT", f"/v2/orgs/{ORG}/apps/{APP}", {})
        relay.http.ok("PUT", f"/relay/v1/orgs/{ORG}/apps/{APP}/data-plane",
                      {"systemDatabaseUrlFrom": f"env:{reference}", "mode": "read"})
        if peer is not None:
            argus = Argus(peer, work, database_url, name=f"argus-{name}").start()
        yield relay, argus
    finally:
        if argus is not None:
            argus.stop()
        relay.stop()


def console_cookie(relay: DataPlaneRelay) -> str:
    """A console session logged in with the admin token (the login form, as tests/support/console_http.py does):
    its Cookie header."""
    import requests

    session = requests.Session()
    base = f"http://127.0.0.1:{relay.port}"
    form = re.search(r'name="csrf_token" value="([^"]+)"', session.get(f"{base}/login", timeout=10).text)
    assert form, "the login page carries no CSRF token"
    answer = session.post(f"{base}/login", data={"token": relay.token, "csrf_token": form.group(1)}, timeout=10)
    if answer.status_code != 200:
        raise RuntimeError(f"console login: HTTP {answer.status_code}")
    return "; ".join(f"{c.name}={c.value}" for c in session.cookies)


# ------------------------------------------------------------------------------------- the questions
def questions(relay: DataPlaneRelay, argus: Argus | None, say: Callable[[str], None]) -> dict[str, Any]:
    v2 = f"/v2/orgs/{ORG}/apps/{APP}"
    console = f"/orgs/{ORG}/apps/{APP}"
    auth = {"Authorization": f"Bearer {relay.token}"}
    cookie = {"Cookie": console_cookie(relay)}

    def r(method: str, path: str, body: Any = None, headers: dict[str, str] = auth) -> Ask:
        return lambda: ok(relay.port, method, path, body, headers)

    def a(path: str) -> Ask | None:
        return None if argus is None else (lambda: ok(argus.port, "GET", path))

    def both(*asks: Ask) -> Ask:
        return lambda: [ask() for ask in asks]

    now = datetime.now(UTC)
    out: dict[str, Any] = {}
    plan: list[tuple[str, Ask, Ask | None]] = [
        ("newest 50 workflows", r("GET", v2 + "/workflows?limit=50&sortDesc=true"), a("/api/workflows?limit=50")),
        ("failed 50 (ERROR)", r("GET", v2 + "/workflows?limit=50&sortDesc=true&status=ERROR"),
         a("/api/workflows?limit=50&status=ERROR")),
        ("one workflow with its steps", both(r("GET", f"{v2}/workflows/{STEP_WORKFLOW}"),
                                             r("GET", f"{v2}/workflows/{STEP_WORKFLOW}/steps")),
         a(f"/api/workflows/{STEP_WORKFLOW}")),
        ("counts by status", r("POST", v2 + "/workflows/aggregates", {"groupByStatus": True, "selectCount": True}),
         a("/api/stats")),
    ]
    for key, (bucket_ms, span_ms) in RANGES.items():
        start = (now - timedelta(milliseconds=span_ms)).isoformat().replace("+00:00", "Z")
        plan.append((f"throughput series {key}", r("POST", v2 + "/workflows/aggregates", {
            "groupByStatus": True, "selectCount": True, "timeBucketSizeMs": bucket_ms, "startTime": start}),
            a(f"/api/stats/timeseries?range={key}")))
    plan += [
        ("queues", r("GET", v2 + "/queues"), a("/api/queues")),
        (f"search '{SEARCH_TEXT}'", r("GET", f"{console}/workflows?q={quote(SEARCH_TEXT)}", headers=cookie),
         a(f"/api/workflows?q={quote(SEARCH_TEXT)}")),
        ("search: Relay's workflow-id prefix (API)", r("POST", v2 + "/workflows/search", {
            "workflowIdPrefix": [f"wf-0004{SEARCH_TEXT[:3]}"], "limit": 50, "sortDesc": True}), None),
        ("overview page (HTML) vs argus dashboard's reads", r("GET", console, headers=cookie),
         None if argus is None else both(*(lambda p=p: ok(argus.port, "GET", p) for p in DASHBOARD_READS))),
        ("workflows page (HTML) vs argus' list read", r("GET", f"{console}/workflows", headers=cookie),
         a("/api/workflows?limit=50")),
    ]
    for name, relay_ask, argus_ask in plan:
        out[name] = timed_pair(relay_ask, argus_ask)
        say(f"argus: {name}: Relay {_ms(out[name]['relay_ms'])}, argus {_ms(out[name]['argus_ms'])}")
    # What each answered (sizes and a check that they are the question's answer).
    sizes = {"relay_newest": len(json.loads(ok(relay.port, "GET", v2 + "/workflows?limit=50&sortDesc=true",
                                               headers=auth))),
             "relay_failed_statuses": sorted({w["status"] for w in json.loads(ok(
                 relay.port, "GET", v2 + "/workflows?limit=50&status=ERROR", headers=auth))}),
             "relay_steps": len(json.loads(ok(relay.port, "GET", f"{v2}/workflows/{STEP_WORKFLOW}/steps",
                                              headers=auth))),
             "relay_queues": json.loads(ok(relay.port, "GET", v2 + "/queues", headers=auth))}
    page = ok(relay.port, "GET", f"{console}/workflows?q={quote(SEARCH_TEXT)}", headers=cookie).decode()
    shown = re.findall(r'<tr data-workflow="([^"]+)"', page)
    sizes["relay_search_rows"] = len(shown)
    sizes["relay_q_honoured"] = bool(shown) and all(SEARCH_TEXT in w for w in shown)
    if argus is not None:
        found = json.loads(ok(argus.port, "GET", f"/api/workflows?q={quote(SEARCH_TEXT)}"))
        sizes["argus_search_rows"] = len(found)
        sizes["argus_newest"] = len(json.loads(ok(argus.port, "GET", "/api/workflows?limit=50")))
        sizes["argus_queues"] = json.loads(ok(argus.port, "GET", "/api/queues"))
        sizes["argus_steps"] = len(json.loads(ok(argus.port, "GET", f"/api/workflows/{STEP_WORKFLOW}"))["steps"])
    out["_answers"] = sizes
    return out


# --------------------------------------------------------------------------------------- the browser
def _weigh(browser: Any, state: Any, url: str, row: str) -> dict[str, Any]:
    """Load `url` in a new context (empty cache) until `row` shows and the network is idle: bytes per kind of
    loopback response (bodies as decoded), WebSocket bytes received; other hosts are refused."""
    context = browser.new_context(storage_state=state, viewport={"width": 1360, "height": 900})
    context.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())
    responses: list[Any] = []
    frames = [0]
    try:
        page = context.new_page()
        page.on("response", lambda response: responses.append(response))  # noqa: PLW0108 - Playwright tags the handler
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.__setitem__(
            0, frames[0] + len(payload))))
        page.goto(url)
        page.wait_for_selector(row, timeout=60_000)
        with contextlib.suppress(Exception):
            page.wait_for_load_state("networkidle", timeout=10_000)
        kinds: dict[str, int] = {}
        for response in responses:
            with contextlib.suppress(Exception):
                kind = response.request.resource_type
                kinds[kind] = kinds.get(kind, 0) + len(response.body())
        kinds["websocket frames"] = frames[0]
        return {"bytes": kinds, "total": sum(kinds.values()), "requests": len(responses)}
    finally:
        context.close()


def _until_rows(browser: Any, state: Any, url: str, row: str) -> float:
    context = browser.new_context(storage_state=state, viewport={"width": 1360, "height": 900})
    context.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())
    try:
        page = context.new_page()
        began = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_selector(row, timeout=60_000)
        return (time.perf_counter() - began) * 1000
    finally:
        context.close()


def browser_table_times(relay: DataPlaneRelay, argus: Argus | None) -> dict[str, Any]:
    """Navigation → first workflow row, in a new context each time (empty cache, logged in for Relay): medians
    of BROWSER_REPEATS after a warm-up, alternating."""
    from playwright.sync_api import sync_playwright

    relay_url = f"http://127.0.0.1:{relay.port}/orgs/{ORG}/apps/{APP}/workflows"
    argus_url = None if argus is None else f"http://127.0.0.1:{argus.port}/#/workflows/"
    times: dict[str, list[float]] = {"relay": [], "argus": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            state = _login_state(browser, relay)
            targets = [("relay", relay_url, state, RELAY_ROW)]
            if argus_url is not None:
                targets.append(("argus", argus_url, None, ARGUS_ROW))
            for _name, url, st, row in targets:  # warm-up
                _until_rows(browser, st, url, row)
            for i in range(BROWSER_REPEATS):
                for name, url, st, row in targets if i % 2 == 0 else targets[::-1]:
                    times[name].append(_until_rows(browser, st, url, row))
        finally:
            browser.close()
    relay_ms = statistics.median(times["relay"])
    argus_ms = statistics.median(times["argus"]) if times["argus"] else None
    return {"relay_ms": relay_ms, "argus_ms": argus_ms, "ratio": relay_ms / argus_ms if argus_ms else None}


def _login_state(browser: Any, relay: DataPlaneRelay) -> Any:
    login = browser.new_context()
    try:
        page = login.new_page()
        page.goto(f"http://127.0.0.1:{relay.port}/login")
        page.fill("input[name=token]", relay.token)
        page.click("button[type=submit]")
        page.wait_for_load_state()
        return login.storage_state()
    finally:
        login.close()


def page_weights(relay: DataPlaneRelay, argus: Argus | None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    relay_base = f"http://127.0.0.1:{relay.port}"
    out: dict[str, Any] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            state = _login_state(browser, relay)
            out["relay"] = {
                "overview": _weigh(browser, state, f"{relay_base}/orgs/{ORG}/apps/{APP}",
                                   "table[data-testid=recent] tbody tr"),
                "workflows": _weigh(browser, state, f"{relay_base}/orgs/{ORG}/apps/{APP}/workflows", RELAY_ROW)}
            if argus is not None:
                argus_base = f"http://127.0.0.1:{argus.port}"
                out["argus"] = {"dashboard": _weigh(browser, None, f"{argus_base}/", ARGUS_ROW),
                                "workflows": _weigh(browser, None, f"{argus_base}/#/workflows/", ARGUS_ROW)}
        finally:
            browser.close()
    return out


# ------------------------------------------------------------------------------------------ the run
def bench_argus(work: Path, server: str, say: Callable[[str], None], million: bool = False,
                options: list[str] | None = None) -> dict[str, Any]:
    from bench.stores import fresh_database

    peer, peer_note = ensure_peer(say, options=options)
    say(f"argus: peer: {peer_note}")
    out: dict[str, Any] = {"peer": peer_note, "peer_ok": peer is not None, "repeats": REPEATS,
                           "browser_repeats": BROWSER_REPEATS, "search_text": SEARCH_TEXT}
    with fresh_database(server) as url:
        out["database"] = fill(url, WORKFLOWS, say)
        with servers(work, url, peer, "50k") as (relay, argus):
            out["questions"] = questions(relay, argus, say)
            if CHROMIUM.exists():
                out["weights"] = page_weights(relay, argus)
                out["table_shown"] = browser_table_times(relay, argus)
                say(f"argus: table shown: {out['table_shown']}")
            else:
                out["browser"] = f"{CHROMIUM} is missing: no browser figures"
    if million:
        with fresh_database(server) as url:
            out["million_database"] = fill(url, MILLION, say)
            with servers(work, url, peer, "1m") as (relay, argus):
                out["million"] = million_questions(relay, argus, say)
    return out


def million_questions(relay: DataPlaneRelay, argus: Argus | None, say: Callable[[str], None]) -> dict[str, Any]:
    v2 = f"/v2/orgs/{ORG}/apps/{APP}"
    console = f"/orgs/{ORG}/apps/{APP}"
    auth = {"Authorization": f"Bearer {relay.token}"}
    cookie = {"Cookie": console_cookie(relay)}
    out: dict[str, Any] = {}

    def a(*paths: str) -> Ask | None:
        if argus is None:
            return None
        return lambda: [ok(argus.port, "GET", p) for p in paths]

    plan: list[tuple[str, Ask, Ask | None]] = [
        ("overview page (HTML) vs argus dashboard's reads", lambda: ok(relay.port, "GET", console, headers=cookie),
         a(*DASHBOARD_READS)),
        ("counts by status", lambda: ok(relay.port, "POST", v2 + "/workflows/aggregates",
                                        {"groupByStatus": True, "selectCount": True}, auth), a("/api/stats")),
        ("newest 50 workflows", lambda: ok(relay.port, "GET", v2 + "/workflows?limit=50&sortDesc=true",
                                           headers=auth), a("/api/workflows?limit=50")),
        ("throughput series 30d", lambda: ok(relay.port, "POST", v2 + "/workflows/aggregates", {
            "groupByStatus": True, "selectCount": True, "timeBucketSizeMs": DAY_MS,
            "startTime": (datetime.now(UTC) - timedelta(days=30)).isoformat().replace("+00:00", "Z")}, auth),
         a("/api/stats/timeseries?range=30d")),
        (f"search '{SEARCH_TEXT}' (console page vs argus' list)",
         lambda: ok(relay.port, "GET", f"{console}/workflows?q={quote(SEARCH_TEXT)}", headers=cookie),
         a(f"/api/workflows?q={quote(SEARCH_TEXT)}")),
    ]
    for name, relay_ask, argus_ask in plan:
        out[name] = timed_pair(relay_ask, argus_ask, repeats=5)
        say(f"argus (1M): {name}: {out[name]}")
    return out


# ------------------------------------------------------------------------------------------ report
def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def _ratio(row: dict[str, Any]) -> str:
    return "—" if row.get("ratio") is None else f"{row['ratio']:.2f}x"


def _kib(value: int | None) -> str:
    if value is None:
        return "—"
    return f"{value:,} B" if value < 1024 else f"{value / 1024:,.0f} KiB"


def summary_rows(d: dict[str, Any]) -> list[list[str]]:
    q = d.get("questions", {})
    return [[f"data-plane console vs dbos-argus {PEER_VERSION}: {name} ({d['database']['workflows']:,})",
             f"{_ms(q[name]['relay_ms'])} vs {_ms(q[name]['argus_ms'])} ({_ratio(q[name])})", "",
             "same database, same run, loopback HTTP"]
            for name in ("newest 50 workflows", "counts by status", "throughput series 30d") if name in q]


def details(d: dict[str, Any], add: Callable[[str], None]) -> None:
    add(f"### Relay's data-plane console beside dbos-argus {PEER_VERSION} (issue 36)")
    add("")
    db = d["database"]
    add(f"{db['workflows']:,} workflows in one dbos 3.4.0 system database on PostgreSQL (tests/support/sysdb_fill.py; "
        f"by status {dict(sorted(db['statuses'].items()))}; their times moved to the last 29 days), read in the "
        f"same run by `relay serve` (its data plane, mode read, no executor connected) and by dbos-argus "
        f"{PEER_VERSION} ({d['peer']}). HTTP on loopback, a new connection per request, medians of {d['repeats']} "
        "after a warm-up, the two alternating; ratio = Relay / argus.")
    add("")
    if not d.get("peer_ok"):
        add(f"argus: {d['peer']}.")
        add("")
    add("| question | Relay asks | argus asks | Relay | argus | Relay/argus |")
    add("|---|---|---|---|---|---|")
    asked = {
        "newest 50 workflows": ("GET /v2/…/workflows?limit=50&sortDesc=true", "GET /api/workflows?limit=50"),
        "failed 50 (ERROR)": ("…&status=ERROR", "…&status=ERROR"),
        "one workflow with its steps": ("GET workflow + GET its steps (2 requests)", "GET /api/workflows/{id}"),
        "counts by status": ("POST …/workflows/aggregates groupByStatus",
                             "GET /api/stats (total, in flight, queued, failed 24 h)"),
        "throughput series 24h": ("aggregates, 1 h buckets, startTime -24 h, by status",
                                  "GET /api/stats/timeseries?range=24h"),
        "throughput series 7d": ("aggregates, 1 d buckets, -7 d", "…?range=7d"),
        "throughput series 30d": ("aggregates, 1 d buckets, -30 d", "…?range=30d"),
        "queues": ("GET /v2/…/queues", "GET /api/queues"),
        f"search '{d['search_text']}'": (f"console GET /orgs/…/workflows?q={d['search_text']} (HTML)",
                                         f"GET /api/workflows?q={d['search_text']}"),
        "search: Relay's workflow-id prefix (API)": ("POST …/workflows/search workflowIdPrefix", "—"),
        "overview page (HTML) vs argus dashboard's reads": ("console GET /orgs/…/apps/{app} (HTML)",
                                                            "its 4 reads: stats, series, 8 workflows, queues"),
        "workflows page (HTML) vs argus' list read": ("console GET /orgs/…/workflows (HTML, 50 rows)",
                                                      "GET /api/workflows?limit=50"),
    }
    for name, row in d.get("questions", {}).items():
        if name.startswith("_"):
            continue
        relay_asks, argus_asks = asked.get(name, ("", ""))
        add(f"| {name} | {relay_asks} | {argus_asks} | {_ms(row['relay_ms'])} | {_ms(row['argus_ms'])} | "
            f"{_ratio(row)} |")
    if (shown := d.get("table_shown")) is not None:
        add(f"| workflow table shown in Chromium (navigation → first row, empty cache, median of "
            f"{d['browser_repeats']}) | console workflows page | `#/workflows/` | {_ms(shown['relay_ms'])} | "
            f"{_ms(shown['argus_ms'])} | {_ratio(shown)} |")
    add("")
    answers = d.get("questions", {}).get("_answers", {})
    if answers:
        q_note = ("honoured (every row shown holds the text)" if answers.get("relay_q_honoured") else
                  "not built yet: the page ignores `q` and answers its first page of every workflow, which is "
                  "what was timed")
        add(f"- What they answered: Relay's newest page {answers.get('relay_newest')} workflows, argus' "
            f"{answers.get('argus_newest', '—')} (argus' list leaves ENQUEUED workflows out unless a status filter "
            "asks for them (its page shows them in a strip of their own, `?status=ENQUEUED`) and groups children "
            f"under their root); steps of `{STEP_WORKFLOW}`: {answers.get('relay_steps')} vs "
            f"{answers.get('argus_steps', '—')}; queues (both read `dbos.queues`, where the bench declares the "
            f"filler's two): Relay {len(answers.get('relay_queues') or [])}, argus "
            f"{len(answers.get('argus_queues') or [])}.")
        add(f"- Search `{d['search_text']}` ({db.get('matching', '—')} workflows hold it in their id or name): argus "
            f"matches it anywhere in the id or name (ILIKE; {answers.get('argus_search_rows', '—')} rows: its list "
            f"leaves the ENQUEUED ones out); Relay's console `q`: {q_note} ({answers.get('relay_search_rows')} "
            "rows shown).")
    if (weights := d.get("weights")) is not None:
        add("- Page weight (Chromium, empty cache, until the first row shows and the network is idle; bodies as "
            "decoded; requests to other hosts refused — argus asks api.github.com for its star count):")
        for who, pages in weights.items():
            for page, w in pages.items():
                parts = ", ".join(f"{k} {_kib(v)}" for k, v in sorted(w["bytes"].items()) if v)
                add(f"  - {who} {page}: {_kib(w['total'])} in {w['requests']} responses ({parts})")
    if (m := d.get("million")) is not None:
        mdb = d["million_database"]
        add(f"- At {mdb['workflows']:,} workflows (filled in {mdb['fill_s']:.0f} s, ready in {mdb['prepare_s']:.0f} "
            "s), medians of 5:")
        for name, row in m.items():
            add(f"  - {name}: Relay {_ms(row['relay_ms'])}, argus {_ms(row['argus_ms'])} ({_ratio(row)})")
    add("")


def section(saved: dict[str, Any]) -> str:
    """This part's section of bench/RESULTS.md from a run's results.json (`--section`)."""
    lines: list[str] = []
    details(saved["results"]["argus"], lines.append)
    lines[0] = lines[0].replace("### ", "## ", 1)
    command = re.sub(r" --results \S+", "", saved["command"])  # where that run wrote its own report
    lines.insert(2, f"Written by `{command}` on {saved['info']['started']}, same machine (bench/argus.py; "
                 f"load average {'; '.join(f'{w}: {v}' for w, v in saved['loads'])}).")
    busiest = max(float(v.split()[0]) for _, v in saved["loads"])
    cpus = saved["info"]["machine"]["nproc"] or 1
    if busiest > cpus:
        lines[2] += (f" A noisy run: the 1-minute load average reached {busiest:g} on {cpus}"
                     " CPUs (other test runs shared the machine); the same-run ratios are the figures to compare.")
    lines.insert(3, "")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.argus --install-peer`: install the peer's venv (make bench-argus-peer);
    `python -m bench.argus --section RUN/results.json`: print this part's section of bench/RESULTS.md."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--install-peer"]:
        peer, note = ensure_peer(print)
        print(note)
        return 0 if peer is not None else 1
    if len(args) == 2 and args[0] == "--section":
        print(section(json.loads(Path(args[1]).read_text())))
        return 0
    print("usage: python -m bench.argus --install-peer | --section RUN/results.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
