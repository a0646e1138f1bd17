"""The executor handshake at /websocket/{appName}/{conductorKey}, against a real `relay serve`.

Refusals happen before the upgrade, as plain HTTP problem+json: 401 for a key Relay does not know (or
no longer knows: a revoked key is unknown, as on the HTTP API), 403 for everything else. Every refusal
carries the same detail, so a caller cannot tell a wrong app from a wrong key. A good key is upgraded and
Relay speaks first with executor_info. Keys never reach the log.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.integration.fake_executor import (
    FakeExecutor,
    HandshakeRefusedError,
    create_key,
    executors,
    register_app,
    unique,
    wait_status,
)
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def app(relay: RelayProcess) -> str:
    name = unique("hs-app")
    register_app(relay, name)
    return name


def refusal(relay: RelayProcess, app: str, key: str) -> HandshakeRefusedError:
    fake = FakeExecutor(relay, app, key)
    with pytest.raises(HandshakeRefusedError) as caught:
        fake.connect()
    fake.close()
    return caught.value


def assert_refused(relay: RelayProcess, app: str, key: str, status: int) -> dict:
    """The handshake is answered with ``status`` as problem+json, without an upgrade; returns the body."""
    error = refusal(relay, app, key)
    assert error.status == status
    assert error.headers.get("content-type") == "application/problem+json"
    assert "sec-websocket-accept" not in error.headers
    assert "upgrade" not in error.headers
    body = json.loads(error.body)
    assert body["status"] == status
    assert body["title"] in ("Unauthorized", "Forbidden")
    assert key not in error.body.decode()
    return body


def assert_not_logged(relay: RelayProcess, *secrets_: str) -> None:
    text = relay.log_text()
    for secret in secrets_:
        assert secret not in text


def test_good_key_is_upgraded_and_asked_executor_info_first(relay: RelayProcess, app: str) -> None:
    key = create_key(relay, unique("good"))
    with FakeExecutor(relay, app, key) as fake:
        first = fake.connect()
        assert set(first) == {"type", "request_id"}
        assert first["type"] == "executor_info"
        assert isinstance(first["request_id"], str) and first["request_id"]
        fake.identify(first)
        wait_status(relay, app, fake.executor_id, "HEALTHY")
        listed = executors(relay, app)[fake.executor_id]
        assert listed["language"] == "python" and listed["dbosVersion"] == "3.2.0"
        assert listed["appVersion"] == "fake-version-1"
    wait_status(relay, app, fake.executor_id, "DISCONNECTED")
    assert_not_logged(relay, key)


def test_every_request_id_is_fresh(relay: RelayProcess, app: str) -> None:
    key = create_key(relay, unique("ids"))
    seen = set()
    for _ in range(3):
        with FakeExecutor(relay, app, key) as fake:
            seen.add(fake.connect()["request_id"])
    assert len(seen) == 3


def test_admin_token_is_allowed(relay: RelayProcess, app: str) -> None:
    with FakeExecutor(relay, app, relay.admin_token) as fake:
        first = fake.connect()
        assert first["type"] == "executor_info"
        fake.identify(first)
        wait_status(relay, app, fake.executor_id, "HEALTHY")
    assert_not_logged(relay, relay.admin_token)


def test_unknown_key_is_401(relay: RelayProcess, app: str) -> None:
    for key in ("dbos_" + "x" * 43, "not-even-a-dbos-key", "dbos_"):
        assert_refused(relay, app, key, 401)
    # The access log names the request with the key redacted.
    wait_until(lambda: f"/websocket/{app}/<redacted>" in relay.log_text(), timeout=5, message="no access line")
    assert_not_logged(relay, "dbos_" + "x" * 43, "not-even-a-dbos-key")


def test_unregistered_app_is_403(relay: RelayProcess) -> None:
    key = create_key(relay, unique("unreg"))
    assert_refused(relay, unique("never-registered"), key, 403)
    assert_not_logged(relay, key)


def test_deleted_app_is_403(relay: RelayProcess, app: str) -> None:
    key = create_key(relay, unique("deleted"))
    assert relay.api("DELETE", f"/v2/orgs/local/apps/{app}").status_code == 204
    assert_refused(relay, app, key, 403)


def test_revoked_key_is_refused(relay: RelayProcess, app: str) -> None:
    name = unique("revoked")
    key = create_key(relay, name)
    assert relay.api("DELETE", f"/v2/orgs/local/tokens/{name}").status_code == 204
    # Revoked keys are unknown to Relay: 401, the same answer as the HTTP API gives them.
    assert_refused(relay, app, key, 401)
    assert relay.api("GET", f"/v2/orgs/local/apps/{app}", token=key).status_code == 401
    assert_not_logged(relay, key)


def test_key_scoped_to_another_app_is_403(relay: RelayProcess, app: str) -> None:
    other = unique("hs-other")
    register_app(relay, other)
    key = create_key(relay, unique("scoped"), appNames=[other])
    assert_refused(relay, app, key, 403)
    # ...while its own app lets it in.
    with FakeExecutor(relay, other, key) as fake:
        assert fake.connect()["type"] == "executor_info"
    assert_not_logged(relay, key)


def test_key_without_websocket_connect_is_403(relay: RelayProcess, app: str) -> None:
    key = create_key(relay, unique("noconnect"), permissions=["application.read", "application.write"])
    assert_refused(relay, app, key, 403)
    assert_not_logged(relay, key)


def test_key_of_another_org_is_403(relay: RelayProcess, app: str) -> None:
    """The socket path names no org: the key's own org is the one searched, and the app is not there."""
    org = "hs_other_org"
    register_app(relay, unique("hs-elsewhere"), org=org)
    key = create_key(relay, unique("otherorg"), org=org)
    assert_refused(relay, app, key, 403)
    # The same app name registered in the key's org: that one is where the key connects.
    register_app(relay, app, org=org)
    with FakeExecutor(relay, app, key) as fake:
        fake.connect_and_identify()
        wait_until(
            lambda: fake.executor_id in executors(relay, app, org=org), timeout=10, message="not in the key's org"
        )
    assert fake.executor_id not in executors(relay, app)


def test_refusals_do_not_say_why(relay: RelayProcess, app: str) -> None:
    """Every refusal has the same detail: nothing tells a wrong app from a wrong or unentitled key."""
    other = unique("hs-why")
    register_app(relay, other)
    good = create_key(relay, unique("why-good"))
    revoked_name = unique("why-revoked")
    revoked = create_key(relay, revoked_name)
    relay.api("DELETE", f"/v2/orgs/local/tokens/{revoked_name}")
    scoped = create_key(relay, unique("why-scoped"), appNames=[other])
    weak = create_key(relay, unique("why-weak"), permissions=["application.read"])
    bodies = [
        assert_refused(relay, app, "dbos_unknownunknownunknown", 401),
        assert_refused(relay, app, revoked, 401),
        assert_refused(relay, unique("why-missing"), good, 403),
        assert_refused(relay, app, scoped, 403),
        assert_refused(relay, app, weak, 403),
    ]
    details = {b["detail"] for b in bodies}
    assert len(details) == 1
    (detail,) = details
    for word in ("revoked", "permission", "websocket.connect", "scope", "not found", "unknown", app):
        assert word not in detail.lower()
    assert set().union(*(b.keys() for b in bodies)) <= {"type", "title", "status", "detail"}
    assert_not_logged(relay, good, revoked, scoped, weak)


def test_revoking_a_key_closes_its_open_socket(relay: RelayProcess, app: str) -> None:
    name = unique("live-revoke")
    key = create_key(relay, name)
    bystander_key = create_key(relay, unique("bystander"))
    with FakeExecutor(relay, app, key) as fake, FakeExecutor(relay, app, bystander_key) as bystander:
        fake.connect_and_identify()
        bystander.connect_and_identify()
        wait_status(relay, app, fake.executor_id, "HEALTHY")
        wait_status(relay, app, bystander.executor_id, "HEALTHY")

        assert relay.api("DELETE", f"/v2/orgs/local/tokens/{name}").status_code == 204
        assert fake.wait_closed() == 1000
        wait_status(relay, app, fake.executor_id, "DISCONNECTED")
        # Only the sockets of that key go.
        bystander.ping_pong()
        assert executors(relay, app)[bystander.executor_id]["status"] == "HEALTHY"
    # And the key cannot come back.
    assert_refused(relay, app, key, 401)
    assert_not_logged(relay, key, bystander_key)


def test_no_key_in_the_log_at_all(relay: RelayProcess) -> None:
    """Whatever ran before in this module: no key issued by this server, nor the admin token, is logged."""
    text = relay.log_text()
    assert relay.admin_token not in text
    assert "dbos_" not in text.replace("dbos_version", "")


def test_shutdown_sends_executors_a_going_away_close_frame(tmp_path: Path) -> None:
    """Issue 14: `relay serve` stopping (SIGTERM) closes every executor socket with 1001 (going away), so the
    SDK reconnects (to a peer, or to the next start) instead of finding its socket dropped."""
    relay = RelayProcess(tmp_path / "data").start()
    try:
        register_app(relay, "going-away")
        key = create_key(relay, "going-away-key")
        with FakeExecutor(relay, "going-away", key) as identified, FakeExecutor(relay, "going-away", key) as fresh:
            identified.connect_and_identify()
            fresh.connect()  # asked executor_info, not answered yet: closed all the same
            assert relay.proc is not None
            relay.proc.send_signal(signal.SIGTERM)
            assert identified.wait_closed() == 1001
            assert fresh.wait_closed() == 1001
        assert relay.stop() == 0
        assert "did not close in time" not in relay.log_text()
    finally:
        relay.stop()
