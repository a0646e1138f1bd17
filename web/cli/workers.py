"""`relay serve --workers N`: N worker processes on one port, each a Relay instance of one cluster.

One Python process runs on one core (gevent); a machine with more serves more with more processes. The
supervisor (this module's `Supervisor`, the process `relay serve` started) binds nothing: it checks the port is
free, then starts N workers (`relay serve --worker I`). Each worker binds the public port with SO_REUSEPORT (the
kernel spreads new connections over them) and a port of its own on RELAY_HOST, chosen by the system, which it
advertises in the instances table: a connection to the public port reaches any worker, so peers forward to an
executor's worker there. The workers are instances of one cluster on RELAY_DATABASE_URL, exactly as in the HA
design (DESIGN.md): leases, heartbeats, adoption of a silent instance, signed forwarding. The forward secret is
RELAY_FORWARD_SECRET, or one the supervisor generates (in the workers' environment only, never logged).

A worker that dies is started again as a new instance (`<id>/w<slot>.<n>`); meanwhile its executors reconnect
to the others and its leases are adopted as any silent instance's. The supervisor forwards SIGTERM/SIGINT, waits
for the workers' clean stop, and exits non-zero when a worker refuses to start (exit 2: a setting, the port) or
keeps dying within seconds of its start.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent.event import Event
from gevent.queue import Queue

from relay.actors.configuration.settings import Settings
from relay.actors.runtime import OfflineStore
from relay.web.transport.ports import port_refusal

log = logging.getLogger("relay.workers")

WORKER_FLAG = "--worker"
STOP_TIMEOUT_S = 40.0  # a worker's clean stop: executors told to go (3 s), server (5 s), actors and store (20 s)
QUICK_DEATH_S = 10.0  # a worker that dies sooner than this after its start counts towards giving up
MAX_QUICK_DEATHS = 5  # in a row, for one slot
REFUSED = 2  # a worker's exit code for a refused start (settings, the port): restarting it cannot help


def worker_instance_id(base: str, slot: int, generation: int) -> str:
    """The instance id of a worker: `<base>/w<slot>`, and `.<n>` for its n-th restart (a new instance)."""
    return f"{base}/w{slot}" + (f".{generation}" if generation else "")


def prepare_store(settings: Settings) -> None:
    """Create the store's tables once, before the workers start: N processes creating them at once on a new
    database collide in PostgreSQL's catalog (CREATE TABLE IF NOT EXISTS is not safe against a concurrent one)."""
    with OfflineStore(settings) as offline:
        offline.create_tables()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the supervisor dies (Linux), so no worker outlives it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Worker:
    slot: int
    generation: int
    instance: str
    proc: subprocess.Popen[bytes]
    started: float


class Supervisor:
    """Starts, watches and stops the workers; see the module doc."""

    def __init__(self, settings: Settings, command: Callable[[int], list[str]] | None = None) -> None:
        self.settings = settings
        self.count = settings.workers
        self.secret = settings.forward_secret or secrets.token_urlsafe(32)
        self.command = command or (lambda slot: [sys.executable, "-m", "relay.web.cli.main", "serve", WORKER_FLAG,
                                                 str(slot)])
        self.workers: dict[int, Worker] = {}
        self.generations = dict.fromkeys(range(self.count), 0)
        self.quick_deaths = dict.fromkeys(range(self.count), 0)
        self.deaths: Queue[tuple[Worker, int]] = Queue()
        self.stopping = Event()
        self.exit_code = 0

    def environment(self, instance: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"RELAY_INSTANCE_ID": instance, "RELAY_FORWARD_SECRET": self.secret, "PYTHONUNBUFFERED": "1"})
        return env

    def start(self, slot: int) -> None:
        generation = self.generations[slot]
        self.generations[slot] += 1
        instance = worker_instance_id(self.settings.instance_id, slot, generation)
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            self.command(slot), env=self.environment(instance), stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl before exec
        )
        worker = Worker(slot, generation, instance, proc, time.monotonic())
        self.workers[slot] = worker
        log.info("worker %d started as instance %s (pid %d)", slot, instance, proc.pid)
        gevent.spawn(self._watch, worker)

    def _watch(self, worker: Worker) -> None:
        self.deaths.put((worker, worker.proc.wait()))

    def run(self) -> int:
        refusal = port_refusal(self.settings.host, self.settings.port)
        if refusal is not None:
            log.error("cannot listen on %s:%d: %s", self.settings.host, self.settings.port, refusal)
            return REFUSED
        try:
            prepare_store(self.settings)
        except Exception as error:  # the store unreachable, or refusing us: no worker could start either
            log.error("cannot open the store %s: %s", self.settings.store.describe(), type(error).__name__)
            return REFUSED
        gevent.signal_handler(signal.SIGTERM, self.stop, signal.SIGTERM)
        gevent.signal_handler(signal.SIGINT, self.stop, signal.SIGINT)
        log.info("relay serve: %d workers on %s:%d (instances %s/w0..w%d)", self.count, self.settings.host,
                 self.settings.port, self.settings.instance_id, self.count - 1)
        for slot in range(self.count):
            self.start(slot)
        while self.workers:
            worker, code = self.deaths.get()
            if worker.slot not in self.workers or self.workers[worker.slot] is not worker:
                continue
            del self.workers[worker.slot]
            if not self.stopping.is_set():
                self._died(worker, code)
        log.info("relay serve: every worker stopped")
        return self.exit_code

    def _died(self, worker: Worker, code: int) -> None:
        lived = time.monotonic() - worker.started
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        if lived < QUICK_DEATH_S and code == REFUSED:
            log.error("worker %d (%s) refused to start (%s); stopping", worker.slot, worker.instance, how)
            self.stop(signal.SIGTERM, REFUSED)
            return
        self.quick_deaths[worker.slot] = self.quick_deaths[worker.slot] + 1 if lived < QUICK_DEATH_S else 0
        if self.quick_deaths[worker.slot] >= MAX_QUICK_DEATHS:
            log.error("worker %d died %d times in a row within %g s of its start (last: %s); giving up",
                      worker.slot, MAX_QUICK_DEATHS, QUICK_DEATH_S, how)
            self.stop(signal.SIGTERM, 1)
            return
        delay = min(0.5 * 2 ** self.quick_deaths[worker.slot], 8.0) if self.quick_deaths[worker.slot] else 0.0
        log.warning("worker %d (%s) died (%s) after %.1f s; its executors reconnect to the other workers, which "
                    "adopt its leases; starting it again as a new instance in %g s",
                    worker.slot, worker.instance, how, lived, delay)
        gevent.spawn(self._restart, worker.slot, delay)

    def _restart(self, slot: int, delay: float) -> None:
        if self.stopping.wait(delay):
            return
        try:
            self.start(slot)
        except OSError as error:
            log.error("could not start worker %d again (%s); stopping", slot, error.strerror or error)
            self.stop(signal.SIGTERM, 1)

    def stop(self, signum: int = signal.SIGTERM, exit_code: int = 0) -> None:
        """Pass the signal on to every worker; SIGKILL those still running after STOP_TIMEOUT_S."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.exit_code = self.exit_code or exit_code
        log.info("relay serve: stopping %d worker(s) (%s)", len(self.workers), signal.Signals(signum).name)
        for worker in list(self.workers.values()):
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signum)
        gevent.spawn_later(STOP_TIMEOUT_S, self._kill_stragglers)

    def _kill_stragglers(self) -> None:
        for worker in list(self.workers.values()):
            if worker.proc.poll() is None:
                log.warning("worker %d (%s) did not stop within %g s; killing it", worker.slot, worker.instance,
                            STOP_TIMEOUT_S)
                self.exit_code = self.exit_code or 1
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
