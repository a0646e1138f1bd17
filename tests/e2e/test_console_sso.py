"""The console's sign-in with SSO (issue 31), end to end in Chromium through a real identity provider's own login
page (npm oidc-provider, tests/support/idp.py): two people, an administrator (RELAY_OIDC_ADMIN_EMAILS) and one
invited with a join secret, see and may do different things; a removed member is signed out at once; logout
goes through the provider's end_session_endpoint; a forged, crossed or replayed callback ends on an error page
with no session. This Relay turns the token login off (RELAY_CONSOLE_TOKEN_LOGIN=false).

The tests run in order, each building on the last (the module's state: `PEOPLE`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.e2e.axe_audit import assert_accessible
from tests.e2e.console_support import APP, PREFIX, WAIT_S, register_app, shot
from tests.support.console_http import csrf_token
from tests.support.idp import IdentityProvider
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

ADMIN, VIEWER = "alice", "bob"
READ_ONLY_ROLE = "viewer"
READ_ONLY_PERMISSIONS = ("application.read", "metric.read", "organization.read")
ORG = "local"  # RELAY_DEFAULT_ORG: where the administrator's e-mail lands
EXECUTOR_READY_S = 90.0
PEOPLE: dict[str, Any] = {}  # what a test leaves the next: browser contexts, the join secret, a used callback URL


@pytest.fixture(scope="module")
def sso_relay(identity_provider: IdentityProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    server = RelayProcess(tmp_path_factory.mktemp("relay-sso"), env={
        **identity_provider.relay_env(),
        "RELAY_OIDC_ADMIN_EMAILS": identity_provider.email_of(ADMIN),
        "RELAY_CONSOLE_TOKEN_LOGIN": "false",
    })
    # The console's redirect URI, and its login page as where logging out at the provider comes back to.
    identity_provider.allow_relay(server.base_url, post_logout_paths=("/login",))
    with server:
        yield server


@pytest.fixture(scope="module")
def shop(sso_relay: RelayProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecutorProcess]:
    """The `shop` application's executor (tests/e2e/console_app.py), started at once and waited for only where a
    test needs its workflows: it boots while people sign in."""
    key = register_app(sso_relay, APP)
    proc = ExecutorProcess(
        Path(__file__).with_name("console_app.py"), cwd=tmp_path_factory.mktemp("sso-shop"), name="sso-shop",
        env={"APP_NAME": APP, "CONDUCTOR_URL": sso_relay.ws_url, "CONDUCTOR_KEY": key, "SCENARIO_PREFIX": PREFIX},
    ).start()
    try:
        yield proc
    finally:
        proc.kill()  # its approval workflows wait for ever


@pytest.fixture(scope="module")
def people(browser: Browser) -> Iterator[dict[str, BrowserContext]]:
    """One browser context (cookie jar) per person."""
    contexts = {}
    for person in (ADMIN, VIEWER):
        contexts[person] = browser.new_context(viewport={"width": 1360, "height": 900})
        contexts[person].set_default_timeout(WAIT_S * 1000)
    try:
        yield contexts
    finally:
        for context in contexts.values():
            context.close()


def sign_in(page: Page, relay: RelayProcess, login: str) -> None:
    """From the console's login page through the provider's login (any password) and consent pages, back to
    the console."""
    page.goto(relay.base_url + "/login")
    page.click("[data-testid=sso-login]")
    # The provider's pages; or straight back, for a person with a session and a grant there already.
    page.wait_for_url(lambda url: "/interaction/" in url or (
        url.startswith(relay.base_url) and not re.search(r"/oauth/|/login", url)))
    for _ in range(4):  # login, then consent
        if page.url.startswith(relay.base_url):
            return
        if page.locator("input[name=login]").count():
            page.fill("input[name=login]", login)
            page.fill("input[name=password]", "any password")
        with page.expect_navigation():
            page.click("button[type=submit]")
    expect(page).to_have_url(re.compile("^" + re.escape(relay.base_url)))


def register(page: Page, username: str, secret: str | None = None) -> None:
    expect(page.locator("[data-testid=register]")).to_be_visible()
    page.fill("#username", username)
    if secret:
        page.fill("#secret", secret)
    page.click("[data-testid=register] button.primary")
    expect(page.locator("[data-testid=user-menu]")).to_be_visible()


def user_menu(page: Page) -> dict[str, str]:
    page.click("[data-testid=user-menu] summary")
    return {name: page.locator(f"[data-testid={testid}]").inner_text().strip()
            for name, testid in (("who", "principal"), ("org", "user-org"), ("role", "user-role"))}


# -- the login page --------------------------------------------------------------------------------------------------
def test_login_page_offers_sso_and_no_token_form(sso_relay: RelayProcess, people: dict[str, BrowserContext]) -> None:
    page = people[ADMIN].new_page()
    page.goto(sso_relay.base_url + "/")
    expect(page).to_have_url(re.compile(r"/login"))
    expect(page.locator("[data-testid=sso-login]")).to_have_text("Sign in with SSO")
    assert page.locator("[data-testid=token-login]").count() == 0
    assert page.locator("#token").count() == 0
    shot(page, "sso-010-login")
    assert_accessible(page, "SSO login page")
    page.close()


# -- the administrator -----------------------------------------------------------------------------------------------
def test_admin_signs_in_registers_and_invites(
    sso_relay: RelayProcess, identity_provider: IdentityProvider, people: dict[str, BrowserContext],
    shop: ExecutorProcess,
) -> None:
    del shop  # booting meanwhile
    page = people[ADMIN].new_page()
    callbacks: list[str] = []
    page.on("request", lambda r: callbacks.append(r.url) if "/oauth/callback" in r.url else None)
    sign_in(page, sso_relay, ADMIN)
    expect(page).to_have_url(re.compile(r"/register$"))
    assert page.locator("#username").input_value() == ADMIN  # suggested from the e-mail
    shot(page, "sso-020-register")
    assert_accessible(page, "register page")
    register(page, ADMIN)
    PEOPLE["callback"] = callbacks[-1]
    # The token form is not just hidden: a token posted to it (with a valid CSRF token) is refused, the admin's too.
    form = csrf_token(page.content())
    refused = people[ADMIN].request.post(f"{sso_relay.base_url}/login", max_redirects=0,
                                         form={"token": sso_relay.admin_token, "csrf_token": form})
    assert refused.status == 403 and "RELAY_CONSOLE_TOKEN_LOGIN" in refused.text(), refused.status
    menu = user_menu(page)
    assert menu == {"who": f"{ADMIN} ({identity_provider.email_of(ADMIN)})", "org": ORG,
                    "role": "Organization Admin"}, menu
    shot(page, "sso-030-user-menu")
    assert_accessible(page, "user menu open")

    page.click("[data-testid=user-menu] a:text('Members & roles')")
    expect(page).to_have_url(re.compile(f"/orgs/{ORG}/members$"))
    expect(page.locator(f"tr[data-member={ADMIN}] [data-testid=member-role]")).to_have_text("Organization Admin")

    page.fill("#role-name", READ_ONLY_ROLE)
    for permission in READ_ONLY_PERMISSIONS:
        page.check(f"form.create-role input[value='{permission}']")
    page.click("form.create-role button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text(f"Role {READ_ONLY_ROLE} created")
    expect(page.locator(f"tr[data-role={READ_ONLY_ROLE}] td.perms")).to_have_text(", ".join(READ_ONLY_PERMISSIONS))

    page.click("[data-testid=invite]")
    secret = page.locator("#new-secret").inner_text().strip()
    assert len(secret) >= 16
    sso_relay.remember_secret(secret, "join secret")
    PEOPLE["secret"] = secret
    shot(page, "sso-040-members")
    assert_accessible(page, "members page")
    page.goto(f"{sso_relay.base_url}/orgs/{ORG}/members")  # shown once: not again
    assert page.locator("#new-secret").count() == 0

    # The organization's own settings (issue 33: what requestDomainClaim, releaseDomainClaim and updateOrg change),
    # each confirmed. The domain is none of the provider's: nobody registering here joins by it.
    page.fill("#claim-domain", "parity.example")
    page.get_by_role("button", name="Claim domain…").click()
    page.click("[data-testid=confirm-button]")
    expect(page.locator(".flash.ok")).to_contain_text("Domain parity.example claimed.")
    claims = sso_relay.api("GET", f"/v2/orgs/{ORG}/domain-claims").json()["claims"]
    assert [c["domain"] for c in claims] == ["parity.example"], claims
    page.locator("tr[data-domain='parity.example']").get_by_role("button", name="Release…").click()
    page.click("[data-testid=confirm-button]")
    expect(page.locator(".flash.ok")).to_contain_text("Claim on parity.example released.")
    assert sso_relay.api("GET", f"/v2/orgs/{ORG}/domain-claims").json()["claims"] == []
    page.fill("#retention-days", "30")
    page.get_by_role("button", name="Save retention…").click()
    page.click("[data-testid=confirm-button]")
    expect(page.locator(".flash.ok")).to_contain_text("Audit log retention set to 30 days.")
    assert sso_relay.api("GET", f"/v2/orgs/{ORG}").json()["auditLogRetentionDays"] == 30
    page.close()


# -- a second person, read-only ------------------------------------------------------------------------------------
def test_invited_person_joins_and_a_read_only_role_offers_no_action(
    sso_relay: RelayProcess, identity_provider: IdentityProvider, people: dict[str, BrowserContext],
    shop: ExecutorProcess,
) -> None:
    viewer = people[VIEWER].new_page()
    sign_in(viewer, sso_relay, VIEWER)
    register(viewer, VIEWER, PEOPLE["secret"])
    menu = user_menu(viewer)
    assert menu == {"who": f"{VIEWER} ({identity_provider.email_of(VIEWER)})", "org": ORG,
                    "role": "Organization Member"}, menu

    admin = people[ADMIN].new_page()
    admin.goto(f"{sso_relay.base_url}/orgs/{ORG}/members")
    row = admin.locator(f"tr[data-member={VIEWER}]")
    row.locator("select[name=role]").select_option(READ_ONLY_ROLE)
    row.locator("form.grant button").click()
    expect(admin.locator(".flash.ok")).to_contain_text(f"{VIEWER} is now {READ_ONLY_ROLE}")
    expect(admin.locator(f"tr[data-member={VIEWER}] [data-testid=member-role]")).to_have_text(READ_ONLY_ROLE)

    # The new role from the viewer's next request on.
    viewer.goto(f"{sso_relay.base_url}/orgs/{ORG}/apps")
    assert user_menu(viewer)["role"] == READ_ONLY_ROLE
    expect(viewer.locator("table[data-testid=apps]")).to_contain_text(APP)
    for offered in ("form[action$='/apps']", "a:text('API keys')"):
        assert viewer.locator(offered).count() == 0, offered
    viewer.goto(f"{sso_relay.base_url}/orgs/{ORG}/members")
    expect(viewer.locator(f"tr[data-member={ADMIN}]")).to_be_visible()
    for offered in ("form.grant", "form.remove", "[data-testid=invite]", "form.create-role"):
        assert viewer.locator(offered).count() == 0, offered

    # A workflow still waiting: its page offers no cancel (nor any other action) to the viewer.
    shop.wait_for_log("READY ", timeout=EXECUTOR_READY_S)
    wait_until(lambda: any(e["status"] == "HEALTHY" for e in sso_relay.api(
        "GET", f"/v2/orgs/{ORG}/apps/{APP}/executors").json()), timeout=WAIT_S, message=f"no {APP} executor HEALTHY")
    waiting = f"{PREFIX}-approval"
    viewer.goto(f"{sso_relay.base_url}/orgs/{ORG}/apps/{APP}/workflows/{waiting}")
    expect(viewer.locator("[data-testid=workflow-status]")).to_have_text("PENDING")
    assert viewer.locator("[data-testid=workflow-actions]").count() == 0
    assert viewer.locator("button:has-text('Cancel')").count() == 0
    shot(viewer, "sso-050-viewer-workflow")
    admin.goto(f"{sso_relay.base_url}/orgs/{ORG}/apps/{APP}/workflows/{waiting}")
    expect(admin.locator("[data-testid=workflow-actions] button:text('Cancel workflow…')")).to_be_visible()

    # No page offers the viewer an action: no form that would change something (logout aside) has a button.
    for path in ("/apps", f"/apps/{APP}", f"/apps/{APP}/workflows", f"/apps/{APP}/queues", f"/apps/{APP}/schedules",
                 f"/apps/{APP}/versions", f"/apps/{APP}/recoveries", f"/apps/{APP}/alerts", f"/apps/{APP}/settings",
                 "/members", "/audit", "/cluster"):
        viewer.goto(f"{sso_relay.base_url}/orgs/{ORG}{path}")
        expect(viewer.locator("[data-testid=user-menu]")).to_be_visible()
        actions = viewer.locator("form[method=post]:not([action$='/logout']) button[type=submit]")
        assert actions.count() == 0, (path, actions.all_inner_texts())

    # Refused by the server anyway: a forged form with the viewer's valid CSRF token.
    token = viewer.locator("input[name=csrf_token]").first.get_attribute("value")
    for path, form in ((f"/orgs/{ORG}/apps/{APP}/workflow-actions/cancel", {"workflow_id": waiting}),
                       (f"/orgs/{ORG}/keys", {"name": "sneaky"}),
                       (f"/orgs/{ORG}/roles", {"name": "sneaky", "permissions": "organization.write"})):
        answer = people[VIEWER].request.post(sso_relay.base_url + path, form={
            **form, "csrf_token": str(token), "confirmed": "yes"}, max_redirects=0)
        assert answer.status == 403, (path, answer.status)
    admin.reload()
    expect(admin.locator("[data-testid=workflow-status]")).to_have_text("PENDING")
    admin.close()


def test_removed_member_is_signed_out_at_their_next_request_and_may_join_again(
    sso_relay: RelayProcess, identity_provider: IdentityProvider, people: dict[str, BrowserContext],
) -> None:
    admin = people[ADMIN].new_page()
    admin.goto(f"{sso_relay.base_url}/orgs/{ORG}/members")
    admin.locator(f"tr[data-member={VIEWER}] form.remove button").click()
    expect(admin.locator("[data-testid=confirm-button]")).to_have_text("Remove member")
    admin.click("[data-testid=confirm-button]")
    expect(admin.locator(".flash.ok")).to_contain_text(f"{VIEWER} removed")
    assert admin.locator(f"tr[data-member={VIEWER}]").count() == 0

    viewer = people[VIEWER].pages[0]
    viewer.goto(f"{sso_relay.base_url}/orgs/{ORG}/apps")
    expect(viewer).to_have_url(re.compile(r"/login"))
    expect(viewer.locator(".flash.error")).to_contain_text("session ended")
    shot(viewer, "sso-060-removed")

    # Signing in again, they may join with a join secret (the same one: valid for 7 days).
    sign_in(viewer, sso_relay, VIEWER)
    expect(viewer.locator("[data-testid=join]")).to_be_visible()
    viewer.goto(f"{sso_relay.base_url}/orgs/{ORG}/apps")  # nothing else is open to them meanwhile
    expect(viewer).to_have_url(re.compile(r"/join$"))
    viewer.fill("#secret", PEOPLE["secret"])
    viewer.click("[data-testid=join] button.primary")
    expect(viewer.locator(".flash.ok")).to_contain_text(f"You joined {ORG}")
    assert user_menu(viewer)["role"] == "Organization Member"

    # The audit log names the person who acted, and where from.
    entries = sso_relay.api("GET", f"/v2/orgs/{ORG}/audit-logs", params={"operation": "removeMember"}).json()
    assert entries and entries[0]["subject"]["display"] == identity_provider.email_of(ADMIN), entries[:1]
    assert entries[0]["sourceIp"] == "127.0.0.1"
    assert entries[0]["details"]["via"] == "console"
    joined = sso_relay.api("GET", f"/v2/orgs/{ORG}/audit-logs", params={"operation": "joinOrg"}).json()
    assert joined and joined[0]["subject"]["display"] == identity_provider.email_of(VIEWER), joined[:1]
    admin.close()


def test_logout_ends_the_session_at_the_provider_too(
    sso_relay: RelayProcess, identity_provider: IdentityProvider, people: dict[str, BrowserContext],
) -> None:
    page = people[ADMIN].new_page()
    page.goto(sso_relay.base_url + "/")
    page.click("[data-testid=user-menu] summary")
    page.click("[data-testid=logout]")
    page.wait_for_url(re.compile("^" + re.escape(identity_provider.issuer)))  # its end_session confirmation
    shot(page, "sso-070-provider-logout")
    page.locator("button[type=submit]").first.click()  # "Yes, sign me out"
    expect(page).to_have_url(re.compile(re.escape(sso_relay.base_url) + r"/login"))
    page.goto(sso_relay.base_url + "/")
    expect(page).to_have_url(re.compile(r"/login"))
    # Signed out at the provider as well: signing in again asks for a login.
    page.click("[data-testid=sso-login]")
    expect(page.locator("input[name=login]")).to_be_visible()
    page.close()


# -- a callback that is not the answer to this browser's sign-in ----------------------------------------------------
def _started(relay: RelayProcess) -> tuple[requests.Session, str]:
    """A browser-like session that started a sign-in: its state (from the redirect to the provider)."""
    session = relay.http_session()
    answer = session.get(f"{relay.base_url}/oauth/login", allow_redirects=False, timeout=10)
    assert answer.status_code == 302, answer.text[:300]
    query = parse_qs(urlsplit(answer.headers["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["resource"]
    return session, query["state"][0]


def _refused(relay: RelayProcess, session: requests.Session, query: dict[str, str], status: int, says: str) -> None:
    answer = session.get(f"{relay.base_url}/oauth/callback", params=query, allow_redirects=False, timeout=10)
    assert answer.status_code == status, (query.keys(), answer.status_code, answer.text[:300])
    assert says in answer.text, answer.text[:500]
    after = session.get(f"{relay.base_url}/orgs/{ORG}/apps", allow_redirects=False, timeout=10)
    assert after.status_code == 302 and "/login" in after.headers["Location"]  # no session


def test_wrong_state_missing_code_and_replayed_callback_are_refused(sso_relay: RelayProcess) -> None:
    session, state = _started(sso_relay)
    _refused(sso_relay, session, {"state": "not-" + state, "code": "x"}, 400, "state does not match")
    session, state = _started(sso_relay)
    _refused(sso_relay, session, {"state": state}, 400, "no authorization code")
    session, state = _started(sso_relay)
    _refused(sso_relay, session, {"state": state, "error": "access_denied"}, 401, "refused the sign-in")

    used = parse_qs(urlsplit(PEOPLE["callback"]).query)
    # The very same answer again, in a browser with no sign-in under way.
    _refused(sso_relay, sso_relay.http_session(), {k: v[0] for k, v in used.items()}, 400, "No sign-in is under way")
    # Its code with the state of a sign-in this browser did start: the provider refuses a used code.
    session, state = _started(sso_relay)
    _refused(sso_relay, session, {"state": state, "code": used["code"][0]}, 401, "did not exchange the code")
