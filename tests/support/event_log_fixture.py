"""Record a small event log that holds every event class Relay has, and export it as JSON lines.

The checked-in fixture (tests/fixtures/event-log-*.jsonl) was written by this module with the code of its
day; tests/unit/test_event_log_fixture.py loads it into a fresh store and replays it with today's code, so a
change to an event's fields or module that breaks old logs fails there. Run as a script to write a new one:
    .venv/bin/python -m tests.support.event_log_fixture tests/fixtures/event-log-NEW.jsonl
"""

from __future__ import annotations

import base64
import json
import sqlite3
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from relay.actors.alerting import fire_alert
from relay.actors.application import register_app
from relay.actors.cluster import adopt_instance
from relay.events.alerting import AlertingRule
from relay.events.executor import Executor
from relay.events.instance import RelayInstance
from relay.events.organization import Organization
from relay.events.refs import alert_ref, app_ref, executor_ref, instance_ref, org_ref, retention_ref, rule_ref
from relay.events.retention import RetentionRun

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
KEY_HASH = "ab" * 32


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record(relay_log: object) -> None:
    """Every command of the domain once or more, in an order a real run could take."""
    from relay.events.executor import ExecutorInfo

    log = relay_log
    log.ensure(org_ref("acme"), lambda: Organization.create("acme", _at(0)))
    log.change(org_ref("acme"),
               lambda organization: organization.issue_key(
                   "ci", KEY_HASH, ["shop"], ["application.read"], _at(1), "admin"),
               create=lambda: Organization.create("acme", _at(1)))
    log.change(org_ref("acme"),
               lambda organization: organization.issue_key(
                   "old", "cd" * 32, [], [], _at(2), "admin"), create=lambda: Organization.create("acme", _at(2)))
    log.change(org_ref("acme"), lambda organization: organization.revoke_key("old", _at(3), "admin"))
    register_app(log, "acme", "shop", _at(4), "admin")
    log.change(app_ref("acme", "shop"),
               lambda application: application.change_settings(
                   {"executorTimeoutSecs": 30, "gcRowsThreshold": 1000}, _at(5), "admin"))
    register_app(log, "acme", "gone", _at(6))
    log.change(app_ref("acme", "gone"), lambda application: application.delete(_at(7)))
    register_app(log, "acme", "gone", _at(8))  # registered again after deletion

    log.run(instance_ref("relay-a"),
            lambda found: RelayInstance.start_again(found, "relay-a", "127.0.0.1", 8080, "0.1.0", _at(9)))
    log.run(instance_ref("relay-b"),
            lambda found: RelayInstance.start_again(found, "relay-b", "127.0.0.1", 8081, "0.1.0", _at(9)))
    log.change(instance_ref("relay-a"), lambda i: i.take_lease("acme/shop/ex-1", _at(10)))
    log.change(instance_ref("relay-a"), lambda i: i.take_lease("acme/shop/ex-2", _at(10)))
    log.change(instance_ref("relay-a"), lambda i: i.release_lease("acme/shop/ex-2", _at(11)))

    v1 = ExecutorInfo("v1", "host-1", "python", "3.2.0", {"region": "eu"})
    v2 = ExecutorInfo("v1", "host-2", "typescript", "5.2.11", None)
    log.run(executor_ref("acme", "shop", "ex-1"),
            lambda found: Executor.connect_again(found, "acme", "shop", "ex-1", v1, "relay-a", _at(12)))
    log.run(executor_ref("acme", "shop", "ex-2"),
            lambda found: Executor.connect_again(found, "acme", "shop", "ex-2", v2, "relay-a", _at(12)))
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.disconnect("socket closed", _at(13)))
    log.run(executor_ref("acme", "shop", "ex-1"),
            lambda found: Executor.connect_again(
                found, "acme", "shop", "ex-1", v1, "relay-a", _at(14)))  # reconnected in the grace period
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.disconnect("pong missed", _at(15)))
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.declare_dead(30, _at(45)))
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.dispatch_recovery("ex-2", "relay-a", _at(46)))
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.fail_recovery("ex-2", "peer disconnected", _at(47)))
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.dispatch_recovery("ex-2", "relay-a", _at(48)))
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.acknowledge_recovery("ex-2", _at(49)))
    log.change(executor_ref("acme", "shop", "ex-1"), lambda e: e.delete("recovered", _at(49)))

    log.run(instance_ref("relay-b"),
            lambda found: RelayInstance.start_again(found, "relay-b", "127.0.0.1", 8081, "0.1.0", _at(50)))  # restarted
    log.change(instance_ref("relay-b"), lambda i: i.take_lease("acme/gone/ex-9", _at(51)))
    adopt_instance(log, "relay-b", "relay-a", ["acme/gone/ex-9"], _at(90), lambda: True)
    log.change(instance_ref("relay-a"), lambda i: i.stop(_at(95)))

    log.create(rule_ref("acme", "shop", "fail"), lambda: AlertingRule.create("acme", "shop", "fail", "WorkflowFailure",
                                                                             {}, None, 60, _at(100), "admin"))
    log.create(rule_ref("acme", "shop", "slow"),
               lambda: AlertingRule.create(
                   "acme", "shop", "slow", "SlowQueue", {"queueName": "q", "thresholdSecs": 5}, "gone", None, _at(100),
                   "admin"))
    alert = fire_alert(log, "acme", "shop", "fail", 10, "2 workflows failed", {"count": "2"}, "relay-a", _at(101))
    log.change(alert_ref("acme", "shop", "fail", alert.sequence),
               lambda alert_: alert_.deliver(
                   ["ex-2"], [{"executorId": "ex-3", "reason": "timeout"}], {"outcome": "delivered",
                                                                             "status": 200}, _at(102)))
    log.change(rule_ref("acme", "shop", "slow"), lambda rule: rule.delete(_at(103), "admin"))

    log.create(retention_ref("acme", "shop", 7),
               lambda: RetentionRun.start(
                   "acme", "shop", 7, "ex-2", {"gc_rows_threshold": 1000}, {"gcRowsThreshold": 1000}, "relay-a",
                   _at(110)))
    log.change(retention_ref("acme", "shop", 7), lambda run: run.finish("succeeded", None, _at(111)))


def export(events_sqlite: Path, out: Path) -> int:
    """The stored events, oldest first, one JSON object a line (state as stored: JSON text, or base64)."""
    with sqlite3.connect(events_sqlite) as db:
        table = next(name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
                     if name.endswith("_events") and "notification" not in name)
        rows = db.execute(f"SELECT originator_id, originator_version, topic, state FROM {table} "
                          "ORDER BY rowid").fetchall()
    lines = []
    for originator_id, version, topic, state in rows:
        raw = bytes(state)
        try:
            payload = {"state": json.loads(raw)}
        except ValueError:
            payload = {"state_b64": base64.b64encode(raw).decode()}
        lines.append(json.dumps({"originator_id": str(originator_id), "originator_version": version,
                                 "topic": topic, **payload}, sort_keys=True))
    out.write_text("\n".join(lines) + "\n")
    return len(lines)


def main(out: str) -> None:
    from relay.projections.backend import StoreConfig
    from relay.projections.store.log import RelayLog

    with tempfile.TemporaryDirectory() as tmp:
        config = StoreConfig(data_dir=Path(tmp))
        log = RelayLog(env=config.event_store_env())
        record(log)
        log.close()
        print(f"{export(Path(tmp) / 'events.sqlite', Path(out))} events written to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
