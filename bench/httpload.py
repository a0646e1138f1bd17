"""An HTTP/1.1 load client on asyncio streams (keep-alive connections), for the request-path benchmark.

- ``saturate``: a closed loop, `concurrency` connections each sending its next request as soon as the last
  answer arrived, for `duration` seconds: the server's throughput at saturation.
- ``fixed_rate``: an open loop, requests started at `rate` per second whatever the answers do (a pool of
  connections carries them); each latency counts from the moment the request was due, so a server that
  falls behind shows it (no coordinated omission).
Both are bounded by `duration` and by a request count.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RequestMaker = Callable[[int], tuple[str, str, Any]]  # n -> (method, path, JSON body or None)
MAX_REQUESTS = 2_000_000


@dataclass
class LoadResult:
    mode: str
    duration_s: float
    ok: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    offered_rps: float | None = None

    @property
    def throughput(self) -> float:
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    def percentile(self, p: float) -> float | None:
        if not self.latencies_ms:
            return None
        data = sorted(self.latencies_ms)
        index = min(len(data) - 1, max(0, round(p / 100 * (len(data) - 1))))
        return data[index]

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "offered_rps": self.offered_rps,
            "duration_s": round(self.duration_s, 2),
            "ok": self.ok,
            "throughput_rps": round(self.throughput, 1),
            "p50_ms": _round(self.percentile(50)),
            "p99_ms": _round(self.percentile(99)),
            "mean_ms": _round(statistics.fmean(self.latencies_ms)) if self.latencies_ms else None,
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "errors": dict(self.errors),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class Connection:
    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError("the load client only targets loopback addresses")
        self.host, self.port = host, port
        self.base_headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self.base_headers}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + data)
        try:
            return await self._response()
        except BaseException:
            self.close()
            raise

    async def _response(self) -> tuple[int, bytes]:
        assert self.reader is not None
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split(b" ", 2)[1])
        length, chunked, closing = None, False, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                closing = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readline()).split(b";")[0].strip(), 16)
                if size == 0:
                    await self.reader.readline()
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readline()
            payload = b"".join(parts)
        elif length is not None:
            payload = await self.reader.readexactly(length)
        else:
            payload = await self.reader.read()
            closing = True
        if closing:
            self.close()
        return status, payload

    def close(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
        self.reader = self.writer = None


async def _one(conn: Connection, make: RequestMaker, n: int, result: LoadResult, started: float) -> None:
    method, path, body = make(n)
    try:
        status, _ = await conn.request(method, path, body)
    except Exception as error:  # counted, and the connection is opened again next time
        result.errors[type(error).__name__] += 1
        return
    result.statuses[status] += 1
    if status == 200:
        result.ok += 1
        result.latencies_ms.append((time.perf_counter() - started) * 1000)


async def saturate(host: str, port: int, headers: dict[str, str], make: RequestMaker, *, concurrency: int,
                   duration: float, max_requests: int = MAX_REQUESTS) -> LoadResult:
    result = LoadResult("saturation", duration)
    counter = iter(range(max_requests))
    begin = time.perf_counter()
    deadline = begin + duration

    async def worker() -> None:
        conn = Connection(host, port, headers)
        try:
            for n in counter:
                if time.perf_counter() >= deadline:
                    return
                await _one(conn, make, n, result, time.perf_counter())
        finally:
            conn.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.duration_s = time.perf_counter() - begin
    return result


async def fixed_rate(host: str, port: int, headers: dict[str, str], make: RequestMaker, *, rate: float,
                     duration: float, pool: int = 64) -> LoadResult:
    result = LoadResult("fixed", duration, offered_rps=rate)
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(pool):
        idle.put_nowait(Connection(host, port, headers))
    total = min(int(rate * duration), MAX_REQUESTS)
    begin = time.perf_counter()

    async def send(n: int, due: float) -> None:
        conn = await idle.get()
        try:
            await _one(conn, make, n, result, due)
        finally:
            idle.put_nowait(conn)

    tasks = []
    for n in range(total):
        due = begin + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(n, due)))
    done, pending = await asyncio.wait(tasks, timeout=60) if tasks else (set(), set())
    for task in pending:
        task.cancel()
        result.errors["unfinished"] += 1
    result.duration_s = time.perf_counter() - begin
    while not idle.empty():
        idle.get_nowait().close()
    del done
    return result


def merge(results: list[LoadResult]) -> LoadResult:
    """Pool several runs of the same mode (e.g. the halves of an ABBA sequence)."""
    out = LoadResult(results[0].mode, sum(r.duration_s for r in results), offered_rps=results[0].offered_rps)
    for r in results:
        out.ok += r.ok
        out.statuses.update(r.statuses)
        out.errors.update(r.errors)
        out.latencies_ms.extend(r.latencies_ms)
    return out
