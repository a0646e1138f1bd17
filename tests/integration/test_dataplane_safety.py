"""The data plane's guard rails (issue 15), each against a real `relay serve` (from .venv-relay, with the DBOS
client of its `dataplane` extra) and system databases written by the DBOS SDK itself:

- a schema Relay does not read is refused with a clear error before anything touches the database: one a step
  older than the floor (built with the SDK's own migrations), one written by a real older SDK release (dbos 2.x),
  one newer than the client knows; the database file is byte-for-byte unchanged;
- the floor itself is read (the client works on it);
- the system database URL (with a password) is never in the log, the event log, an API answer, the CLI or the
  console, also when the database cannot be reached; and the database coming back is picked up."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

from relay.actors.adapters.dataplane.schema import MIN_SCHEMA_VERSION
from tests.integration.sdk_apps import OLD_PYTHON
from tests.support import pg
from tests.support.console_http import console_session
from tests.support.ports import free_port, wait_until
from tests.support.procs import RELAY_PYTHON, RelayProcess

pytestmark = pytest.mark.integration
ORG = "local"

# Builds a SQLite system database at a given schema version with the SDK's own migrations (dbos 3.4.0's list),
# the way an SDK at that version leaves it; run by .venv-relay's interpreter (the harness has dbos 3.2.0).
BUILD = textwrap.dedent("""
    import sqlite3, sys
    from dbos import _migration
    path, version = sys.argv[1], int(sys.argv[2])
    with sqlite3.connect(path) as db:
        for sql in _migration.sqlite_migrations[:version]:
            if sql:
                db.executescript(sql)
        db.execute("CREATE TABLE IF NOT EXISTS dbos_migrations (version INTEGER NOT NULL PRIMARY KEY)")
        db.execute("DELETE FROM dbos_migrations")
        db.execute("INSERT INTO dbos_migrations VALUES (?)", (version,))
""")

# A real dbos 2.x application run once on its default SQLite system database.
OLD_APP = textwrap.dedent("""
    import sys
    from dbos import DBOS
    DBOS(config={"name": "old-app", "system_database_url": "sqlite:///" + sys.argv[1]})

    @DBOS.workflow()
    def hello() -> str:
        return "hi"

    DBOS.launch()
    hello()
    DBOS.destroy()
""")


def build_database(path: Path, version: int) -> Path:
    subprocess.run([str(RELAY_PYTHON), "-c", BUILD, str(path), str(version)], check=True, timeout=120,
                   capture_output=True)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def register(relay: RelayProcess, app: str, reference: str, mode: str = "read-write") -> dict:
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{app}").status_code == 204
    answer = relay.api("PUT", f"/relay/v1/orgs/{ORG}/apps/{app}/data-plane",
                       json={"systemDatabaseUrlFrom": reference, "mode": mode})
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.fixture(scope="module")
def sqlite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the system databases the references name are (each test builds the ones of its applications)."""
    return tmp_path_factory.mktemp("system-databases")


@pytest.fixture(scope="module")
def relay_env(sqlite_dir: Path) -> dict[str, str]:
    return {"FLOOR_DB": f"sqlite:///{sqlite_dir / 'floor.sqlite'}",
            "BELOW_DB": f"sqlite:///{sqlite_dir / 'below.sqlite'}",
            "NEWER_DB": f"sqlite:///{sqlite_dir / 'newer.sqlite'}",
            "OLD_SDK_DB": f"sqlite:///{sqlite_dir / 'old-sdk.sqlite'}",
            # the operator binds each reference to its application
            "RELAY_DATA_PLANE_REFERENCES": "local/floor-app=env:FLOOR_DB local/below-app=env:BELOW_DB "
                                           "local/newer-app=env:NEWER_DB local/old-sdk-app=env:OLD_SDK_DB"}


def test_unsupported_schemas_are_refused_before_anything_is_written(relay: RelayProcess, sqlite_dir: Path,
                                                                     tmp_path: Path) -> None:
    below = build_database(sqlite_dir / "below.sqlite", MIN_SCHEMA_VERSION - 1)
    newer = build_database(sqlite_dir / "newer.sqlite", 125)
    with sqlite3.connect(newer) as db:  # a release after the client's: its own next migration recorded
        db.execute("UPDATE dbos_migrations SET version = 126")
    old_sdk = sqlite_dir / "old-sdk.sqlite"
    script = tmp_path / "old_app.py"  # a file: the SDK reads its workflows' source
    script.write_text(OLD_APP)
    subprocess.run([str(OLD_PYTHON), str(script), str(old_sdk)], check=True, timeout=120, capture_output=True,
                   cwd=tmp_path)
    with sqlite3.connect(old_sdk) as db:
        old_version = db.execute("SELECT version FROM dbos_migrations").fetchone()[0]
    assert old_version < MIN_SCHEMA_VERSION
    before = {p: digest(p) for p in (below, newer, old_sdk)}

    cases = [("below-app", "env:BELOW_DB", MIN_SCHEMA_VERSION - 1, "dbos migrate"),
             ("old-sdk-app", "env:OLD_SDK_DB", old_version, "upgrade the application's DBOS SDK"),
             ("newer-app", "env:NEWER_DB", 126, "upgrade Relay")]
    for app, reference, version, advice in cases:
        state = register(relay, app, reference)["state"]
        assert (state["status"], state["schemaVersion"]) == ("refused", version), state
        assert advice in state["detail"]
        for path in ("workflows", "queues", "versions"):
            answer = relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}/{path}")
            assert answer.status_code == 422, answer.text
            assert f"schema version {version}" in answer.json()["detail"] and advice in answer.json()["detail"]
        cancel = relay.api("POST", f"/v2/orgs/{ORG}/apps/{app}/workflows/any-id/cancel")
        assert cancel.status_code == 422, cancel.text
    assert {p: digest(p) for p in before} == before  # nothing written, not even a migration table row


def test_the_oldest_schema_relay_reads_is_read(relay: RelayProcess, sqlite_dir: Path) -> None:
    floor = build_database(sqlite_dir / "floor.sqlite", MIN_SCHEMA_VERSION)
    state = register(relay, "floor-app", "env:FLOOR_DB")["state"]
    assert (state["status"], state["schemaVersion"]) == ("ready", MIN_SCHEMA_VERSION), state
    for path in ("workflows", "queues", "schedules", "versions"):
        answer = relay.api("GET", f"/v2/orgs/{ORG}/apps/floor-app/{path}")
        assert answer.status_code == 200, (path, answer.text)
        assert answer.headers["X-Relay-Served-From"] == "database"
        assert answer.json() == []
    missing = relay.api("GET", f"/v2/orgs/{ORG}/apps/floor-app/workflows/none/steps")
    assert missing.status_code == 404 and missing.headers["X-Relay-Served-From"] == "database"
    assert floor.exists()


PASSWORD = "Pw-never-shown-7Qz"


def test_the_url_is_never_shown_and_a_database_coming_back_is_picked_up(pg_url: str, tmp_path: Path) -> None:
    # A real system database (dbos 3.2.0's migrations, as its executors leave it) reached with a password: the
    # test cluster trusts local connections, so the password is only there to be looked for.
    pg.migrate_dbos(pg_url)
    good = re.sub(r"^postgresql://([^@/]+)@", rf"postgresql://\1:{PASSWORD}@", pg_url)
    assert PASSWORD in good
    dead = re.sub(r":(\d+)/", f":{free_port()}/", good, count=1)  # nothing listens there
    url_file = tmp_path / "sysdb-url"
    url_file.write_text(dead)
    bound = f"local/pw-app=env:APP_SYSDB local/down-app=file:{url_file}"
    with RelayProcess(env={"APP_SYSDB": good, "RELAY_DATA_PLANE_REFERENCES": bound}) as relay:
        for secret in (good, dead, PASSWORD):
            relay.remember_secret(secret, "system database URL")  # every stop and the session's sweep grep for it
        relay.start()
        shown = [register(relay, "pw-app", "env:APP_SYSDB", mode="read")]
        assert shown[0]["state"]["status"] == "ready", shown[0]
        listed = relay.api("GET", f"/v2/orgs/{ORG}/apps/pw-app/workflows")
        assert listed.status_code == 200 and listed.headers["X-Relay-Served-From"] == "database"
        # Unreachable: the API says so, without the URL.
        shown.append(register(relay, "down-app", f"file:{url_file}"))
        assert shown[-1]["state"]["status"] == "unreachable", shown[-1]
        down = relay.api("GET", f"/v2/orgs/{ORG}/apps/down-app/workflows")
        assert down.status_code == 503 and "cannot be reached" in down.json()["detail"], down.text
        texts = [down.text, listed.text, *map(str, shown)]
        # The database comes back (the file now names a live one): picked up without a restart.
        url_file.write_text(good)
        wait_until(lambda: relay.api("GET", f"/v2/orgs/{ORG}/apps/down-app/workflows").status_code == 200,
                   timeout=30, interval=0.5)
        texts.append(relay.api("GET", f"/relay/v1/orgs/{ORG}/apps/down-app/data-plane").text)
        texts.append(relay.api("GET", "/relay/v1/events", params={"limit": 1000}).text)
        texts.append(relay.api("GET", f"/v2/orgs/{ORG}/audit-logs").text)
        texts.append(relay.run_cli(["events", "--output", "json"]).stdout)
        texts.append(relay.run_cli(["data-plane", "show", "down-app"]).stdout)
        browser, _csrf = console_session(relay)
        settings = browser.get(f"{relay.base_url}/orgs/{ORG}/apps/down-app/settings", timeout=10).text
        assert "file:" in settings and "ready" in settings
        texts.append(settings)
        texts.append(browser.get(f"{relay.base_url}/orgs/{ORG}/apps/down-app/workflows", timeout=10).text)
        events = relay.api("GET", "/relay/v1/events", params={"type": "App.DataPlaneConfigured"}).json()["events"]
        assert len(events) == 2 and {e["details"]["config"]["systemDatabaseUrlFrom"] for e in events} == {
            "env:APP_SYSDB", f"file:{url_file}"}
        relay.stop()
        texts.append(relay.log_path.read_text())
    for text in texts:
        for secret in (PASSWORD, good, dead, "127.0.0.1:" + pg_url.rsplit(":", 1)[1].split("/")[0] + "/"):
            assert secret not in text, f"found {secret!r} in {text[:300]!r}"
