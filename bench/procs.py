"""The processes a benchmark runs: `relay serve`, the reference server, the load generator, py-spy; and what
/proc says about them (RSS, CPU time)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
ORG = "local"
APP = "bench"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "DBOS_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _limit_files(count: int) -> Any:
    def apply() -> None:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))

    return apply


# ----------------------------------------------------------------------------------------- /proc
def rss_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included), in seconds."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (the workers of `relay serve --workers`)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                text = (entry / "stat").read_text()
                if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
                    out.append(int(entry.name))
    return sorted(out)


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime



def stop_process(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """SIGTERM, and its process group killed if it is still there after `timeout` s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)

class CpuMeter:
    """CPU use of some processes over an interval, as % of one core."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {k: v for k, v in pids.items() if v}
        self.start_wall = time.monotonic()
        self.start = {k: cpu_seconds(p) for k, p in self.pids.items()}
        self.start_self = own_cpu_seconds()

    def read(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self.start_wall, 1e-9)
        out = {k: round((cpu_seconds(p) - self.start[k]) / elapsed * 100, 1) for k, p in self.pids.items()}
        out["bench client"] = round((own_cpu_seconds() - self.start_self) / elapsed * 100, 1)
        return out


# ------------------------------------------------------------------------------------------ HTTP
class Http:
    """Small blocking JSON calls (setup and polling; the load itself is bench/httpload.py)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Authorization": f"Bearer {self.token}"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read()
            return response.status, (json.loads(text) if text else None)
        finally:
            conn.close()

    def ok(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        status, data = self.call(method, path, body, timeout)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {status} {data}")
        return data


# ----------------------------------------------------------------------------------------- relay
class Relay:
    """`relay serve` as a real process on a free port with its own store."""

    def __init__(self, workdir: Path, name: str, database_url: str | None = None, max_files: int = 65536,
                 env: dict[str, str] | None = None, args: list[str] | None = None) -> None:
        self.workdir = workdir
        self.data_dir = workdir / f"{name}-data"
        self.log_path = workdir / f"{name}.log"
        self.database_url = database_url
        self.port = free_port()
        self.token = "relay-bench-" + secrets.token_urlsafe(24)
        self.max_files = max_files
        self.extra_env = dict(env or {})
        self.args = list(args or [])
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = Http(self.port, self.token)
        self.key: str | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def env(self) -> dict[str, str]:
        env = {"RELAY_HOST": "127.0.0.1", "RELAY_PORT": str(self.port), "RELAY_DATA_DIR": str(self.data_dir),
               "RELAY_ADMIN_TOKEN": self.token,
               # Relay's cap on executor sockets (default 1000) must not be what a benchmark measures.
               "RELAY_MAX_CONNECTIONS": str(max(1000, self.max_files)),
               "RELAY_MAX_HTTP_CONNECTIONS": str(max(1000, self.max_files)),  # nor its cap on connections served
               **self.extra_env}
        if self.database_url:
            env["RELAY_DATABASE_URL"] = self.database_url
        return env

    def start(self, timeout: float = 60.0) -> Relay:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process (again: same port, same data directory) without waiting for it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "relay.web.cli.main", "serve", *self.args], cwd=REPO, env=clean_env(self.env()),
                stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_limit_files(self.max_files),  # noqa: PLW1509 - only setrlimit, before exec
            )

    def wait_listening(self, timeout: float, interval: float = 0.01) -> bool:
        """Wait until the port accepts a TCP connection (the server listens; not yet necessarily ready)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"relay exited ({self.proc.returncode}); see {self.log_path}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
            time.sleep(interval)
        return False

    def wait_ready(self, timeout: float = 60.0) -> Relay:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"relay exited ({self.proc.returncode}); see {self.log_path}")
            with contextlib.suppress(OSError):
                if self.http.call("GET", "/readyz", timeout=2)[0] == 200:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"relay not ready within {timeout:g} s; see {self.log_path}")
            time.sleep(0.1)

    def setup_app(self) -> str:
        """Register the benchmark's application and mint its executors' key."""
        self.http.ok("PUT", f"/v2/orgs/{ORG}/apps/{APP}", {})
        created = self.http.ok("POST", f"/v2/orgs/{ORG}/tokens/bench-key", {"appNames": [APP]})
        self.key = created["token"]
        return self.key

    @property
    def ws_url(self) -> str:
        assert self.key is not None
        return f"ws://127.0.0.1:{self.port}/websocket/{APP}/{self.key}"

    def executor_counts(self, timeout: float = 60.0) -> Counter[str]:
        rows = self.http.ok("GET", f"/v2/orgs/{ORG}/apps/{APP}/executors", timeout=timeout)
        return Counter(row["status"] for row in rows)

    def set_grace(self, seconds: int) -> None:
        self.http.ok("PATCH", f"/v2/orgs/{ORG}/apps/{APP}", {"executorTimeoutSecs": seconds})

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 120.0) -> float:
        """Send `sig` and wait for the process to exit (SIGKILL after `timeout`); seconds it took."""
        assert self.proc is not None
        begin = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)
        return time.monotonic() - begin

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_process(self.proc)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class Reference:
    """bench/reference.py as a process."""

    def __init__(self, workdir: Path, token: str) -> None:
        self.ws_port = free_port()
        self.port = free_port()
        self.token = token
        self.key = "ref-" + secrets.token_urlsafe(16)
        self.log_path = workdir / "reference.log"
        self.proc: subprocess.Popen[str] | None = None
        self.http = Http(self.port, token)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/websocket/{APP}/{self.key}"

    def start(self, timeout: float = 30.0) -> Reference:
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "bench.reference", "--ws-port", str(self.ws_port), "--http-port", str(self.port),
             "--token", self.token, "--key", self.key, "--max-seconds", "7200"],
            cwd=REPO, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self.log_path.open("ab"), text=True, start_new_session=True,
            preexec_fn=_limit_files(65536),  # noqa: PLW1509
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.proc.stdout.readline()
        if line.strip() != "ready" or time.monotonic() > deadline:
            raise RuntimeError(f"reference did not start; see {self.log_path}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class LoadGen:
    """bench/loadgen.py as a process, driven by JSON lines."""

    def __init__(self, workdir: Path, name: str, *, payload_bytes: int = 1024, client_ping_interval: float = 20.0,
                 open_timeout: float = 30.0, max_attempts: int = 10, max_executors: int = 50_000,
                 max_seconds: float = 7200.0, backoff_max: float = 8.0, first_source: int = 1) -> None:
        self.log_path = workdir / f"{name}.log"
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "bench.loadgen", "--first-source", str(first_source), "--payload-bytes", str(payload_bytes),
             "--client-ping-interval", str(client_ping_interval), "--open-timeout", str(open_timeout),
             "--max-attempts", str(max_attempts), "--max-executors", str(max_executors),
             "--max-seconds", str(max_seconds), "--backoff-max", str(backoff_max)],
            cwd=REPO, env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log_path.open("ab"), text=True, start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"loadgen exited ({self.proc.returncode}); see {self.log_path}")
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"loadgen closed its output; see {self.log_path}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"loadgen {cmd}: {reply.get('error')}")
        return reply

    def start(self, url: str, prefix: str, count: int, first: int = 0, concurrency: int | None = None) -> None:
        self.call("start", url=url, prefix=prefix, count=count, first=first, concurrency=concurrency)

    def status(self) -> dict[str, Any]:
        return self.call("status")

    def wait_identified(self, count: int, timeout: float, interval: float = 0.25) -> tuple[bool, float]:
        """Wait until `count` executors are connected and answered executor_info; (reached, seconds)."""
        begin = time.monotonic()
        while True:
            status = self.status()
            if status["identified"] >= count:
                return True, time.monotonic() - begin
            if status["given_up"] + status["identified"] >= count and status["given_up"]:
                return False, time.monotonic() - begin
            if time.monotonic() - begin > timeout:
                return False, time.monotonic() - begin
            time.sleep(interval)

    def wait_progress(self, count: int, stall_s: float, deadline: float, interval: float = 1.0) -> tuple[bool, int]:
        """Wait until `count` executors are identified, as long as the count keeps rising (no stall of
        `stall_s` seconds) and until `deadline` (time.monotonic()); (reached, identified)."""
        best, best_at = -1, time.monotonic()
        while True:
            identified = self.status()["identified"]
            now = time.monotonic()
            if identified >= count:
                return True, identified
            if identified > best:
                best, best_at = identified, now
            if now - best_at > stall_s or now > deadline:
                return False, identified
            time.sleep(interval)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.call("quit")
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def wait_healthy(relay: Relay, count: int, timeout: float, interval: float = 1.0) -> tuple[bool, float, Counter[str]]:
    """Poll GET executors until `count` are HEALTHY; (reached, seconds, last counts)."""
    begin = time.monotonic()
    counts: Counter[str] = Counter()
    while True:
        asked = time.monotonic()
        with contextlib.suppress(OSError, RuntimeError):
            counts = relay.executor_counts()
            if counts.get("HEALTHY", 0) >= count:
                return True, time.monotonic() - begin, counts
        if time.monotonic() - begin > timeout:
            return False, time.monotonic() - begin, counts
        # A list of thousands of executors is work for relay too: poll no more than a third of the time.
        time.sleep(max(interval, 2 * (time.monotonic() - asked)))


class Profiler:
    """py-spy (pinned in bench/requirements.txt) recording a process until stopped; raw collapsed stacks."""

    def __init__(self, pid: int, out: Path, max_seconds: float) -> None:
        self.out = out
        exe = Path(PYTHON).parent / "py-spy"
        self.available = exe.exists()
        self.proc: subprocess.Popen[bytes] | None = None
        if self.available:
            self.proc = subprocess.Popen(
                [str(exe), "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--format", "raw",
                 "--duration", str(int(max_seconds)), "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )

    @classmethod
    def run(cls, command: list[str], out: Path, env: dict[str, str], timeout: float) -> Path | None:
        """Run `command` under py-spy until it exits (at most `timeout` s); the raw stacks, if written."""
        exe = Path(PYTHON).parent / "py-spy"
        if not exe.exists():
            return None
        subprocess.run(
            [str(exe), "record", "--rate", "100", "--nonblocking", "--format", "raw", "--output", str(out), "--",
             *command], cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=timeout, check=False,
        )
        return out if out.exists() else None

    def stop(self) -> Path | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.out if self.out.exists() else None
