"""A PostgreSQL server for tests, and throwaway databases on it.

Where the server comes from, first match wins (see ``acquire_server``):

1. ``RELAY_TEST_DATABASE_URL`` when set (it must answer: an explicit setting is never silently ignored);
2. else a throwaway cluster started from the local PostgreSQL binaries (``make test`` installs Debian's
   ``postgresql`` when they are missing), as a non-root user, on a free port, stopped and deleted when the
   caller is done with it.

Nothing assumes a server at 5432: whatever runs there (someone's own, or the cluster Debian's package may
start) is never touched. ``RELAY_TEST_FORCE_THROWAWAY=1`` ignores 1, so the second path can be exercised anywhere.

psycopg 3 is the only driver used, always in autocommit mode.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from tests.support.ports import free_port, port_is_open

ENV_DATABASE_URL = "RELAY_TEST_DATABASE_URL"
ENV_FORCE_THROWAWAY = "RELAY_TEST_FORCE_THROWAWAY"
TEST_DB_PREFIX = "relay_test_"
THROWAWAY_USER = "relaytest"
PROBE_TIMEOUT_S = 2
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0

_PG_ENV_VARS = ("PGDATA", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD", "PGSERVICE", "PGOPTIONS")


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server could be found or started for the tests."""


# --------------------------------------------------------------------------------------------- URLs


def with_database(url: str, dbname: str) -> str:
    """``url`` (``postgresql://...``) with its database replaced by ``dbname``; query string kept."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a postgresql:// URL: {redact(url)}")
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def database_name(url: str) -> str:
    """The database a ``postgresql://`` URL names (``postgres`` when it names none)."""
    path = urlsplit(url).path.lstrip("/")
    return path or "postgres"


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


# ------------------------------------------------------------------------------------- probing


def probe(url: str, timeout: int = PROBE_TIMEOUT_S) -> bool:
    """True when a server at ``url`` accepts a connection and answers ``SELECT 1`` within ``timeout`` s."""
    try:
        with psycopg.connect(url, connect_timeout=timeout, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


# ---------------------------------------------------------------------------- databases


def create_database(server_url: str) -> str:
    """Create a uniquely named, empty database (``relay_test_<hex>``) on the server; return its URL."""
    name = f"{TEST_DB_PREFIX}{uuid.uuid4().hex}"
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(server_url, name)


# Per server, a database DBOS's migrations ran in once this session: migrate_dbos copies it (CREATE DATABASE ...
# TEMPLATE) rather than starting the SDK to migrate each test's database again.
_DBOS_TEMPLATES: dict[str, str] = {}


def migrate_dbos(url: str) -> str:
    """Make ``url`` a DBOS system database with the harness's own DBOS release (dbos 3.2.0's migrations): once,
    before executors that share it launch together. An empty database (as create_database makes it, nobody
    connected) becomes a copy of the session's migrated template; any other is migrated in place. Returns the URL."""
    server, name = with_database(url, "postgres"), database_name(url)
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', "
                              "'information_schema')").fetchone()
    if not name.startswith(TEST_DB_PREFIX) or (tables is not None and tables[0]):
        _run_dbos_migrate(url)
        return url
    if server not in _DBOS_TEMPLATES:
        template = create_database(server)
        _run_dbos_migrate(template)
        _DBOS_TEMPLATES[server] = database_name(template)
        atexit.register(_drop_if_reachable, template)  # a shared server keeps no copy (a throwaway goes whole)
    with psycopg.connect(server, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(_DBOS_TEMPLATES[server])))
    return url


def _drop_if_reachable(url: str) -> None:
    with contextlib.suppress(psycopg.OperationalError):  # a throwaway server is gone by now
        drop_database(url)


def _run_dbos_migrate(url: str) -> None:
    migrate = subprocess.run(
        [sys.executable, "-c", "import sys; from dbos import DBOS; DBOS.migrate(sys.argv[1])", url],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert migrate.returncode == 0, migrate.stderr


def database_exists(server_url: str, name: str) -> bool:
    """True when the server at ``server_url`` has a database called ``name``."""
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


def drop_database(url: str, maintenance_db: str = "postgres", timeout: float = 15.0) -> None:
    """Drop the database ``url`` names, after terminating every connection to it.

    Only databases made by ``create_database`` (``relay_test_*``) are dropped: a mistyped URL must not cost
    anyone a real database. Missing databases are fine. Connections that race in between the terminate and
    the drop (a pool reconnecting) are terminated again until ``timeout``.
    """
    name = database_name(url)
    if not name.startswith(TEST_DB_PREFIX):
        raise ValueError(f"refusing to drop {name!r}: not a test database ({TEST_DB_PREFIX}*)")
    deadline = time.monotonic() + timeout
    with psycopg.connect(with_database(url, maintenance_db), autocommit=True, connect_timeout=10) as conn:
        while True:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            try:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            except psycopg.errors.ObjectInUse:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
            else:
                return


# ---------------------------------------------------------------------- throwaway cluster


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: the newest /usr/lib/postgresql/*/bin, else PATH."""

    def major(path: str) -> tuple[int, str]:
        version = Path(path).parent.name
        return (int(version) if version.isdigit() else -1, version)

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major, reverse=True)
    for candidate in candidates:
        if all(os.access(Path(candidate) / tool, os.X_OK) for tool in ("initdb", "postgres")):
            return Path(candidate)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return Path(initdb).resolve().parent
    return None


def _ensure_system_user() -> pwd.struct_passwd:
    """As root: the ``postgres`` system user, or a ``relaytest`` one created for the purpose."""
    for name in ("postgres", THROWAWAY_USER):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", THROWAWAY_USER],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(THROWAWAY_USER)


@dataclass
class ThrowawayCluster:
    """A PostgreSQL cluster of its own: ``initdb`` into a temp dir, ``postgres`` on a free port.

    Runs as the current user, or, when that is root (PostgreSQL refuses root), as ``postgres`` (or
    ``relaytest``, created if need be). Trust auth, superuser ``postgres``, TCP on 127.0.0.1 only, the Unix
    socket in the temp dir. Durability is switched off unless ``durable`` (tests need speed; benchmarks
    measure the real write path). Use as a context manager, or call
    ``start()`` and ``stop()``; ``stop()`` also deletes the directory.
    """

    bindir: Path | None = None
    start_timeout: float = START_TIMEOUT_S
    durable: bool = False
    settings: tuple[str, ...] = ()  # more `-c name=value` server settings (e.g. shared_preload_libraries)
    base_dir: Path | None = field(default=None, init=False)
    port: int | None = field(default=None, init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _user: pwd.struct_passwd | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the cluster is not running")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data_dir(self) -> Path:
        if self.base_dir is None:
            raise RuntimeError("the cluster has no directory yet")
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        if self.base_dir is None:
            raise RuntimeError("the cluster has no directory yet")
        return self.base_dir / "postgres.log"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, RuntimeError):
            return "(no log)"

    # -- lifecycle

    def start(self) -> str:
        """initdb, start, wait until it answers; return the server URL."""
        if self._proc is not None:
            return self.url
        bindir = self.bindir or find_bindir()
        if bindir is None:
            raise PostgresUnavailableError(
                "no PostgreSQL binaries (initdb, postgres) under /usr/lib/postgresql/*/bin or on PATH"
            )
        self.bindir = bindir
        self._user = _ensure_system_user() if os.geteuid() == 0 else None
        self.base_dir = Path(tempfile.mkdtemp(prefix="relay-pg-"))
        atexit.register(self.stop)
        try:
            if self._user is not None:
                os.chown(self.base_dir, self._user.pw_uid, self._user.pw_gid)
            self._initdb()
            self._launch()
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL if it does not go in time; then delete the directory."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None:
            _terminate(proc, signal.SIGINT, STOP_TIMEOUT_S)
        self.port = None
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def __enter__(self) -> ThrowawayCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals

    def _popen_kwargs(self) -> dict[str, object]:
        env = {k: v for k, v in os.environ.items() if k not in _PG_ENV_VARS}
        env.update(LC_ALL="C", LANG="C")
        kwargs: dict[str, object] = {"env": env, "cwd": str(self.base_dir)}
        if self._user is not None:
            env.update(HOME=str(self.base_dir), USER=self._user.pw_name, LOGNAME=self._user.pw_name)
            kwargs.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
        return kwargs

    def _initdb(self) -> None:
        assert self.bindir is not None
        argv = [
            str(self.bindir / "initdb"),
            "--pgdata", str(self.data_dir),
            "--username", "postgres",
            "--auth", "trust",
            "--encoding", "UTF8",
            "--locale", "C",
            "--no-sync",
            "--no-instructions",
        ]  # fmt: skip
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, check=False, **self._popen_kwargs()
        )
        if result.returncode != 0:
            raise PostgresUnavailableError(
                f"initdb failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )

    def _launch(self, attempts: int = 3) -> None:
        """Start ``postgres`` on a free port; another port if the one picked was taken meanwhile."""
        assert self.bindir is not None and self.base_dir is not None
        for attempt in range(1, attempts + 1):
            port = free_port()
            argv = [
                str(self.bindir / "postgres"),
                "-D", str(self.data_dir),
                "-p", str(port),
                "-k", str(self.base_dir),
                "-c", "listen_addresses=127.0.0.1",
                "-c", "max_connections=200",
            ]  # fmt: skip
            if not self.durable:
                argv += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
            for setting in self.settings:
                argv += ["-c", setting]
            with self.log_path.open("ab") as log:
                proc = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._popen_kwargs()
                )
            self._proc, self.port = proc, port
            if self._wait_ready(proc, port):
                return
            self._proc, self.port = None, None
            _terminate(proc, signal.SIGINT, STOP_TIMEOUT_S)
            if attempt == attempts:
                raise PostgresUnavailableError(
                    f"throwaway PostgreSQL did not start (exit code {proc.returncode}):\n{self.log_tail()}"
                )

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> bool:
        """Poll until the server answers (True) or exits (False); past the deadline, raise."""
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if port_is_open(port) and probe(url, timeout=2):
                return True
            time.sleep(0.05)
        _terminate(proc, signal.SIGINT, STOP_TIMEOUT_S)
        raise PostgresUnavailableError(
            f"throwaway PostgreSQL not ready after {self.start_timeout:g} s:\n{self.log_tail()}"
        )


def _terminate(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The postmaster's children die with their process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


# ------------------------------------------------------------------------------ the server


@dataclass
class PgServer:
    """The server tests use: its URL, where it came from, and the cluster to stop if we started one."""

    url: str
    source: str  # "env" or "throwaway"
    cluster: ThrowawayCluster | None = None

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def force_throwaway() -> bool:
    return os.environ.get(ENV_FORCE_THROWAWAY, "").strip().lower() in ("1", "true", "yes", "on")


def acquire_server(force: bool | None = None) -> PgServer:
    """Find a server as the module docstring says; ``close()`` the result when done with it."""
    if force is None:
        force = force_throwaway()
    if not force:
        env_url = os.environ.get(ENV_DATABASE_URL, "").strip()
        if env_url:
            if not probe(env_url, timeout=5):
                raise PostgresUnavailableError(
                    f"{ENV_DATABASE_URL}={redact(env_url)} is set but that server does not answer"
                )
            return PgServer(url=env_url, source="env")
    cluster = ThrowawayCluster()
    return PgServer(url=cluster.start(), source="throwaway", cluster=cluster)


@contextlib.contextmanager
def fresh_databases(server_url: str, keys: list[str]) -> Iterator[dict[str, str]]:
    """One fresh database per key on ``server_url``, dropped afterwards (those made, if making one failed)."""
    urls: dict[str, str] = {}
    try:
        for key in keys:
            urls[key] = create_database(server_url)
        yield urls
    finally:
        for url in urls.values():
            drop_database(url)
