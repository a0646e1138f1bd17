"""Issue 29, point 9c: behind a reverse proxy listed in RELAY_TRUSTED_PROXIES, X-Forwarded-For names the caller,
for the audit log's `sourceIp` and for the per-address handshake limit; from any other peer the header changes
nothing (the test's requests come from 127.0.0.1, the "proxy")."""

from __future__ import annotations

import json

import pytest
import websocket

from tests.integration.fake_executor import register_app, unique
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

CALLER = "203.0.113.7"


def audited_source(relay: RelayProcess, forwarded_for: str) -> str:
    """Register an application with X-Forwarded-For set; the sourceIp of its audit entry."""
    app = unique("xff")
    answer = relay.api("PUT", f"/v2/orgs/local/apps/{app}", json={}, headers={"X-Forwarded-For": forwarded_for})
    assert answer.status_code == 204, answer.text
    entries = relay.api("GET", "/v2/orgs/local/audit-logs").json()
    mine = [e for e in entries if e["operation"] == "registerApp" and app in json.dumps(e)]
    assert len(mine) == 1, entries
    return str(mine[0]["sourceIp"])


@pytest.mark.parametrize(("trusted", "expected"), [
    ("127.0.0.1/32", CALLER),  # the peer is a trusted proxy: the caller it names
    (None, "127.0.0.1"),  # no trusted proxies: the header is ignored
    ("10.0.0.0/8", "127.0.0.1"),  # the peer is not one of them: a forged header changes nothing
])
def test_the_audit_log_names_the_caller_only_behind_a_trusted_proxy(trusted: str | None, expected: str) -> None:
    env = {"RELAY_TRUSTED_PROXIES": trusted} if trusted else {}
    with RelayProcess(env=env) as relay:
        relay.start()
        assert audited_source(relay, CALLER) == expected
        # A client's own X-Forwarded-For entries, left of what the proxy appended, are never believed.
        assert audited_source(relay, f"198.51.100.9, {CALLER}") == expected


def handshake_status(relay: RelayProcess, app: str, forwarded_for: str) -> int:
    try:
        ws = websocket.create_connection(f"{relay.ws_url}/websocket/{app}/dbos_not-a-key-{'x' * 30}", timeout=10,
                                         header=[f"X-Forwarded-For: {forwarded_for}"])
    except websocket.WebSocketBadStatusException as refused:
        return int(refused.status_code)
    ws.close()
    return 101


@pytest.mark.parametrize(("trusted", "other_caller_status"), [("127.0.0.1/32", 401), ("10.0.0.0/8", 429)])
def test_handshake_failures_are_counted_per_caller_behind_a_trusted_proxy(trusted: str,
                                                                          other_caller_status: int) -> None:
    env = {"RELAY_TRUSTED_PROXIES": trusted, "RELAY_HANDSHAKE_FAILURES_PER_MIN": "2"}
    with RelayProcess(env=env) as relay:
        relay.start()
        app = unique("xff")
        register_app(relay, app)
        assert [handshake_status(relay, app, CALLER) for _ in range(3)] == [401, 401, 429]
        # Another caller behind the same proxy is not locked out by the first one's failures; without a trusted
        # proxy both are 127.0.0.1, one address, and the header cannot get the second one out of the lockout.
        assert handshake_status(relay, app, "203.0.113.8") == other_caller_status
