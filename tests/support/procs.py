"""Real processes for integration tests: a Relay server, DBOS executor scripts, the CLI.

Every process gets a clean environment: the ``RELAY_*`` and ``DBOS_*`` variables of the shell that runs the
tests are dropped, so only what a test passes reaches the process. Output goes to a log file (``.log_path``,
``.log_text()``), and failures quote its tail.

Secrets: a ``RelayProcess`` remembers every secret a test handed it or got back from it (its admin token, a
forward secret in its environment, every ``dbos_`` key its API or CLI returned, and what a test passes to
``remember_secret``); each stop or kill asserts that none is in its log. ``sweep_session_logs`` (called when the
test session ends) checks every Relay log of the session against every secret of the session.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import requests

from tests.support.http_session import session_idle_below
from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_MODULE = "relay.web.cli.main"
# `relay serve` runs as `make run` installs it: from .venv-relay, with the data plane's newer `dbos` (the harness's
# own interpreter has the release the test executors run).
RELAY_PYTHON = REPO_ROOT / ".venv-relay" / "bin" / "python"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
CLI_TIMEOUT_S = 60.0
_DROPPED_PREFIXES = ("RELAY_", "DBOS_")
_SECRET_ENV = ("RELAY_ADMIN_TOKEN", "RELAY_FORWARD_SECRET", "RELAY_ALERT_SLACK_WEBHOOK_URL",
               "RELAY_ALERT_PAGERDUTY_ROUTING_KEY")
_MIN_SECRET_CHARS = 12  # shorter strings are not secrets a test minted, and would match by chance
_API_KEY = re.compile(r"dbos_[A-Za-z0-9_-]{20,}")
# Every secret of the session (value -> label), and every Relay log written in it: see sweep_session_logs.
SESSION_SECRETS: dict[str, str] = {}
SESSION_LOGS: list[Path] = []
SESSION_LOG_DIR = REPO_ROOT / "test-output" / f"relay-logs-{os.getpid()}"


def secret_label(value: str, label: str) -> str:
    """How a secret is named in a failure: its kind and a hash prefix, never the value."""
    return f"{label} (sha256 {hashlib.sha256(value.encode()).hexdigest()[:12]})"


def leaked_secrets(text: str, known: dict[str, str]) -> list[str]:
    """The labels of the secrets in ``known`` (value -> label) that occur in ``text``."""
    return sorted(secret_label(value, label) for value, label in known.items() if value in text)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` without ``RELAY_*``/``DBOS_*``, unbuffered Python, then ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


class ManagedProcess:
    """A child process in its own session, logging to a file; base of the two process kinds below."""

    name = "process"

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    # -- what subclasses provide

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        raise NotImplementedError

    def workdir(self) -> Path:
        raise NotImplementedError

    # -- lifecycle

    def start(self) -> Self:
        """Start the process (again, after a stop or kill: the log is appended to)."""
        if self.running:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"--- {self.name}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                env=self.environment(),
                cwd=self.workdir(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def kill(self) -> int | None:
        """SIGKILL the process and everything it started (its process group); return the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL; return the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return self.kill()
        # Leftover children (if any) go with the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit by itself; return its exit code."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.proc.wait(timeout=timeout)

    # -- the log

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_log(self, text: str, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until ``text`` appears in the log; fail at once (with the log) if the process exits."""
        deadline = time.monotonic() + timeout
        while True:
            if text in self.log_text():
                return
            if not self.running:
                raise AssertionError(
                    f"{self.name} exited ({self.returncode}) before logging {text!r}:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{self.name} did not log {text!r} within {timeout:g} s:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class RelayProcess(ManagedProcess):
    """``python -m web.cli serve`` on a free port, ready (``GET /readyz`` == 200) when ``start()`` returns.

    ``data_dir``: ``RELAY_DATA_DIR`` (a fresh temp dir, deleted afterwards, when not given); the log is
    ``<data_dir>/relay-<port>.log`` unless ``log_path`` says otherwise.
    ``database_url``: ``RELAY_DATABASE_URL``.
    ``admin_token``: generated when not given (``.admin_token``). ``env``: anything else, applied last.
    ``start()`` may be called again after ``stop()``/``kill()``: same port, token, data dir.
    """

    name = "relay"

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        database_url: str | None = None,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        admin_token: str | None = None,
        args: Sequence[str] = (),
        log_path: Path | str | None = None,
        ready_timeout: float = READY_TIMEOUT_S,
        cwd: Path | str | None = None,
    ) -> None:
        self._own_dir = data_dir is None
        if data_dir is None:
            data_dir = tempfile.mkdtemp(prefix="relay-test-")
        self.data_dir = Path(data_dir)
        self.port = port if port is not None else free_port()
        self.host = "127.0.0.1"
        self.admin_token = admin_token or f"relay-test-{secrets.token_urlsafe(24)}"
        self.database_url = database_url
        self.extra_env = dict(env or {})
        self.args = list(args)
        self.ready_timeout = ready_timeout
        self.cwd = Path(cwd) if cwd is not None else REPO_ROOT
        self.session = self.http_session()
        super().__init__(Path(log_path) if log_path else self.data_dir / f"relay-{self.port}.log")
        self.secrets: dict[str, str] = {}
        self.remember_secret(self.admin_token, "admin token")
        for name in _SECRET_ENV:
            if self.extra_env.get(name):
                self.remember_secret(self.extra_env[name], name)
        SESSION_LOGS.append(self.log_path)

    # -- secrets

    def remember_secret(self, value: str | None, label: str = "secret") -> None:
        """A secret this server must never log (checked at every stop or kill, and at the session's end)."""
        if isinstance(value, str) and len(value) >= _MIN_SECRET_CHARS:
            self.secrets.setdefault(value, label)
            SESSION_SECRETS.setdefault(value, label)

    def _remember_keys_in(self, text: str, label: str) -> None:
        for key in _API_KEY.findall(text):
            self.remember_secret(key, label)

    def assert_no_secrets_logged(self) -> None:
        """Fail when any secret this server knows of is in its log."""
        found = leaked_secrets(self.log_text(), self.secrets)
        if found:
            raise AssertionError(f"secrets in the relay log {self.log_path}: {', '.join(found)}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        code = super().stop(timeout)
        self.assert_no_secrets_logged()
        return code

    def kill(self) -> int | None:
        code = super().kill()
        self.assert_no_secrets_logged()
        return code

    @property
    def tls(self) -> bool:
        """Whether it serves https:// and wss:// (RELAY_TLS_CERT set; the test trusts its CA, REQUESTS_CA_BUNDLE)."""
        return bool(self.extra_env.get("RELAY_TLS_CERT"))

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://{self.host}:{self.port}"

    def relay_env(self) -> dict[str, str]:
        """The ``RELAY_*`` settings this server runs with (and a CLI run against its store needs)."""
        env = {
            "RELAY_HOST": self.host,
            "RELAY_PORT": str(self.port),
            "RELAY_DATA_DIR": str(self.data_dir),
            "RELAY_ADMIN_TOKEN": self.admin_token,
        }
        if self.database_url:
            env["RELAY_DATABASE_URL"] = self.database_url
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        if not RELAY_PYTHON.exists():
            raise AssertionError(f"{RELAY_PYTHON} is missing: `make runtime` (or `make test`) builds .venv-relay")
        return [str(RELAY_PYTHON), "-m", CLI_MODULE, "serve", *self.args]

    def environment(self) -> dict[str, str]:
        return clean_env(self.relay_env())

    def workdir(self) -> Path:
        return self.cwd

    def start(self) -> Self:
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        super().start()
        try:
            self.wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll ``GET /readyz`` until 200; fail at once, with the log tail, if the process exits."""
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            if not self.running:
                raise AssertionError(
                    f"relay exited ({self.returncode}) before it was ready; log {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            try:
                response = requests.get(f"{self.base_url}/readyz", timeout=1)
            except requests.RequestException as exc:
                last = repr(exc)
            else:
                if response.status_code == 200:
                    return
                last = f"{response.status_code} {response.text[:200]!r}"
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"relay not ready within {timeout:g} s (last: {last}); log {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.05)

    def http_session(self) -> requests.Session:
        """A new client Session for this server: it drops a keep-alive connection before Relay's idle deadline
        (RELAY_HANDSHAKE_TIMEOUT_S, 10 s unless set) instead of racing Relay's close of it."""
        return session_idle_below(float(self.extra_env.get("RELAY_HANDSHAKE_TIMEOUT_S") or 10))

    def api(self, method: str, path: str, *, token: str | None = None, **kwargs: Any) -> requests.Response:
        """An HTTP call to ``base_url + path`` with ``Authorization: Bearer <token or admin token>``.

        ``token=""`` sends no Authorization header. Other keyword arguments go to ``requests`` (``json=``,
        ``params=``, ``headers=`` merged over the bearer, ``timeout=`` default 10 s).
        """
        headers = dict(kwargs.pop("headers", None) or {})
        bearer = self.admin_token if token is None else token
        if bearer:
            headers.setdefault("Authorization", f"Bearer {bearer}")
        kwargs.setdefault("timeout", 10)
        response = self.session.request(method, f"{self.base_url}{path}", headers=headers, **kwargs)
        if "json" in response.headers.get("Content-Type", "") and '"token"' in response.text:
            self._remember_keys_in(response.text, "API key")
        return response

    def run_cli(
        self, args: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """``run_cli`` with this server's ``RELAY_*`` settings (plus ``env``)."""
        result = run_cli(args, {**self.relay_env(), **(env or {})}, **kwargs)
        self._remember_keys_in(result.stdout or "", "API key (CLI)")
        return result

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            try:
                self.stop()
            except AssertionError:
                if exc_type is None:  # a leak fails the test, unless it is failing already
                    raise
            self.session.close()
        finally:
            if self._own_dir and exc_type is None:
                _keep_for_sweep(self.log_path)
                shutil.rmtree(self.data_dir, ignore_errors=True)


class ExecutorProcess(ManagedProcess):
    """A Python script (a DBOS app, say) run with ``sys.executable`` in its own process.

    Give exactly one of ``path`` (a script file) or ``source`` (script text, written to
    ``<cwd>/<name>.py``). ``cwd`` defaults to a fresh temp dir (the DBOS SDK puts its SQLite system database
    there); the log is ``<cwd>/<name>.log``. ``env`` is applied over a clean environment (see module doc).
    """

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        source: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        args: Sequence[str] = (),
        name: str = "executor",
        log_path: Path | str | None = None,
    ) -> None:
        if (path is None) == (source is None):
            raise ValueError("give exactly one of path= or source=")
        self.name = name
        self.cwd = Path(cwd) if cwd is not None else Path(tempfile.mkdtemp(prefix=f"relay-{name}-"))
        self.cwd.mkdir(parents=True, exist_ok=True)
        if source is not None:
            script = self.cwd / f"{name}.py"
            script.write_text(source)
            self.script = script
        else:
            self.script = Path(path).resolve()  # type: ignore[arg-type]
        self.env = dict(env or {})
        self.args = list(args)
        super().__init__(Path(log_path) if log_path else self.cwd / f"{name}.log")

    def command(self) -> list[str]:
        return [sys.executable, "-u", str(self.script), *self.args]

    def environment(self) -> dict[str, str]:
        return clean_env(self.env)

    def workdir(self) -> Path:
        return self.cwd


def _keep_for_sweep(log_path: Path) -> None:
    """Move a log out of a data dir about to be deleted, so the session's sweep still reads it."""
    if not log_path.exists():
        return
    SESSION_LOG_DIR.mkdir(parents=True, exist_ok=True)
    kept = SESSION_LOG_DIR / f"{len(SESSION_LOGS)}-{secrets.token_hex(4)}-{log_path.name}"
    shutil.move(str(log_path), kept)
    SESSION_LOGS[:] = [kept if p == log_path else p for p in SESSION_LOGS]


def sweep_session_logs() -> tuple[list[str], dict[str, int]]:
    """Every Relay log of the session against every secret of the session (a key minted on one server must not
    appear in another's log either). Returns the problems (log and secret labels, never values) and counts. The
    kept logs are deleted when nothing was found."""
    problems: list[str] = []
    counts = {"secrets": len(SESSION_SECRETS), "logs": 0, "lines": 0, "bytes": 0}
    for path in dict.fromkeys(SESSION_LOGS):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        counts["logs"] += 1
        counts["lines"] += text.count("\n")
        counts["bytes"] += len(text)
        found = leaked_secrets(text, SESSION_SECRETS)
        if found:
            problems.append(f"{path}: {', '.join(found)}")
    if not problems:
        shutil.rmtree(SESSION_LOG_DIR, ignore_errors=True)
    return problems, counts


def run_cli(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = CLI_TIMEOUT_S,
    cwd: Path | str | None = None,
    input: str | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python -m web.cli *args`` with a clean environment plus ``env``; text output captured."""
    return subprocess.run(
        [sys.executable, "-m", CLI_MODULE, *args],
        env=clean_env(env),
        cwd=cwd if cwd is not None else REPO_ROOT,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )
