"""Issue 17, the operations kit (ops/, Containerfile, compose.yaml), checked against a real Relay.

1. A live scrape: a real `relay serve` with two real DBOS 3.2.0 executors of one application, one of them killed
   (declared DEAD, its recovery dispatched to the other), requests sent to them through the API, and executor
   handshakes refused (401, and 503 past RELAY_MAX_CONNECTIONS). `promtool check metrics` lints that scrape;
   every metric the Grafana dashboard and the alerting rules name is in it (the alerts' with live samples), with
   the labels they filter on; the dashboard's expressions parse as PromQL (`promtool check rules` on them).
2. The alerting rules: `promtool check rules`, and their unit tests (`promtool test rules`).
3. The container: lint-level checks of Containerfile and compose.yaml, always; the entrypoint script run for real
   (as a non-root user, against the test PostgreSQL, stopped by SIGTERM), always; and, where a container engine
   with compose answers, the image built and compose brought up to /readyz and torn down.

promtool comes from Debian's `prometheus` package (`make system-deps`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import websocket
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.ports import free_port, wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

PROMTOOL = Path("/usr/bin/promtool")
DASHBOARD = REPO_ROOT / "ops" / "grafana" / "relay-dashboard.json"
RULES = REPO_ROOT / "ops" / "prometheus" / "relay-alerts.yml"
RULES_TESTS = REPO_ROOT / "ops" / "prometheus" / "relay-alerts.test.yml"
CONTAINERFILE = REPO_ROOT / "Containerfile"
COMPOSE = REPO_ROOT / "compose.yaml"
ENTRYPOINT = REPO_ROOT / "ops" / "container" / "entrypoint.sh"
HEALTHCHECK = REPO_ROOT / "ops" / "container" / "healthcheck.py"
ENV_EXAMPLE = REPO_ROOT / "ops" / "container" / "relay.env.example"
POSTGRES_ENV_EXAMPLE = REPO_ROOT / "ops" / "container" / "postgres.env.example"
RELAY_BIN = REPO_ROOT / ".venv-relay" / "bin"
MINIMAL_APP = Path(__file__).resolve().parent / "executor_apps" / "minimal_app.py"
ORG = "local"
APP = "ops-app"
DEADLINE_S = 60.0
NOBODY = 65534  # uid and gid of Debian's nobody/nogroup: the entrypoint refuses root


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.exists():
        pytest.fail(f"{PROMTOOL} is missing: `make system-deps` installs Debian's prometheus package", pytrace=False)
    return subprocess.run([str(PROMTOOL), *args], input=stdin, capture_output=True, text=True, timeout=60,
                          check=False)


def eventually(predicate: Any, what: str, timeout: float = DEADLINE_S) -> Any:
    return wait_until(predicate, timeout, interval=0.2, message=what,
                      ignore=(requests.RequestException, websocket.WebSocketException, OSError))


# ------------------------------------------------------------------------------------------- the live scrape


@dataclass
class Scrape:
    text: str
    types: dict[str, str]  # family name (as the parser names it) -> type
    samples: dict[str, list[dict[str, str]]]  # sample name -> the label sets it has

    @classmethod
    def parse(cls, text: str) -> Scrape:
        types: dict[str, str] = {}
        samples: dict[str, list[dict[str, str]]] = {}
        for family in text_string_to_metric_families(text):
            types[family.name] = family.type
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(dict(sample.labels))
        return cls(text, types, samples)

    def declared(self) -> set[str]:
        """Every sample name the scrape's families may have: a counter's `_total`, a histogram's `_bucket`,
        `_sum` and `_count`, a gauge's own name (whether or not a sample is there yet)."""
        names: set[str] = set()
        for name, kind in self.types.items():
            if kind == "counter":
                names.add(f"{name}_total")
            elif kind == "histogram":
                names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            else:
                names.add(name)
        return names

    def value(self, name: str, **labels: str) -> float:
        pattern = re.compile(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", re.MULTILINE)
        total = 0.0
        for match in pattern.finditer(self.text):
            if all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
                total += float(match.group(2))
        return total


def scrape(relay: RelayProcess) -> Scrape:
    response = relay.api("GET", "/metrics")
    assert response.status_code == 200, response.text
    return Scrape.parse(response.text)


def executors(relay: RelayProcess) -> list[dict[str, Any]]:
    response = relay.api("GET", f"/v2/orgs/{ORG}/apps/{APP}/executors")
    assert response.status_code == 200, response.text
    return response.json()


def handshake_status(relay: RelayProcess, key: str) -> int:
    """The status a WebSocket handshake at /websocket/APP/KEY is answered with (101 when it is accepted)."""
    try:
        sock = websocket.create_connection(f"{relay.ws_url}/websocket/{APP}/{key}", timeout=10)
    except websocket.WebSocketBadStatusException as error:
        return error.status_code
    sock.close()
    return 101


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    """The scrape of a Relay that has seen executors connect, serve requests, die and be recovered."""
    base = tmp_path_factory.mktemp("ops-live")
    # Two connections at most: the third handshake is refused with 503 (at_capacity).
    relay = RelayProcess(base / "relay-data", env={
        "RELAY_MAX_CONNECTIONS": "2", "RELAY_PING_INTERVAL_S": "0.5", "RELAY_PONG_TIMEOUT_S": "2",
        "RELAY_RECOVERY_TIMEOUT_S": "5",
    })
    procs: list[ExecutorProcess] = []
    with relay:
        assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{APP}", json={}).status_code == 204
        response = relay.api("PATCH", f"/v2/orgs/{ORG}/apps/{APP}", json={"executorTimeoutSecs": 1})
        assert response.status_code == 204, response.text
        response = relay.api("POST", f"/v2/orgs/{ORG}/tokens/ops-key", json={"appNames": [APP]})
        assert response.status_code == 201, response.text
        key = response.json()["token"]
        try:
            for name in ("doomed", "survivor"):
                cwd = base / name
                executor = ExecutorProcess(MINIMAL_APP, name=name, cwd=cwd, env={
                    "APP_NAME": APP, "SYSTEM_DATABASE_URL": f"sqlite:///{cwd / 'dbos_system.sqlite'}",
                    "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key,
                })
                procs.append(executor.start())
                executor.wait_for_log("READY ", timeout=DEADLINE_S)
            eventually(lambda: sum(e["status"] == "HEALTHY" for e in executors(relay)) == 2, "two healthy executors")

            # Requests to executors: an API call answered by one of them.
            response = relay.api("GET", f"/v2/orgs/{ORG}/apps/{APP}/workflows", timeout=30)
            assert response.status_code == 200, response.text
            # Refused handshakes: a wrong key (401), and a right one past RELAY_MAX_CONNECTIONS (503).
            assert handshake_status(relay, "dbos_" + secrets.token_urlsafe(24)) == 401
            assert handshake_status(relay, key) == 503

            # One executor dies: DISCONNECTED, DEAD a second later, its recovery dispatched to the survivor, which
            # acknowledges it (the dead executor's record is then deleted).
            procs[0].kill()
            live = eventually(
                lambda: (s := scrape(relay)).value("relay_recoveries_total", app=APP, outcome="acknowledged") and s,
                "an acknowledged recovery dispatch in the scrape")
            yield live
        finally:
            for proc in procs:
                proc.kill()


def test_promtool_lints_a_live_scrape_with_per_app_series(live: Scrape) -> None:
    result = promtool("check", "metrics", stdin=live.text)
    assert result.returncode == 0, f"promtool check metrics:\n{result.stdout}{result.stderr}"
    assert not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
    # What the scenario made: per-application series, with the values it implies.
    assert live.value("relay_executors", app=APP, status="HEALTHY") == 1
    assert live.value("relay_executors", app=APP, status="DEAD") == 0  # recovered: its record is gone
    assert live.value("relay_executor_connects_total", app=APP) == 2
    assert live.value("relay_executor_disconnects_total", app=APP) == 1
    assert live.value("relay_executor_requests_total", app=APP, outcome="ok") >= 1
    assert live.value("relay_executor_request_seconds_count", app=APP) >= 1
    assert live.value("relay_executor_handshakes_refused_total", status="401", reason="refused") == 1
    assert live.value("relay_executor_handshakes_refused_total", status="503", reason="at_capacity") == 1
    assert live.value("relay_recoveries_total", app=APP, outcome="acknowledged") == 1


_METRIC = re.compile(r"\b((?:relay|process)_[a-z0-9_]+)\b(?:\s*\{([^}]*)\})?")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
# Labels Prometheus adds to every series it scrapes (the target's), not in Relay's exposition.
_TARGET_LABELS = {"instance", "job"}


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def referenced(exprs: list[str]) -> dict[str, set[str]]:
    """Metric name -> the label names the expressions filter it on (recording rules, `relay:...`, are not)."""
    found: dict[str, set[str]] = {}
    for expr in exprs:
        for match in _METRIC.finditer(expr):
            labels = found.setdefault(match.group(1), set())
            labels.update(_MATCHER.findall(match.group(2) or ""))
    return found


def test_dashboard_and_rules_name_only_metrics_of_the_live_scrape(live: Scrape) -> None:
    declared = live.declared()
    dashboard, rules = referenced(dashboard_exprs()), referenced(rule_exprs())
    assert len(dashboard) >= 15 and len(rules) >= 7, (sorted(dashboard), sorted(rules))
    for where, names in (("dashboard", dashboard), ("rules", rules)):
        unknown = sorted(set(names) - declared)
        assert not unknown, f"the {where} names metrics Relay does not expose: {unknown}; exposed: {sorted(declared)}"
    # Every metric an alert watches had samples in this run, carrying the labels the alert filters on.
    for name, labels in {**dashboard, **rules}.items():
        if name not in live.samples:
            assert name not in rules, f"no sample of {name} in the live scrape"
            continue
        seen = set().union(*(set(s) for s in live.samples[name]))
        missing = labels - _TARGET_LABELS - seen
        assert not missing, f"{name} is filtered on labels it does not have: {sorted(missing)} (has {sorted(seen)})"


def test_dashboard_is_importable_and_its_promql_parses(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "relay-ops" and dashboard["title"] == "Relay"
    assert "id" not in dashboard or dashboard["id"] is None  # importable into any Grafana
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance", "org", "app"} <= set(variables)
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "org", "app"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"], variables[name]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    graphs = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert graphs and all(p["targets"] and p["datasource"]["uid"] == "${datasource}" for p in graphs)
    # Every panel expression, its variables given values, must parse: promtool checks them as recording rules.
    values = {"$__rate_interval": "5m", "$instance": ".*", "$org": ".*", "$app": ".*"}
    rules = []
    for index, expr in enumerate(dashboard_exprs()):
        for variable, value in values.items():
            expr = expr.replace(variable, value)  # noqa: PLW2901 - the substituted copy is what is checked
        assert "$" not in expr, f"an unknown variable in {expr}"
        rules.append({"record": f"dashboard:panel_{index}", "expr": expr})
    checked = tmp_path / "dashboard-rules.yml"
    checked.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(checked))
    assert result.returncode == 0, f"a dashboard expression does not parse:\n{result.stdout}{result.stderr}"


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    assert len(alerts) >= 8
    for rule in alerts:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
    tested = set(re.findall(r"alertname: (\w+)", RULES_TESTS.read_text()))
    assert tested == {rule["alert"] for rule in alerts}, "every alert has a unit test, and only those"
    result = promtool("test", "rules", str(RULES_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# ---------------------------------------------------------------------------------------------- the container


def instructions(text: str) -> list[tuple[str, str]]:
    """A Containerfile's (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in joined.splitlines() if line.strip()]


def test_containerfile_runs_unprivileged_with_a_volume_and_a_healthcheck() -> None:
    steps = instructions(CONTAINERFILE.read_text())
    kinds = [kind for kind, _ in steps]
    assert steps[0][0] == "FROM" and steps[0][1].startswith("python:3.11-slim")
    user = [args for kind, args in steps if kind == "USER"][-1]
    assert user.split(":")[0] not in ("root", "0"), user
    assert kinds.index("USER") < kinds.index("ENTRYPOINT")
    assert any(kind == "VOLUME" and "/data" in args for kind, args in steps)
    assert any(kind == "EXPOSE" and args == "8090" for kind, args in steps)
    env = " ".join(args for kind, args in steps if kind == "ENV")
    for setting in ("RELAY_HOST=0.0.0.0", "RELAY_DATA_DIR=/data", "RELAY_PORT=8090"):
        assert setting in env
    healthcheck = next(args for kind, args in steps if kind == "HEALTHCHECK")
    assert "relay-healthcheck" in healthcheck and "CMD" in healthcheck
    run = " ".join(args for kind, args in steps if kind == "RUN")
    assert "-c /src/constraints.txt '/src[dataplane]'" in run  # pinned, with the data plane
    assert "ops/container/entrypoint.sh /usr/local/bin/relay-entrypoint" in run
    assert "ops/container/healthcheck.py /usr/local/bin/relay-healthcheck" in run
    assert json.loads(next(args for kind, args in steps if kind == "ENTRYPOINT")) == ["/usr/local/bin/relay-entrypoint"]
    assert os.access(ENTRYPOINT, os.X_OK)
    syntax = subprocess.run(["bash", "-n", str(ENTRYPOINT)], capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".venv*", "relay-data", "ops/container/relay.env", "ops/container/postgres.env"} <= set(ignored)


def compose_engine() -> list[str] | None:
    """`docker compose` or `podman compose`, when an engine answers and has compose; else None."""
    for cli in ("docker", "podman"):
        exe = shutil.which(cli)
        if exe is None:
            continue
        info = subprocess.run([exe, "info"], capture_output=True, timeout=60, check=False)
        version = subprocess.run([exe, "compose", "version"], capture_output=True, timeout=60, check=False)
        if info.returncode == 0 and version.returncode == 0:
            return [exe, "compose"]
    return None


def compose_cli() -> list[str] | None:
    """A compose CLI that can render `config` (it needs no engine), if any."""
    for cli in ("docker", "podman"):
        exe = shutil.which(cli)
        if exe and subprocess.run([exe, "compose", "version"], capture_output=True, timeout=60,
                                  check=False).returncode == 0:
            return [exe, "compose"]
    return None


def test_compose_file_runs_relay_on_a_healthy_postgres_with_secrets_from_an_env_file(tmp_path: Path) -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    postgres, relay = compose["services"]["postgres"], compose["services"]["relay"]
    assert postgres["image"] == "postgres:16"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert relay["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert relay["build"]["dockerfile"] == "Containerfile"
    assert any(v.startswith("relay-data:/data") for v in relay["volumes"])
    assert any(v.startswith("postgres-data:/var/lib/postgresql/data") for v in postgres["volumes"])
    assert {"relay-data", "postgres-data"} <= set(compose["volumes"])
    # Secrets come from env files only, each read by the service that needs it.
    assert postgres["env_file"] == ["${POSTGRES_ENV_FILE:-ops/container/postgres.env}"]
    assert relay["env_file"] == ["${RELAY_ENV_FILE:-ops/container/relay.env}"]
    for service in (postgres, relay):
        assert not {"POSTGRES_PASSWORD", "RELAY_DATABASE_URL", "RELAY_ADMIN_TOKEN"} & set(service["environment"])

    def settings(path: Path) -> dict[str, str]:
        return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))

    assert set(settings(POSTGRES_ENV_EXAMPLE)) == {"POSTGRES_PASSWORD"}
    example = settings(ENV_EXAMPLE)
    assert set(example) == {"RELAY_DATABASE_URL", "RELAY_ADMIN_TOKEN"}
    assert example["RELAY_DATABASE_URL"].startswith("postgresql://relay:")
    assert example["RELAY_DATABASE_URL"].endswith("@postgres:5432/relay")
    ignored = (REPO_ROOT / ".gitignore").read_text().splitlines()
    assert {"ops/container/relay.env", "ops/container/postgres.env"} <= set(ignored)
    cli = compose_cli()
    if cli is not None:  # `compose config` validates the file against the compose schema, with no engine
        env = {**os.environ, "RELAY_ENV_FILE": str(ENV_EXAMPLE), "POSTGRES_ENV_FILE": str(POSTGRES_ENV_EXAMPLE)}
        result = subprocess.run([*cli, "-f", str(COMPOSE), "config", "--quiet"], env=env, capture_output=True,
                                text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr


# -- the entrypoint, run for real


def _reachable_by_others(path: Path) -> bool:
    """True when every directory on the way to ``path`` (symlinks resolved) may be searched by any user."""
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.resolve().parents)


def as_unprivileged(argv: list[str]) -> list[str]:
    """``argv`` as nobody when the tests run as root (the entrypoint refuses root), else as is.

    Where the interpreter of .venv-relay lies under a directory only root may search (a pyenv Python in /root, as
    on the machine this was written on), nobody keeps one capability, CAP_DAC_READ_SEARCH, to reach it: the
    process is still uid 65534, which is what the entrypoint checks. On CI (Debian's /usr/bin/python3) it is not
    needed and not given."""
    if os.geteuid() != 0:
        return argv
    wrapper = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if not _reachable_by_others(RELAY_BIN / "python3"):
        wrapper += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    return [*wrapper, *argv]


def owned_dir(prefix: str) -> Path:
    """A fresh directory the unprivileged user owns (outside pytest's root-only tmp tree)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    return path


def entrypoint_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "DBOS_", "PG"))}
    env.update(PATH=f"{RELAY_BIN}:/usr/local/bin:/usr/bin:/bin", PYTHONUNBUFFERED="1", HOME="/tmp", **settings)
    return env


@pytest.fixture
def scratch() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in made:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def run_entrypoint(env: dict[str, str], *args: str, root: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [str(ENTRYPOINT), *args]
    return subprocess.run(argv if root else as_unprivileged(argv), env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_entrypoint_serves_on_postgres_as_non_root_and_stops_on_sigterm(pg_url: str, scratch: list[Path]) -> None:
    engine = compose_engine()
    if engine is not None:
        compose_up_and_down(engine, scratch)  # not run where this was written: no engine there
    data_dir, secrets_dir = owned_dir("relay-ops-data-"), owned_dir("relay-ops-secrets-")
    scratch += [data_dir, secrets_dir]
    token = f"relay-ops-{secrets.token_urlsafe(24)}"
    token_file = secrets_dir / "admin_token"
    token_file.write_text(token + "\n")  # as a secret file usually is: with a newline
    token_file.chmod(0o400)
    if os.geteuid() == 0:
        os.chown(token_file, NOBODY, NOBODY)
    port = free_port()
    env = entrypoint_env(RELAY_HOST="127.0.0.1", RELAY_PORT=str(port), RELAY_DATA_DIR=str(data_dir),
                         RELAY_DATABASE_URL=pg_url, RELAY_ADMIN_TOKEN_FILE=str(token_file))
    log_path = data_dir.parent / f"{data_dir.name}.log"
    scratch.append(log_path)
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(as_unprivileged([str(ENTRYPOINT)]), env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        def ready() -> bool:
            assert proc.poll() is None, f"the entrypoint exited ({proc.returncode}):\n{log_path.read_text()}"
            return requests.get(f"{base}/readyz", timeout=2).status_code == 200

        eventually(ready, "relay (from the entrypoint) ready")
        assert requests.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
        # exec all the way down: the process started is `relay serve` itself (signals reach it), not a shell.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and any(part.endswith(b"relay") for part in cmdline), cmdline
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE).group(1) != "0"  # type: ignore[union-attr]
        # It runs on RELAY_DATABASE_URL, with the token from the file (no token generated into the data dir).
        assert "(store postgresql://" in log_path.read_text()
        answer = requests.get(f"{base}/v2/orgs/{ORG}/apps", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert answer.status_code == 200, answer.text
        assert requests.get(f"{base}/v2/orgs/{ORG}/apps", timeout=10).status_code == 401
        assert not (data_dir / "admin_token").exists()
        # The image's HEALTHCHECK command, against it.
        health = subprocess.run([str(RELAY_BIN / "python"), str(HEALTHCHECK)], env=env, capture_output=True,
                                text=True, timeout=30, check=False)
        assert health.returncode == 0, health.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert token not in log_path.read_text()
    health = subprocess.run([str(RELAY_BIN / "python"), str(HEALTHCHECK)], env=env, capture_output=True, text=True,
                            timeout=30, check=False)
    assert health.returncode == 1 and "relay-healthcheck" in health.stderr


def test_entrypoint_refusals_are_clear_and_keep_secrets(scratch: list[Path]) -> None:
    data_dir, secrets_dir = owned_dir("relay-ops-data-"), owned_dir("relay-ops-secrets-")
    scratch += [data_dir, secrets_dir]
    empty = secrets_dir / "empty"
    empty.write_text("\n")
    if os.geteuid() == 0:
        os.chown(empty, NOBODY, NOBODY)
    base = {"RELAY_DATA_DIR": str(data_dir), "RELAY_PORT": str(free_port())}

    def refused(env: dict[str, str], needle: str, *, root: bool = False) -> str:
        result = run_entrypoint(entrypoint_env(**{**base, **env}), "--help", root=root)
        assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
        assert needle in result.stderr, result.stderr
        return result.stderr

    if os.geteuid() == 0:
        refused({}, "refusing to run as root", root=True)
    else:  # the same check, with an `id` that says root
        stub = owned_dir("relay-ops-stub-")
        scratch.append(stub)
        (stub / "id").write_text("#!/bin/sh\necho 0\n")
        (stub / "id").chmod(0o755)
        env = {**entrypoint_env(**base), "PATH": f"{stub}:{RELAY_BIN}:/usr/bin:/bin"}
        result = subprocess.run([str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 1 and "refusing to run as root" in result.stderr
    refused({"RELAY_ADMIN_TOKEN": "x" * 20, "RELAY_ADMIN_TOKEN_FILE": str(empty)},
            "set RELAY_ADMIN_TOKEN or RELAY_ADMIN_TOKEN_FILE, not both")
    refused({"RELAY_ADMIN_TOKEN_FILE": str(empty)}, f"RELAY_ADMIN_TOKEN_FILE: {empty} is empty")
    refused({"RELAY_FORWARD_SECRET_FILE": str(secrets_dir / "missing")}, "is not a readable file")
    refused({"RELAY_DATABASE_WAIT_S": "soon"}, "RELAY_DATABASE_WAIT_S must be a whole number of seconds")
    refused({"RELAY_DATA_DIR": "/proc/relay-data"}, "RELAY_DATA_DIR /proc/relay-data is not a writable directory")
    # A database that never answers: it waits RELAY_DATABASE_WAIT_S, then names the failure, never the URL.
    password = secrets.token_urlsafe(16)
    url = f"postgresql://relay:{password}@127.0.0.1:{free_port()}/relay"
    started = time.monotonic()
    stderr = refused({"RELAY_DATABASE_URL": url, "RELAY_DATABASE_WAIT_S": "2"},
                     "RELAY_DATABASE_URL did not accept a connection within 2 s")
    assert time.monotonic() - started >= 2
    assert password not in stderr and url not in stderr
    # Arguments that are not options run as a command after the checks (here: the CLI's own help).
    result = run_entrypoint(entrypoint_env(**base), "relay", "--help")
    assert result.returncode == 0 and "serve" in result.stdout, result.stderr


def compose_up_and_down(engine: list[str], scratch: list[Path]) -> None:
    """Build the image, bring compose.yaml up, wait for /readyz through the published port, tear it all down.
    Runs only where an engine answers (`docker info`/`podman info`)."""
    workdir = Path(tempfile.mkdtemp(prefix="relay-compose-"))
    scratch.append(workdir)
    password, token = secrets.token_urlsafe(16), secrets.token_urlsafe(32)
    (workdir / "postgres.env").write_text(f"POSTGRES_PASSWORD={password}\n")
    (workdir / "relay.env").write_text(f"RELAY_DATABASE_URL=postgresql://relay:{password}@postgres:5432/relay\n"
                                       f"RELAY_ADMIN_TOKEN={token}\n")
    port = free_port()
    project = f"relay-ops-{secrets.token_hex(4)}"
    env = {**os.environ, "RELAY_ENV_FILE": str(workdir / "relay.env"),
           "POSTGRES_ENV_FILE": str(workdir / "postgres.env"), "RELAY_PUBLISH": f"127.0.0.1:{port}"}
    base_cmd = [*engine, "-p", project, "-f", str(COMPOSE)]

    def compose(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base_cmd, *args], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout, check=False)

    try:
        up = compose("up", "--detach", "--build")
        assert up.returncode == 0, up.stdout + up.stderr
        eventually(lambda: requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200,
                   "the composed relay ready", timeout=180)
        answer = requests.get(f"http://127.0.0.1:{port}/v2/orgs/{ORG}/apps",
                              headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert answer.status_code == 200, answer.text
        uid = compose("exec", "-T", "relay", "id", "-u", timeout=60)
        assert uid.returncode == 0 and uid.stdout.strip() not in ("", "0"), uid.stdout + uid.stderr
        logs = compose("logs", "relay", timeout=60)
        assert "(store postgresql://" in logs.stdout + logs.stderr
        assert token not in logs.stdout + logs.stderr and password not in logs.stdout + logs.stderr
    finally:
        down = compose("down", "--volumes", "--remove-orphans", timeout=300)
        print(down.stdout + down.stderr, file=sys.stderr)
