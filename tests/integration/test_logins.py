"""Issue 34, point 10 (logins, sessions, forwards), against real `relay serve` processes:

- failed console and API logins are throttled per caller address (the one RELAY_TRUSTED_PROXIES names): 429
  with Retry-After past RELAY_LOGIN_FAILURES_PER_MIN, for a valid token too; other addresses are unaffected;
- a RELAY_ADMIN_TOKEN shorter than 32 characters stops `relay serve`, naming the variable, never the value;
- logout ends the session server-side: a cookie saved before it no longer works, nor its CSRF token, after a
  restart too, and on another instance of the cluster (two instances on one PostgreSQL);
- a signed forward is bound to its nonce and its target instance, and the nonces are shared in the store: a
  replay to the same instance, to another one, or after a restart is refused (two instances on one PostgreSQL).
(TLS: the Secure cookie and HSTS are tests/integration/test_tls.py's.)
"""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from relay.wire import signing as forwarding
from tests.integration.fake_executor import register_app, unique
from tests.support.console_http import console_session, csrf_token
from tests.support.procs import RelayProcess, run_cli
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

ORG = "local"
LIMIT = 5
STATS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["failed logins"]:
        record("logins", area="Logins, sessions and forwards (throttle, admin token length, logout, nonces)",
               tried={"failed logins": STATS["failed logins"], "logins refused by the throttle": STATS["throttled"],
                      "saved cookies replayed after logout": STATS["stale cookies"],
                      "forwards replayed (same instance, other instance, after a restart)": STATS["replays"],
                      "short admin tokens": STATS["short tokens"]},
               outcome="429 with Retry-After past the limit, other addresses served; short tokens refused by name; "
                       "every stale cookie and replayed forward refused, across instances and restarts")


# -- (a) failed logins, throttled per address ----------------------------------------------------------------------

def login_form(relay: RelayProcess, token: str, source: str) -> requests.Response:
    browser = relay.http_session()
    headers = {"X-Forwarded-For": source}
    form = csrf_token(browser.get(f"{relay.base_url}/login", headers=headers, timeout=10).text)
    return browser.post(f"{relay.base_url}/login", data={"token": token, "csrf_token": form}, headers=headers,
                        timeout=10, allow_redirects=False)


def test_failed_logins_are_throttled_per_caller_address() -> None:
    env = {"RELAY_LOGIN_FAILURES_PER_MIN": str(LIMIT), "RELAY_TRUSTED_PROXIES": "127.0.0.1/32"}
    with RelayProcess(env=env) as relay:
        relay.start()
        guesser, bystander = "203.0.113.7", "203.0.113.8"
        path = f"/v2/orgs/{ORG}/apps"

        def api(token: str, source: str) -> requests.Response:
            return relay.api("GET", path, token=token, headers={"X-Forwarded-For": source})

        # Failures at the console and at the API count together.
        for attempt in range(LIMIT):
            if attempt % 2:
                assert login_form(relay, f"wrong-{attempt}", guesser).status_code == 401
            else:
                assert api(f"dbos_wrong{attempt}", guesser).status_code == 401
            STATS["failed logins"] += 1
        # Past the limit: 429 with Retry-After, for a wrong token and for the valid admin token alike, at the API
        # and at the console's login form.
        for token in ("dbos_wrong-again", relay.admin_token):
            refused = api(token, guesser)
            assert refused.status_code == 429, refused.text
            assert refused.headers["Content-Type"] == "application/problem+json"
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            assert relay.admin_token not in refused.text
            STATS["throttled"] += 1
        form = login_form(relay, relay.admin_token, guesser)
        assert form.status_code == 429 and 1 <= int(form.headers["Retry-After"]) <= 60
        assert "Too many failed logins" in form.text
        STATS["throttled"] += 1
        # No token at all is no login: a plain 401.
        assert relay.api("GET", path, token="", headers={"X-Forwarded-For": guesser}).status_code == 401
        # Another address logs in, at the API and at the console.
        assert api(relay.admin_token, bystander).status_code == 200
        landed = login_form(relay, relay.admin_token, bystander)
        assert landed.status_code == 302 and "relay_console=" in landed.headers["Set-Cookie"]
        # Plain HTTP: no Secure cookie (the browser would never send it back), no HSTS (tests/integration/test_tls.py).
        assert "secure" not in landed.headers["Set-Cookie"].lower()
        assert "Strict-Transport-Security" not in landed.headers
        log = relay.log_text()
        assert log.count(f"failed logins from {guesser} reached {LIMIT}") == 1
        assert relay.admin_token not in log and "dbos_wrong" not in log


# -- (b) the admin token's minimum length --------------------------------------------------------------------------

def test_a_short_admin_token_stops_relay_serve_naming_the_variable(tmp_path: Path) -> None:
    short = "too-short-" + secrets.token_hex(8)  # 26 characters
    result = run_cli(["serve"], {"RELAY_DATA_DIR": str(tmp_path / "data"), "RELAY_ADMIN_TOKEN": short}, timeout=60)
    STATS["short tokens"] += 1
    assert result.returncode == 2, result.stderr
    assert "RELAY_ADMIN_TOKEN must be at least 32 characters long" in result.stderr
    assert short not in result.stderr + result.stdout and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made
    # 32 characters are enough (random: a token of one repeated letter would also be found, as a false leak, in
    # other tests' logs of long names made of that letter).
    with RelayProcess(admin_token=secrets.token_hex(16)) as relay:
        relay.start()
        assert relay.api("GET", f"/v2/orgs/{ORG}/apps").status_code == 200


# -- (c) logout ends the session -----------------------------------------------------------------------------------

def replay_cookie(relay: RelayProcess, cookies: requests.cookies.RequestsCookieJar, csrf: str,
                  app: str) -> tuple[int, int]:
    """A stolen copy of a console session: (status of a page, status of a form posted with its CSRF token)."""
    thief = relay.http_session()
    thief.cookies.update(cookies)
    page = thief.get(f"{relay.base_url}/orgs/{ORG}/apps", timeout=10, allow_redirects=False)
    thief = relay.http_session()  # the saved copy again (a refusal above may have replaced the cookie)
    thief.cookies.update(cookies)
    form = thief.post(f"{relay.base_url}/orgs/{ORG}/apps", data={"name": app, "csrf_token": csrf}, timeout=10,
                      allow_redirects=False)
    STATS["stale cookies"] += 1
    return page.status_code, form.status_code


def app_names(relay: RelayProcess) -> set[str]:
    return {a["name"] for a in relay.api("GET", f"/v2/orgs/{ORG}/apps").json()}


def test_logout_ends_the_session_for_every_copy_of_the_cookie_and_after_a_restart(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path / "data")
    with relay:
        relay.start()
        kept, _ = console_session(relay)
        browser, csrf = console_session(relay)
        saved = requests.cookies.RequestsCookieJar()
        saved.update(browser.cookies)
        assert replay_cookie(relay, saved, csrf, "made-before")[0] == 200  # the copy works while logged in
        assert "made-before" in app_names(relay)  # its form too: the refusals below are the logout's
        out = browser.post(f"{relay.base_url}/logout", data={"csrf_token": csrf}, timeout=10, allow_redirects=False)
        assert out.status_code == 302
        page, form = replay_cookie(relay, saved, csrf, "after-logout")
        assert page == 302 and form == 302  # to the login form; nothing done
        assert "after-logout" not in app_names(relay)
        relay.stop()
        relay.start()
        page, form = replay_cookie(relay, saved, csrf, "after-restart")
        assert page == 302 and form == 302
        assert "after-restart" not in app_names(relay)
        # A session nobody logged out still works after the restart (the refusals above are the logout's).
        assert kept.get(f"{relay.base_url}/orgs/{ORG}/apps", timeout=10, allow_redirects=False).status_code == 200


# -- two instances on one PostgreSQL: logout and forward nonces ----------------------------------------------------

@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Iterator[dict[str, RelayProcess]]:
    secret, admin = secrets.token_urlsafe(32), f"relay-pair-{secrets.token_urlsafe(24)}"
    relays: dict[str, RelayProcess] = {}
    try:
        for name in ("relay-a", "relay-b"):  # one after the other: the first creates the tables
            relays[name] = RelayProcess(tmp_path / name, database_url=pg_url, admin_token=admin,
                                        env={"RELAY_INSTANCE_ID": name, "RELAY_FORWARD_SECRET": secret}).start()
        yield relays
    finally:
        for relay in relays.values():
            relay.stop()


def test_a_logout_on_one_instance_ends_the_session_on_the_other(pair: dict[str, RelayProcess]) -> None:
    a, b = pair["relay-a"], pair["relay-b"]
    browser, csrf = console_session(a)
    saved = requests.cookies.RequestsCookieJar()
    saved.update(browser.cookies)
    assert replay_cookie(b, saved, csrf, "via-b")[0] == 200  # one cluster: B accepts A's session
    assert "via-b" in app_names(a)
    b_browser = b.http_session()
    b_browser.cookies.update(saved)
    assert b_browser.post(f"{b.base_url}/logout", data={"csrf_token": csrf}, timeout=10,
                          allow_redirects=False).status_code == 302
    page, form = replay_cookie(a, saved, csrf, "after-logout-on-b")
    assert page == 302 and form == 302
    assert "after-logout-on-b" not in app_names(a)


def forward(relay: RelayProcess, app_id: str, payload: bytes, headers: dict[str, str]) -> requests.Response:
    STATS["replays"] += 1
    return requests.post(f"{relay.base_url}/internal/v1/forward/{app_id}", data=payload, headers=headers, timeout=15)


def test_a_forward_is_refused_twice_on_any_instance_and_after_a_restart(pair: dict[str, RelayProcess]) -> None:
    a, b = pair["relay-a"], pair["relay-b"]
    secret = a.extra_env["RELAY_FORWARD_SECRET"]
    app = unique("fwd")
    register_app(a, app)
    app_id = a.api("GET", f"/v2/orgs/{ORG}/apps/{app}").json()["id"]
    payload = json.dumps({"org": ORG, "app": app, "frame": {"type": "executor_info"}}).encode()
    started = time.time()
    to_a = forwarding.signed_headers(secret, payload, target="relay-a")

    # Accepted once: its signature and nonce hold (no executor is connected to answer it: 503).
    first = forward(a, app_id, payload, to_a)
    assert first.status_code == 503, first.text
    again = forward(a, app_id, payload, to_a)
    assert again.status_code == 401 and "replay" in again.json()["detail"]
    # Replayed to the other instance: it was signed for relay-a.
    elsewhere = forward(b, app_id, payload, to_a)
    assert elsewhere.status_code == 401 and elsewhere.json()["detail"] == "signed for another instance"
    # The same nonce, signed right for relay-b (a holder of the secret reusing it): relay-b saw it in the store.
    same_nonce = forwarding.signed_headers(secret, payload, target="relay-b", nonce=to_a[forwarding.NONCE_HEADER])
    shared = forward(b, app_id, payload, same_nonce)
    assert shared.status_code == 401 and "replay" in shared.json()["detail"]
    # After a restart, still inside the signature's window.
    a.stop()
    a.start()
    assert time.time() - started < forwarding.MAX_SKEW_S, "the restart took longer than the window"
    restarted = forward(a, app_id, payload, to_a)
    assert restarted.status_code == 401 and "replay" in restarted.json()["detail"]
    # A fresh forward still goes through.
    assert forward(a, app_id, payload, forwarding.signed_headers(secret, payload, target="relay-a")).status_code == 503
    for relay in (a, b):
        assert secret not in relay.log_text()
