"""Who gets in, for every endpoint Relay serves, driven by its own GET /openapi.json and, for the console (which is
not in that document), by its Flask routes (so a new route is covered the day it is added), against a real
`relay serve`:

- every API operation (/v2, /relay/v1, /internal, /metrics, ...) without a token, or with any kind of wrong one
  (garbage, an unknown dbos_ key, a revoked key, the admin token with a character more or less, another scheme):
  401 problem+json, before any validation of the request; a key holding only websocket.connect: 403, or 401
  where bearer tokens do not apply; only the documented unauthenticated operations (security: []) answer;
- /websocket/{app}/{key} with a wrong key: 401 at the handshake;
- the console: every page redirects to the login without a session, every form post is refused without the
  session's CSRF token (login included), and a token of another session does not do;
- keys are stored hashed (no store file holds a key or the admin token, the SHA-256 of the key is there) and every
  comparison of a presented secret goes through hmac.compare_digest;
- failed WebSocket handshakes are rate-limited per source address (RELAY_HANDSHAKE_FAILURES_PER_MIN): past the
  limit an address gets 429 with Retry-After, whatever key it sends, while another address and the HTTP API are
  unaffected.

test_http_api.py and test_handshake.py pin single cases; this is the matrix. Revoked keys' sockets being closed
is test_handshake.py's test_revoking_a_key_closes_its_open_socket.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import inspect
import os
import re
import secrets
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.fake_executor import FakeExecutor, HandshakeRefusedError, create_key, register_app
from tests.support.flask_routes import url_rules
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

APP = "auth-matrix-app"
API_PREFIXES = ("/v2/", "/relay/", "/internal/", "/metrics", "/v1/")
PATH_VALUES = {"orgName": "local", "appName": APP, "tokenName": "auth-matrix-token", "executorId": "some-executor",
               "workflowId": "some-workflow", "queueName": "some-queue", "scheduleName": "some-schedule",
               "ruleId": "some-rule", "appID": "some-app-id", "filename": "console.css", "name": "some-key",
               "action": "cancel", "conductorKey": "dbos_not-a-key"}
STATS: Counter[str] = Counter()


@dataclass
class Setup:
    relay: RelayProcess
    doc: dict[str, Any]
    socket_only: str
    revoked: str


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    # Hundreds of wrong tokens from one address: the login throttle (test_logins.py) must not answer them first.
    return {"RELAY_LOGIN_FAILURES_PER_MIN": "1000000"}


@pytest.fixture(scope="module")
def setup(relay: RelayProcess) -> Setup:
    register_app(relay, APP)
    socket_only = create_key(relay, "socket-only", permissions=["websocket.connect"])
    revoked = create_key(relay, "revoked-key")
    assert relay.api("DELETE", "/v2/orgs/local/tokens/revoked-key").status_code == 204
    doc = relay.api("GET", "/openapi.json", token="").json()
    return Setup(relay, doc, socket_only, revoked)


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["requests"]:
        record(
            "auth-1-matrix", area="Authentication, every endpoint of /openapi.json",
            tried={"operations": STATS["operations"], "requests without or with a wrong token": STATS["requests"],
                   "console form posts without their CSRF token": STATS["csrf"],
                   "failed handshakes before the rate limit held": STATS["handshake failures"],
                   "handshakes refused 429": STATS["429"]},
            outcome="401 (API), 403 (websocket.connect-only key), a login redirect or a CSRF refusal (console) "
                    "every time; only the documented public operations answered; keys stored as SHA-256 only",
        )


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in doc["paths"].items() for method, op in ops.items()]


def fill(path: str) -> str:
    return re.sub(r"\{([^}]+)\}", lambda m: PATH_VALUES.get(m.group(1), "some-value"), path)


def is_api(path: str) -> bool:
    return path.startswith(API_PREFIXES)


def wrong_credentials(setup: Setup) -> dict[str, dict[str, str]]:
    admin = setup.relay.admin_token
    return {
        "no header": {},
        "empty bearer": {"Authorization": "Bearer "},
        "garbage": {"Authorization": "Bearer not-a-token-at-all"},
        "unknown dbos_ key": {"Authorization": "Bearer dbos_" + secrets.token_urlsafe(32)},
        "revoked key": {"Authorization": f"Bearer {setup.revoked}"},
        "admin token plus one": {"Authorization": f"Bearer {admin}x"},
        "admin token minus one": {"Authorization": f"Bearer {admin[:-1]}"},
        "basic scheme": {"Authorization": "Basic " + base64.b64encode(b"admin:" + admin.encode()).decode()},
        "token without scheme": {"Authorization": admin},
    }


def call(relay: RelayProcess, method: str, path: str, headers: dict[str, str]) -> requests.Response:
    body = {"json": {}} if method in ("POST", "PUT", "PATCH") else {}
    STATS["requests"] += 1
    return requests.request(method, f"{relay.base_url}{path}", headers=headers, timeout=15, allow_redirects=False,
                            **body)


def assert_problem(response: requests.Response, status: int, where: str) -> None:
    assert response.status_code == status, f"{where}: {response.status_code} {response.text[:300]}"
    assert response.headers["Content-Type"] == "application/problem+json", where
    assert response.json()["status"] == status, where


def test_the_document_lists_what_relay_serves(setup: Setup) -> None:
    ops = operations(setup.doc)
    api = [op for op in ops if is_api(op[1])]
    assert len(api) >= 45, len(api)  # the matrix below cannot pass by testing nothing
    public = {(m, p) for m, p, op in ops if op.get("security") == []}
    assert {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/openapi.json")} <= public
    # Every operation without bearer auth is one API.md names as unauthenticated, or checks a credential of its
    # own: the socket its key in the path, instance-to-instance forwarding its HMAC signature.
    own = {"/websocket/{appName}/{conductorKey}", "/internal/v1/forward/{appID}"}
    documents = {"/openapi.json", "/openapi.yaml", "/openapi-3.0.json", "/docs"}
    assert {p for _m, p in public} <= {"/healthz", "/readyz", *documents, *own}


def test_every_api_operation_refuses_missing_and_wrong_tokens(setup: Setup) -> None:
    relay = setup.relay
    checked = 0
    for method, path, op in operations(setup.doc):
        if not is_api(path) or (op.get("security") == [] and not path.startswith("/internal/")):
            continue
        STATS["operations"] += 1
        url = fill(path)
        for label, headers in wrong_credentials(setup).items():
            assert_problem(call(relay, method, url, headers), 401, f"{method} {path} with {label}")
            checked += 1
    assert checked >= 45 * 9
    assert relay.api("GET", f"/v2/orgs/local/apps/{APP}").status_code == 200  # nothing was changed or deleted


def test_a_key_with_only_websocket_connect_gets_nothing_from_the_api(setup: Setup) -> None:
    relay = setup.relay
    headers = {"Authorization": f"Bearer {setup.socket_only}"}
    for method, path, op in operations(setup.doc):
        if not is_api(path) or (op.get("security") == [] and not path.startswith("/internal/")):
            continue
        response = call(relay, method, fill(path), headers)
        expected = 401 if path.startswith("/internal/") else 403  # instance-to-instance: signed, not bearer
        assert_problem(response, expected, f"{method} {path} with a websocket.connect-only key")


def test_public_operations_answer_without_a_token_and_despite_a_wrong_one(setup: Setup) -> None:
    relay = setup.relay
    for method, path, op in operations(setup.doc):
        if op.get("security") != [] or path.startswith(("/websocket/", "/internal/")):
            continue
        STATS["operations"] += 1
        for headers in ({}, {"Authorization": "Bearer dbos_wrong"}):
            response = call(relay, method, path, headers)
            assert response.status_code == 200, f"{method} {path}: {response.status_code}"


def test_the_websocket_refuses_wrong_keys(setup: Setup) -> None:
    relay = setup.relay
    keys = {"unknown": "dbos_" + secrets.token_urlsafe(32), "revoked": setup.revoked, "garbage": "x" * 40,
            "admin plus one": relay.admin_token + "x"}
    for label, key in keys.items():
        fake = FakeExecutor(relay, APP, key)
        with pytest.raises(HandshakeRefusedError) as refused:
            fake.connect()
        fake.close()
        STATS["requests"] += 1
        assert refused.value.status == 401, label
        assert "sec-websocket-accept" not in refused.value.headers


def console_routes() -> list[tuple[str, str]]:
    """(method, path) of every console route, from the Flask app's URL map (the API document leaves them out)."""
    rules = url_rules()
    names = {"org": "orgName", "app": "appName", "workflow_id": "workflowId", "rule_id": "ruleId"}
    return sorted(
        (method, re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: "{" + names.get(m.group(1), m.group(1)) + "}", r.rule))
        for r in rules if r.endpoint.startswith("console.") for method in r.methods or () if method in ("GET", "POST")
    )


def test_console_pages_need_a_session_and_forms_need_its_csrf_token(setup: Setup) -> None:
    relay = setup.relay
    base = relay.base_url
    routes = console_routes()
    assert ("GET", "/orgs/{orgName}/apps/{appName}/workflows") in routes and ("POST", "/logout") in routes
    documented = {p for _m, p, _op in operations(setup.doc)}
    assert [p for _m, p in routes if p in documented] == []  # the console is not API (issue 29)
    for method, path in routes:
        if path in ("/login", "/console/static/{filename}"):
            continue
        STATS["operations"] += 1
        response = call(relay, method, fill(path), {})
        if path.startswith("/oauth/"):  # the SSO flow is open to anyone, and absent without RELAY_OIDC_CLIENT_ID
            assert response.status_code == 404, f"{path}: {response.status_code}"
            continue
        if method == "GET":
            assert response.status_code == 302, f"{path}: {response.status_code}"
            assert response.headers["Location"].startswith("/login"), path
        else:
            assert response.status_code == 403 and "CSRF" in response.text, f"{method} {path}"
    # Logged in (as the admin), every form post still needs this session's token.
    session, token = console_session(relay)
    other, other_token = console_session(relay)
    for method, path in routes:
        if method != "POST" or path == "/login":
            continue
        for data in ({}, {"csrf_token": "wrong"}, {"csrf_token": other_token}):
            STATS["csrf"] += 1
            response = session.post(f"{base}{fill(path)}", data={**data, "confirmed": "yes", "name": "csrf-k"},
                                    timeout=15, allow_redirects=False)
            assert response.status_code == 403 and "CSRF" in response.text, f"POST {path} with {data or 'none'}"
    assert "csrf-k" not in [t["tokenName"] for t in relay.api("GET", "/v2/orgs/local/tokens").json()]
    assert relay.api("GET", f"/v2/orgs/local/apps/{APP}").status_code == 200
    # Logging out is a form post like the others; with the token it ends the session.
    assert session.get(f"{base}/", timeout=10, allow_redirects=False).status_code in (200, 302)
    assert session.post(f"{base}/logout", data={"csrf_token": token}, timeout=10).status_code == 200
    assert session.get(f"{base}/orgs/local/apps", timeout=10, allow_redirects=False).status_code == 302
    other.close()


def console_session(relay: RelayProcess) -> tuple[requests.Session, str]:
    session = relay.http_session()
    form = session.get(f"{relay.base_url}/login", timeout=10)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert csrf
    # The login form itself is CSRF-protected: the right admin token without the form's token is refused.
    STATS["csrf"] += 1
    refused = session.post(f"{relay.base_url}/login", data={"token": relay.admin_token}, timeout=10,
                           allow_redirects=False)
    assert refused.status_code == 403 and "CSRF" in refused.text
    answer = session.post(f"{relay.base_url}/login", data={"csrf_token": csrf.group(1), "token": relay.admin_token},
                          timeout=10)
    assert answer.status_code == 200 and "/orgs/local/apps" in answer.url
    cookie = answer.history[0].headers.get("Set-Cookie", "") if answer.history else ""
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    fresh = re.search(r'name="csrf_token" value="([^"]+)"', answer.text)
    assert fresh and fresh.group(1) != csrf.group(1)  # a new session (and token) at login
    return session, fresh.group(1)


# -- how secrets are kept ------------------------------------------------------------------------------------------


def test_keys_are_stored_hashed(setup: Setup) -> None:
    relay = setup.relay
    key = create_key(relay, "stored-hashed")
    assert relay.api("GET", f"/v2/orgs/local/apps/{APP}", token=key).status_code == 200
    digest = hashlib.sha256(key.encode()).hexdigest().encode()
    files = [p for p in Path(relay.data_dir).rglob("*") if p.is_file() and not p.name.endswith(".log")]
    assert any(p.suffix in (".sqlite", ".sqlite-wal") for p in files), files
    found_hash = False
    for path in files:
        data = path.read_bytes()
        assert key.encode() not in data, f"{path.name} holds a key in clear"
        assert relay.admin_token.encode() not in data, f"{path.name} holds the admin token"
        found_hash = found_hash or digest in data
    assert found_hash, "the key's SHA-256 is in no store file"
    assert key not in relay.api("GET", "/v2/orgs/local/tokens").text


def _compares(module: Any) -> list[str]:
    """``==``/``!=`` comparisons in a module that involve a name or attribute about a token, key, hash or
    signature (those must go through hmac.compare_digest)."""
    suspicious = re.compile(r"token|hash|secret|signature|digest|key", re.IGNORECASE)
    found = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            names = [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
                     if isinstance(n, ast.Name | ast.Attribute)]
            if any(suspicious.search(name) for name in names):
                found.append(f"{module.__name__}:{node.lineno} {ast.unparse(node)}")
    return found


def test_presented_secrets_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import hmac

    from relay.projections import identity as auth
    from relay.web.console import auth as console_auth
    from relay.wire import signing as forwarding

    assert not _compares(auth) + _compares(console_auth) + _compares(forwarding)
    calls: list[tuple[int, int]] = []
    compare_digest = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((len(a), len(b)))
        return compare_digest(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    key = auth.new_api_key()

    class Applications:
        def shared_key_by_hash(self, key_hash: str) -> dict[str, Any] | None:
            if key_hash != auth.hash_key(key):  # a fake store's index lookup
                return None
            return {"key_hash": key_hash, "org": "local", "name": "k", "apps": [], "permissions": ["application.read"]}

    authenticator = auth.Authenticator("relay-admin-token-for-the-test", Applications())  # type: ignore[arg-type]
    assert authenticator.principal_for("relay-admin-token-for-the-test") is auth.ADMIN
    assert authenticator.principal_for(key) is not None
    assert authenticator.principal_for(key + "x") is None
    assert authenticator.principal_for("dbos_" + "y" * 43) is None
    # Every decision compared fixed-length digests, never the presented value itself.
    assert calls and all(a == b == 64 for a, b in calls)


# -- failed handshakes, rate-limited per address -------------------------------------------------------------------

LIMIT = 5
MINIMAL_APP = Path(__file__).resolve().parent / "executor_apps" / "minimal_app.py"


def raw_handshake(relay: RelayProcess, path: str, source: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    """An upgrade request from ``source`` (any 127.0.0.0/8 address: all are this machine's loopback)."""
    with socket.create_connection(("127.0.0.1", relay.port), timeout=10, source_address=(source, 0)) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{relay.port}\r\nUpgrade: websocket\r\n"
                     f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if "content-length" in headers:
            while len(body) < int(headers["content-length"]):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                body += chunk
        return int(lines[0].split()[1]), headers, body


def test_failed_handshakes_are_rate_limited_per_address_and_key() -> None:
    env = {"RELAY_HANDSHAKE_FAILURES_PER_MIN": str(LIMIT)}
    with RelayProcess(env=env) as relay:
        register_app(relay, APP)
        key = create_key(relay, "rate-limited")
        good, bad = f"/websocket/{APP}/{key}", f"/websocket/{APP}/dbos_{secrets.token_urlsafe(32)}"
        assert raw_handshake(relay, good)[0] == 101  # a success does not count
        for _ in range(LIMIT):
            assert raw_handshake(relay, bad)[0] == 401
            STATS["handshake failures"] += 1
        # Past the limit: 429 for this key from this address, before it is even looked up ...
        status, headers, body = raw_handshake(relay, bad)
        STATS["429"] += 1
        assert status == 429, body
        assert headers["content-type"] == "application/problem+json"
        assert 1 <= int(headers["retry-after"]) <= 60
        assert b"too many failed handshakes" in body and key.encode() not in body
        # ... but a valid key from the same address still gets in (behind NAT, a fleet shares one address).
        assert raw_handshake(relay, good)[0] == 101
        with FakeExecutor(relay, APP, key) as fake:
            fake.connect()
        # Other wrong keys from an address that keeps failing are slowed down (429), the valid one is not.
        other = f"/websocket/{APP}/dbos_{secrets.token_urlsafe(32)}"
        assert raw_handshake(relay, other)[0] == 429
        assert raw_handshake(relay, good)[0] == 101
        # Another address is not affected, and neither is the HTTP API of the failing one.
        assert raw_handshake(relay, other, source="127.0.0.2")[0] == 401
        assert relay.api("GET", f"/v2/orgs/local/apps/{APP}").status_code == 200
        text = relay.log_text()
        # One line per episode, naming the application, not one per refusal.
        assert text.count(f"application '{APP}' from 127.0.0.1 with the same wrong key refused for a while") == 1
        assert key not in text and bad.rsplit("/", 1)[1] not in text


def test_a_stale_executor_retrying_a_wrong_key_does_not_lock_out_a_valid_one(tmp_path: Path) -> None:
    """Issue 14: a real DBOS executor with a wrong key retries every second from 127.0.0.1; once it is locked
    out, a valid executor from the same address connects at once (within 2 s), and a real valid DBOS executor
    from the same address is HEALTHY as usual. The lockout is logged once."""
    env = {"RELAY_HANDSHAKE_FAILURES_PER_MIN": str(LIMIT)}
    with RelayProcess(env=env) as relay:
        register_app(relay, APP)
        key = create_key(relay, "valid-key")
        executor_env = {"APP_NAME": APP, "CONDUCTOR_URL": relay.ws_url}
        stale = ExecutorProcess(MINIMAL_APP, name="stale", cwd=tmp_path / "stale",
                                env={**executor_env, "CONDUCTOR_KEY": f"dbos_{secrets.token_urlsafe(32)}"})
        with stale.start():
            lockout = f"application '{APP}' from 127.0.0.1 with the same wrong key refused for a while"
            wait_until(lambda: lockout in relay.log_text(), 60, message="the stale executor was never locked out")
            started = time.monotonic()
            with FakeExecutor(relay, APP, key) as fake:
                fake.connect()
            assert time.monotonic() - started < 2.0
            valid = ExecutorProcess(MINIMAL_APP, name="valid", cwd=tmp_path / "valid",
                                    env={**executor_env, "CONDUCTOR_KEY": key})
            with valid.start():
                valid.wait_for_log("READY ", timeout=60)
                wait_until(lambda: any(e["status"] == "HEALTHY" for e in
                                       relay.api("GET", f"/v2/orgs/local/apps/{APP}/executors").json()),
                           30, message="the valid executor never became HEALTHY")
                # The stale one is still being refused (it retries every second): still one line.
                refusals = relay.log_text().count(" 429 ")
                wait_until(lambda: relay.log_text().count(" 429 ") > refusals + 1, 10,
                           message="the stale executor stopped retrying")
        assert relay.log_text().count(lockout) == 1
