"""The `relay` CLI as an operator uses it: real `python -m web.cli` processes against a real `relay serve`.

`apps` and `keys` talk HTTP to the running server (admin token from RELAY_ADMIN_TOKEN or <data dir>/admin_token);
`events` reads the event log. Errors exit 2 with one clear line on stderr, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.procs import CLI_MODULE, RelayProcess, clean_env, run_cli

pytestmark = pytest.mark.integration

ORG = "local"


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def failed(result: subprocess.CompletedProcess[str], message: str) -> str:
    """The command exited 2 with ``message`` on stderr (and nothing on stdout, no traceback)."""
    assert result.returncode == 2, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return result.stderr


def tsv(stdout: str) -> list[list[str]]:
    """A list command's rows, below its header line (checked: upper-case column names)."""
    header, *rows = [line.split("\t") for line in stdout.splitlines() if line]
    assert all(name == name.upper() for name in header), header
    return rows


# -- apps ------------------------------------------------------------------------------------------
def test_apps_create_list_delete(relay: RelayProcess) -> None:
    assert ok(relay.run_cli(["apps", "create", "cli-apps"])).strip() == f"application {ORG}/cli-apps registered"
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/cli-apps").status_code == 200

    rows = {row[0]: row for row in tsv(ok(relay.run_cli(["apps", "list"])))}
    assert rows["cli-apps"][1:] == ["UNAVAILABLE", "60"]

    deleted = ok(relay.run_cli(["apps", "delete", "cli-apps", "--org", ORG]))
    assert deleted.strip() == f"application {ORG}/cli-apps deleted"
    assert "cli-apps" not in [r[0] for r in tsv(ok(relay.run_cli(["apps", "list"])))]
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/cli-apps").status_code == 404

    # Deleting what is not there: the server's 404, said plainly.
    failed(relay.run_cli(["apps", "delete", "cli-apps"]), "HTTP 404")


# -- keys ------------------------------------------------------------------------------------------
def test_keys_create_list_revoke(relay: RelayProcess) -> None:
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/cli-keys-app", json={}).status_code == 204

    created = relay.run_cli(["keys", "create", "cli-key", "--app", "cli-keys-app"])
    stdout = ok(created)
    # The key, once, alone on stdout (so `key=$(relay keys create ...)` works); the note goes to stderr.
    assert len(stdout.splitlines()) == 1
    key = stdout.strip()
    assert key.startswith("dbos_") and len(key) > 20
    assert key not in created.stderr
    assert "shown once" in created.stderr

    # It is a working key, limited to its application.
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/cli-keys-app", token=key).status_code == 200
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/cli-keys-other", json={}).status_code == 204
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/cli-keys-other", token=key).status_code == 403

    narrow = ok(relay.run_cli(["keys", "create", "cli-key-ro", "--permission", "application.read"])).strip()
    assert narrow.startswith("dbos_") and narrow != key

    listed = ok(relay.run_cli(["keys", "list"]))
    assert key not in listed and narrow not in listed
    rows = {row[0]: row for row in tsv(listed)}
    assert rows["cli-key"][1] == "cli-keys-app"
    assert "websocket.connect" in rows["cli-key"][2].split(",")
    assert rows["cli-key-ro"][1:3] == ["*", "application.read"]

    assert ok(relay.run_cli(["keys", "revoke", "cli-key"])).strip() == "API key cli-key revoked"
    names = [t["tokenName"] for t in relay.api("GET", f"/v2/orgs/{ORG}/tokens").json()]
    assert "cli-key" not in names and "cli-key-ro" in names
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/cli-keys-app", token=key).status_code == 401
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps/cli-keys-app", token=narrow).status_code == 200
    assert key not in relay.log_text() and narrow not in relay.log_text()


# -- events ----------------------------------------------------------------------------------------
def test_events_lists_filters_and_skips(relay: RelayProcess) -> None:
    for app in ("cli-events-a", "cli-events-b"):
        assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}", json={}).status_code == 204
    issued = relay.api("POST", f"/v2/orgs/{ORG}/tokens/cli-events-key", json={})
    assert issued.status_code == 201
    key = issued.json()["token"]
    assert relay.api("DELETE", f"/v2/orgs/{ORG}/apps/cli-events-a").status_code == 204

    everything = ok(relay.run_cli(["events"]))
    assert key not in everything and hashlib.sha256(key.encode()).hexdigest() not in everything
    rows = tsv(everything)
    positions = [int(row[0]) for row in rows]
    assert positions == sorted(positions) and len(set(positions)) == len(positions) and positions[0] == 1
    names = [row[2] for row in rows]
    assert names[0] == "RelayInstance.Started"
    assert {"Organization.Created", "App.Registered", "Organization.ApiKeyIssued", "App.Deleted"} <= set(names)
    registered_b = next(r for r in rows if r[2] == "App.Registered" and r[3] == f"{ORG}/cli-events-b")
    assert registered_b[4] == "cli-events-b"

    only_a = tsv(ok(relay.run_cli(["events", "--app", "cli-events-a"])))
    # Each change, then the API call that made it (an Operation, issue 14).
    assert [row[2] for row in only_a] == ["App.Registered", "Operation.Performed", "App.Deleted",
                                          "Operation.Performed"]
    assert {row[3] for row in only_a} == {f"{ORG}/cli-events-a"}

    since = int(registered_b[0])
    later = tsv(ok(relay.run_cli(["events", "--since", str(since)])))
    assert later, "events after the registration of cli-events-b are missing"
    assert all(int(row[0]) > since for row in later)
    assert [int(row[0]) for row in later] == [p for p in positions if p > since]


def test_list_commands_answer_json(relay: RelayProcess) -> None:
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/cli-json-app", json={}).status_code == 204
    issued = relay.api("POST", f"/v2/orgs/{ORG}/tokens/cli-json-key", json={"appNames": ["cli-json-app"]})
    key = issued.json()["token"]

    apps = json.loads(ok(relay.run_cli(["apps", "list", "--output", "json"])))
    app = next(a for a in apps if a["name"] == "cli-json-app")
    assert (app["status"], app["executorTimeoutSecs"]) == ("UNAVAILABLE", 60)

    listed = ok(relay.run_cli(["keys", "list", "--output", "json"]))
    assert key not in listed
    keys = {k["tokenName"]: k for k in json.loads(listed)}
    assert keys["cli-json-key"]["appIds"] == ["cli-json-app"]

    # events: JSON Lines, one object per event (so --follow streams too), the same events as the text form.
    lines = ok(relay.run_cli(["events", "--output", "json", "--app", "cli-json-app"])).splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["App.Registered", "Operation.Performed"]
    assert events[1]["details"]["operation"] == "registerApp" and events[1]["details"]["by"] == "admin"
    assert events[0]["app"] == "cli-json-app" and isinstance(events[0]["position"], int)
    text = tsv(ok(relay.run_cli(["events", "--app", "cli-json-app"])))
    assert [int(row[0]) for row in text] == [e["position"] for e in events]


# -- the store: which one, and whether beside a live server ------------------------------------------
def test_store_commands_say_which_store_and_whether_safe_beside_the_server(relay: RelayProcess) -> None:
    log_file = (relay.data_dir / "events.sqlite").resolve()
    for args, safety in ((["events"], "safe beside a running relay serve"),
                         (["replay", "--verify"], "safe beside a running relay serve")):
        result = relay.run_cli(args)
        ok(result)
        assert f"relay {' '.join(args)}: store sqlite:{log_file}; " in result.stderr
        assert safety in result.stderr
        assert relay.admin_token not in result.stderr
        if args[0] == "replay":
            # The progress counts events (log positions), not events times views.
            last = int(tsv(ok(relay.run_cli(["events"])))[-1][0])
            shown = re.findall(r"(\d+)/(\d+) events", result.stderr)
            assert shown and shown[-1][1] == shown[-1][0] and int(shown[-1][1]) <= last, result.stderr

    # A rebuild empties the views the server answers from: refused while it runs, nothing touched.
    before = relay.api("GET", f"/v2/orgs/{ORG}/apps").json()
    failed(relay.run_cli(["replay"]), "relay serve is running on this store")
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps").json() == before


@pytest.mark.parametrize("args", [["events"], ["replay"], ["replay", "--verify"]], ids=" ".join)
def test_store_commands_refuse_a_missing_store(tmp_path: Path, args: list[str]) -> None:
    # No RELAY_DATA_DIR: the default ./relay-data of the working directory, which has none.
    stderr = failed(run_cli(args, {}, cwd=tmp_path), "no Relay event log in sqlite:relay-data")
    assert "RELAY_DATA_DIR" in stderr
    assert list(tmp_path.iterdir()) == []  # nothing created
    failed(run_cli(args, {"RELAY_DATA_DIR": str(tmp_path / "elsewhere")}), "no Relay event log")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_postgres_store_is_refused_without_its_password(pg_url: str) -> None:
    stderr = failed(run_cli(["events"], {"RELAY_DATABASE_URL": pg_url}), "no Relay event log in postgresql://")
    assert "RELAY_DATABASE_URL" in stderr
    # Unreachable or refusing: said plainly, and the URL's password never printed.
    unreachable = f"postgresql://relay:s3cret-pass@127.0.0.1:{free_port()}/relay"
    stderr = failed(run_cli(["replay", "--verify"], {"RELAY_DATABASE_URL": unreachable}), "cannot open the store")
    assert "s3cret-pass" not in stderr and "127.0.0.1" in stderr


def test_ctrl_c_ends_events_follow_quietly(relay: RelayProcess) -> None:
    """SIGINT (Ctrl-C) ends `relay events --follow` with exit code 130 and no traceback (documented in --help)."""
    proc = subprocess.Popen([sys.executable, "-m", CLI_MODULE, "events", "--follow", "--app", "cli-follow"],
                            env=clean_env(relay.relay_env()), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("POSITION\t")
        assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/cli-follow", json={}).status_code == 204
        line = proc.stdout.readline()  # the follower prints it within its 1 s poll
        assert "\tApp.Registered\tlocal/cli-follow\t" in line
        # The registration's audit entry is appended just after it (before the PUT answers), so a poll can fall
        # between the two: read it too, so that nothing of this app is left to print after the SIGINT.
        line = proc.stdout.readline()
        assert "\tOperation.Performed\tlocal/cli-follow\t" in line and '"registerApp"' in line
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stdout == ""


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [["apps", "create"], ["keys", "revoke"]],
    ids=" ".join,
)
def test_missing_name_is_refused(args: list[str]) -> None:
    # No server needed: the CLI refuses before it tries to reach one.
    failed(run_cli(args), f"relay {args[0]} {args[1]}: a NAME is required")


def test_server_down_is_reported(tmp_path: Path) -> None:
    env = {"RELAY_PORT": str(free_port()), "RELAY_ADMIN_TOKEN": "whatever-" + "w" * 32, "RELAY_DATA_DIR": str(tmp_path)}
    stderr = failed(run_cli(["keys", "create", "some-key"], env), "cannot reach relay")
    assert env["RELAY_PORT"] in stderr
    assert "whatever" not in stderr


@pytest.mark.parametrize(
    ("args", "port", "message"),
    [
        (["serve"], "abc", "RELAY_PORT must be an integer"),
        (["serve"], "70000", "RELAY_PORT is out of range"),
        (["apps", "list"], "8o90", "RELAY_PORT must be an integer"),
    ],
    ids=["serve-not-a-number", "serve-out-of-range", "apps-list-not-a-number"],
)
def test_bad_port_is_a_clear_error(tmp_path: Path, args: list[str], port: str, message: str) -> None:
    env = {"RELAY_PORT": port, "RELAY_ADMIN_TOKEN": "whatever-" + "w" * 32, "RELAY_DATA_DIR": str(tmp_path / "data")}
    failed(run_cli(args, env, timeout=30), message)
    assert not (tmp_path / "data").exists()  # it gave up before touching the data dir


# -- the generated admin token ---------------------------------------------------------------------
def test_serve_without_admin_token_generates_one(tmp_data_dir: Path) -> None:
    token_path = tmp_data_dir / "admin_token"
    server = RelayProcess(tmp_data_dir, env={"RELAY_ADMIN_TOKEN": ""})  # set but empty: unset for Relay
    with server:
        assert token_path.exists()
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        token = token_path.read_text().strip()
        assert token

        log = server.log_text()
        assert f"admin token generated and stored in {token_path}" in log
        assert token not in log

        # The stored token is the admin's; the one the harness would have used is nobody's.
        assert server.api("GET", f"/v2/orgs/{ORG}/apps", token=token).status_code == 200
        assert server.api("GET", f"/v2/orgs/{ORG}/apps").status_code == 401

        # A CLI run where the data dir is finds the token there, with no RELAY_ADMIN_TOKEN.
        env = {"RELAY_PORT": str(server.port), "RELAY_DATA_DIR": str(tmp_data_dir)}
        ok(run_cli(["apps", "create", "token-app"], env))
        assert "token-app" in ok(run_cli(["apps", "list"], env))

        # A restart keeps the stored token: not generated again.
        server.stop()
        server.start()
        assert token_path.read_text().strip() == token
        assert server.log_text().count("admin token generated") == 1
        assert server.api("GET", f"/v2/orgs/{ORG}/apps/token-app", token=token).status_code == 200
