"""Fixtures shared by every test: a PostgreSQL server and fresh databases on it, a data dir.

Nothing here imports the application packages (actors, events, projections, web).

- ``pg_server`` (session): URL of a PostgreSQL server (``tests/support/pg.py`` says where it comes from;
  ``RELAY_TEST_FORCE_THROWAWAY=1`` forces a throwaway cluster, stopped and deleted at the end).
- ``pg_url`` (function): URL (``postgresql://...``) of a new, empty database, dropped after the test.
- ``tmp_data_dir`` (function): an empty directory for ``RELAY_DATA_DIR``.
- ``relay`` (module): a running ``relay serve`` (``tests/support/procs.py``'s ``RelayProcess``), one per test
  module, stopped (and its log checked for secrets) after the module's last test. Its settings are
  ``relay_env`` (module; none by default): a module that needs some overrides ``relay_env`` with a fixture of
  its own, which may use other fixtures (a CA, databases). With ``RELAY_TLS_CERT`` it is reached over https.
- ``identity_provider`` (module): a real OpenID Provider (``tests/support/idp.py``'s ``IdentityProvider``).

Tests that use ``pg_server`` or ``pg_url`` are marked ``postgres`` automatically (``-m "not postgres"``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# `tests.support` must import the same way whether or not tests/ becomes a package, and under plain
# `pytest` (which does not put the working directory on sys.path) as well as `python -m pytest`.
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.support import pg  # noqa: E402
from tests.support.idp import IdentityProvider  # noqa: E402
from tests.support.procs import RelayProcess  # noqa: E402

_PG_FIXTURES = frozenset({"pg_server", "pg_url"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _PG_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session", autouse=True)
def _third_party_installed() -> None:
    """What `relay serve` installs at start-up (actors/runtime.py), for the tests that build parts without it."""
    from relay.actors.runtime import install_third_party

    install_third_party()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of the PostgreSQL server the tests use (started and stopped here when it is a throwaway)."""
    try:
        server = pg.acquire_server()
    except pg.PostgresUnavailableError as exc:
        pytest.fail(f"no PostgreSQL for the tests: {exc}", pytrace=False)
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """URL of a fresh, empty database on ``pg_server``; dropped (connections terminated) after the test."""
    url = pg.create_database(pg_server)
    try:
        yield url
    finally:
        pg.drop_database(url)


@pytest.fixture
def tmp_data_dir(tmp_path: Path) -> Path:
    """An empty directory for ``RELAY_DATA_DIR`` (inside pytest's ``tmp_path``)."""
    path = tmp_path / "relay-data"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    """The settings of the module's ``relay`` (``RELAY_*`` variables): none beyond the defaults. Override it in a
    module that needs some."""
    return {}


@pytest.fixture(scope="module")
def relay(relay_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    """A running ``relay serve`` with ``relay_env``, shared by the module's tests (each uses names of its own)."""
    with RelayProcess(tmp_path_factory.mktemp("relay-data"), env=relay_env) as server:
        yield server


@pytest.fixture(scope="module")
def identity_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityProvider]:
    """A real OpenID Provider (npm oidc-provider, tests/support/idp.py) on a free port, one per test module (a
    module may rotate its keys or stop it). A module's ``relay_env`` may take its ``relay_env()`` settings."""
    with IdentityProvider(tmp_path_factory.mktemp("idp")) as provider:
        yield provider


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Issue 9: no secret that any Relay of the session was given or minted may be in any Relay log of the session
    (tests/support/procs.py keeps both); a leak fails the run, naming the log and the secret's kind only."""
    del exitstatus
    from tests.support import procs, reliability_report

    problems, counts = procs.sweep_session_logs()
    if counts["logs"] and not problems:
        reliability_report.record(
            "secrets", area="Secrets in logs",
            tried={"Relay logs grepped": counts["logs"], "log lines": counts["lines"],
                   "secrets looked for (admin tokens, dbos_ keys, forward secrets)": counts["secrets"]},
            outcome="none of them in any log of the run",
        )
    if problems:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in ["secrets found in Relay logs:", *problems]:
            if reporter is not None:
                reporter.write_line(line, red=True)
            else:
                print(line, file=sys.stderr)
