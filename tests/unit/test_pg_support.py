"""tests/support/pg.py against real PostgreSQL servers."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support import pg
from tests.support.ports import port_is_open


def test_create_database_gives_a_database_to_write_in(pg_url: str) -> None:
    name = pg.database_name(pg_url)
    assert name.startswith("relay_test_")
    assert pg_url.startswith("postgresql://")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (name,)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
        assert conn.execute("SELECT v FROM t ORDER BY id").fetchall() == [("one",), ("two",)]


def test_each_database_is_new(pg_server: str) -> None:
    first, second = pg.create_database(pg_server), pg.create_database(pg_server)
    try:
        assert first != second
    finally:
        pg.drop_database(first)
        pg.drop_database(second)


def test_drop_database_removes_it_even_with_open_connections(pg_server: str) -> None:
    url = pg.create_database(pg_server)
    name = pg.database_name(url)
    assert pg.database_exists(pg_server, name)
    holder = psycopg.connect(url, autocommit=True)  # dropped from under it
    try:
        pg.drop_database(url)
        assert not pg.database_exists(pg_server, name)
        with pytest.raises(psycopg.OperationalError):
            holder.execute("SELECT 1")
    finally:
        holder.close()
    pg.drop_database(url)  # a missing database is fine


def test_drop_database_refuses_a_database_it_did_not_make(pg_server: str) -> None:
    with pytest.raises(ValueError, match="not a test database"):
        pg.drop_database(pg.with_database(pg_server, "postgres"))


def test_an_explicit_url_is_used_and_must_answer(pg_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pg.ENV_DATABASE_URL, pg_server)
    server = pg.acquire_server(force=False)
    assert (server.source, server.url, server.cluster) == ("env", pg_server, None)

    monkeypatch.setenv(pg.ENV_DATABASE_URL, "postgresql://postgres@127.0.0.1:1/postgres")
    with pytest.raises(pg.PostgresUnavailableError, match="does not answer"):
        pg.acquire_server(force=False)


def test_with_database_keeps_everything_but_the_database() -> None:
    url = "postgresql://u:secret@db.example:6543/main?sslmode=disable"
    assert pg.with_database(url, "other") == "postgresql://u:secret@db.example:6543/other?sslmode=disable"
    assert pg.redact(url) == "postgresql://u:***@db.example:6543/main?sslmode=disable"
    with pytest.raises(ValueError, match="not a postgresql"):
        pg.with_database("host=x dbname=y", "z")


@pytest.mark.postgres
def test_throwaway_cluster_starts_answers_and_goes_away() -> None:
    # `make test` installs the binaries when they are missing: their absence is a failure, not a skip.
    assert pg.find_bindir() is not None, "no PostgreSQL binaries (make test installs Debian's postgresql)"
    started = time.monotonic()
    server = pg.acquire_server(force=True)
    assert server.source == "throwaway" and server.cluster is not None
    cluster = server.cluster
    port, base_dir = cluster.port, cluster.base_dir
    assert port is not None and base_dir is not None
    try:
        assert port != 5432
        with psycopg.connect(server.url, autocommit=True) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
            assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        url = pg.create_database(server.url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x int)")
        pg.drop_database(url)
    finally:
        server.close()
    assert not port_is_open(port)
    assert not base_dir.exists()
    assert not pg.probe(f"postgresql://postgres@127.0.0.1:{port}/postgres")
    assert time.monotonic() - started < 15


@pytest.mark.postgres
def test_without_a_url_the_server_is_a_throwaway_never_5432(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pg.ENV_DATABASE_URL, raising=False)
    server = pg.acquire_server(force=False)
    try:
        assert server.source == "throwaway" and server.cluster is not None
        assert server.cluster.port not in (None, 5432)
        with psycopg.connect(server.url, autocommit=True) as conn:
            assert conn.execute("SHOW fsync").fetchone() == ("off",)
    finally:
        server.close()


@pytest.mark.postgres
def test_a_durable_throwaway_keeps_fsync_on() -> None:
    with pg.ThrowawayCluster(durable=True) as cluster, psycopg.connect(cluster.url, autocommit=True) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
