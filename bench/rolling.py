"""Part `rolling` (issue 32, point 5): a rolling restart of 3 Relay instances behind haproxy on one PostgreSQL
store with N executors (3,000) connected through the balancer (as tests/integration/test_ha.py configures it).
Each instance in turn gets SIGTERM (it closes its sockets with 1001, records Stopped, leaves its records HEALTHY),
its executors reconnect through haproxy to the live ones, then it is started again on the same port. Measured per
step: time until every executor is HEALTHY on a live instance (GET executors: status and hostId), the most DEAD
records seen, and over the run the recoveries the executors received (each would be a `recovery` frame).
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.procs import APP, ORG, Http, LoadGen, Relay, free_port, stop_process

HAPROXY = Path("/usr/sbin/haproxy")
NAMES = ("relay-a", "relay-b", "relay-c")
CONFIG = """global
    maxconn 9000  # haproxy needs 2 descriptors a connection: the hard limit here is 20,000

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout tunnel 1h
    retries 3
    option redispatch

frontend relays_in
    bind 127.0.0.1:{port}
    default_backend relays

backend relays
    balance roundrobin
    option httpchk GET /readyz
    default-server inter 300ms fall 2 rise 1
{servers}
"""


def _rows(relay: Relay) -> list[dict[str, Any]]:
    return list(relay.http.ok("GET", f"/v2/orgs/{ORG}/apps/{APP}/executors", timeout=60))


def bench_rolling(work: Path, database_url: str, say: Callable[[str], None], *, count: int = 3_000,
                  step_timeout: float = 120.0) -> dict[str, Any]:
    if not HAPROXY.exists():
        return {"error": "skipped: no /usr/sbin/haproxy"}
    admin, secret = "relay-bench-" + secrets.token_urlsafe(24), secrets.token_urlsafe(32)
    relays: dict[str, Relay] = {}
    lb: subprocess.Popen[bytes] | None = None
    lg: LoadGen | None = None
    try:
        for name in NAMES:  # one after the other: the first creates the tables
            relay = Relay(work, f"rolling-{name}", database_url=database_url, max_files=count * 2 + 4096,
                          env={"RELAY_INSTANCE_ID": name, "RELAY_FORWARD_SECRET": secret, "RELAY_ADMIN_TOKEN": admin})
            relay.token, relay.http = admin, Http(relay.port, admin)
            relays[name] = relay.start(timeout=120)
        lb_port = free_port()
        servers = "\n".join(f"    server {n} 127.0.0.1:{r.port} check" for n, r in relays.items())
        config = work / "rolling-haproxy.cfg"
        config.write_text(CONFIG.format(port=lb_port, servers=servers))
        with (work / "rolling-haproxy.log").open("ab") as log:
            lb = subprocess.Popen([str(HAPROXY), "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        time.sleep(0.5)
        if lb.poll() is not None:
            raise RuntimeError(f"haproxy exited ({lb.returncode}); see {work / 'rolling-haproxy.log'}")
        first = relays[NAMES[0]]
        key = first.setup_app()
        lg = LoadGen(work, "rolling-loadgen", open_timeout=60.0, max_attempts=30, max_executors=count + 10,
                     backoff_max=1.0)
        time.sleep(1.0)  # haproxy's first health checks (inter 300 ms) before the storm
        lg.start(f"ws://127.0.0.1:{lb_port}/websocket/{APP}/{key}", "roll", count)
        say(f"rolling: {count} executors through haproxy")
        began = time.monotonic()
        while sum(r["status"] == "HEALTHY" for r in _rows(first)) < count:
            if time.monotonic() - began > 300:
                raise RuntimeError("not every executor HEALTHY within 300 s")
            time.sleep(1.0)
        connected_s = time.monotonic() - began
        steps = []
        for name in NAMES:
            relay = relays[name]
            reader = relays[next(n for n in NAMES if n != name)]
            live = set(NAMES) - {name}
            stop_began = time.monotonic()
            stop_s = relay.terminate()
            dead_max, back_s = 0, None
            while time.monotonic() - stop_began < step_timeout:
                with contextlib.suppress(OSError, RuntimeError):
                    rows = _rows(reader)
                    dead_max = max(dead_max, sum(r["status"] == "DEAD" for r in rows))
                    if sum(r["status"] == "HEALTHY" and r["hostId"] in live for r in rows) >= count:
                        back_s = time.monotonic() - stop_began
                        break
                time.sleep(0.5)
            relay.launch()
            relay.wait_ready(timeout=120)
            say(f"rolling: {name} stopped in {stop_s:.1f} s, executors back on live instances after {back_s} s")
            steps.append({"instance": name, "stop_s": stop_s, "all_back_on_live_s": back_s, "dead_max": dead_max})
        final = _rows(first)
        return {
            "count": count, "connected_s": connected_s, "steps": steps,
            "dead_final": sum(r["status"] == "DEAD" for r in final),
            "healthy_final": sum(r["status"] == "HEALTHY" for r in final),
            "recoveries": lg.status()["recoveries"], "given_up": lg.status()["given_up"],
        }
    finally:
        if lg is not None:
            lg.stop()
        if lb is not None:
            stop_process(lb)
        for relay in relays.values():
            relay.stop()
