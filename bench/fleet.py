"""Part `fleet` (issue 32, point 5): a fleet beyond one process. `relay serve` with RELAY_WORKERS=2 on PostgreSQL,
N executors (30,000) connecting at once from several load generators (bench/loadgen.py; each process holds at
most 15,000 sockets and takes loopback source addresses of its own: the container's hard RLIMIT_NOFILE is
20,000 per process, Relay's workers included). Measured: time until every one is HEALTHY (GET executors), how
the workers share them, memory per executor (RSS of every relay process / N), then a hold: pings the executors
received against the expected (one per RELAY_PING_INTERVAL_S each), sockets Relay closed, DISCONNECTED records.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.procs import CpuMeter, LoadGen, Relay, children, rss_kib, wait_healthy

PER_LOADGEN = 15_000
PING_INTERVAL_S = 10.0  # Relay's default RELAY_PING_INTERVAL_S


def _relay_rss(relay: Relay) -> dict[str, int]:
    pids = [relay.pid, *children(relay.pid)]
    return {str(pid): rss_kib(pid)["VmRSS"] for pid in pids}


def bench_fleet(work: Path, database_url: str, say: Callable[[str], None], *, count: int = 30_000,
                workers: int = 2, hold_s: float = 40.0, timeout: float = 300.0,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    relay = Relay(work, "fleet", database_url=database_url, max_files=20_000,
                  env={"RELAY_WORKERS": str(workers), **(env or {})})
    gens: list[LoadGen] = []
    try:
        relay.start(timeout=120)
        relay.setup_app()
        parts = math.ceil(count / PER_LOADGEN)
        per = math.ceil(count / parts)
        # Each generator's sockets come from addresses of its own (up to 2 each: 28,000 ports per address).
        gens.extend(LoadGen(work, f"fleet-loadgen-{k}", open_timeout=60.0, max_attempts=30,
                            max_executors=per + 10, backoff_max=1.0, first_source=1 + 2 * k) for k in range(parts))
        say(f"fleet: {count} executors at once, RELAY_WORKERS={workers}, {parts} load generators")
        meter = CpuMeter({"relay": relay.pid, **{f"worker-{pid}": pid for pid in children(relay.pid)},
                          **{f"loadgen-{k}": g.pid for k, g in enumerate(gens)}})
        begin = time.monotonic()
        for k, gen in enumerate(gens):
            gen.start(relay.ws_url, f"fleet{k}", min(per, count - k * per), concurrency=None)
        reached, healthy_s, counts = wait_healthy(relay, count, timeout, interval=2.0)
        elapsed = time.monotonic() - begin
        cpu = meter.read()
        say(f"fleet: {counts.get('HEALTHY', 0)} HEALTHY after {elapsed:.1f} s")
        rss = _relay_rss(relay)
        spread = {i["instanceId"]: sum(1 for x in i["leases"] if x["status"] == "HEALTHY")
                  for i in relay.http.ok("GET", "/relay/v1/instances", timeout=120)["instances"]
                  if i["status"] == "RUNNING"}
        before = [g.status() for g in gens]
        say(f"fleet: holding {hold_s:g} s (pings)")
        time.sleep(hold_s)  # the hold is the measurement's input: pings over this long
        after = [g.status() for g in gens]
        final = relay.executor_counts(timeout=120)
        pings = sum(a["pings_received"] - b["pings_received"] for a, b in zip(after, before, strict=True))
        closes = {k: sum(a["closes"].get(k, 0) - b["closes"].get(k, 0) for a, b in zip(after, before, strict=True))
                  for k in {c for a in after for c in a["closes"]}}
        return {
            "count": count, "workers": workers, "relay_env": dict(env or {}), "all_healthy": reached,
            "all_healthy_s": elapsed,
            "healthy_wait_s": healthy_s, "registry": dict(counts), "registry_after_hold": dict(final),
            "relay_rss_kib": rss, "kib_per_executor": round(sum(rss.values()) / count, 1),
            "instances": spread, "cpu": cpu, "hold_s": hold_s,
            "pings_received": pings, "pings_expected": round(count * hold_s / PING_INTERVAL_S),
            "closed_during_hold": {k: v for k, v in closes.items() if v},
            "reconnects": sum(a["reconnects"] for a in after),
            "given_up": sum(a["given_up"] for a in after),
            "connect_errors": [a["connect_errors"] for a in after],
        }
    finally:
        for gen in gens:
            gen.stop()
        relay.stop()
