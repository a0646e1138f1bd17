"""Issue 32: `relay store copy|export|import` move a store holding every event class, as real `relay` processes.

After each move the target holds exactly the source's events (positions, originator ids and versions, topics,
states byte for byte, in order) and `relay replay --verify` passes on it. Refused: a source or target with a
running `relay serve`, a target holding events, a damaged backup. No database password in any output.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from relay.events.refs import app_ref
from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from tests.support import pg
from tests.support.every_event_log import T1, every_event_class, record_every_event, recorded_event_classes
from tests.support.ports import free_port
from tests.support.procs import RelayProcess, run_cli

pytestmark = pytest.mark.integration

PASSWORD = "Store-Pw-7q2x9"  # the test cluster trusts any password; none may be printed
Event = tuple[int, str, int, str, bytes]


def _with_password(url: str) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username or 'postgres'}:{PASSWORD}@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@pytest.fixture
def database(pg_server: str) -> Iterator[Callable[[], str]]:
    """Make fresh databases (URLs with a password), dropped after the test."""
    made: list[str] = []

    def make() -> str:
        made.append(pg.create_database(pg_server))
        return _with_password(made[-1])

    yield make
    for url in made:
        pg.drop_database(url)


def _env(config: StoreConfig) -> dict[str, str]:
    env = {"RELAY_DATA_DIR": str(config.data_dir)}
    if config.database_url:
        env |= {"RELAY_DATABASE_URL": config.database_url, "RELAY_DATABASE_SCHEMA": config.schema}
    return env


def _relay(args: list[str], config: StoreConfig) -> subprocess.CompletedProcess[str]:
    result = run_cli(args, _env(config), timeout=120)
    for text in (result.stdout, result.stderr):
        assert PASSWORD not in text, f"the password was printed by relay {' '.join(args[:2])}"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def _refused(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert message in result.stderr, result.stderr


def _events(config: StoreConfig) -> list[Event]:
    relay_log = RelayLog(env=config.event_store_env())
    try:
        last = relay_log.recorder.max_notification_id() or 0
        return [(n.id, str(n.originator_id), n.originator_version, n.topic, bytes(n.state))
                for n in relay_log.recorder.select_notifications(start=1, limit=last + 1)]
    finally:
        relay_log.close()


def _source(config: StoreConfig, *, gap: bool = False) -> list[Event]:
    """Fill `config`'s store with every event class (test_the_source_holds_every_event_class); with `gap`, a
    PostgreSQL log gets a hole in its positions, as a rolled-back append leaves."""
    relay_log = RelayLog(env=config.event_store_env())
    try:
        record_every_event(relay_log)
        if gap:
            assert config.database_url is not None
            with psycopg.connect(config.database_url, autocommit=True) as conn:
                conn.execute(f"SELECT nextval(pg_get_serial_sequence('\"{config.schema}\".relay_events', "
                             "'notification_id')) FROM generate_series(1, 5)")
            _one_more_change(relay_log)
    finally:
        relay_log.close()
    events = _events(config)
    assert not gap or [e[0] for e in events] != list(range(1, len(events) + 1))
    return events


def _one_more_change(relay_log: RelayLog, timeout_secs: int = 40) -> None:
    relay_log.change(app_ref("acme", "shop"), lambda app: app.change_settings({"executorTimeoutSecs": timeout_secs},
                                                                              T1))


def _same_and_verified(target: StoreConfig, expected: list[Event]) -> None:
    assert _events(target) == expected
    assert "verified" in _ok(_relay(["replay", "--verify"], target))


def test_the_source_holds_every_event_class(tmp_path: Path) -> None:
    config = StoreConfig(data_dir=tmp_path)
    _source(config)
    relay_log = RelayLog(env=config.event_store_env())
    try:
        missing = every_event_class() - recorded_event_classes(relay_log)
    finally:
        relay_log.close()
    assert not missing, (f"no command records {sorted(missing)}: add one to tests/support/event_log_fixture.py "
                         "record() (or tests/support/every_event_log.py)")


# -- copy ---------------------------------------------------------------------------------------------------------
def test_sqlite_to_postgresql_copy_and_a_second_copy_refused(tmp_path: Path, database: Callable[[], str]) -> None:
    source = StoreConfig(data_dir=tmp_path / "source")
    expected = _source(source)
    target = StoreConfig(data_dir=tmp_path / "unused", database_url=database())

    out = _ok(_relay(["store", "copy", "--to", target.database_url or ""], source))
    assert f"copied {len(expected)} events" in out and "views rebuilt" in out
    _same_and_verified(target, expected)

    again = _relay(["store", "copy", "--to", target.database_url or ""], source)
    _refused(again, "already holds")
    assert _events(target) == expected


def test_postgresql_to_another_database_and_to_another_schema_keeping_gaps(
        tmp_path: Path, database: Callable[[], str]) -> None:
    url = database()
    source = StoreConfig(data_dir=tmp_path / "unused", database_url=url)
    expected = _source(source, gap=True)

    other_database = StoreConfig(data_dir=tmp_path / "unused", database_url=database())
    _ok(_relay(["store", "copy", "--to", other_database.database_url or ""], source))
    _same_and_verified(other_database, expected)

    other_schema = StoreConfig(data_dir=tmp_path / "unused", database_url=url, schema="moved")
    _ok(_relay(["store", "copy", "--to", url, "--to-schema", "moved"], source))
    _same_and_verified(other_schema, expected)
    assert _events(source) == expected  # the source is only read

    # The target goes on from after the copied positions (the sequence was moved past them).
    relay_log = RelayLog(env=other_schema.event_store_env())
    try:
        _one_more_change(relay_log, 41)
        assert relay_log.recorder.max_notification_id() == expected[-1][0] + 1
    finally:
        relay_log.close()


def test_an_unreachable_target_is_refused_without_its_password(tmp_path: Path) -> None:
    source = StoreConfig(data_dir=tmp_path / "source")
    _source(source)
    result = _relay(["store", "copy", "--to", f"postgresql://relay:{PASSWORD}@127.0.0.1:{free_port()}/relay"], source)
    _refused(result, "cannot reach postgresql://127.0.0.1:")


# -- export and import --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_export_import_round_trip(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        source, target = StoreConfig(data_dir=tmp_path / "source"), StoreConfig(data_dir=tmp_path / "target")
    else:
        make = request.getfixturevalue("database")
        source = StoreConfig(data_dir=tmp_path / "unused", database_url=make())
        target = StoreConfig(data_dir=tmp_path / "unused", database_url=make(), schema="restored")
    expected = _source(source, gap=kind == "postgresql")
    backup = tmp_path / "relay.jsonl"

    _ok(_relay(["store", "export", "--out", str(backup)], source))
    assert not backup.with_name("relay.jsonl.partial").exists()
    assert backup.read_text().count("\n") == len(expected) + 2  # header, events, checksum
    stdout = _ok(_relay(["store", "export"], source))  # to standard output: the same stream
    assert stdout == backup.read_text()

    assert f"imported {len(expected)} events" in _ok(_relay(["store", "import", str(backup)], target))
    _same_and_verified(target, expected)
    _refused(_relay(["store", "import", str(backup)], target), "already holds")


def test_a_damaged_or_truncated_backup_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    source = StoreConfig(data_dir=tmp_path / "source")
    _source(source)
    backup = tmp_path / "relay.jsonl"
    _ok(_relay(["store", "export", "--out", str(backup)], source))
    text = backup.read_text()

    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(text.replace('"acme"', '"acne"', 1))
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text("".join(text.splitlines(keepends=True)[:-3]))
    for bad, reason in ((damaged, "checksum mismatch"), (truncated, "truncated")):
        target = StoreConfig(data_dir=tmp_path / f"target-{bad.stem}")
        _refused(_relay(["store", "import", str(bad)], target), reason)
        assert not (target.data_dir / "events.sqlite").exists()  # no store was opened, nothing created


# -- a running server ---------------------------------------------------------------------------------------------
def test_refused_while_relay_serve_runs_on_the_store(tmp_path: Path, database: Callable[[], str]) -> None:
    data_dir = tmp_path / "served"
    store = StoreConfig(data_dir=data_dir)
    backup = tmp_path / "relay.jsonl"
    target = database()
    with RelayProcess(data_dir) as server:
        _refused(_relay(["store", "copy", "--to", target], store), "relay serve is running on the source")
        _refused(_relay(["store", "import", str(backup)], store), "cannot read")  # (no file yet)
        _ok(_relay(["store", "export", "--out", str(backup)], store))  # a snapshot: safe beside the server
        _refused(_relay(["store", "import", str(backup)], store), "relay serve is running on this store")
        server.stop()  # a clean stop zeroes its heartbeat: the store is free
    expected = _events(store)
    _ok(_relay(["store", "copy", "--to", target], store))
    _same_and_verified(StoreConfig(data_dir=tmp_path / "unused", database_url=target), expected)
