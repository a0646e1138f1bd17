"""Issue 34, point 7: deeply nested JSON bodies, against a real `relay serve`.

100,000 nested arrays made the parser recurse until RecursionError: 500s with tracebacks, and, on routes that
ignore their body (DELETE of a token, of a data plane), the action ran while the audit trail, parsing the body
again, raised and lost its entry. Now a route that reads its body answers 400 (problem+json) before anything
runs, a route that ignores it still ignores it, and either way the audit log has the operation, performed or
refused; the server logs no traceback.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import requests

from tests.integration.fake_executor import create_key, register_app, unique
from tests.support.procs import RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

ORG = "local"
LEVELS = 100_000
NESTED = "[" * LEVELS + "]" * LEVELS
NESTED_OBJECTS = '{"a":' * LEVELS + "1" + "}" * LEVELS


def send(relay: RelayProcess, method: str, path: str, body: str) -> requests.Response:
    return relay.api(method, path, data=body.encode(), headers={"Content-Type": "application/json"}, timeout=30)


def audit(relay: RelayProcess, operation: str, target: str) -> list[dict[str, Any]]:
    entries = relay.api("GET", f"/v2/orgs/{ORG}/audit-logs", params={"limit": 1000}).json()
    return [e for e in entries if e["operation"] == operation and e["target"]["id"] == target]


def token_names(relay: RelayProcess) -> set[str]:
    names = {k["tokenName"] for k in relay.api("GET", f"/v2/orgs/{ORG}/tokens").json()}
    assert "bystander" in names  # the list is read for real
    return names


def assert_problem(answer: requests.Response, status: int) -> None:
    assert answer.status_code == status, answer.text[:300]
    assert answer.headers["Content-Type"].startswith("application/problem+json")
    assert "nests deeper than 64 levels" in answer.json()["detail"]


def test_nested_bodies_are_refused_or_ignored_and_always_audited() -> None:
    started = time.monotonic()
    sent = 0
    with RelayProcess() as relay:
        relay.start()
        app = unique("nest")
        register_app(relay, app)

        # A route that ignores its body: the key is revoked, and the revocation is in the audit log.
        create_key(relay, "bystander", appNames=[app])
        create_key(relay, "doomed", appNames=[app])
        assert "doomed" in token_names(relay)
        answer = send(relay, "DELETE", f"/v2/orgs/{ORG}/tokens/doomed", NESTED)
        sent += 1
        assert answer.status_code == 204, answer.text[:300]
        assert "doomed" not in token_names(relay)
        assert [e["status"] for e in audit(relay, "deleteToken", "doomed")] == ["success"]

        # The data plane's DELETE ignores its body too.
        answer = send(relay, "DELETE", f"/relay/v1/orgs/{ORG}/apps/{app}/data-plane", NESTED_OBJECTS)
        sent += 1
        assert answer.status_code == 204, answer.text[:300]
        assert [e["status"] for e in audit(relay, "deleteDataPlane", app)] == ["success"]

        # Routes that read their body refuse it, before anything runs, and the refusal is audited.
        for body in (NESTED, NESTED_OBJECTS):
            answer = send(relay, "POST", f"/v2/orgs/{ORG}/apps/{app}/workflows/wf-1/cancel", body)
            sent += 1
            assert_problem(answer, 400)
        assert [e["status"] for e in audit(relay, "cancelWorkflow", "wf-1")] == ["failure", "failure"]

        answer = send(relay, "POST", f"/v2/orgs/{ORG}/tokens/never", '{"appNames": ' + NESTED + "}")
        sent += 1
        assert_problem(answer, 400)
        assert "never" not in token_names(relay)
        assert [e["status"] for e in audit(relay, "createToken", "never")] == ["failure"]

        # Just under the cap is still an ordinary body (here: a bad value, named).
        shallow = '{"appNames": ' + "[" * 63 + "]" * 63 + "}"
        answer = send(relay, "POST", f"/v2/orgs/{ORG}/tokens/shallow", shallow)
        assert answer.status_code == 422 and "body.appNames" in answer.json()["detail"], answer.text[:300]

        assert relay.api("GET", "/healthz").status_code == 200
        log = relay.log_text()
    assert "Traceback" not in log and "RecursionError" not in log, log[-3000:]
    record("nested-json", area="Deeply nested JSON bodies (100,000 levels)",
           tried={"nested bodies sent (DELETE token, DELETE data plane, cancel, create token)": sent,
                  "levels each": LEVELS, "seconds": round(time.monotonic() - started, 1)},
           outcome="400 problem+json where the body is read, ignored where it is not; every action audited; "
                   "no traceback")


def test_the_audit_trail_names_targets_from_a_body_it_can_read() -> None:
    """The safe body read still gives the audit trail a bulk body's ids."""
    with RelayProcess() as relay:
        relay.start()
        app = unique("nest")
        register_app(relay, app)
        body = json.dumps({"workflowIds": ["wf-a", "wf-b"]})
        answer = send(relay, "POST", f"/v2/orgs/{ORG}/apps/{app}/workflows/bulk-cancel", body)
        assert answer.status_code >= 400  # no executor
        entries = relay.api("GET", f"/v2/orgs/{ORG}/audit-logs").json()
        bulk = [e for e in entries if e["operation"] == "bulkCancelWorkflows"]
        assert bulk and "wf-a" in json.dumps(bulk[0]), entries
