"""Restart storm (issue 16, target 3): Relay stopped and started again with N executors connected.

N simulated executors (bench/loadgen.py) connect to one `relay serve` and are all HEALTHY; Relay is stopped
(SIGTERM: a clean stop; or SIGKILL) and started again on the same port and data directory. From the moment it
listens again: how long until every executor is HEALTHY again (the registry, GET executors), how many records
were declared DEAD and how many recoveries were dispatched (the event log, /relay/v1/events, since the stop),
and what the executors went through (reconnect attempts, refused connections, 503s).

The executors reconnect like the Python and TypeScript SDKs by default: a fixed 1 s after any failure, forever
(dbos 3.2.0 `_conductor/conductor.py`: `time.sleep(1)` after ConnectionClosed, InvalidStatus or any error;
@dbos-inc/dbos-sdk 5.2.11: `reconnectDelayMs = 1000`). The Go SDK (v1.6.0) backs off 1 s doubling to 30 s
with jitter; `backoff_max` > 1 gives the doubling (without jitter).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.procs import APP, ORG, CpuMeter, LoadGen, Relay, wait_healthy

# The event types that must not appear after a restart whose executors all come back within grace.
BAD_EVENTS = ("DeclaredDead", "RecoveryDispatched")
EVENTS_PAGE = 10_000


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def event_counts(relay: Relay, since: int, timeout: float = 60.0) -> tuple[Counter[str], int]:
    """Events after position `since`, counted by kind (Executor.Reconnected → "Reconnected"); and the last
    position seen."""
    counts: Counter[str] = Counter()
    position = since
    while True:
        page = relay.http.ok("GET", f"/relay/v1/events?since={position}&limit={EVENTS_PAGE}", timeout=timeout)
        rows = page["events"]
        for row in rows:
            counts[str(row["event"]).rsplit(".", 1)[-1]] += 1
        if rows:
            position = int(rows[-1]["position"])
        if len(rows) < EVENTS_PAGE:
            return counts, position


def last_position(relay: Relay) -> int:
    """The log's last position (walked page by page: before the restart it holds about N events)."""
    return event_counts(relay, 0)[1]


def back_since(relay: Relay, count: int, since: datetime, timeout: float, interval: float = 0.5,
               ) -> tuple[bool, float, Counter[str]]:
    """Poll GET executors until `count` are HEALTHY by a connection made after `since` (right after a restart,
    the records still read HEALTHY from before the stop); (reached, seconds, counts: "back" = those)."""
    begin = time.monotonic()
    counts: Counter[str] = Counter()
    stamp = since.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    while True:
        asked = time.monotonic()
        with contextlib.suppress(OSError, RuntimeError):
            rows = relay.http.ok("GET", f"/v2/orgs/{ORG}/apps/{APP}/executors", timeout=60)
            counts = Counter(row["status"] for row in rows)
            counts["back"] = sum(1 for row in rows if row["status"] == "HEALTHY" and (row["updatedAt"] or "") >= stamp)
            if counts["back"] >= count:
                return True, time.monotonic() - begin, counts
        if time.monotonic() - begin > timeout:
            return False, time.monotonic() - begin, counts
        # a list of thousands of executors is work for relay too: poll no more than a third of the time
        time.sleep(max(interval, 2 * (time.monotonic() - asked)))


def bench_restart(work: Path, count: int, *, store: str = "sqlite", database_url: str | None = None,
                  sig: int = signal.SIGTERM, backoff_max: float = 1.0, connect_concurrency: int = 200,
                  timeout_s: float = 600.0, name: str | None = None,
                  on_listening: Any = None) -> dict[str, Any]:
    """One restart of Relay under `count` connected executors; the figures (see the module doc).
    `on_listening(relay)`: called right after the new process listens (e.g. to attach a profiler); what it
    returns, if not None, is called once every executor is back."""
    label = name or f"restart-{store}-{signal.Signals(sig).name.lower()}"
    relay = Relay(work, label, database_url=database_url, max_files=count * 2 + 4096)
    lg: LoadGen | None = None
    try:
        relay.start()
        relay.setup_app()
        grace = int(relay.http.ok("GET", f"/v2/orgs/{ORG}/apps/{APP}").get("executorTimeoutSecs") or 60)
        lg = LoadGen(work, f"{label}-loadgen", open_timeout=5.0, max_attempts=1_000_000, max_executors=count + 10,
                     backoff_max=backoff_max)
        lg.start(relay.ws_url, "rs", count, concurrency=connect_concurrency)
        ok, connect_s = lg.wait_identified(count, timeout=max(300.0, count / 10))
        ok_h, _, counts = wait_healthy(relay, count, timeout=300)
        if not (ok and ok_h):
            raise RuntimeError(f"the executors did not all connect before the restart: {dict(counts)}")
        since = last_position(relay)
        before = lg.status()

        # -- the stop ----------------------------------------------------------------------------------
        stopped_at = datetime.now(UTC)
        stop_s = relay.terminate(sig)
        old_pid = relay.pid
        # -- the start: same port, same data directory -------------------------------------------------
        launched = time.monotonic()
        relay.launch()
        if not relay.wait_listening(timeout=300):
            raise RuntimeError("relay did not listen again within 300 s")
        listening = time.monotonic()
        stopped = lg.status()  # the downtime's attempts end here
        done = on_listening(relay) if on_listening is not None else None
        meter = CpuMeter({"relay": relay.pid, "loadgen": lg.pid})
        identified_s = None
        deadline = listening + timeout_s
        while time.monotonic() < deadline:
            if lg.status()["identified"] >= count:
                identified_s = time.monotonic() - listening
                break
            time.sleep(0.1)
        ok_h, _, counts = back_since(relay, count, stopped_at, timeout=max(1.0, deadline - time.monotonic()))
        healthy_s = time.monotonic() - listening if ok_h else None
        cpu = meter.read()
        if done is not None:
            done()
        after = lg.status()
        ready_s = None
        with contextlib.suppress(Exception):
            relay.wait_ready(timeout=60)
            ready_s = time.monotonic() - listening
        # Anything declared dead later than the storm would come after the grace period: look once more at
        # the log only after every executor is back (a stale timer would have fired by then only if wrong).
        events, _ = event_counts(relay, since)
        return {
            "store": store,
            "signal": signal.Signals(sig).name,
            "count": count,
            "grace_s": grace,
            "backoff_max_s": backoff_max,
            "initial_connect_s": connect_s,
            "stop_s": stop_s,
            "start_to_listen_s": listening - launched,
            "identified_s": identified_s,
            "all_healthy_s": healthy_s,
            "ready_s": ready_s,
            "registry": dict(counts),
            "events": dict(events),
            "dead": events.get("DeclaredDead", 0),
            "recoveries": events.get("RecoveryDispatched", 0),
            "attempts_during_stop": stopped["attempts"] - before["attempts"],
            "attempts": after["attempts"] - stopped["attempts"],
            "connect_errors": _delta(after["connect_errors"], stopped["connect_errors"]),
            "errors_during_stop": _delta(stopped["connect_errors"], before["connect_errors"]),
            "closes": _delta(after["closes"], before["closes"]),
            "given_up": after["given_up"],
            "cpu": cpu,
            "old_pid": old_pid,
            "pid": relay.pid,
        }
    finally:
        if lg is not None:
            lg.stop()
        relay.stop()


def summary_rows(r: dict[str, Any], key: str, fmt: Any) -> list[list[str]]:
    s = r[key]
    refused = s["connect_errors"] or {}
    return [
        [f"restart storm ({s['store']}, {s['signal']}): {fmt(s['count'])} connected → all HEALTHY after listening",
         f"{fmt(s['all_healthy_s'])} s" if s["all_healthy_s"] is not None
         else f"not reached: registry {s['registry']}", "≤ 30 s", restart_limit(s)],
        [f"restart storm ({s['store']}, {s['signal']}): declared DEAD / recoveries dispatched",
         f"{fmt(s['dead'])} / {fmt(s['recoveries'])}", "0 / 0",
         f"grace {s['grace_s']} s counted from the restart; events since the stop: {s['events']}"],
        [f"restart storm ({s['store']}, {s['signal']}): reconnect attempts after listening",
         f"{fmt(s['attempts'])} ({fmt(refused.get('HTTP 503', 0))} 503s)", "—",
         (f"executors retry a fixed {s['backoff_max_s']:g} s after a failure (Python/TypeScript SDKs); all errors: "
         f"{refused or 'none'}")],
    ]


def restart_limit(s: dict[str, Any]) -> str:
    cpu = s["cpu"].get("relay")
    return (f"relay at {cpu} % of one core from listening to all HEALTHY; one Reconnected event per executor, "
            f"after a load of its aggregate, the appends of concurrent handshakes grouped "
            f"(projections/store/group_commit.py); "
            f"the stop took {s['stop_s']:.1f} s "
            f"and the start {s['start_to_listen_s']:.1f} s to listen")


def details(r: dict[str, Any], key: str, add: Any, fmt: Any) -> None:
    s = r[key]
    add(f"### Restart storm ({s['store']}, {s['signal']})")
    add("")
    add(f"{fmt(s['count'])} simulated executors connected ({fmt(s['initial_connect_s'])} s at most 200 handshakes in "
        f"flight), all HEALTHY; Relay sent {s['signal']} and waited for ({fmt(s['stop_s'])} s), then started again "
        f"on the same port and data directory: listening {fmt(s['start_to_listen_s'])} s after launch. From then: "
        f"every executor had answered executor_info after {fmt(s['identified_s'])} s; GET executors showed all "
        f"HEALTHY after {fmt(s['all_healthy_s'])} s (polled); /readyz after {fmt(s['ready_s'])} s. Registry at the "
        f"end: {s['registry']}. Events since the stop: {s['events']} (DeclaredDead {s['dead']}, RecoveryDispatched "
        f"{s['recoveries']}; grace {s['grace_s']} s). Executors reconnect {s['backoff_max_s']:g} s after a failure "
        f"(the Python and TypeScript SDKs' fixed 1 s).")
    add(f"Connection attempts while Relay was down (stop and start): {fmt(s['attempts_during_stop'])} "
        f"({s['errors_during_stop'] or 'none'}); "
        f"after it listened: {fmt(s['attempts'])}, errors {s['connect_errors'] or 'none'}; closes seen by the "
        f"executors: {s['closes'] or 'none'}; none gave up: {s['given_up'] == 0}. CPU (% of one core, listening → "
        f"all HEALTHY): {s['cpu']}.")
    add("")


def main(argv: list[str] | None = None) -> int:
    """One restart at any size, printed as JSON: `python -m bench.restart --count 2000 [--kill] [--profile]`."""
    import argparse
    import json
    import tempfile

    from bench.procs import Profiler

    parser = argparse.ArgumentParser(prog="bench.restart", description=main.__doc__)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--kill", action="store_true", help="SIGKILL instead of SIGTERM")
    parser.add_argument("--backoff-max", type=float, default=1.0)
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the new relay, from listening on")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="relay-restart-"))
    profiler: list[Profiler] = []

    def attach(relay: Relay) -> Any:
        if args.profile is None:
            return None
        profiler.append(Profiler(relay.pid, args.profile.resolve(), max_seconds=600))
        return profiler[-1].stop

    try:
        result = bench_restart(work, args.count, sig=signal.SIGKILL if args.kill else signal.SIGTERM,
                               backoff_max=args.backoff_max, on_listening=attach)
    finally:
        for p in profiler:
            p.stop()
    print(json.dumps(result, indent=1, default=str))
    print(f"logs in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
