"""Simulated DBOS executors, cheaply: one asyncio process answering the executor protocol on thousands of
WebSockets (the `websockets` package; pinned in bench/requirements.txt).

Each simulated executor connects to ``ws://HOST:PORT/websocket/{app}/{key}`` and answers every request the
way a DBOS SDK does (PROTOCOL.md): ``executor_info`` with its id, ``recovery`` with ``success: true`` (and the
time it arrived, for the recovery-latency benchmark), ``get_workflow``/``list_workflows`` with a canned
workflow record whose ``Output`` is ``payload_bytes`` long, any other type with a canned answer of the
fields its response needs. Pings from the server are answered by the library (pong), and each executor
pings the server like the Python SDK does (every 20 s by default). An executor the server closes reconnects
with exponential backoff (as the SDKs do), a bounded number of times; a *killed* one (``kill``: the socket
is aborted without a close frame, as when its process gets SIGKILL) never comes back.

Limits: loopback targets only, at most ``--max-executors`` sockets, and the process exits by itself after
``--max-seconds`` (or when its standard input closes). It raises its own open-file limit, and spreads its
sockets over several loopback source addresses (127.0.0.1, 127.0.0.2, ...) when the ephemeral port range
(/proc/sys/net/ipv4/ip_local_port_range) could not hold them all from one.

Run as a process (``python -m bench.loadgen``) it is driven by JSON lines on stdin, one answer line on
stdout per command (see ``Controller``); bench/run.py does that. ``LoadGen`` can also be used in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import os
import resource
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import Opcode

log = logging.getLogger("bench.loadgen")

DEFAULT_MAX_EXECUTORS = 50_000
DEFAULT_MAX_SECONDS = 4 * 3600.0
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
PORT_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
# Not every port of the range is ours to take (other tests run on the machine): plan for most of it.
PORT_RANGE_USABLE = 0.8


# ------------------------------------------------------------------------------------------- limits
def raise_fd_limit(wanted: int) -> int:
    """Raise RLIMIT_NOFILE to at least `wanted` (as root the hard limit too, up to fs.nr_open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return soft
    target = wanted
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            nr_open = int(Path("/proc/sys/fs/nr_open").read_text().strip())
        except (OSError, ValueError):
            nr_open = wanted
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, nr_open), min(wanted, nr_open)))
            return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (ValueError, OSError):
            target = hard  # not privileged: as far as the hard limit goes
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def ephemeral_port_count() -> int:
    try:
        low, high = (int(x) for x in Path(PORT_RANGE_FILE).read_text().split())
    except (OSError, ValueError):
        return 28_000  # Linux's default range
    return high - low + 1


def source_addresses(count: int, host: str, first: int = 1) -> list[str]:
    """Loopback source addresses enough for `count` sockets to one (host, port), from 127.0.0.`first` on
    (several load generators aimed at one port each take addresses of their own)."""
    per_address = max(1, int(ephemeral_port_count() * PORT_RANGE_USABLE))
    needed = max(1, math.ceil(count / per_address))
    if first + needed - 1 > 250:
        raise ValueError(f"{count} sockets need more than 250 source addresses")
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError("the load generator only targets loopback addresses")
    return [f"127.0.0.{i}" for i in range(first, first + needed)]


def check_loopback_url(url: str) -> tuple[str, int]:
    parts = urlparse(url)
    if parts.scheme != "ws" or parts.hostname is None:
        raise ValueError("the URL must be ws://HOST:PORT/...")
    host = socket.gethostbyname(parts.hostname)
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError("the load generator only targets loopback addresses")
    return host, parts.port or 80


# ---------------------------------------------------------------------------------------- answers
@dataclass
class Options:
    """How the simulated executors behave."""

    payload_bytes: int = 1024
    application_version: str = "bench-v1"
    language: str = "python"
    dbos_version: str = "3.2.0"
    # The Python SDK pings its conductor every 20 s and gives up after 15 s without a pong.
    client_ping_interval: float | None = 20.0
    client_ping_timeout: float | None = 15.0
    open_timeout: float = 30.0
    # Reconnects after the server closed or refused us: 1 s, 2 s, 4 s... up to backoff_max, at most
    # max_attempts in a row without a successful handshake. The SDKs: Python (dbos 3.2.0
    # _conductor/conductor.py) and TypeScript (5.2.11) wait a fixed 1 s after any failure, forever; Go (v1.6.0)
    # 1 s doubling to 30 s with jitter x0.5-1.5. backoff_max=1 is the Python/TypeScript behaviour.
    backoff_initial: float = 1.0
    backoff_max: float = 8.0
    max_attempts: int = 10


def workflow_record(workflow_id: str, executor_id: str, payload: str, version: str) -> dict[str, Any]:
    """A workflow status record with the SDKs' keys (most values strings), `payload` as its Output."""
    return {
        "WorkflowUUID": workflow_id,
        "Status": "SUCCESS",
        "WorkflowName": "bench_workflow",
        "WorkflowClassName": None,
        "WorkflowConfigName": None,
        "AuthenticatedUser": None,
        "AssumedRole": None,
        "AuthenticatedRoles": None,
        "Input": '{"args": [], "kwargs": {}}',
        "Output": payload,
        "Error": None,
        "CreatedAt": "1767225600000",
        "UpdatedAt": "1767225601000",
        "QueueName": None,
        "ApplicationVersion": version,
        "ExecutorID": executor_id,
        "WorkflowTimeoutMS": None,
        "WorkflowDeadlineEpochMS": None,
        "DeduplicationID": None,
        "Priority": "0",
        "QueuePartitionKey": None,
        "ForkedFrom": None,
    }


# What the response of each type must carry besides the envelope (wire/codec.py checks them).
_SUCCESS_TYPES = frozenset({
    "recovery", "cancel", "resume", "delete", "restart", "retention", "import_workflow", "pause_schedule",
    "resume_schedule", "set_latest_application_version", "alert", "rewind_workflow",
})
_LIST_OUTPUT_TYPES = frozenset({
    "list_workflows", "list_queued_workflows", "list_steps", "get_workflow_aggregates", "get_step_aggregates",
    "list_schedules", "list_queues", "list_application_versions",
})


def answer(frame: dict[str, Any], executor_id: str, opts: Options, payload: str) -> dict[str, Any]:
    """The response a DBOS SDK would send to `frame` (canned contents)."""
    kind = frame.get("type")
    out: dict[str, Any] = {"type": kind, "request_id": frame.get("request_id"), "error_message": None}
    if kind == "executor_info":
        out.update(executor_id=executor_id, application_version=opts.application_version,
                   hostname=f"bench-{executor_id}", language=opts.language, dbos_version=opts.dbos_version,
                   executor_metadata=None)
    elif kind in _SUCCESS_TYPES:
        out["success"] = True
    elif kind == "get_workflow":
        workflow_id = str(frame.get("workflow_id") or "wf")
        out["output"] = workflow_record(workflow_id, executor_id, payload, opts.application_version)
    elif kind in ("list_workflows", "list_queued_workflows"):
        out["output"] = [workflow_record("wf-1", executor_id, payload, opts.application_version)]
    elif kind in _LIST_OUTPUT_TYPES:
        out["output"] = []
    elif kind == "exist_pending_workflows":
        out["exist"] = False
    elif kind in ("get_schedule", "get_queue"):
        out["output"] = None
    elif kind == "get_workflow_events":
        out["events"] = []
    elif kind == "get_workflow_notifications":
        out["notifications"] = []
    elif kind == "get_workflow_streams":
        out["streams"] = []
    elif kind == "get_metrics":
        out["metrics"] = []
    elif kind == "fork_workflow":
        out["new_workflow_id"] = "wf-forked"
    elif kind == "fork_from_failure":
        out["forked_workflow_ids"] = []
    elif kind == "export_workflow":
        out["serialized_workflow"] = payload
    elif kind == "trigger_schedule":
        out["workflow_id"] = "wf-triggered"
    elif kind == "backfill_schedule":
        out["workflow_ids"] = []
    else:  # a type this generator does not model: a canned payload, like a newer SDK's answer
        out["output"] = payload
    return out


# ----------------------------------------------------------------------------------------- sockets
class CountingConnection(ClientConnection):
    """Counts the pings the server sends (the library answers them with pongs by itself)."""

    pings_received = 0  # class-wide: one counter for the whole process

    def process_event(self, event: Any) -> None:
        if getattr(event, "opcode", None) is Opcode.PING:
            CountingConnection.pings_received += 1
        super().process_event(event)


@dataclass
class SimExecutor:
    executor_id: str
    source: str
    ws: ClientConnection | None = None
    identified: bool = False
    killed: bool = False
    given_up: bool = False
    attempts: int = 0
    connects: int = 0
    identified_at: float | None = None
    first_identified_wall: float | None = None  # time.time() of its first executor_info answer (bench.registry)


@dataclass
class Stats:
    attempts: int = 0
    connect_errors: Counter[str] = field(default_factory=Counter)
    closes: Counter[str] = field(default_factory=Counter)  # close code the server sent ("none": no frame)
    answered: Counter[str] = field(default_factory=Counter)
    recoveries: list[dict[str, Any]] = field(default_factory=list)


class LoadGen:
    """The simulated executors of one process. Use from one event loop."""

    def __init__(self, opts: Options | None = None, max_executors: int = DEFAULT_MAX_EXECUTORS,
                 first_source: int = 1) -> None:
        self.opts = opts or Options()
        self.max_executors = max_executors
        self.first_source = first_source
        self.executors: dict[str, SimExecutor] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.stats = Stats()
        self.stopping = False
        self.payload = "x" * self.opts.payload_bytes
        self._sources: list[str] = ["127.0.0.1"]

    # -- commands -------------------------------------------------------------------------------
    def start(self, url: str, ids: list[str], concurrency: int | None = None) -> int:
        """Start executors with these ids (connecting in the background); `concurrency` bounds how many
        handshakes are in flight at once (None: all at once). Returns how many were started."""
        host, port = check_loopback_url(url)
        total = len(self.executors) + len(ids)
        if total > self.max_executors:
            raise ValueError(f"{total} executors would exceed the limit of {self.max_executors}")
        raise_fd_limit(total + 1024)
        self._sources = source_addresses(total, host, self.first_source)
        gate = asyncio.Semaphore(concurrency) if concurrency else None
        started = 0
        for index, executor_id in enumerate(ids):
            if executor_id in self.executors:
                continue
            ex = SimExecutor(executor_id, self._sources[(len(self.executors) + index) % len(self._sources)])
            self.executors[executor_id] = ex
            self.tasks[executor_id] = asyncio.create_task(self._run(ex, url, host, port, gate))
            started += 1
        return started

    def status(self) -> dict[str, Any]:
        open_ = sum(1 for e in self.executors.values() if e.ws is not None)
        return {
            "executors": len(self.executors),
            "open": open_,
            "identified": sum(1 for e in self.executors.values() if e.identified),
            "killed": sum(1 for e in self.executors.values() if e.killed),
            "given_up": sum(1 for e in self.executors.values() if e.given_up),
            "reconnects": sum(max(0, e.connects - 1) for e in self.executors.values()),
            "attempts": self.stats.attempts,
            "connect_errors": dict(self.stats.connect_errors),
            "closes": dict(self.stats.closes),
            "answered": dict(self.stats.answered),
            "recoveries": len(self.stats.recoveries),
            "pings_received": CountingConnection.pings_received,
            "sources": len(self._sources),
        }

    def kill(self, ids: list[str]) -> list[dict[str, Any]]:
        """Abort these executors' sockets without a close frame (as SIGKILL would); they never reconnect (one
        not connected right now, e.g. waiting to reconnect, just stops trying)."""
        out = []
        for executor_id in ids:
            ex = self.executors.get(executor_id)
            if ex is None or ex.killed:
                continue
            ex.killed = True
            at = time.monotonic()
            if ex.ws is not None:
                ex.ws.transport.abort()
            out.append({"executor_id": executor_id, "at": at})
        return out

    def identified_ids(self) -> list[str]:
        return [e.executor_id for e in self.executors.values() if e.identified and not e.killed]

    async def stop(self) -> None:
        """Abort every socket and end every task."""
        self.stopping = True
        for ex in self.executors.values():
            if ex.ws is not None:
                with contextlib.suppress(Exception):
                    ex.ws.transport.abort()
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    # -- one executor ---------------------------------------------------------------------------
    async def _run(self, ex: SimExecutor, url: str, host: str, port: int, gate: asyncio.Semaphore | None) -> None:
        delay = self.opts.backoff_initial
        while not (self.stopping or ex.killed):
            if ex.attempts >= self.opts.max_attempts:
                ex.given_up = True
                return
            ex.attempts += 1
            self.stats.attempts += 1
            try:
                if gate is not None:
                    async with gate:
                        ws = await self._open(ex, url, host, port)
                else:
                    ws = await self._open(ex, url, host, port)
            except Exception as error:  # refused, reset, timed out, 4xx: retried with backoff
                response = getattr(error, "response", None)  # InvalidStatus: the server refused the upgrade
                status = getattr(response, "status_code", None)
                self.stats.connect_errors[f"HTTP {status}" if status else type(error).__name__] += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.opts.backoff_max)
                continue
            if ex.killed or self.stopping:  # killed while it was connecting: it never was
                ws.transport.abort()
                return
            ex.ws = ws
            ex.connects += 1
            try:
                await self._serve(ex, ws)
            finally:
                ex.ws = None
                ex.identified = False
                code = ws.close_code
                self.stats.closes["none" if code is None or code == 1006 else str(code)] += 1
            if ex.killed or self.stopping:
                return
            if ex.identified_at is not None:
                ex.attempts = 0  # a connection that got through: the backoff starts over
                delay = self.opts.backoff_initial
                ex.identified_at = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.opts.backoff_max)

    async def _open(self, ex: SimExecutor, url: str, host: str, port: int) -> ClientConnection:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            if len(self._sources) > 1 or self._sources[0] != "127.0.0.1":
                # Bind the address only; the port is chosen at connect time, per destination.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                sock.bind((ex.source, 0))
            await asyncio.wait_for(loop.sock_connect(sock, (host, port)), self.opts.open_timeout)
            return await connect(
                url,
                sock=sock,
                compression=None,
                proxy=None,
                open_timeout=self.opts.open_timeout,
                ping_interval=self.opts.client_ping_interval,
                ping_timeout=self.opts.client_ping_timeout,
                close_timeout=2,
                max_size=None,
                max_queue=4,
                user_agent_header=None,
                create_connection=CountingConnection,
            )
        except BaseException:
            sock.close()
            raise

    async def _serve(self, ex: SimExecutor, ws: ClientConnection) -> None:
        opts, payload = self.opts, self.payload
        try:
            async for message in ws:
                try:
                    frame = json.loads(message)
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                kind = str(frame.get("type"))
                if kind == "recovery":
                    self.stats.recoveries.append({
                        "at": time.monotonic(), "peer": ex.executor_id,
                        "executor_ids": list(frame.get("executor_ids") or []),
                    })
                await ws.send(json.dumps(answer(frame, ex.executor_id, opts, payload)))
                self.stats.answered[kind] += 1
                if kind == "executor_info":
                    ex.identified = True
                    ex.identified_at = time.monotonic()
                    if ex.first_identified_wall is None:
                        ex.first_identified_wall = time.time()
        except ConnectionClosed:
            pass


# ------------------------------------------------------------------------------------ controller
class Controller:
    """JSON lines on stdin, one answer per line on stdout. Commands (``{"cmd": ..., ...}``):

    - ``start`` url, prefix, count, [first=0], [concurrency]: executors ``{prefix}-{n:06d}``;
    - ``status``: counters (``LoadGen.status``);
    - ``identified``: ids of the executors that answered executor_info and are still connected;
    - ``identified_times``: ``{id: time.time()}`` of each executor's first executor_info answer;
    - ``kill`` ids: abort those sockets, answer ``[{executor_id, at}]`` (``at``: time.monotonic());
    - ``recoveries``: every recovery frame received ``[{at, peer, executor_ids}]``;
    - ``stop``: abort everything; ``quit``: stop and exit.
    Answers are ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.
    """

    def __init__(self, gen: LoadGen) -> None:
        self.gen = gen

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        kind = command.get("cmd")
        if kind == "start":
            first = int(command.get("first", 0))
            ids = [f"{command['prefix']}-{n:06d}" for n in range(first, first + int(command["count"]))]
            started = self.gen.start(command["url"], ids, command.get("concurrency"))
            return {"started": started, "sources": len(self.gen._sources)}
        if kind == "status":
            return self.gen.status()
        if kind == "identified":
            return {"ids": self.gen.identified_ids()}
        if kind == "identified_times":
            return {"times": {e.executor_id: e.first_identified_wall for e in self.gen.executors.values()
                              if e.first_identified_wall is not None}}
        if kind == "kill":
            return {"killed": self.gen.kill(list(command["ids"]))}
        if kind == "recoveries":
            return {"recoveries": self.gen.stats.recoveries}
        raise ValueError(f"unknown command {kind!r}")

    async def serve(self, max_seconds: float) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        deadline = loop.time() + max_seconds
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    log.warning("loadgen: time limit reached; exiting")
                    return
                try:
                    line = await asyncio.wait_for(reader.readline(), remaining)
                except TimeoutError:
                    continue
                if not line:
                    return  # the parent went away
                try:
                    command = json.loads(line)
                    if command.get("cmd") in ("stop", "quit"):
                        await self.gen.stop()
                        reply: dict[str, Any] = {"ok": True}
                    else:
                        reply = {"ok": True, **self.handle(command)}
                except Exception as error:  # reported to the driver
                    reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
                sys.stdout.write(json.dumps(reply) + "\n")
                sys.stdout.flush()
                if command.get("cmd") == "quit":
                    return
        finally:
            await self.gen.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.loadgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--payload-bytes", type=int, default=1024, help="size of canned Output fields")
    parser.add_argument("--client-ping-interval", type=float, default=20.0, help="0: executors never ping")
    parser.add_argument("--open-timeout", type=float, default=30.0)
    parser.add_argument("--max-attempts", type=int, default=10)
    parser.add_argument("--backoff-max", type=float, default=8.0,
                        help="longest wait between reconnects (1: a fixed 1 s, like the Python and TypeScript SDKs)")
    parser.add_argument("--max-executors", type=int, default=DEFAULT_MAX_EXECUTORS)
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_MAX_SECONDS)
    parser.add_argument("--first-source", type=int, default=1, help="source addresses from 127.0.0.N on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    opts = Options(
        payload_bytes=args.payload_bytes,
        client_ping_interval=args.client_ping_interval or None,
        client_ping_timeout=15.0 if args.client_ping_interval else None,
        open_timeout=args.open_timeout,
        max_attempts=args.max_attempts,
        backoff_max=args.backoff_max,
    )
    gen = LoadGen(opts, max_executors=args.max_executors, first_source=args.first_source)
    raise_fd_limit(min(args.max_executors, 1_000_000) + 1024)
    asyncio.run(Controller(gen).serve(args.max_seconds))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
