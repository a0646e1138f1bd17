"""The data plane at scale (issue 34, point 11): `python -m bench.run --only dataplane` (not in the default set).

A dbos 3.4.0 system database on PostgreSQL with 181,346 workflows (the SDK's migrations, then COPY into its own
tables: tests/support/sysdb_fill.py), a real `relay serve` (.venv-relay: the data plane's pinned client) whose
data plane reads it, and the same questions asked of PostgreSQL directly in the same run:

- workflow aggregates (group by status and name, every measure) vs the equivalent GROUP BY;
- the default list page (100 workflows, newest first) vs the SELECT the SDK's list runs for it;
- a maximum page (10,000 workflows with inputs and outputs) vs the same SELECT with its payload.

Each figure is the median of `REPEATS` timed runs after one warm-up; Relay's through HTTP on loopback.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.procs import ORG, REPO, Relay, _limit_files, clean_env, rss_kib

WORKFLOWS = 181_346
APP = "scale"
REPEATS = 5
RELAY_PYTHON = REPO / ".venv-relay" / "bin" / "python"
AGGREGATES = {"groupByStatus": True, "groupByWorkflowName": True, "selectCount": True, "selectMinCreatedAt": True,
              "selectMaxQueueWaitMs": True, "selectMaxTotalLatencyMs": True}
GROUP_BY = ("SELECT status, name, count(*), min(created_at), max(started_at_epoch_ms - created_at), "
            "max(completed_at - created_at) FROM dbos.workflow_status GROUP BY status, name")
PAGE = ("SELECT workflow_uuid, status, name, recovery_attempts, config_name, class_name, authenticated_user, "
        "authenticated_roles, assumed_role, queue_name, executor_id, created_at, updated_at, application_version, "
        "application_id, workflow_deadline_epoch_ms, workflow_timeout_ms, deduplication_id, priority, "
        "queue_partition_key, forked_from, parent_workflow_id, started_at_epoch_ms, delay_until_epoch_ms, "
        "was_forked_from, completed_at, attributes, schedule_name, application_name{payload} "
        "FROM dbos.workflow_status ORDER BY created_at DESC LIMIT {limit}")


class DataPlaneRelay(Relay):
    """`relay serve` from .venv-relay, where the data plane's pinned `dbos` is installed."""

    def launch(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(RELAY_PYTHON), "-m", "relay.web.cli.main", "serve", *self.args], cwd=REPO,
                env=clean_env(self.env()), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_limit_files(self.max_files),  # noqa: PLW1509
            )


def _median(fn: Callable[[], Any]) -> float:
    fn()  # warm-up
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def bench_dataplane(work: Path, database_url: str, say: Callable[[str], None]) -> dict[str, Any]:
    import psycopg

    began = time.monotonic()
    subprocess.run([str(RELAY_PYTHON), "-m", "tests.support.sysdb_fill", database_url, str(WORKFLOWS), APP],
                   cwd=REPO, check=True, capture_output=True, timeout=600)
    say(f"dataplane: {WORKFLOWS} workflows written in {time.monotonic() - began:.1f} s")
    relay = DataPlaneRelay(work, "dataplane", env={"SCALE_SYSDB": database_url,
                                                    "RELAY_DATA_PLANE_REFERENCES": f"{ORG}/{APP}=env:SCALE_SYSDB"})
    relay.start()
    try:
        relay.http.ok("PUT", f"/v2/orgs/{ORG}/apps/{APP}", {})
        relay.http.ok("PUT", f"/relay/v1/orgs/{ORG}/apps/{APP}/data-plane",
                      {"systemDatabaseUrlFrom": "env:SCALE_SYSDB"})
        base = f"/v2/orgs/{ORG}/apps/{APP}"
        rss_before = rss_kib(relay.pid)["VmRSS"]
        rows = relay.http.ok("POST", base + "/workflows/aggregates", AGGREGATES, timeout=120)
        with psycopg.connect(database_url, autocommit=True) as conn:
            direct_rows = conn.execute(GROUP_BY).fetchall()
            out = {
                "workflows": WORKFLOWS + 1,  # and the workflow with steps
                "groups": len(rows), "groups_direct": len(direct_rows),
                "aggregates_ms": _median(lambda: relay.http.ok("POST", base + "/workflows/aggregates", AGGREGATES,
                                                                timeout=120)),
                "group_by_ms": _median(lambda: conn.execute(GROUP_BY).fetchall()),
                "page_ms": _median(lambda: relay.http.ok("GET", base + "/workflows?sortDesc=true")),
                "page_sql_ms": _median(lambda: conn.execute(PAGE.format(payload="", limit=100)).fetchall()),
                "max_page_ms": _median(lambda: relay.http.ok(
                    "GET", base + "/workflows?sortDesc=true&limit=10000&loadInput=true&loadOutput=true", timeout=120)),
                "max_page_sql_ms": _median(lambda: conn.execute(PAGE.format(
                    payload=", inputs, output, error, serialization", limit=10_000)).fetchall()),
            }
        out["rss_before_mib"] = rss_before / 1024
        out["rss_after_mib"] = rss_kib(relay.pid)["VmRSS"] / 1024
        out["default_page_rows"] = len(relay.http.ok("GET", base + "/workflows"))
        return out
    finally:
        relay.stop()


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "n/a"


def summary_rows(d: dict[str, Any]) -> list[list[str]]:
    return [
        [f"data plane: workflow aggregates ({d['workflows']:,} workflows, {d['groups']} groups)",
         (f"{d['aggregates_ms']:.0f} ms vs GROUP BY {d['group_by_ms']:.0f} ms "
         f"({_ratio(d['aggregates_ms'], d['group_by_ms'])})"), "<= 3x the GROUP BY",
         "one read-only GROUP BY (docs/adr/0009) + HTTP and JSON"],
        [f"data plane: default list page ({d['default_page_rows']} workflows)",
         f"{d['page_ms']:.1f} ms vs SELECT {d['page_sql_ms']:.1f} ms ({_ratio(d['page_ms'], d['page_sql_ms'])})", "",
         "the SDK client's query and record building, HTTP"],
        ["data plane: maximum page (10,000 workflows, inputs and outputs)",
         (f"{d['max_page_ms']:.0f} ms vs SELECT {d['max_page_sql_ms']:.0f} ms "
         f"({_ratio(d['max_page_ms'], d['max_page_sql_ms'])})"), "",
         "unpickling every input and output (plain data only), shaping, JSON in chunks"],
    ]


def details(d: dict[str, Any], add: Callable[[str], None]) -> None:
    add("### Data plane at scale (issue 34)")
    add("")
    add(f"{d['workflows']:,} workflows in a dbos 3.4.0 system database on PostgreSQL; medians of {REPEATS} runs, "
        "Relay through HTTP vs the same question asked of PostgreSQL directly in the same run. Relay's RSS "
        f"{d['rss_before_mib']:.0f} → {d['rss_after_mib']:.0f} MiB over the run.")
    add("")
    for row in summary_rows(d):
        add(f"- {row[0]}: {row[1]}")
    add("")
