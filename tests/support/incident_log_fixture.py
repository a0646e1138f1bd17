"""Record a small event log holding every event class of alerts as incidents (issue 32: `Incident.*` and
`AlertingRule.RenotifySet`), and export it as JSON lines.

A log of the older classes is tests/support/event_log_fixture.py's; these events have a fixture of their own, so
that replaying the older fixtures still builds exactly the views their commands build today. The checked-in
fixture (tests/fixtures/incident-event-log-*.jsonl) was written by this module with the code of its day;
tests/unit/test_incident_log_fixture.py replays it with today's. Run as a script to write a new one:
    .venv/bin/python -m tests.support.incident_log_fixture tests/fixtures/incident-event-log-NEW.jsonl
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from relay.actors.incidents import open_incident
from relay.events.alerting import AlertingRule
from relay.events.refs import incident_ref, rule_ref
from relay.projections.store.log import RelayLog
from tests.support.event_log_fixture import export

T0 = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)
SENT = {"outcome": "delivered", "attempts": 1, "status": 200, "error": None}


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record_incidents(log: RelayLog) -> None:
    """Every command of incidents once or more, in an order a real run could take."""
    def make() -> AlertingRule:
        rule = AlertingRule.create("acme", "shop", "flaky", "WorkflowFailure", {"threshold": 1, "periodSecs": 300},
                                   None, None, _at(0), "admin")
        rule.set_renotify(600, _at(0), "admin")
        return rule

    log.create(rule_ref("acme", "shop", "flaky"), make)
    first = incident_ref("acme", "shop", "flaky", 1)
    open_incident(log, "acme", "shop", "flaky", "1 workflow failed", {"failed_workflow_count": "1"}, "relay-a", _at(1))
    log.change(first, lambda i: i.record_notified("open", ["ex-1"], [{"executorId": "ex-2", "reason": "timeout"}],
                                                  SENT, {"pagerduty": dict(SENT, status=202)}, _at(2)))
    log.change(first, lambda i: i.renotify(600, "2 workflows failed", {"failed_workflow_count": "2"}, "relay-b",
                                           _at(601)))
    log.change(first, lambda i: i.record_notified("renotify", ["ex-1"], [], None, {}, _at(602)))
    log.change(first, lambda i: i.silence(_at(4000), "ann", _at(700)))
    log.change(first, lambda i: i.unsilence("ann", _at(800)))
    log.change(first, lambda i: i.acknowledge("bob", _at(900)))
    log.change(first, lambda i: i.silence(_at(9000), "bob", _at(950)))
    log.change(first, lambda i: i.resolve("relay-a", _at(1000)))  # while silenced: quietly
    log.change(first, lambda i: i.record_notified("resolve", [], [], None, {"pagerduty": SENT}, _at(1001)))
    open_incident(log, "acme", "shop", "flaky", "3 workflows failed", {"failed_workflow_count": "3"}, "relay-b",
                  _at(2000), known=1)


def main(out: str) -> None:
    from relay.projections.backend import StoreConfig

    with tempfile.TemporaryDirectory() as tmp:
        config = StoreConfig(data_dir=Path(tmp))
        log = RelayLog(env=config.event_store_env())
        record_incidents(log)
        log.close()
        print(f"{export(Path(tmp) / 'events.sqlite', Path(out))} events written to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
