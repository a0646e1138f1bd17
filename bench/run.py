"""The benchmark suite (issue 6): `make bench`, i.e. `.venv/bin/python -m bench.run [--quick]`.

Starts `relay serve` as a real process on a free port with a fresh store for each benchmark, drives it with
simulated executors (bench/loadgen.py) and an HTTP load client (bench/httpload.py), measures it from the
outside (/proc, its HTTP API, its store), and writes bench/RESULTS.md: the machine, the date, every figure
with its unit, Relay/reference ratios from the same run, and what limits each figure.

1. scale: executors connected in steps up to 20,000, default pings; max all-HEALTHY, memory per connection
   (relay RSS), CPU at rest, missed pongs (executors the server closed / DISCONNECTED);
2. overhead: HTTP → frame → executor → answer → HTTP over 100 executors, Relay vs bench/reference.py, at
   saturation and at a fixed offered load: throughput, p50, p99, ratios;
3. storm: 10,000 executors connecting at once → time until all HEALTHY, event-store append rate (SQLite,
   PostgreSQL);
4. replay: `relay replay` over 1,000,000 events (SQLite, PostgreSQL);
5. recovery: abrupt socket close → `recovery` frame at a peer, minus the grace period, 1,000 executors;
6. profile: py-spy on the connect storm and on the request path;
7. workers: `relay serve --workers 2` vs 1 on PostgreSQL: executors held, API throughput, forwarded share
   (bench/workers.py).
8. restart (only with `--only restart`): 10,000 executors connected, Relay stopped (SIGTERM; SIGKILL) and started
   again on the same port and data directory → time until all HEALTHY again, DEAD records, recoveries dispatched
   (bench/restart.py).
9. dataplane (only with `--only dataplane`): 181,346 workflows in a dbos 3.4.0 system database on PostgreSQL;
   the data plane's aggregates and list pages vs the same SQL asked directly (bench/dataplane.py).
10. argus (only with `--only argus`): Relay's data-plane console beside dbos-argus 0.0.41 on one system database
   of 50,000 workflows, the same questions to both (`--argus-million`: and the overview at 1,000,000)
   (bench/argus.py).
11. registry (only with `--only registry`): 10,000 executors at once (`--storm-count`) → from each one's
   handshake to its first appearance in the registry view and in GET executors (p50/p99/max), and the view's
   lag behind the log over the storm (SQLite, PostgreSQL) (bench/registry.py).
12. fleet (only with `--only fleet`): 30,000 executors at once on `RELAY_WORKERS=2` and PostgreSQL → all HEALTHY,
   memory per executor, pings over a hold (bench/fleet.py; `--fleet-count`).
13. rolling (only with `--only rolling`): 3 instances behind haproxy on one PostgreSQL store, 3,000 executors;
   each instance stopped (SIGTERM) and started again in turn → DEAD, recoveries, time until all are back on live
   instances (bench/rolling.py).
`--quick` divides every count by 20 (a few minutes in all). Every loop is bounded in count and time; all
traffic stays on loopback. PostgreSQL: RELAY_BENCH_DATABASE_URL, else a throwaway cluster, fsync on (a database
is created for each part and dropped after); without one the PostgreSQL parts are reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import argus, console, dataplane, fleet, httpload, profiles, registry, restart, rolling, workers
from bench.procs import (
    APP,
    ORG,
    PYTHON,
    REPO,
    CpuMeter,
    LoadGen,
    Profiler,
    Reference,
    Relay,
    clean_env,
    rss_kib,
    wait_healthy,
)
from bench.stores import Position, fill_log, fresh_database, server_url
from relay.projections.views import Views

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "RESULTS.md"
FINDINGS = BENCH_DIR / "FINDINGS.md"
PROFILE_DIR = BENCH_DIR / "profiles"


@dataclass
class Config:
    quick: bool
    scale_target: int = 20_000
    scale_steps: int = 8
    scale_hold_s: float = 40.0
    scale_ramp_budget_s: float = 1800.0
    connect_concurrency: int = 100
    overhead_executors: int = 100
    overhead_seconds: float = 15.0
    overhead_concurrency: int = 16
    fixed_rps_cap: float = 200.0
    payload_bytes: int = 1024
    storm_count: int = 10_000
    # After a refused or failed upgrade an executor retries in 1 s, as the Python and TypeScript SDKs do (a fixed
    # 1 s); more doubles the wait up to that many seconds (Go: from 1 s up to 30 s, with jitter).
    storm_backoff_max_s: float = 1.0
    # Settings for the storm's Relay (RELAY_*=value), e.g. a sweep of RELAY_MAX_HANDSHAKES_IN_FLIGHT.
    storm_env: tuple[tuple[str, str], ...] = ()
    storm_timeout_s: float = 900.0
    replay_events: int = 1_000_000
    replay_timeout_s: float = 7200.0
    recovery_executors: int = 1_000
    recovery_kills: int = 100
    recovery_spacing_s: float = 0.3
    grace_s: int = 1
    profile_storm: int = 3_000
    profile_request_s: float = 20.0
    profile_rest_s: float = 30.0
    profile_replay_events: int = 100_000
    restart_count: int = 10_000
    workers_executors: int = 5_000
    workers_rest_s: float = 10.0

    @classmethod
    def make(cls, quick: bool) -> Config:
        if not quick:
            return cls(quick=False)
        return cls(
            quick=True, scale_target=1_000, scale_steps=4, scale_hold_s=30.0, scale_ramp_budget_s=300.0,
            overhead_seconds=6.0,
            storm_count=500, storm_timeout_s=180.0, replay_events=50_000, replay_timeout_s=600.0,
            recovery_executors=50, recovery_kills=20, recovery_spacing_s=0.2, profile_storm=500,
            profile_request_s=8.0, profile_rest_s=15.0, profile_replay_events=20_000, restart_count=500,
            workers_executors=500, workers_rest_s=5.0,
        )


def say(message: str) -> None:
    print(f"[bench {datetime.now().astimezone().strftime('%H:%M:%S')}] {message}", flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    data = sorted(values)
    return data[min(len(data) - 1, max(0, math.ceil(p / 100 * len(data)) - 1))]


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# ------------------------------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem_kib = int(line.split()[1])
    return {
        "nproc": os.cpu_count(),
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "ports": Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split(),
    }


# ------------------------------------------------------------------------------------ benchmarks
def bench_scale(cfg: Config, work: Path) -> dict[str, Any]:
    relay = Relay(work, "scale", max_files=cfg.scale_target * 2 + 4096)
    lg: LoadGen | None = None
    try:
        relay.start()
        relay.setup_app()
        time.sleep(1.0)
        base = rss_kib(relay.pid)["VmRSS"]
        lg = LoadGen(work, "scale-loadgen", max_executors=cfg.scale_target + 10, payload_bytes=cfg.payload_bytes)
        step = max(1, cfg.scale_target // cfg.scale_steps)
        reached, steps = 0, []
        ramp_begin = time.monotonic()
        ramp_deadline = ramp_begin + cfg.scale_ramp_budget_s
        for _ in range(cfg.scale_steps):
            want = reached + step
            say(f"scale: connecting executors {reached + 1}..{want}")
            t0 = time.monotonic()
            meter = CpuMeter({"relay": relay.pid})
            lg.start(relay.ws_url, "scale", step, first=reached, concurrency=cfg.connect_concurrency)
            # A step may take as long as it needs while executors keep getting in (bounded overall).
            ok_id, _ = lg.wait_progress(want, stall_s=60.0, deadline=ramp_deadline)
            ok_h, _, counts = wait_healthy(relay, want if ok_id else 1, timeout=120.0, interval=2.0)
            ok_h = ok_h and counts.get("HEALTHY", 0) >= want
            step_cpu = meter.read().get("relay")
            rss = rss_kib(relay.pid)
            closed = sum(lg.status()["closes"].values())  # sockets the server closed so far (none killed here)
            stable = closed <= max(10, want // 100)
            steps.append({"executors": want, "healthy": counts.get("HEALTHY", 0), "seconds": time.monotonic() - t0,
                          "rss_kib": rss["VmRSS"], "closed_by_server": closed, "relay_cpu": step_cpu,
                          "ok": ok_id and ok_h and stable})
            if not (ok_id and ok_h and stable):
                reached = counts.get("HEALTHY", 0)
                break
            reached = want
        ramp_s = time.monotonic() - ramp_begin
        say(f"scale: {reached} HEALTHY; holding {cfg.scale_hold_s:g} s (CPU at rest, pongs)")
        before = lg.status()
        rss_full = rss_kib(relay.pid)["VmRSS"]
        sockets = max(before["open"], reached)  # what the RSS holds: every open socket, identified or not
        meter = CpuMeter({"relay": relay.pid, "loadgen": lg.pid})
        time.sleep(cfg.scale_hold_s)
        cpu = meter.read()
        after = lg.status()
        counts = relay.executor_counts(timeout=120)
        rss_end = rss_kib(relay.pid)
        closes_hold = sum(after["closes"].values()) - sum(before["closes"].values())
        pings = after["pings_received"] - before["pings_received"]
        open_now = after["identified"]
        return {
            "target": cfg.scale_target,
            "max_healthy": counts.get("HEALTHY", 0),
            "reached_all_steps": all(s["ok"] for s in steps) and len(steps) == cfg.scale_steps,
            "steps": steps,
            "ramp_s": ramp_s,
            "rss_base_kib": base,
            "rss_full_kib": rss_full,
            "rss_end_kib": rss_end["VmRSS"],
            "rss_peak_kib": rss_end["VmHWM"],
            "per_connection_kib": (rss_full - base) / sockets if sockets else None,
            "open_sockets": sockets,
            "identified_at_end": after["identified"],
            "hold_s": cfg.scale_hold_s,
            "cpu_rest": cpu,
            "disconnected": counts.get("DISCONNECTED", 0) + counts.get("DEAD", 0),
            "registry": dict(counts),
            "closes_during_hold": closes_hold,
            "closes_total": after["closes"],
            "reconnects_total": after["reconnects"],
            "pings_per_executor_per_10s": (pings / open_now / cfg.scale_hold_s * 10) if open_now else None,
            "loadgen_rss_kib": rss_kib(lg.pid)["VmRSS"],
            "sources": after["sources"],
        }
    finally:
        if lg is not None:
            lg.stop()
        relay.stop()


def _run_load(coro: Any, pids: dict[str, int | None]) -> tuple[httpload.LoadResult, dict[str, float]]:
    meter = CpuMeter(pids)
    result = asyncio.run(coro)
    return result, meter.read()


def _mean_cpu(readings: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for r in readings for k in r}
    return {k: round(statistics.fmean(r.get(k, 0.0) for r in readings), 1) for k in keys}


def bench_overhead(cfg: Config, work: Path) -> dict[str, Any]:
    relay = Relay(work, "overhead")
    ref: Reference | None = None
    lg: LoadGen | None = None
    try:
        relay.start()
        relay.setup_app()
        ref = Reference(work, relay.token).start()
        n = cfg.overhead_executors
        lg = LoadGen(work, "overhead-loadgen", payload_bytes=cfg.payload_bytes)
        lg.start(relay.ws_url, "ovr", n, concurrency=50)
        lg.start(ref.ws_url, "ovf", n, concurrency=50)
        ok, _ = lg.wait_identified(2 * n, timeout=120)
        ok_h, _, _ = wait_healthy(relay, n, timeout=60)
        if not (ok and ok_h):
            raise RuntimeError("the executors did not all connect")
        headers = {"Authorization": f"Bearer {relay.token}"}
        targets = {"relay": (relay.port, relay.pid, "ovr"), "reference": (ref.port, ref.pid, "ovf")}

        def makers(prefix: str) -> dict[str, httpload.RequestMaker]:
            ids = [f"{prefix}-{i:06d}" for i in range(n)]
            base = f"/v2/orgs/{ORG}/apps/{APP}"

            def raw(k: int) -> tuple[str, str, Any]:
                return ("POST", f"/relay/v1/orgs/{ORG}/apps/{APP}/executors/{ids[k % n]}/requests",
                        {"type": "get_workflow", "workflow_id": f"wf-{k}", "load_input": True, "load_output": True})

            def get(k: int) -> tuple[str, str, Any]:
                return ("GET", f"{base}/workflows/wf-{k}", None)

            return {"raw": raw, "get_workflow": get}

        out: dict[str, Any] = {"executors": n, "payload_bytes": cfg.payload_bytes,
                               "concurrency": cfg.overhead_concurrency, "seconds": cfg.overhead_seconds, "paths": {}}
        # Each measurement is split in two halves run in the order relay, reference, reference, relay
        # (ABBA), pooled: drift in the machine's load (it is shared) then weighs on both alike.
        order = ["relay", "reference", "reference", "relay"]
        half = cfg.overhead_seconds / 2
        for path in ("raw", "get_workflow"):
            entry: dict[str, Any] = {name: {} for name in targets}
            for name, (port, _pid, prefix) in targets.items():
                say(f"overhead: {path} on {name}: warm-up")
                asyncio.run(httpload.saturate("127.0.0.1", port, headers, makers(prefix)[path], concurrency=4,
                                              duration=1.5))
            for mode in ("saturation", "fixed"):
                if mode == "fixed":
                    slowest = min(entry[t]["saturation"]["throughput_rps"] for t in targets)
                    rate = max(10.0, min(cfg.fixed_rps_cap, round(slowest * 0.5 / 10) * 10))
                    entry["fixed_rps"] = rate
                parts: dict[str, list[tuple[httpload.LoadResult, dict[str, float]]]] = {t: [] for t in targets}
                for name in order:
                    port, pid, prefix = targets[name]
                    make = makers(prefix)[path]
                    say(f"overhead: {path} on {name}: {mode} for {half:g} s")
                    if mode == "saturation":
                        coro = httpload.saturate("127.0.0.1", port, headers, make,
                                                 concurrency=cfg.overhead_concurrency, duration=half)
                    else:
                        coro = httpload.fixed_rate("127.0.0.1", port, headers, make, rate=rate, duration=half)
                    parts[name].append(_run_load(coro, {"server": pid, "loadgen": lg.pid}))
                for name in targets:
                    merged = httpload.merge([r for r, _ in parts[name]])
                    cpu = _mean_cpu([c for _, c in parts[name]])
                    entry[name][mode] = merged.summary()
                    entry[name][f"{mode}_cpu"] = cpu
                    # CPU time the server spent per answered request: robust to a shared machine's load
                    entry[name][mode]["server_cpu_ms_per_request"] = (
                        cpu.get("server", 0.0) / 100 * merged.duration_s / merged.ok * 1000 if merged.ok else None)
            out["paths"][path] = entry
        return out
    finally:
        if lg is not None:
            lg.stop()
        if ref is not None:
            ref.stop()
        relay.stop()


def _storm(relay: Relay, lg: LoadGen, count: int, timeout: float, position: Position | None,
           prefix: str = "storm") -> dict[str, Any]:
    p0 = position.read() if position else 0
    t0 = time.monotonic()
    lg.start(relay.ws_url, prefix, count, concurrency=None)
    samples: list[tuple[float, int]] = [(0.0, p0)]
    identified_at = healthy_at = None
    next_poll = 0.0
    counts: dict[str, int] = {}
    while time.monotonic() - t0 < timeout:
        time.sleep(0.5)
        now = time.monotonic() - t0
        if position is not None:
            with contextlib.suppress(Exception):
                samples.append((now, position.read()))
        status = lg.status()
        if identified_at is None and status["identified"] >= count:
            identified_at = now
        if identified_at is not None and now >= next_poll:
            with contextlib.suppress(OSError, RuntimeError):
                counts = dict(relay.executor_counts(timeout=60))
                if counts.get("HEALTHY", 0) >= count:
                    healthy_at = time.monotonic() - t0
                    break
            # the list of every executor is work for relay too: poll no more than a third of the time
            next_poll = now + max(1.0, 3 * (time.monotonic() - t0 - now))
    status = lg.status()
    if position is not None:
        samples.append((time.monotonic() - t0, position.read()))
    events = samples[-1][1] - p0
    first = next((t for t, p in samples if p > p0), None)
    last = next((t for t, p in samples if p >= samples[-1][1]), None)
    peak = 0.0
    for (ta, pa), (tb, pb) in zip(samples, samples[2:], strict=False):  # ~1 s windows
        if tb > ta:
            peak = max(peak, (pb - pa) / (tb - ta))
    return {
        "count": count,
        "all_identified_s": identified_at,
        "all_healthy_s": healthy_at,
        "registry": counts,
        "events": events,
        "append_rate_avg": events / last if last else None,
        "append_rate_peak_1s": peak,
        "append_window_s": (last - first) if first is not None and last is not None else None,
        "reconnects": status["reconnects"],
        "connect_errors": status["connect_errors"],
        "closes": status["closes"],
        "given_up": status["given_up"],
        "samples": samples,
    }


def bench_storm(cfg: Config, work: Path, store: str, database_url: str | None) -> dict[str, Any]:
    relay = Relay(work, f"storm-{store}", database_url=database_url, max_files=cfg.storm_count * 2 + 4096,
                  env=dict(cfg.storm_env))
    lg: LoadGen | None = None
    position: Position | None = None
    try:
        relay.start()
        relay.setup_app()
        position = Position(relay.data_dir, database_url)
        lg = LoadGen(work, f"storm-{store}-loadgen", open_timeout=60.0, max_attempts=20,
                     max_executors=cfg.storm_count + 10, backoff_max=cfg.storm_backoff_max_s)
        say(f"storm ({store}): {cfg.storm_count} executors at once")
        meter = CpuMeter({"relay": relay.pid, "loadgen": lg.pid})
        result = _storm(relay, lg, cfg.storm_count, cfg.storm_timeout_s, position)
        result["cpu"] = meter.read()
        result["store"] = store
        result["backoff_max_s"] = cfg.storm_backoff_max_s
        result["relay_env"] = dict(cfg.storm_env)
        return result
    finally:
        if position is not None:
            position.close()
        if lg is not None:
            lg.stop()
        relay.stop()


def bench_replay(cfg: Config, work: Path, store: str, database_url: str | None) -> dict[str, Any]:
    data_dir = work / f"replay-{store}-data"
    say(f"replay ({store}): writing {cfg.replay_events:,} events through RelayLog")
    last_said = [0.0]

    def progress(done: int) -> None:
        if time.monotonic() - last_said[0] > 15:
            last_said[0] = time.monotonic()
            say(f"replay ({store}): {done:,} events written")

    fill = fill_log(data_dir, database_url, cfg.replay_events, progress=progress)
    env = {"RELAY_DATA_DIR": str(data_dir), "RELAY_ADMIN_TOKEN": "relay-bench-replay-" + "r" * 32}
    if database_url:
        env["RELAY_DATABASE_URL"] = database_url
    say(f"replay ({store}): relay replay over {fill['events']:,} events")
    log_path = work / f"replay-{store}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen([PYTHON, "-m", "relay.web.cli.main", "replay"], cwd=REPO, env=clean_env(env),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    begin = time.monotonic()
    rusage = None
    status = None
    while time.monotonic() - begin < cfg.replay_timeout_s:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.1)
    elapsed = time.monotonic() - begin
    if rusage is None or status is None or not os.WIFEXITED(status):
        proc.kill()
        raise RuntimeError(f"relay replay did not finish within {cfg.replay_timeout_s:g} s")
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"relay replay exited {proc.returncode}; see {log_path}")
    shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "store": store,
        "events": fill["events"],
        "write_rate": fill["rate"],
        "write_s": fill["seconds"],
        "replay_s": elapsed,
        "events_per_s": fill["events"] / elapsed,
        "view_events_per_s": Views.COUNT * fill["events"] / elapsed,
        "cpu_s": rusage.ru_utime + rusage.ru_stime,
        "max_rss_kib": rusage.ru_maxrss,
    }


def bench_recovery(cfg: Config, work: Path) -> dict[str, Any]:
    relay = Relay(work, "recovery")
    lg: LoadGen | None = None
    try:
        relay.start()
        relay.setup_app()
        relay.set_grace(cfg.grace_s)
        n, k = cfg.recovery_executors, cfg.recovery_kills
        lg = LoadGen(work, "recovery-loadgen", max_executors=n + 10)
        lg.start(relay.ws_url, "rec", n, concurrency=cfg.connect_concurrency)
        ok, _ = lg.wait_identified(n, timeout=max(120.0, n / 10))
        ok_h, _, _ = wait_healthy(relay, n, timeout=120)
        if not (ok and ok_h):
            raise RuntimeError("the executors did not all connect")
        victims = [f"rec-{i:06d}" for i in range(n - k, n)]
        say(f"recovery: killing {k} of {n} executors, one every {cfg.recovery_spacing_s:g} s (grace {cfg.grace_s} s)")
        killed: dict[str, float] = {}
        for victim in victims:
            for row in lg.call("kill", ids=[victim])["killed"]:
                killed[row["executor_id"]] = row["at"]
            time.sleep(cfg.recovery_spacing_s)
        deadline = time.monotonic() + cfg.grace_s + 60
        first: dict[str, float] = {}
        while time.monotonic() < deadline:
            for rec in lg.call("recoveries")["recoveries"]:
                for dead in rec["executor_ids"]:
                    if dead in killed and dead not in first:
                        first[dead] = rec["at"]
            if len(first) >= len(killed):
                break
            time.sleep(0.5)
        latencies = [(first[v] - killed[v] - cfg.grace_s) * 1000 for v in killed if v in first]
        time.sleep(1.0)
        rows = relay.http.ok("GET", f"/relay/v1/orgs/{ORG}/apps/{APP}/recoveries?limit=1000")["recoveries"]
        return {
            "executors": n,
            "kills": len(killed),
            "recovered": len(first),
            "grace_s": cfg.grace_s,
            "p50_ms": pct(latencies, 50),
            "p95_ms": pct(latencies, 95),
            "max_ms": max(latencies) if latencies else None,
            "mean_ms": statistics.fmean(latencies) if latencies else None,
            "api_dispatches": len(rows),
            "api_acknowledged": sum(1 for r in rows if r["outcome"] == "acknowledged"),
        }
    finally:
        if lg is not None:
            lg.stop()
        relay.stop()


def bench_profile(cfg: Config, work: Path) -> dict[str, Any]:
    PROFILE_DIR.mkdir(exist_ok=True)
    out: dict[str, Any] = {}
    # the connect storm
    relay = Relay(work, "profile-storm", max_files=cfg.profile_storm * 2 + 4096)
    lg: LoadGen | None = None
    try:
        relay.start()
        relay.setup_app()
        lg = LoadGen(work, "profile-storm-loadgen", open_timeout=60.0, max_attempts=20)
        profiler = Profiler(relay.pid, PROFILE_DIR / "connect-storm.txt", max_seconds=cfg.storm_timeout_s)
        if not profiler.available:
            return {"error": "py-spy is not installed (pip install -r bench/requirements.txt)"}
        time.sleep(1.0)
        say(f"profile: connect storm of {cfg.profile_storm} under py-spy")
        storm = _storm(relay, lg, cfg.profile_storm, cfg.storm_timeout_s, None, prefix="pstorm")
        path = profiler.stop()
        out["connect_storm"] = {"executors": cfg.profile_storm, "all_healthy_s": storm["all_healthy_s"],
                                "profile": _profile_summary(path)}
        # the same executors at rest: pings only
        profiler = Profiler(relay.pid, PROFILE_DIR / "at-rest.txt", max_seconds=cfg.profile_rest_s + 30)
        say(f"profile: {cfg.profile_storm} executors at rest for {cfg.profile_rest_s:g} s under py-spy")
        meter = CpuMeter({"relay": relay.pid})
        time.sleep(cfg.profile_rest_s)
        cpu = meter.read()
        path = profiler.stop()
        out["at_rest"] = {"executors": cfg.profile_storm, "cpu": cpu, "profile": _profile_summary(path)}
    finally:
        if lg is not None:
            lg.stop()
        relay.stop()
    # relay replay (SQLite)
    data_dir = work / "profile-replay-data"
    fill = fill_log(data_dir, None, cfg.profile_replay_events)
    say(f"profile: relay replay over {fill['events']:,} events (SQLite) under py-spy")
    env = clean_env({"RELAY_DATA_DIR": str(data_dir), "RELAY_ADMIN_TOKEN": "relay-bench-replay-" + "r" * 32})
    begin = time.monotonic()
    path = Profiler.run([PYTHON, "-m", "relay.web.cli.main", "replay"], PROFILE_DIR / "replay.txt", env,
                        cfg.replay_timeout_s)
    out["replay"] = {"events": fill["events"], "seconds": time.monotonic() - begin, "profile": _profile_summary(path)}
    shutil.rmtree(data_dir, ignore_errors=True)
    # the request path
    relay = Relay(work, "profile-requests")
    lg = None
    try:
        relay.start()
        relay.setup_app()
        n = cfg.overhead_executors
        lg = LoadGen(work, "profile-requests-loadgen", payload_bytes=cfg.payload_bytes)
        lg.start(relay.ws_url, "preq", n, concurrency=50)
        lg.wait_identified(n, timeout=120)
        wait_healthy(relay, n, timeout=60)
        ids = [f"preq-{i:06d}" for i in range(n)]

        def raw(k: int) -> tuple[str, str, Any]:
            return ("POST", f"/relay/v1/orgs/{ORG}/apps/{APP}/executors/{ids[k % n]}/requests",
                    {"type": "get_workflow", "workflow_id": f"wf-{k}", "load_input": True, "load_output": True})

        headers = {"Authorization": f"Bearer {relay.token}"}
        profiler = Profiler(relay.pid, PROFILE_DIR / "request-path.txt", max_seconds=cfg.profile_request_s + 30)
        time.sleep(1.0)
        say(f"profile: request path (raw endpoint, saturation) for {cfg.profile_request_s:g} s under py-spy")
        result = asyncio.run(httpload.saturate("127.0.0.1", relay.port, headers, raw,
                                               concurrency=cfg.overhead_concurrency, duration=cfg.profile_request_s))
        path = profiler.stop()
        out["request_path"] = {"throughput_rps": result.throughput, "profile": _profile_summary(path)}
    finally:
        if lg is not None:
            lg.stop()
        relay.stop()
    return out


def _profile_summary(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {"error": "py-spy wrote no profile"}
    prof = profiles.parse(path)
    return {"file": str(path.relative_to(REPO)), "samples": prof.samples, "self": prof.top_self(15),
            "inclusive": prof.top_inclusive(20)}


# ------------------------------------------------------------------------------------------ report
def render(cfg: Config, info: dict[str, Any], results: dict[str, Any], loads: list[tuple[str, str]],
           command: str, full: dict[str, Any] | None = None) -> str:
    lines: list[str] = []
    add = lines.append
    started = info["started"]
    add("# Relay benchmark results")
    add("")
    mode = "quick mode: every count divided by 20" if cfg.quick else "full run"
    add(f"Written by `{command}` on {started} ({mode}).")
    add("Absolute figures are this machine's, with the load generator and the HTTP client on the same machine;")
    add("compare ratios (Relay / reference, same run) rather than absolute numbers across machines.")
    add("")
    add("## Machine")
    add("")
    add("| | |")
    add("|---|---|")
    add(f"| CPUs (nproc) | {info['machine']['nproc']} |")
    add(f"| CPU model | {info['machine']['cpu']} |")
    add(f"| memory | {info['machine']['memory']} |")
    add(f"| kernel | {info['machine']['kernel']} |")
    add(f"| Python | {info['machine']['python']} |")
    add(f"| ephemeral ports | {'-'.join(info['machine']['ports'])} |")
    add(f"| date (UTC) | {started} |")
    add(f"| load average (1, 5, 15 min) | {'; '.join(f'{when}: {value}' for when, value in loads)} |")
    add("")
    busiest = max(float(v.split()[0]) for _, v in loads)
    if busiest > (info["machine"]["nproc"] or 1):
        add(f"**Noisy run**: the 1-minute load average reached {busiest:g} on {info['machine']['nproc']} CPUs "
            "(the machine was shared with other test runs), so absolute figures are pessimistic and noisy; the")
        add("same-run ratios are less affected, but not immune.")
        add("")
    add("## Summary")
    add("")
    add("| figure | value | target | limited by |")
    add("|---|---|---|---|")
    for row in summary_rows(cfg, results):
        add("| " + " | ".join(row) + " |")
    add("")
    details(cfg, results, add)
    if full is not None:
        add("## Full-size runs")
        add("")
        add(f"Parts run at full size (`python -m bench.run --only ...`, no `--quick`) on {full['info']['started']}, "
            f"same machine; load average: {'; '.join(f'{w}: {v}' for w, v in full['loads'])}.")
        add("")
        add("| figure | value | target | limited by |")
        add("|---|---|---|---|")
        for row in summary_rows(Config.make(False), full["results"]):
            if row[1] != "not run":
                add("| " + " | ".join(row) + " |")
        add("")
        details(Config.make(False), full["results"], add, heading="### Details of the full-size runs")
    if FINDINGS.exists():
        add("")
        add(FINDINGS.read_text().strip())
    add("")
    return "\n".join(lines)


def _err(results: dict[str, Any], key: str) -> str | None:
    value = results.get(key)
    if value is None:
        return "not run"
    if "error" in value:
        text = str(value["error"])
        return text if text.startswith(("skipped", "not run")) else f"failed: {text}"
    return None


def summary_rows(cfg: Config, r: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    scale_target = "≥ 20,000" if not cfg.quick else "≥ 20,000 (quick run: 1,000 tried)"
    if (e := _err(r, "scale")) is None:
        s = r["scale"]
        relay_cpu = s["cpu_rest"].get("relay")
        rows += [
            ["scale: max concurrent HEALTHY executors", f"{fmt(s['max_healthy'])} of {fmt(s['target'])} tried",
             scale_target,
             "the number tried (the load generator's target)" if s["reached_all_steps"]
             else f"the ramp stalled (no new executor identified for 60 s; see the steps table); "
             f"{fmt(s.get('identified_at_end'))} executors had answered executor_info but the registry view "
             f"showed {fmt(s['max_healthy'])} HEALTHY; relay's one core (gevent) at "
             f"{fmt(s['cpu_rest'].get('relay'))} % with the machine shared"],
            ["scale: pings Relay sent per executor per 10 s (hold)", fmt(s["pings_per_executor_per_10s"], 2),
             "1.00 (RELAY_PING_INTERVAL_S=10)",
             "on time: relay's event loop keeps up" if (s["pings_per_executor_per_10s"] or 0) >= 0.95
             else "late: relay's timers fire late because its event loop (one core) is saturated"],
            ["scale: memory per connection", f"{fmt(s['per_connection_kib'])} KiB", "≤ 30 KiB (at 19,000)",
             (f"relay RSS growth / {fmt(s.get('open_sockets', s['max_healthy']))} open sockets: greenlets (receive "
             "loop, actor thread) + socket buffers + the per-executor state (timers: heap entries of one scheduler)")],
            ["scale: CPU at rest", f"{fmt(relay_cpu)} % of one core with {fmt(s['max_healthy'])} executors",
             "—", (f"pings every 10 s each way (one scheduler greenlet over a heap of timers); measured over "
             f"{s['hold_s']:g} s")],
            ["scale: missed pongs", (f"{fmt(s['disconnected'])} DISCONNECTED/DEAD, {fmt(s['closes_during_hold'])} "
             "sockets closed during the hold"), "0",
             "pong deadline 25 s vs. CPU headroom: nonzero only if the event loop stalls for > 15 s"],
        ]
    else:
        rows.append(["scale", e, "", ""])
    if (e := _err(r, "overhead")) is None:
        o = r["overhead"]
        for path, entry in o["paths"].items():
            rel, ref = entry["relay"], entry["reference"]
            for mode in ("fixed", "saturation"):
                a, b = rel[mode], ref[mode]
                cpu_rel = rel[f"{mode}_cpu"]
                label = f"at {fmt(entry['fixed_rps'], 0)} req/s offered" if mode == "fixed" else "at saturation"
                limit = (f"relay {fmt(cpu_rel.get('server'))} % CPU, loadgen {fmt(cpu_rel.get('loadgen'))} %, client "
                         f"{fmt(cpu_rel.get('bench client'))} % (2 cores shared)")
                rows.append([f"overhead {path}: p50 {label}",
                             (f"{fmt(a['p50_ms'], 2)} ms vs {fmt(b['p50_ms'], 2)} ms ref = "
                             f"**{_ratio(a['p50_ms'], b['p50_ms'])}**"),
                             "≤ 1.5x reference" if mode == "fixed" else "—", limit])
                rows.append([f"overhead {path}: p99 {label}",
                             (f"{fmt(a['p99_ms'], 2)} ms vs {fmt(b['p99_ms'], 2)} ms ref = "
                             f"{_ratio(a['p99_ms'], b['p99_ms'])}"),
                             "—", limit])
                if mode == "saturation":
                    rows.append([f"overhead {path}: server CPU per request (saturation)",
                                 (f"{fmt(a['server_cpu_ms_per_request'], 2)} ms vs "
                                 f"{fmt(b['server_cpu_ms_per_request'], 2)} ms ref = "
                                 f"{_ratio(a['server_cpu_ms_per_request'], b['server_cpu_ms_per_request'])}"), "≤ 2.5x",
                                 ("Relay's own work per request (see the profile of the request path); "
                                 "CPU time, so little affected by the machine's load")])
                    rows.append([f"overhead {path}: throughput at saturation",
                                 (f"{fmt(a['throughput_rps'])} req/s vs {fmt(b['throughput_rps'])} req/s ref = "
                                 f"{_ratio(a['throughput_rps'], b['throughput_rps'])}"),
                                 "≥ 0.40x; relay CPU ≥ 90 % of a core",
                                 limit + f"; reference server at {fmt(ref['saturation_cpu'].get('server'))} %"])
    else:
        rows.append(["overhead", e, "", ""])
    for store in ("sqlite", "postgres"):
        key = f"storm_{store}"
        if (e := _err(r, key)) is None:
            s = r[key]
            rows.append([f"connect storm ({store}): {fmt(s['count'])} at once → all HEALTHY",
                         f"{fmt(s['all_healthy_s'])} s" if s["all_healthy_s"] else
                         f"not reached within the time limit: {fmt(s['events'])} events appended, registry "
                         f"{s['registry'] or 'not read (not every executor identified)'}",
                         "≤ 20 s (at 10,000)", _storm_limit(store, s)])
            rows.append([f"connect storm ({store}): event-store append rate",
                         f"{fmt(s['append_rate_avg'])} events/s average, {fmt(s['append_rate_peak_1s'])} peak (1 s)",
                         "—", ("one Connected event per executor, after a load of its aggregate; the appends of "
                         "concurrent handshakes are grouped, one transaction per batch of up to 500 "
                         "(projections/store/group_commit.py; SQLite: in gevent's threadpool, off the hub)")])
        else:
            rows.append([f"connect storm ({store})", e, "", ""])
    for store in ("sqlite", "postgres"):
        key = f"replay_{store}"
        if (e := _err(r, key)) is None:
            s = r[key]
            rows.append([f"replay ({store}): `relay replay` over {fmt(s['events'])} events",
                         (f"{fmt(s['events_per_s'], 0)} events/s ({fmt(s['replay_s'])} s; 4 views = "
                         f"{fmt(s['view_events_per_s'], 0)} view-events/s); "
                         f"{fmt(s['events'] / s['cpu_s'] if s['cpu_s'] else None, 0)} events per CPU-second"), "—",
                         (f"one process, {fmt(s['cpu_s'])} s CPU in {fmt(s['replay_s'])} s wall (the rest: "
                         "waiting for the store, and for a CPU on a shared machine); each 5,000-event batch read and "
                         "decoded once for the four views, written per view in one transaction (executemany; "
                         "PostgreSQL: pipelined, multi-row inserts): decoding and the views' Python handlers")])
        else:
            rows.append([f"replay ({store})", e, "", ""])
    for key in RESTART_KEYS:
        if (e := _err(r, key)) is None:
            rows += restart.summary_rows(r, key, fmt)
        elif key in r:
            rows.append([key.replace("_", " "), e, "", ""])
    if (e := _err(r, "recovery")) is None:
        s = r["recovery"]
        rows.append([f"recovery latency, p95 ({fmt(s['executors'])} connected, {fmt(s['kills'])} killed)",
                     (f"{fmt(s['p95_ms'])} ms (p50 {fmt(s['p50_ms'])} ms, max {fmt(s['max_ms'])} ms; "
                     f"{s['recovered']}/{s['kills']} recovered)"), "< 1,000 ms",
                     ("disconnect noticed at once (EOF); then 3 appends (Disconnected, DeclaredDead, "
                     "RecoveryDispatched) and actor hops; grace timer granularity")])
    else:
        rows.append(["recovery", e, "", ""])
    if (e := _err(r, "workers")) is None:
        rows += workers.summary_rows(r["workers"])
    else:
        rows.append(["workers", e, "", ""])
    if (e := _err(r, "dataplane")) is None:
        rows += dataplane.summary_rows(r["dataplane"])
    elif "dataplane" in r:
        rows.append(["data plane", e, "", ""])
    if (e := _err(r, "argus")) is None:
        rows += argus.summary_rows(r["argus"])
    elif "argus" in r:
        rows.append(["beside dbos-argus", e, "", ""])
    return rows


# Restart storms: SQLite with SIGTERM (a clean stop) and SIGKILL, PostgreSQL with SIGTERM.
RESTART_KEYS = ("restart_sqlite", "restart_sqlite_kill", "restart_postgres")


def _storm_limit(store: str, s: dict[str, Any]) -> str:
    cpu = s["cpu"].get("relay")
    parts = [f"relay at {fmt(cpu)} % of one core over the storm"]
    if s["all_healthy_s"] is None:
        parts.append("it did not converge: the opening handshakes timed out or were cut, executors retried, "
                     "and no Connected event was recorded after the first minutes (see the findings)")
    elif cpu is not None and cpu < 80:
        backoff = s.get("backoff_max_s", 8.0)
        wait = "a fixed 1 s" if backoff <= 1 else f"1, 2, 4... up to {backoff:g} s"
        parts.append(f"so not CPU alone: the executors refused past RELAY_MAX_HANDSHAKES_IN_FLIGHT wait before "
                     f"retrying ({wait}), and the load generator shares the 2 cores"
                     if s["connect_errors"] else "so not CPU alone: the load generator opening its connections "
                     "shares the 2 cores")
    refused = dict(s["connect_errors"] or {})
    if refused:
        parts.append(f"upgrades refused or failed: {refused} (retried with backoff)")
    if s["reconnects"]:
        parts.append(f"{fmt(s['reconnects'])} reconnects")
    return "; ".join(parts)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}x"


def details(cfg: Config, r: dict[str, Any], add: Callable[[str], None], heading: str = "## Details") -> None:
    add(heading)
    add("")
    if _err(r, "scale") is None:
        s = r["scale"]
        add("### 1. Scale")
        add("")
        add(f"Executors connected in {len(s['steps'])} steps (at most {cfg.connect_concurrency} handshakes in flight), "
            f"each with Relay's default pings (10 s, pong deadline 25 s) and the Python SDK's own pings (20 s), "
            f"from {s['sources']} loopback source address(es). After the ramp ({fmt(s['ramp_s'])} s) nothing is "
            f"polled for {s['hold_s']:g} s: CPU at rest is relay's utime+stime over that hold (/proc/PID/stat); "
            "then the registry (GET executors) is read for DISCONNECTED records.")
        add("")
        add("| executors | HEALTHY | step time (s) | relay CPU in the step (% of a core) | relay RSS (MiB) | "
            "closed by the server so far |")
        add("|---|---|---|---|---|---|")
        add(f"| 0 | 0 | — | — | {s['rss_base_kib'] / 1024:.1f} | — |")
        for step in s["steps"]:
            add(f"| {fmt(step['executors'])} | {fmt(step['healthy'])} | {fmt(step['seconds'])} | "
                f"{fmt(step.get('relay_cpu'))} | {step['rss_kib'] / 1024:.1f} | {fmt(step.get('closed_by_server'))} |")
        add("")
        add(f"- relay RSS: {s['rss_base_kib'] / 1024:.1f} MiB before, {s['rss_full_kib'] / 1024:.1f} MiB with all "
            f"connected, {s['rss_end_kib'] / 1024:.1f} MiB after the hold (peak {s['rss_peak_kib'] / 1024:.1f} MiB)")
        add(f"- CPU during the hold (% of one core): {s['cpu_rest']}")
        add(f"- pings seen per executor per 10 s during the hold: {fmt(s['pings_per_executor_per_10s'], 2)}")
        add(f"- registry after the hold: {s['registry']}; sockets closed by the server during the hold: "
            f"{s['closes_during_hold']}; all closes: {s['closes_total'] or 'none'}")
        add(f"- load generator RSS: {s['loadgen_rss_kib'] / 1024:.1f} MiB")
        add("")
    if _err(r, "overhead") is None:
        o = r["overhead"]
        add("### 2. Overhead of the request path")
        add("")
        add(f"{o['executors']} executors connected to each server; requests answered with a canned workflow "
            f"record ({o['payload_bytes']} B Output). `raw`: POST /relay/v1/orgs/{{org}}/apps/{{app}}/executors/"
            "{id}/requests with a get_workflow frame, spread over the 100 executors; `get_workflow`: GET /v2/orgs/"
            "{org}/apps/{app}/workflows/{id} (Relay routes it, translates the record to the v2 shape; the "
            "reference returns the record as is). Saturation: "
            f"{o['concurrency']} keep-alive connections in a closed loop for {o['seconds']:g} s. Fixed: an open "
            "loop at half the slower server's saturation throughput (capped), latency counted from when each "
            "request was due.")
        add("")
        add("| path | mode | server | req/s | p50 ms | p99 ms | errors | server CPU % | loadgen CPU % | client CPU % |")
        add("|---|---|---|---|---|---|---|---|---|---|")
        for path, entry in o["paths"].items():
            for mode in ("fixed", "saturation"):
                for name in ("relay", "reference"):
                    res, cpu = entry[name][mode], entry[name][f"{mode}_cpu"]
                    errors = sum(res["errors"].values()) + sum(v for k, v in res["statuses"].items() if k != "200")
                    offered = f" ({fmt(res['offered_rps'], 0)} offered)" if res["offered_rps"] else ""
                    add(f"| {path} | {mode}{offered} | {name} | {fmt(res['throughput_rps'])} | "
                        f"{fmt(res['p50_ms'], 2)} | "
                        f"{fmt(res['p99_ms'], 2)} | {errors} | {fmt(cpu.get('server'))} | {fmt(cpu.get('loadgen'))} | "
                        f"{fmt(cpu.get('bench client'))} |")
        add("")
    for store in ("sqlite", "postgres"):
        if _err(r, f"storm_{store}") is None:
            s = r[f"storm_{store}"]
            add(f"### 3. Connect storm ({store})")
            add("")
            backoff = s.get("backoff_max_s", 8.0)
            retry = ("a fixed 1 s, as the Python and TypeScript SDKs do" if backoff <= 1
                     else f"after 1 s, doubling up to {backoff:g} s")
            add(f"{fmt(s['count'])} executors started at once (no pacing); a refused one retries {retry}. "
                "Times from the first connect: the load generator had every executor identified "
                f"after {fmt(s['all_identified_s'])} s; GET executors showed all HEALTHY after "
                f"{fmt(s['all_healthy_s'])} s. {fmt(s['events'])} events appended "
                f"(store max notification id, sampled every 0.5 s) over {fmt(s['append_window_s'])} s.")
            if s.get("relay_env"):
                add(f"Relay's settings for this storm: {', '.join(f'{k}={v}' for k, v in s['relay_env'].items())}.")
            add(f"Reconnects: {s['reconnects']}; connect errors: {s['connect_errors'] or 'none'}; closes: "
                f"{s['closes'] or 'none'}; CPU (% of one core, over the storm): {s['cpu']}.")
            add("")
            series = [(round(t, 1), p) for t, p in s["samples"][:: max(1, len(s["samples"]) // 12)]]
            add(f"Position over time (s, max notification id): {series}")
            add("")
    for store in ("sqlite", "postgres"):
        if _err(r, f"replay_{store}") is None:
            s = r[f"replay_{store}"]
            add(f"### 4. Replay ({store})")
            add("")
            add(f"{fmt(s['events'])} executor events written through RelayLog.save in batches "
                f"({fmt(s['write_rate'], 0)} events/s from the bench process, {fmt(s['write_s'])} s), then "
                f"`relay replay` (every view emptied and rebuilt): {fmt(s['replay_s'])} s wall, {fmt(s['cpu_s'])} s "
                f"CPU, peak RSS {s['max_rss_kib'] / 1024:.0f} MiB → {fmt(s['events_per_s'], 0)} events/s.")
            add("")
    if _err(r, "recovery") is None:
        s = r["recovery"]
        add("### 5. Recovery latency")
        add("")
        add(f"{fmt(s['executors'])} executors, executorTimeoutSecs = {s['grace_s']} (PATCH); {s['kills']} of them "
            f"killed one every {cfg.recovery_spacing_s:g} s by aborting the socket without a close frame. "
            "Latency = when a peer's simulated executor received the `recovery` frame naming the dead one - when "
            "its socket was aborted - the grace period (both clocks CLOCK_MONOTONIC on this machine). "
            f"p50 {fmt(s['p50_ms'])} ms, p95 {fmt(s['p95_ms'])} ms, max {fmt(s['max_ms'])} ms, mean "
            f"{fmt(s['mean_ms'])} ms; {s['recovered']}/{s['kills']} recovered; GET …/recoveries lists "
            f"{s['api_dispatches']} dispatches, {s['api_acknowledged']} acknowledged.")
        add("")
    for key in RESTART_KEYS:
        if _err(r, key) is None:
            restart.details(r, key, add, fmt)
    if _err(r, "workers") is None:
        workers.details(r["workers"], add)
    if _err(r, "dataplane") is None:
        dataplane.details(r["dataplane"], add)
    if _err(r, "console") is None:
        console.details(r["console"], add)
    if _err(r, "argus") is None:
        argus.details(r["argus"], add)
    if (p := r.get("profile")) is not None:
        add("### 6. Profiles (py-spy, 100 Hz, relay process)")
        add("")
        if "error" in p:
            add(f"failed: {p['error']}")
        for key, title in (("connect_storm", "connect storm"), ("at_rest", "executors at rest (pings only)"),
                           ("replay", "relay replay (SQLite)"), ("request_path", "request path (raw, saturation)")):
            if key not in p:
                continue
            prof = p[key]["profile"]
            if "error" in prof:
                add(f"{title}: {prof['error']}")
                continue
            add(f"**{title}** — {prof['samples']} samples, raw stacks in `{prof['file']}` (not committed).")
            add("")
            add("| self % | function |")
            add("|---|---|")
            for name, share in prof["self"][:12]:
                add(f"| {share:.1f} | `{name}` |")
            add("")
            add("| inclusive % | Relay function |")
            add("|---|---|")
            for name, share in prof["inclusive"][:15]:
                add(f"| {share:.1f} | `{name}` |")
            add("")


# --------------------------------------------------------------------------------------------- main
def _interrupted(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every count divided by 20 (a few minutes)")
    parser.add_argument("--only", help="comma-separated: scale,overhead,storm,replay,recovery,profile,workers,restart,"
                        "dataplane,argus,registry,fleet,rolling,console")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL parts")
    parser.add_argument("--storm-backoff-max", type=float, metavar="S",
                        help="connect storm: an executor's longest wait before retrying (default 1: the Python and "
                             "TypeScript SDKs' fixed 1 s; 8 doubles 1, 2, 4, 8 s)")
    parser.add_argument("--storm-env", action="append", default=[], metavar="RELAY_NAME=VALUE",
                        help="connect storm: a setting for its Relay (repeatable), e.g. "
                             "RELAY_MAX_HANDSHAKES_IN_FLIGHT=2048")
    parser.add_argument("--storm-count", type=int, metavar="N",
                        help="executors in the connect storm (and its profile), whatever the mode")
    parser.add_argument("--scale-target", type=int, metavar="N",
                        help="scale: connect N executors (default 20,000; 1,000 with --quick)")
    parser.add_argument("--fleet-count", type=int, default=30_000, metavar="N",
                        help="fleet: executors at once (default 30,000)")
    parser.add_argument("--console-executors", type=int, default=10_000, metavar="N",
                        help="console: executors connected (default 10,000)")
    parser.add_argument("--console-workflows", type=int, default=1_000_000, metavar="N",
                        help="console: workflows in the data plane (default 1,000,000)")
    parser.add_argument("--argus-million", action="store_true",
                        help="argus: also fill 1,000,000 workflows and time the overview on both (a few minutes)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write the report")
    parser.add_argument("--report-from", type=Path, help="only re-render the report from a run's results.json")
    parser.add_argument("--with-full", type=Path,
                        help="with --report-from: add the summary of a full-size run's results.json")
    args = parser.parse_args(argv)
    if args.report_from:
        saved = json.loads(args.report_from.read_text())
        loads_saved = [tuple(x) for x in saved["loads"]]
        full = json.loads(args.with_full.read_text()) if args.with_full else None
        args.results.write_text(render(Config.make(saved["quick"]), saved["info"], saved["results"], loads_saved,
                                       saved["command"], full))
        say(f"wrote {args.results}")
        return 0
    cfg = Config.make(args.quick)
    if args.storm_count:
        cfg = dataclasses.replace(cfg, storm_count=args.storm_count, profile_storm=args.storm_count,
                                  storm_timeout_s=max(cfg.storm_timeout_s, 900.0))
    if args.storm_env:
        pairs = [item.partition("=") for item in args.storm_env]
        if any(not name.startswith("RELAY_") or not sep for name, sep, _ in pairs):
            parser.error("--storm-env takes RELAY_NAME=VALUE")
        cfg = dataclasses.replace(cfg, storm_env=tuple((name, value) for name, _, value in pairs))
    if args.storm_backoff_max is not None:
        cfg = dataclasses.replace(cfg, storm_backoff_max_s=args.storm_backoff_max)
    if args.scale_target is not None:
        if args.scale_target < cfg.scale_steps:
            parser.error(f"--scale-target must be at least {cfg.scale_steps} (one executor per step)")
        cfg = dataclasses.replace(cfg, scale_target=args.scale_target)
    # A SIGTERM (or SIGINT, when started in the background) ends the run through the `finally` blocks, which
    # stop every process this run started.
    signal.signal(signal.SIGTERM, _interrupted)
    wanted = set((args.only or "scale,overhead,storm,replay,recovery,profile,workers").split(","))
    command = "make bench" + (" BENCH_ARGS=--quick" if args.quick else "") if not args.only else \
        f"python -m bench.run {' '.join(argv or sys.argv[1:])}"
    work = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    say(f"work dir {work} (logs are kept there)")
    info = {"started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine()}
    loads = [("start", loadavg())]
    results: dict[str, Any] = {}
    pg_url = None
    if not args.no_postgres and wanted & {"storm", "replay", "restart", "workers", "dataplane", "argus",
                                                 "registry", "fleet", "rolling", "console"}:
        try:
            pg_url = server_url()
        except Exception as error:
            say(f"PostgreSQL: {error}")
        say(f"PostgreSQL: {'ready' if pg_url else 'none; its parts are skipped'}")

    def record(key: str, fn: Callable[[], dict[str, Any]]) -> None:
        began = time.monotonic()
        try:
            results[key] = fn()
        except Exception as error:
            traceback.print_exc()
            results[key] = {"error": f"{type(error).__name__}: {error}"}
        results[key]["elapsed_s"] = time.monotonic() - began
        loads.append((key, loadavg()))
        say(f"{key}: done in {results[key]['elapsed_s']:.0f} s")
        args.results.write_text(render(cfg, info, results, loads, command))
        saved = {"quick": cfg.quick, "command": command, "info": info, "loads": loads, "results": results}
        (work / "results.json").write_text(json.dumps(saved, indent=1, default=str))

    def on_postgres(fn: Callable[[str], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            if pg_url is None:
                return {"error": "skipped: no PostgreSQL (see the run log)"}
            with fresh_database(pg_url) as url:
                return fn(url)
        return run

    if "scale" in wanted:
        record("scale", lambda: bench_scale(cfg, work))
    if "overhead" in wanted:
        record("overhead", lambda: bench_overhead(cfg, work))
    if "storm" in wanted:
        record("storm_sqlite", lambda: bench_storm(cfg, work, "sqlite", None))
        record("storm_postgres", on_postgres(lambda url: bench_storm(cfg, work, "postgres", url)))
    if "replay" in wanted:
        record("replay_sqlite", lambda: bench_replay(cfg, work, "sqlite", None))
        record("replay_postgres", on_postgres(lambda url: bench_replay(cfg, work, "postgres", url)))
    if "recovery" in wanted:
        record("recovery", lambda: bench_recovery(cfg, work))
    if "restart" in wanted:  # not in the default set: `--only restart`
        n = cfg.restart_count
        record("restart_sqlite", lambda: restart.bench_restart(work, n))
        record("restart_sqlite_kill", lambda: restart.bench_restart(work, n, sig=signal.SIGKILL))
        record("restart_postgres", on_postgres(
            lambda url: restart.bench_restart(work, n, store="postgres", database_url=url)))
    if "profile" in wanted:
        record("profile", lambda: bench_profile(cfg, work))
    if "workers" in wanted:
        record("workers", lambda: {"error": "skipped: no PostgreSQL (see the run log)"} if pg_url is None
               else workers.bench_workers(cfg, work, pg_url, say))
    if "registry" in wanted:  # not in the default set: `--only registry`
        n = cfg.storm_count
        record("registry_sqlite", lambda: registry.bench_registry(work, n, say))
        record("registry_postgres", on_postgres(
            lambda url: registry.bench_registry(work, n, say, store="postgres", database_url=url)))
    if "fleet" in wanted:  # not in the default set: `--only fleet`
        record("fleet", on_postgres(lambda url: fleet.bench_fleet(work, url, say, count=args.fleet_count,
                                                                env=dict(cfg.storm_env))))
    if "rolling" in wanted:  # not in the default set: `--only rolling`
        record("rolling", on_postgres(lambda url: rolling.bench_rolling(work, url, say)))
    if "console" in wanted:  # not in the default set: `--only console`
        record("console", lambda: {"error": "skipped: no PostgreSQL (see the run log)"} if pg_url is None
               else console.bench_console(work, pg_url, say, executors=args.console_executors,
                                          workflows=args.console_workflows))
    if "dataplane" in wanted:  # not in the default set: `--only dataplane`
        record("dataplane", on_postgres(lambda url: dataplane.bench_dataplane(work, url, say)))
    if "argus" in wanted:  # not in the default set: `--only argus`
        record("argus", lambda: {"error": "skipped: no PostgreSQL (see the run log)"} if pg_url is None
               else argus.bench_argus(work, pg_url, say, million=args.argus_million))
    for path in work.glob("*-data"):
        shutil.rmtree(path, ignore_errors=True)
    say(f"wrote {args.results}")
    failed = [k for k, v in results.items() if "error" in v and not str(v["error"]).startswith("skipped")]
    if failed:
        say(f"failed: {', '.join(failed)} (logs in {work})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
