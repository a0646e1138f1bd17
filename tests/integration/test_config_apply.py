"""`relay diff|apply -f relay.yaml` against a real `relay serve` (SQLite; one test on PostgreSQL), the real CLI run as
a subprocess: everything created and each change an event, the same file again changing and recording nothing,
diff's exit codes, a bad file changing nothing, a change made between plan and apply refused, keys' secrets never
in the file, the plan, the log or the events, key replacement only when asked, and pruning."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    """The module's one server; each test works in an organization of its own."""
    # The operator binds the data plane's reference to its application (RELAY_DATA_PLANE_REFERENCES).
    return {"RELAY_DATA_PLANE_REFERENCES": "cfg_full/orders=env:ORDERS_SYSDB"}


def new_org(relay: RelayProcess, org: str) -> str:
    """An organization (the admin creates it by registering its first application, `base`)."""
    assert relay.api("PUT", f"/v2/orgs/{org}/apps/base", json={}).status_code == 204
    return org


def config(org: str, apps: list[dict[str, Any]], keys: list[dict[str, Any]] | None = None,
           **more: Any) -> dict[str, Any]:
    return {"apiVersion": "relay/v1", "kind": "Config", "org": org, "apps": [{"name": "base"}, *apps],
            "keys": keys or [], **more}


def write(tmp_path: Path, document: Any, name: str = "relay.yaml") -> Path:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False))
    return path


def events(relay: RelayProcess, org: str) -> list[dict[str, Any]]:
    """The organization's events, every one appended so far included: the audit entry of a call is appended after
    its answer is made, and reaches the views a little later. A command waits for the views to hold everything
    its server appended (web/context.py ask): one is made first, in an organization of its own (its audit entry
    lands there), and changing nothing."""
    assert relay.api("PUT", "/v2/orgs/cfg_marker/apps/marker", json={}).status_code == 204
    assert relay.api("PATCH", "/v2/orgs/cfg_marker/apps/marker", json={"privateMode": False}).status_code == 204
    answer = relay.api("GET", "/relay/v1/events", params={"org": org, "limit": 10000})
    assert answer.status_code == 200, answer.text
    return answer.json()["events"]


def run(relay: RelayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    result = relay.run_cli(list(args))
    assert "Traceback" not in result.stderr, result.stderr
    return result


def exits(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


FULL_APPS = [
    {"name": "orders",
     "settings": {"executorTimeoutSecs": 30, "gcRowsThreshold": 1000, "privateMode": True},
     "dataPlane": {"systemDatabaseUrlFrom": "env:ORDERS_SYSDB", "mode": "read-write"},
     "alertRules": [{"type": "WorkflowFailure", "metadata": {"workflowName": "checkout", "threshold": 3},
                     "minIntervalSecs": 600},
                    {"type": "UnresponsiveApplication", "receivingApp": "ops"}]},
    {"name": "ops", "alertRules": [{"type": "SlowQueue", "metadata": {"thresholdSecs": 120}}]},
]
FULL_KEYS = [{"name": "orders-exec", "apps": ["orders"], "permissions": ["application.read", "websocket.connect"]},
             {"name": "tools"}]


def test_apply_creates_everything_each_change_an_event_then_nothing(relay: RelayProcess, tmp_path: Path) -> None:
    org = new_org(relay, "cfg_full")
    path = write(tmp_path, config(org, FULL_APPS, FULL_KEYS))
    start = len(events(relay, org))

    planned = exits(run(relay, "diff", "-f", str(path)), 1)
    assert planned.splitlines()[0] == f"organization {org}: 9 changes"
    assert "+ app orders" in planned and "+ key tools: apps=* " in planned
    assert len(events(relay, org)) == start  # diff reads only

    applied = run(relay, "apply", "-f", str(path))
    out = exits(applied, 0)
    assert f"applied 9 changes to organization {org}" in out
    keys = dict(line.removeprefix("key ").split(": ", 1) for line in out.splitlines() if line.startswith("key "))
    assert set(keys) == {"orders-exec", "tools"} and all(k.startswith("dbos_") for k in keys.values())
    assert "shown once" in applied.stderr

    # Through the API: the apps and their settings, the data plane, the rules, the keys (which work).
    app = relay.api("GET", f"/v2/orgs/{org}/apps/orders").json()
    assert (app["executorTimeoutSecs"], app["gcRowsThreshold"], app["privateMode"]) == (30, 1000, True)
    plane = relay.api("GET", f"/relay/v1/orgs/{org}/apps/orders/data-plane").json()
    assert (plane["systemDatabaseUrlFrom"], plane["mode"]) == ("env:ORDERS_SYSDB", "read-write")
    rules = relay.api("GET", f"/v2/orgs/{org}/apps/orders/alerting-rules").json()
    assert sorted(r["ruleType"] for r in rules) == ["UnresponsiveApplication", "WorkflowFailure"]
    tokens = {t["tokenName"]: t for t in relay.api("GET", f"/v2/orgs/{org}/tokens").json()}
    assert sorted(tokens["orders-exec"]["permissions"]) == ["application.read", "websocket.connect"]
    assert relay.api("GET", f"/v2/orgs/{org}/apps/orders", token=keys["orders-exec"]).status_code == 200
    assert relay.api("GET", f"/v2/orgs/{org}/apps/ops", token=keys["orders-exec"]).status_code == 403

    # Each change an event, by the admin, and the apply's audit entry naming them.
    new = events(relay, org)[start:]
    names = sorted(e["event"] for e in new)
    assert names == sorted([
        "App.Registered", "App.Registered", "App.SettingsChanged", "App.DataPlaneConfigured",
        "AlertingRule.Created", "AlertingRule.Created", "AlertingRule.Created",
        "Organization.ApiKeyIssued", "Organization.ApiKeyIssued", "Operation.Performed",
    ]), names
    audit = next(e for e in new if e["event"] == "Operation.Performed")
    assert audit["details"]["operation"] == "applyConfig" and audit["details"]["status"] == 200
    assert "key:tools" in audit["details"]["targets"] and "app:orders" in audit["details"]["targets"]
    assert all(e["details"].get("by") == "admin" for e in new if e["event"] != "Operation.Performed")

    # Secrets: never in the file, the plan, the events (nor the log: RelayProcess checks it when it stops).
    listing = relay.api("GET", "/relay/v1/events", params={"org": org, "limit": 10000}).text
    for secret in keys.values():
        assert secret not in path.read_text() and secret not in planned and secret not in listing

    # The same file again: nothing to do, nothing recorded (CLI and API alike); diff exits 0.
    count = len(events(relay, org))
    assert exits(run(relay, "apply", "-f", str(path)), 0).strip() == f"organization {org}: no changes"
    assert exits(run(relay, "diff", "-f", str(path)), 0).strip() == f"organization {org}: no changes"
    again = relay.api("POST", f"/relay/v1/orgs/{org}/config/apply", json={"config": config(org, FULL_APPS, FULL_KEYS)})
    assert again.status_code == 200 and again.json() == {"changes": [], "keys": []}
    assert len(events(relay, org)) == count


def test_a_bad_file_changes_nothing(relay: RelayProcess, tmp_path: Path) -> None:
    org = new_org(relay, "cfg_bad")
    bad = config(org, [{"name": "good-one", "settings": {"executorTimeoutSecs": 20}},
                       {"name": "bad-one", "settings": {"gcRowsThreshold": 0}}],
                 [{"name": "k", "apps": ["good-one"]}])
    start = len(events(relay, org))

    refused = run(relay, "apply", "-f", str(write(tmp_path, bad)))
    exits(refused, 2)
    assert "apps[2].settings.gcRowsThreshold: must be an integer >= 1" in refused.stderr
    assert "nothing was changed" in refused.stderr
    exits(run(relay, "diff", "-f", str(write(tmp_path, bad))), 2)

    # Valid in itself, impossible here: a key scoped to an application that neither the file nor Relay has.
    ghost = config(org, [{"name": "good-one"}], [{"name": "k", "apps": ["ghost"]}])
    refused = run(relay, "apply", "-f", str(write(tmp_path, ghost)))
    exits(refused, 2)
    assert "keys[0].apps: no application 'ghost'" in refused.stderr

    refused = run(relay, "apply", "-f", str(write(tmp_path, ghost)), "--org", "cfg_other")
    exits(refused, 2)
    assert "--org cfg_other and the file's org: cfg_bad differ" in refused.stderr

    refused = run(relay, "apply", "-f", str(write(tmp_path, "apiVersion: relay/v1\nkind: [Config\n")))
    exits(refused, 2)
    assert "not valid YAML (line" in refused.stderr
    assert len(events(relay, org)) == start  # through the CLI a refused file records nothing at all
    assert relay.api("GET", f"/v2/orgs/{org}/apps/good-one").status_code == 404

    # Through the API: 422 naming every bad item; no domain event, only the audit entry of the refused attempt.
    answer = relay.api("POST", f"/relay/v1/orgs/{org}/config/apply", json={"config": bad})
    assert answer.status_code == 422
    assert answer.json()["errors"] == [{"location": "body.config.apps[2].settings.gcRowsThreshold",
                                        "message": "must be an integer >= 1 or null (no limit)"}]
    assert [e["event"] for e in events(relay, org)[start:]] == ["Operation.Performed"]


def test_a_change_between_plan_and_apply_is_refused(relay: RelayProcess) -> None:
    org = new_org(relay, "cfg_race")
    document = config(org, [], [{"name": "k"}])
    document["apps"][0]["settings"] = {"executorTimeoutSecs": 30}
    planned = relay.api("POST", f"/relay/v1/orgs/{org}/config/plan", json={"config": document})
    assert planned.status_code == 200
    assert [c["text"] for c in planned.json()["changes"]] == [
        "~ settings base: executorTimeoutSecs 60 -> 30",
        "+ key k: apps=* permissions=application.read,application.write,metric.read,websocket.connect"]

    assert relay.api("PATCH", f"/v2/orgs/{org}/apps/base", json={"privateMode": True}).status_code == 204
    start = len(events(relay, org))
    answer = relay.api("POST", f"/relay/v1/orgs/{org}/config/apply",
                       json={"config": document, "basis": planned.json()["basis"]})
    assert answer.status_code == 409 and "changed since the plan was made" in answer.json()["detail"]
    assert [e["event"] for e in events(relay, org)[start:]] == ["Operation.Performed"]  # the refusal, audited
    assert relay.api("GET", f"/v2/orgs/{org}/apps/base").json()["executorTimeoutSecs"] == 60
    assert relay.api("GET", f"/v2/orgs/{org}/tokens").json() == []

    # Planned again, it goes through.
    replanned = relay.api("POST", f"/relay/v1/orgs/{org}/config/plan", json={"config": document}).json()
    answer = relay.api("POST", f"/relay/v1/orgs/{org}/config/apply",
                       json={"config": document, "basis": replanned["basis"]})
    assert answer.status_code == 200 and [k["tokenName"] for k in answer.json()["keys"]] == ["k"]


def test_a_key_whose_scope_differs_is_replaced_only_when_asked(relay: RelayProcess, tmp_path: Path) -> None:
    org = new_org(relay, "cfg_keys")
    first = write(tmp_path, config(org, [], [{"name": "svc", "permissions": ["application.read"]}]))
    out = exits(run(relay, "apply", "-f", str(first)), 0)
    (old,) = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("key svc: ")]

    wider = write(tmp_path, config(org, [], [{"name": "svc", "permissions": ["application.read", "metric.read"]}]))
    shown = exits(run(relay, "diff", "-f", str(wider)), 1)
    assert "~ key svc: apps=* permissions=application.read -> apps=* permissions=application.read,metric.read" in shown
    as_json = json.loads(exits(run(relay, "diff", "-f", str(wider), "--output", "json"), 1))
    assert as_json["keyReplacements"] == ["svc"] and [c["op"] for c in as_json["changes"]] == ["~"]
    answer = relay.api("POST", f"/relay/v1/orgs/{org}/config/apply", json={"config": yaml.safe_load(wider.read_text())})
    assert answer.status_code == 409 and "replaceKeys" in answer.json()["detail"]
    start = len(events(relay, org))
    refused = run(relay, "apply", "-f", str(wider))
    exits(refused, 2)
    assert "--replace-keys" in refused.stderr and "nothing was applied" in refused.stderr
    assert len(events(relay, org)) == start
    assert relay.api("GET", f"/v2/orgs/{org}/apps/base", token=old).status_code == 200

    out = exits(run(relay, "apply", "-f", str(wider), "--replace-keys"), 0)
    (new,) = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("key svc: ")]
    assert new != old
    assert relay.api("GET", f"/v2/orgs/{org}/apps/base", token=old).status_code == 401
    assert relay.api("GET", f"/v2/orgs/{org}/apps/base", token=new).status_code == 200
    assert [e["event"] for e in events(relay, org)[start:]] == [
        "Organization.ApiKeyRevoked", "Organization.ApiKeyIssued", "Operation.Performed"]


def test_prune_removes_what_the_file_leaves_out(relay: RelayProcess, tmp_path: Path) -> None:
    org = new_org(relay, "cfg_prune")
    path = write(tmp_path, config(org, [{"name": "kept", "settings": {"gcRowsThreshold": 10},
                                         "alertRules": [{"type": "SlowQueue"}]}]))
    exits(run(relay, "apply", "-f", str(path)), 0)
    # Made outside the file: an app, a key, a rule, a setting.
    assert relay.api("PUT", f"/v2/orgs/{org}/apps/stray", json={}).status_code == 204
    assert relay.api("POST", f"/v2/orgs/{org}/tokens/stray-key", json={}).status_code == 201
    rule = relay.api("POST", f"/v2/orgs/{org}/apps/kept/alerting-rules",
                     json={"ruleType": "WorkflowFailure", "ruleMetadata": {}}).json()
    assert relay.api("PATCH", f"/v2/orgs/{org}/apps/kept", json={"executorTimeoutSecs": 99}).status_code == 204

    # Without pruning they stay: nothing to do (the file read from stdin, here).
    from_stdin = relay.run_cli(["diff", "-f", "-"], input=path.read_text())
    assert exits(from_stdin, 0).strip() == f"organization {org}: no changes"
    pruning = exits(run(relay, "diff", "-f", str(path), "--prune"), 1)
    assert pruning.splitlines()[1:] == [
        "~ settings kept: executorTimeoutSecs 99 -> 60",
        f"- alertRule kept {rule['id']}: WorkflowFailure, periodSecs=60 threshold=1",
        "- key stray-key: apps=* permissions=application.read,application.write,metric.read,websocket.connect",
        "- app stray",
    ]
    exits(run(relay, "apply", "-f", str(path), "--prune"), 0)
    assert relay.api("GET", f"/v2/orgs/{org}/apps/stray").status_code == 404
    assert relay.api("GET", f"/v2/orgs/{org}/tokens").json() == []
    assert [r["ruleType"] for r in relay.api("GET", f"/v2/orgs/{org}/apps/kept/alerting-rules").json()] == [
        "SlowQueue"]
    assert relay.api("GET", f"/v2/orgs/{org}/apps/kept").json()["executorTimeoutSecs"] == 60
    # The file's own `prune: true` says the same: nothing left to do.
    pruned = write(tmp_path, {**yaml.safe_load(path.read_text()), "prune": True}, "pruned.yaml")
    assert exits(run(relay, "diff", "-f", str(pruned)), 0).strip() == f"organization {org}: no changes"


def test_apply_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "data", database_url=pg_url,
                      env={"RELAY_DATA_PLANE_REFERENCES": "cfg_pg/orders=env:ORDERS_SYSDB"}) as server:
        org = new_org(server, "cfg_pg")
        path = write(tmp_path, config(org, FULL_APPS, FULL_KEYS))
        start = len(events(server, org))
        assert "applied 9 changes" in exits(run(server, "apply", "-f", str(path)), 0)
        assert len(events(server, org)) == start + 10  # nine changes and the audit entry
        assert exits(run(server, "diff", "-f", str(path)), 0)
        assert len(events(server, org)) == start + 10


def test_who_may_plan_and_apply(relay: RelayProcess) -> None:
    org = new_org(relay, "cfg_who")

    def key(name: str, permissions: list[str], apps: list[str] | None = None) -> str:
        answer = relay.api("POST", f"/v2/orgs/{org}/tokens/{name}", json={"permissions": permissions,
                                                                          "appNames": apps or []})
        assert answer.status_code == 201, answer.text
        return answer.json()["token"]

    everything = ["application.read", "application.write", "token.read", "token.write"]
    manager = key("manager", everything)
    reader = key("reader", ["application.read", "token.read"])
    scoped = key("scoped", everything, ["base"])
    listed = [{"name": "manager", "permissions": everything},
              {"name": "reader", "permissions": ["application.read", "token.read"]},
              {"name": "scoped", "permissions": everything, "apps": ["base"]}]
    document = config(org, [{"name": "made-by-key"}], [*listed, {"name": "new", "permissions": ["token.read"]}])
    body = {"config": document}
    plan_path, apply_path = f"/relay/v1/orgs/{org}/config/plan", f"/relay/v1/orgs/{org}/config/apply"

    assert relay.api("POST", plan_path, json=body, token=reader).status_code == 200
    assert relay.api("POST", apply_path, json=body, token=reader).status_code == 403
    assert relay.api("POST", plan_path, json=body, token=scoped).status_code == 403
    assert relay.api("POST", "/relay/v1/orgs/local/config/plan", json=body, token=manager).status_code == 403
    wider = {"config": {**document, "keys": [*listed, {"name": "new", "permissions": ["organization.write"]}]}}
    refused = relay.api("POST", apply_path, json=wider, token=manager)
    assert refused.status_code == 403 and "organization.write" in refused.json()["detail"]
    applied = relay.api("POST", apply_path, json=body, token=manager)
    assert applied.status_code == 200, applied.text
    assert [k["tokenName"] for k in applied.json()["keys"]] == ["new"]
    registered = [e for e in events(relay, org) if e["event"] == "App.Registered" and e["app"] == "made-by-key"]
    assert [e["details"]["by"] for e in registered] == ["api_key:manager"]
