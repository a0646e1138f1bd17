"""A data plane reaches only its own application's system database, and no reference can freeze Relay (issue 34,
points 1, 4 and the data-plane part of 10), each attack made for real against a real `relay serve` (from
.venv-relay, with the DBOS client of its `dataplane` extra) and system databases written by real DBOS
applications `alpha` and `bravo` (dbos 3.2.0, the harness's SDK, which records each workflow's application):

- an alpha-only key cannot point alpha's data plane anywhere (403, API, `relay apply`'s API and the console); an
  org-wide key cannot point it at bravo's database, by the API or by `relay apply` (422: only the references the
  operator bound to alpha in RELAY_DATA_PLANE_REFERENCES); nothing is recorded; bravo's workflows stay unreachable
  through alpha's routes;
- a reference the operator bound by mistake to bravo's database is refused once opened: its workflows name bravo;
- `file:` naming /dev/zero or a FIFO is refused before it is recorded; one that becomes such a file after it was
  recorded answers at once: /healthz keeps answering and Relay's memory does not grow;
- the state says `unresolved` with one generic reason, whatever the cause (a missing file, an unset variable, a
  URL of another scheme): the cause is in Relay's log only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.fake_executor import create_key
from tests.support.console_http import console_session
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration
ORG = "local"
GENERIC = "the system database reference cannot be used (Relay's log says why)"

# A real DBOS application: launched on its own SQLite system database, it runs `count` workflows and exits.
APP = textwrap.dedent("""
    import sys
    from dbos import DBOS
    DBOS(config={"name": sys.argv[1], "system_database_url": "sqlite:///" + sys.argv[2]})

    @DBOS.workflow()
    def hello(n: int) -> str:
        return f"hi {n}"

    DBOS.launch()
    for n in range(int(sys.argv[3])):
        hello(n)
    DBOS.destroy()
""")


def run_app(folder: Path, name: str, count: int) -> str:
    """The system database URL of a real application `name` that ran `count` workflows."""
    script = folder / "app.py"  # a file: the SDK reads its workflows' source
    script.write_text(APP)
    database = folder / f"{name}.sqlite"
    subprocess.run([sys.executable, str(script), name, str(database), str(count)], check=True, timeout=120,
                   capture_output=True, cwd=folder)
    return f"sqlite:///{database}"


@dataclass(frozen=True)
class Databases:
    alpha: str
    bravo: str
    empty: str  # a real application's, before any workflow ran


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Databases:
    folder = tmp_path_factory.mktemp("apps")
    return Databases(run_app(folder, "alpha", 2), run_app(folder, "bravo", 3), run_app(folder, "carol", 0))


def plane_path(app: str) -> str:
    return f"/relay/v1/orgs/{ORG}/apps/{app}/data-plane"


def configured_events(relay: RelayProcess) -> list[dict[str, Any]]:
    answer = relay.api("GET", "/relay/v1/events", params={"type": "App.DataPlaneConfigured", "limit": 1000})
    assert answer.status_code == 200, answer.text
    return answer.json()["events"]


def workflow_ids(relay: RelayProcess, app: str, token: str | None = None) -> set[str]:
    answer = relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/workflows", token=token)
    assert answer.status_code == 200 and answer.headers["X-Relay-Served-From"] == "database", answer.text
    return {w["workflowId"] for w in answer.json()}


def config_document(app: str, reference: str) -> dict[str, Any]:
    return {"apiVersion": "relay/v1", "kind": "Config",
            "apps": [{"name": app, "dataPlane": {"systemDatabaseUrlFrom": reference, "mode": "read-write"}}]}


# -- point 1: bound to the application ---------------------------------------------------------------------------
def test_an_application_reaches_only_the_database_bound_to_it(databases: Databases, tmp_path: Path) -> None:
    env = {"A_SYSDB": databases.alpha, "B_SYSDB": databases.bravo,
           "RELAY_DATA_PLANE_REFERENCES": "local/alpha=env:A_SYSDB local/bravo=env:B_SYSDB"}
    with RelayProcess(env=env) as relay:
        relay.start()
        for app in ("alpha", "bravo"):
            assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}").status_code == 204
        rights = ["application.read", "application.write", "token.read", "token.write"]
        alpha_key = create_key(relay, "alpha-only", appNames=["alpha"], permissions=rights)
        org_key = create_key(relay, "org-wide", permissions=rights)
        attack = {"systemDatabaseUrlFrom": "env:B_SYSDB", "mode": "read-write"}
        tried = 0

        # (b) alpha's own key cannot set or remove where alpha's system database is: API, config, console.
        for method, body in (("PUT", attack), ("PUT", {"systemDatabaseUrlFrom": "env:A_SYSDB"}), ("DELETE", None)):
            refused = relay.api(method, plane_path("alpha"), token=alpha_key, json=body)
            assert refused.status_code == 403 and "limited to some applications" in refused.text, refused.text
            tried += 1
        applied = relay.api("POST", f"/relay/v1/orgs/{ORG}/config/apply", token=alpha_key,
                            json={"config": config_document("alpha", "env:B_SYSDB")})
        assert applied.status_code == 403, applied.text
        browser, csrf = console_session(relay, alpha_key)
        form = {"csrf_token": csrf, "systemDatabaseUrlFrom": "env:B_SYSDB", "mode": "read-write", "confirmed": "yes"}
        page = browser.post(f"{relay.base_url}/orgs/{ORG}/apps/alpha/data-plane", data=form, timeout=10)
        assert "cannot configure a data plane" in page.text, page.text[:2000]
        tried += 2
        # (a) an org-wide key cannot bind alpha to bravo's database either: not a reference bound to alpha.
        refused = relay.api("PUT", plane_path("alpha"), token=org_key, json=attack)
        assert refused.status_code == 422 and "RELAY_DATA_PLANE_REFERENCES" in refused.text, refused.text
        assert databases.bravo not in refused.text
        for step in ("plan", "apply"):
            answer = relay.api("POST", f"/relay/v1/orgs/{ORG}/config/{step}", token=org_key,
                               json={"config": config_document("alpha", "env:B_SYSDB")})
            assert answer.status_code == 422, answer.text
            assert answer.json()["errors"][0]["location"] == "body.config.apps[0].dataPlane.systemDatabaseUrlFrom"
        (tmp_path / "relay.yaml").write_text(
            "apiVersion: relay/v1\nkind: Config\napps:\n  - name: alpha\n"
            "    dataPlane: {systemDatabaseUrlFrom: env:B_SYSDB, mode: read-write}\n")
        cli = relay.run_cli(["apply", "-f", str(tmp_path / "relay.yaml")])
        assert cli.returncode != 0 and "RELAY_DATA_PLANE_REFERENCES" in cli.stdout + cli.stderr, cli
        tried += 4
        assert configured_events(relay) == []  # nothing recorded by any of them

        # What the operator bound works, for the org-wide key as for the admin.
        ready = relay.api("PUT", plane_path("alpha"), token=org_key,
                          json={"systemDatabaseUrlFrom": "env:A_SYSDB", "mode": "read-write"})
        assert ready.status_code == 200 and ready.json()["state"]["status"] == "ready", ready.text
        assert relay.api("PUT", plane_path("bravo"), json={"systemDatabaseUrlFrom": "env:B_SYSDB"}).status_code == 200
        alpha_ids, bravo_ids = workflow_ids(relay, "alpha", alpha_key), workflow_ids(relay, "bravo")
        assert len(alpha_ids) == 2 and len(bravo_ids) == 3 and not alpha_ids & bravo_ids
        # Bravo's workflows are not reachable through alpha's routes: read, cancel, fork, delete.
        victim = min(bravo_ids)
        base = f"/v2/orgs/{ORG}/apps/alpha/workflows/{victim}"
        for method, path in (("GET", ""), ("POST", "/cancel"), ("POST", "/fork"), ("DELETE", "")):
            answer = relay.api(method, base + path, token=alpha_key, json={} if method == "POST" else None)
            assert answer.status_code == 404, (method, path, answer.status_code, answer.text)
            tried += 1
        assert workflow_ids(relay, "bravo") == bravo_ids

        # The operator unbinds alpha's reference: the recorded data plane stops answering after the restart.
        relay.stop()
        relay.extra_env["RELAY_DATA_PLANE_REFERENCES"] = "local/bravo=env:B_SYSDB"
        relay.start()
        state = relay.api("GET", plane_path("alpha"), token=alpha_key).json()["state"]
        assert state == {"status": "unresolved", "detail": GENERIC, "schemaVersion": None}, state
        assert relay.api("GET", f"/v2/orgs/{ORG}/apps/alpha/workflows", token=alpha_key).status_code == 503
        assert "env:A_SYSDB is not bound to this application" in relay.log_text()
        assert workflow_ids(relay, "bravo") == bravo_ids
        relay.stop()
    record("dataplane-binding", area="Isolation: data-plane references bound to their application (alpha, bravo)",
           tried={"cross-app data-plane attempts": tried},
           outcome="refused (403 app-scoped key; 422 reference not bound to the app); nothing recorded, "
                   "bravo's workflows untouched")


def test_a_database_whose_workflows_name_another_application_is_refused(databases: Databases) -> None:
    # The operator's slip: a variable bound to alpha that holds bravo's URL. And an empty database: accepted.
    env = {"SLIP_SYSDB": databases.bravo, "EMPTY_SYSDB": databases.empty,
           "RELAY_DATA_PLANE_REFERENCES": "local/alpha=env:SLIP_SYSDB,local/dave=env:EMPTY_SYSDB"}
    with RelayProcess(env=env) as relay:
        relay.start()
        for app in ("alpha", "dave"):
            assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}").status_code == 204
        answer = relay.api("PUT", plane_path("alpha"), json={"systemDatabaseUrlFrom": "env:SLIP_SYSDB",
                                                              "mode": "read-write"})
        assert answer.status_code == 200, answer.text
        state = answer.json()["state"]
        assert state["status"] == "refused" and "another application" in state["detail"], state
        assert "bravo" not in state["detail"]  # whose it is stays in Relay's log
        for method, path in (("GET", ""), ("POST", "/any-id/cancel"), ("DELETE", "/any-id")):
            refused = relay.api(method, f"/v2/orgs/{ORG}/apps/alpha/workflows{path}")
            assert refused.status_code == 422 and "another application" in refused.text, refused.text
        assert "holds workflows of application 'bravo'" in relay.log_text()
        empty = relay.api("PUT", plane_path("dave"), json={"systemDatabaseUrlFrom": "env:EMPTY_SYSDB"})
        assert empty.status_code == 200 and empty.json()["state"]["status"] == "ready", empty.text
        assert workflow_ids(relay, "dave") == set()
        relay.stop()
    record("dataplane-foreign-database", area="Isolation: a system database whose workflows name another application",
           tried={"databases of another application opened": 1},
           outcome="refused (422, state refused) before any client call; an empty database is accepted")


# -- point 4: no file freezes Relay -------------------------------------------------------------------------------
@dataclass
class Watch:
    """/healthz polled and Relay's resident memory sampled while an attack runs."""

    relay: RelayProcess
    slowest_s: float = 0.0
    peak_rss_kib: int = 0
    polls: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.relay.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                ok = self.relay.api("GET", "/healthz", token="", timeout=10).status_code == 200
            except OSError:
                ok = False
            self.slowest_s = max(self.slowest_s, time.monotonic() - started if ok else 10.0)
            self.peak_rss_kib = max(self.peak_rss_kib, self.rss_kib())
            self.polls += 1
            self.stop.wait(0.05)


def watched(relay: RelayProcess, attack: Callable[[], None]) -> Watch:
    watch = Watch(relay)
    poller = threading.Thread(target=watch.run, daemon=True)
    poller.start()
    try:
        attack()
        wait_until(lambda: watch.polls >= 5, timeout=30)
    finally:
        watch.stop.set()
        poller.join(15)
    return watch


@pytest.fixture
def files_relay(databases: Databases, tmp_path: Path) -> Iterator[tuple[RelayProcess, dict[str, Path]]]:
    zero, fifo = tmp_path / "alpha-url", tmp_path / "bravo-url"
    zero.symlink_to("/dev/zero")
    os.mkfifo(fifo)
    later = tmp_path / "carol-url"
    later.write_text(databases.empty + "\n")
    references = f"local/alpha=file:{zero} local/bravo=file:{fifo} local/carol=file:{later}"
    with RelayProcess(env={"RELAY_DATA_PLANE_REFERENCES": references}) as relay:
        relay.start()
        for app in ("alpha", "bravo", "carol"):
            assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}").status_code == 204
        yield relay, {"zero": zero, "fifo": fifo, "later": later}


def test_dev_zero_and_a_fifo_are_refused_without_freezing_relay(files_relay: tuple[RelayProcess,
                                                                                     dict[str, Path]]) -> None:
    relay, files = files_relay
    baseline_kib = Watch(relay).rss_kib()
    answers: list[Any] = []

    def attack() -> None:
        for app, path in (("alpha", files["zero"]), ("bravo", files["fifo"])):
            answers.append(relay.api("PUT", plane_path(app), timeout=30,
                                     json={"systemDatabaseUrlFrom": f"file:{path}"}))

    watch = watched(relay, attack)
    for answer in answers:
        assert answer.status_code == 422 and "not a small regular file" in answer.text, answer.text
    assert configured_events(relay) == []  # refused before anything was recorded
    assert watch.slowest_s < 2.0, f"/healthz waited {watch.slowest_s:.1f} s"
    grown_mib = (watch.peak_rss_kib - baseline_kib) / 1024
    assert grown_mib < 64, f"RSS grew {grown_mib:.0f} MiB"
    log = relay.log_text()
    assert f"{files['zero']} is not a regular file" in log and f"{files['fifo']} is not a regular file" in log

    # Recorded while it was a regular file, then swapped for /dev/zero, then for a FIFO: after each restart
    # (the URL is read when the database is first opened) every GET answers at once.
    assert relay.api("PUT", plane_path("carol"),
                     json={"systemDatabaseUrlFrom": f"file:{files['later']}"}).json()["state"]["status"] == "ready"
    states: list[dict[str, Any]] = []
    slowest, peak = 0.0, 0
    for make in (lambda p: p.symlink_to("/dev/zero"), os.mkfifo):
        relay.stop()
        files["later"].unlink()
        make(files["later"])
        relay.start()
        baseline_kib = Watch(relay).rss_kib()
        watch_later = watched(relay, lambda: states.extend(
            relay.api("GET", plane_path("carol"), timeout=30).json()["state"] for _ in range(3)))
        slowest = max(slowest, watch_later.slowest_s)
        peak = max(peak, watch_later.peak_rss_kib - baseline_kib)
    assert len(states) == 6 and all(s == {"status": "unresolved", "detail": GENERIC, "schemaVersion": None}
                                    for s in states), states
    assert slowest < 2.0, f"/healthz waited {slowest:.1f} s"
    later_mib = peak / 1024
    assert later_mib < 64, f"RSS grew {later_mib:.0f} MiB"
    relay.stop()
    record("dataplane-special-files", area="Exhaustion: `file:` references to /dev/zero, a FIFO, large files",
           tried={"file: references to /dev/zero and a FIFO": 2 + len(states),
                  "slowest /healthz (s)": round(max(watch.slowest_s, slowest), 3),
                  "RSS growth (MiB)": round(max(grown_mib, later_mib), 1)},
           outcome="refused before recording (422); once recorded, answered at once as unresolved; "
                   "/healthz kept answering")


# -- point 10: the state tells the caller nothing about the file or the variable ----------------------------------
def test_the_state_gives_one_generic_reason_and_the_log_the_cause(databases: Databases, tmp_path: Path) -> None:
    missing, other_scheme = tmp_path / "missing-url", tmp_path / "other-url"
    other_scheme.write_text("mysql://user@db/app\n")
    references = (f"local/app-missing=file:{missing} local/app-unset=env:UNSET_SYSDB "
                  f"local/app-other=file:{other_scheme} local/app-envother=env:OTHER_SYSDB")
    with RelayProcess(env={"RELAY_DATA_PLANE_REFERENCES": references,
                           "OTHER_SYSDB": "mysql://user@db/app"}) as relay:
        relay.start()
        cases = {"app-missing": f"file:{missing}", "app-unset": "env:UNSET_SYSDB",
                 "app-other": f"file:{other_scheme}", "app-envother": "env:OTHER_SYSDB"}
        texts = []
        for app, reference in cases.items():
            assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}").status_code == 204
            put = relay.api("PUT", plane_path(app), json={"systemDatabaseUrlFrom": reference})
            assert put.status_code == 200, put.text
            got = relay.api("GET", plane_path(app)).json()
            assert got["state"] == {"status": "unresolved", "detail": GENERIC, "schemaVersion": None}, got
            refused = relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/workflows")
            assert refused.status_code == 503 and GENERIC in refused.json()["detail"], refused.text
            show = relay.run_cli(["data-plane", "show", app])
            assert f"state\tunresolved: {GENERIC}" in show.stdout, show
            browser, _ = console_session(relay)
            page = browser.get(f"{relay.base_url}/orgs/{ORG}/apps/{app}/settings", timeout=10).text
            assert "unresolved" in page
            texts += [put.text, refused.text, show.stdout, page]
        for text in texts:
            for disclosed in ("mysql", "No such file", "not set", "is empty", "UNSET_SYSDB is"):
                assert disclosed not in text, (disclosed, text[:500])
        log = relay.log_text()
        assert f"cannot read {missing}: No such file" in log and "UNSET_SYSDB of the Relay server is not set" in log
        assert "the URL's scheme is mysql" in log
        relay.stop()
    record("dataplane-state-disclosure", area="Isolation: what an unusable reference's state tells a caller",
           tried={"unusable references shown": len(cases)},
           outcome="one generic reason to callers (API, CLI, console); the cause in Relay's log only")
