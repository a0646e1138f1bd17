"""Part `workers` (issue 16): `relay serve --workers 2` against one worker, both on PostgreSQL.

For each worker count, on a fresh database:
(a) executors held: K simulated executors (bench/loadgen.py) connect through the one port; time until every one
    is identified and HEALTHY (GET executors), Relay's CPU (all its worker processes) over the ramp and at rest,
    and how the kernel spread them over the workers (GET /relay/v1/instances);
(b) API throughput at saturation, as the overhead part measures it (bench/run.py bench_overhead's request makers):
    `raw` (one named executor: with 2 workers, the call is forwarded when the executor sits on the other one) and
    `get_workflow` (any executor of the app: a worker always has one of its own). Forwarded share: the forwards
    the workers' access logs show over the requests answered. With 2 workers also `raw` with affinity: each
    request sent straight to the port of the worker that holds its executor (what a client, or a balancer,
    that knew where executors are would get): the cost of the forwarding hop, by difference.
CPU figures are % of one core, summed over the workers, from /proc; "CPU ms per request" = that CPU time over
the requests answered (robust to a shared machine's load).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import httpload
from bench.procs import APP, ORG, CpuMeter, LoadGen, Relay, children, wait_healthy
from bench.stores import fresh_database

FORWARD_LINE = "POST /internal/v1/forward/"


def _instances(relay: Relay) -> list[dict[str, Any]]:
    return [i for i in relay.http.ok("GET", "/relay/v1/instances")["instances"] if i["status"] == "RUNNING"]


def _raw(ids: list[str]) -> httpload.RequestMaker:
    def make(k: int) -> tuple[str, str, Any]:
        return ("POST", f"/relay/v1/orgs/{ORG}/apps/{APP}/executors/{ids[k % len(ids)]}/requests",
                {"type": "get_workflow", "workflow_id": f"wf-{k}", "load_input": True, "load_output": True})
    return make


def _get(k: int) -> tuple[str, str, Any]:
    return ("GET", f"/v2/orgs/{ORG}/apps/{APP}/workflows/wf-{k}", None)


def _together(results: list[httpload.LoadResult]) -> httpload.LoadResult:
    """Runs made at the same time (one per worker): their requests add up over the same wall time."""
    merged = httpload.merge(results)
    merged.duration_s = max(r.duration_s for r in results)
    return merged


def _measure(relay: Relay, pids: dict[str, int], loadgen: int, run: Callable[[], Any]) -> dict[str, Any]:
    forwards = relay.log_path.read_text(errors="replace").count(FORWARD_LINE)
    meter = CpuMeter({**pids, "loadgen": loadgen})
    result = asyncio.run(run())
    cpu = meter.read()
    forwarded = relay.log_path.read_text(errors="replace").count(FORWARD_LINE) - forwards
    server = sum(v for k, v in cpu.items() if k in pids)
    out = result.summary()
    out.update({
        "cpu": cpu, "relay_cpu": round(server, 1),
        "cpu_ms_per_request": server / 100 * result.duration_s / result.ok * 1000 if result.ok else None,
        "forwarded": forwarded, "forwarded_share": forwarded / result.ok if result.ok else None,
    })
    return out


def _one(cfg: Any, work: Path, server_url: str, workers: int, say: Callable[[str], None]) -> dict[str, Any]:
    k = cfg.workers_executors
    with fresh_database(server_url) as url:
        relay = Relay(work, f"workers-{workers}", database_url=url, max_files=2 * k + 4096,
                      args=["--workers", str(workers)])
        lg: LoadGen | None = None
        try:
            relay.start()
            deadline = time.monotonic() + 60
            while len(_instances(relay)) < workers or (workers > 1 and len(children(relay.pid)) < workers):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{workers} workers did not all start; see {relay.log_path}")
                time.sleep(0.2)
            pids = {f"w{i}": pid for i, pid in enumerate(children(relay.pid))} if workers > 1 else {"w0": relay.pid}
            relay.setup_app()
            time.sleep(1.0)  # every worker's views have the key (they poll the store every 0.5 s)
            lg = LoadGen(work, f"workers-{workers}-loadgen", max_executors=k + 10, payload_bytes=cfg.payload_bytes)
            say(f"workers ({workers}): connecting {k} executors through the one port")
            meter = CpuMeter(pids)
            begin = time.monotonic()
            lg.start(relay.ws_url, "wk", k, concurrency=cfg.connect_concurrency)
            identified, identified_s = lg.wait_identified(k, timeout=300)
            healthy, _, counts = wait_healthy(relay, k, timeout=300, interval=1.0)
            healthy_s = time.monotonic() - begin
            ramp_cpu = meter.read()
            spread = Counter({i["instanceId"]: sum(1 for x in i["leases"] if x["status"] == "HEALTHY")
                              for i in _instances(relay)})
            meter = CpuMeter(pids)
            time.sleep(cfg.workers_rest_s)
            rest_cpu = meter.read()
            out: dict[str, Any] = {
                "workers": workers, "executors": k, "identified": identified, "all_healthy": healthy,
                "healthy": counts.get("HEALTHY", 0), "identified_s": identified_s, "healthy_s": healthy_s,
                "ramp_cpu": ramp_cpu, "ramp_relay_cpu": round(sum(v for n, v in ramp_cpu.items() if n in pids), 1),
                "rest_cpu": rest_cpu, "rest_relay_cpu": round(sum(v for n, v in rest_cpu.items() if n in pids), 1),
                "spread": dict(spread), "paths": {},
            }
            headers = {"Authorization": f"Bearer {relay.token}"}
            ids = [f"wk-{i:06d}" for i in range(min(k, cfg.overhead_executors))]
            makers = {"raw": _raw(ids), "get_workflow": _get}
            for path, make in makers.items():
                say(f"workers ({workers}): {path}: warm-up, then saturation for {cfg.overhead_seconds:g} s")
                asyncio.run(httpload.saturate("127.0.0.1", relay.port, headers, make, concurrency=4, duration=1.5))
                out["paths"][path] = _measure(relay, pids, lg.pid, lambda m=make: httpload.saturate(
                    "127.0.0.1", relay.port, headers, m, concurrency=cfg.overhead_concurrency,
                    duration=cfg.overhead_seconds))
            if workers > 1:
                # Affinity: each worker's own port gets the requests for the executors it holds.
                held = {i["port"]: [x["executorId"] for x in i["leases"] if x["executorId"] in set(ids)]
                        for i in _instances(relay)}
                held = {port: mine for port, mine in held.items() if mine}
                per = max(1, cfg.overhead_concurrency // len(held))
                say(f"workers ({workers}): raw with affinity (each worker's own port) for {cfg.overhead_seconds:g} s")

                async def affinity() -> httpload.LoadResult:
                    return _together(list(await asyncio.gather(*(
                        httpload.saturate("127.0.0.1", port, headers, _raw(mine), concurrency=per,
                                          duration=cfg.overhead_seconds) for port, mine in held.items()))))

                out["paths"]["raw_affinity"] = _measure(relay, pids, lg.pid, affinity)
            return out
        finally:
            if lg is not None:
                with contextlib.suppress(Exception):
                    lg.stop()
            relay.stop()


def bench_workers(cfg: Any, work: Path, server_url: str, say: Callable[[str], None]) -> dict[str, Any]:
    runs = {str(n): _one(cfg, work, server_url, n, say) for n in (1, 2)}
    one, two = runs["1"], runs["2"]
    ratios = {path: (two["paths"][path]["throughput_rps"] / one["paths"][path]["throughput_rps"]
                     if one["paths"][path]["throughput_rps"] else None) for path in one["paths"]}
    ratios["raw_affinity"] = (two["paths"]["raw_affinity"]["throughput_rps"] / one["paths"]["raw"]["throughput_rps"]
                              if one["paths"]["raw"]["throughput_rps"] else None)
    return {"runs": runs, "throughput_ratio": ratios}


# ------------------------------------------------------------------------------------------ report
def _f(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _capacity(res: dict[str, Any], workers: int) -> float | None:
    ms = res.get("cpu_ms_per_request")
    return workers * 1000 / ms if ms else None


def summary_rows(w: dict[str, Any]) -> list[list[str]]:
    one, two = w["runs"]["1"], w["runs"]["2"]
    rows = [[f"workers: {_f(one['executors'])} executors → all HEALTHY, 1 vs 2 workers",
             (f"{_f(one['healthy_s'])} s vs {_f(two['healthy_s'])} s ({_f(one['healthy'])} / {_f(two['healthy'])} "
             f"HEALTHY; spread over 2: {sorted(two['spread'].values())})"), "—",
             (f"relay CPU over the ramp {_f(one['ramp_relay_cpu'])} % vs {_f(two['ramp_relay_cpu'])} % (all workers); "
             f"at rest {_f(one['rest_relay_cpu'])} % vs {_f(two['rest_relay_cpu'])} %")]]
    for path in ("raw", "get_workflow", "raw_affinity"):
        base = one["paths"]["raw" if path == "raw_affinity" else path]
        got = two["paths"][path]
        label = "raw, affinity (each request to its executor's worker)" if path == "raw_affinity" else path
        share = 100 * (got["forwarded_share"] or 0)
        # What the CPU per request allows once each worker has a core of its own (on a shared machine the
        # measured throughput is the machine's, not Relay's): N workers x 1000 ms / CPU ms per request.
        cap2, cap1 = _capacity(got, 2), _capacity(base, 1)
        cap_ratio = cap2 / cap1 if cap1 and cap2 else None
        rows.append([f"workers: {label} throughput at saturation, 2 workers vs 1",
                     (f"{_f(got['throughput_rps'])} vs {_f(base['throughput_rps'])} req/s = "
                     f"**{_f(w['throughput_ratio'][path], 2)}x**; forwarded {_f(share)} %; CPU-bound capacity (a core "
                     f"per worker) {_f(cap2, 0)} vs {_f(cap1, 0)} req/s = {_f(cap_ratio, 2)}x"),
                     "—", (f"CPU ms per request {_f(got['cpu_ms_per_request'], 2)} vs "
                     f"{_f(base['cpu_ms_per_request'], 2)}; relay {_f(got['relay_cpu'])} % vs "
                     f"{_f(base['relay_cpu'])} %, "
                     f"loadgen {_f(got['cpu'].get('loadgen'))} %, client {_f(got['cpu'].get('bench client'))} % "
                     "(2 cores shared)")])
    return rows


def details(w: dict[str, Any], add: Callable[[str], None]) -> None:
    add("### 7. Worker processes (PostgreSQL)")
    add("")
    add("`relay serve --workers N` on a fresh PostgreSQL database for N = 1 and 2; executors and API calls through "
        "the one port (SO_REUSEPORT spreads connections). CPU: % of one core, summed over the workers.")
    add("")
    add("| workers | executors HEALTHY | time to all HEALTHY (s) | spread | CPU ramp % | CPU at rest % |")
    add("|---|---|---|---|---|---|")
    for n, run in w["runs"].items():
        add(f"| {n} | {_f(run['healthy'])} of {_f(run['executors'])} | {_f(run['healthy_s'])} | "
            f"{sorted(run['spread'].values())} | {_f(run['ramp_relay_cpu'])} | {_f(run['rest_relay_cpu'])} |")
    add("")
    add("| workers | path | req/s | p50 ms | p99 ms | errors | forwarded | relay CPU % | CPU ms/request | "
        "loadgen CPU % | client CPU % |")
    add("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, run in w["runs"].items():
        for path, res in run["paths"].items():
            errors = sum(res["errors"].values()) + sum(v for s, v in res["statuses"].items() if s != "200")
            add(f"| {n} | {path} | {_f(res['throughput_rps'])} | {_f(res['p50_ms'], 2)} | {_f(res['p99_ms'], 2)} | "
                f"{errors} | {_f(res['forwarded'])} ({_f(100 * (res['forwarded_share'] or 0))} %) | "
                f"{_f(res['relay_cpu'])} | {_f(res['cpu_ms_per_request'], 2)} | {_f(res['cpu'].get('loadgen'))} | "
                f"{_f(res['cpu'].get('bench client'))} |")
    add("")
