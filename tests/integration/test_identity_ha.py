"""Issue 31, HA: people, roles and console sessions work on every instance of a cluster.

Two `relay serve` instances on one PostgreSQL store, both trusting one real identity provider (npm
oidc-provider, tests/support/idp.py). What one instance records (a registration, a role, a removal) the other
one's views show within a deadline; a console session started by signing in with SSO on one instance is
accepted by the other (the session secret is derived from the admin token every instance shares); a person
removed on one instance is refused on the other as soon as its view has the removal.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import requests

from tests.support import pg
from tests.support.idp import IdentityProvider, page_forms
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ORG = "local"
DEADLINE_S = 20.0
ADMIN_LOGIN = "ada"
ADMIN_EMAIL = "ada@example.com"


@pytest.fixture(scope="module")
def cluster(pg_server: str, identity_provider: IdentityProvider,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RelayProcess, RelayProcess]]:
    store = pg.create_database(pg_server)
    admin = f"relay-idha-{secrets.token_urlsafe(24)}"
    env = {
        **identity_provider.relay_env(),
        "RELAY_OIDC_ADMIN_EMAILS": ADMIN_EMAIL,
        "RELAY_FORWARD_SECRET": secrets.token_urlsafe(32),
        "RELAY_HEARTBEAT_INTERVAL_S": "0.5",
    }
    relays: list[RelayProcess] = []
    try:
        for name in ("relay-id-a", "relay-id-b"):
            data_dir: Path = tmp_path_factory.mktemp(name)
            relay = RelayProcess(data_dir, database_url=store, admin_token=admin,
                                 env={**env, "RELAY_INSTANCE_ID": name})
            relay.start()
            relays.append(relay)
            identity_provider.allow_relay(relay.base_url)
        yield relays[0], relays[1]
    finally:
        for relay in relays:
            relay.stop()
        pg.drop_database(store)


def eventually(check: Callable[[], bool], message: str) -> None:
    wait_until(check, timeout=DEADLINE_S, interval=0.1, message=message)


def sign_in_with_sso(relay: RelayProcess, login: str) -> requests.Session:
    """A browser without a browser: Relay's /oauth/login, the provider's login and consent pages filled in,
    back to Relay's /oauth/callback; the session holds Relay's console cookie."""
    browser = requests.Session()
    browser.trust_env = False
    url, method, data = f"{relay.base_url}/oauth/login", "GET", None
    for _ in range(20):
        response = browser.request(method, url, data=data, allow_redirects=False, timeout=10)
        if response.is_redirect:
            url, method, data = urljoin(url, response.headers["Location"]), "GET", None
            continue
        if url.startswith(relay.base_url):
            assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:300]}"
            return browser
        forms = [form for form in page_forms(response.text) if form["method"] == "post"]
        assert forms, f"the provider's page {url} has no form: {response.text[:300]}"
        fields = dict(forms[0]["fields"])
        if "login" in fields:
            fields.update(login=login, password="any password")
        url, method, data = urljoin(url, forms[0]["action"]), "POST", fields
    raise AssertionError("the sign-in did not come back to Relay within 20 pages")


def me(relay: RelayProcess, token: str) -> requests.Response:
    return relay.api("GET", "/v2/users/me", token=token)


def test_people_roles_and_sessions_work_on_every_instance(
        cluster: tuple[RelayProcess, RelayProcess], identity_provider: IdentityProvider) -> None:
    a, b = cluster
    ada = identity_provider.access_token(ADMIN_LOGIN)
    bob = identity_provider.access_token("bob")

    # Ada registers on A (an admin e-mail: Organization Admin of the default organization); B knows her.
    assert a.api("POST", "/v2/users", token=ada, json={"name": "ada"}).status_code == 201
    eventually(lambda: me(b, ada).status_code == 200, "B never showed Ada's profile")
    profile = me(b, ada).json()
    assert profile["orgName"] == ORG and profile["email"] == ADMIN_EMAIL
    assert profile["role"]["name"] == "Organization Admin"

    # A custom role made on B, a join secret made on A, Bob registering on B with it.
    made = b.api("POST", f"/v2/orgs/{ORG}/roles", token=ada,
                 json={"name": "viewer", "permissions": ["application.read", "organization.read"]})
    assert made.status_code == 201, made.text
    secret = a.api("POST", f"/v2/orgs/{ORG}/secrets", token=ada)
    assert secret.status_code == 201, secret.text
    eventually(lambda: b.api("POST", "/v2/users", token=bob,
                             json={"name": "bob", "secret": secret.json()["secret"]}).status_code == 201,
               "B never accepted the join secret made on A")
    assert me(b, bob).json()["role"]["name"] == "Organization Member"

    # Ada (on A) makes Bob a viewer; B's answers change with it: he may read, not create keys.
    eventually(lambda: a.api("PUT", f"/v2/orgs/{ORG}/members/bob/roles/viewer", token=ada).status_code == 204,
               "A never saw Bob, registered on B")
    eventually(lambda: me(b, bob).json()["role"]["name"] == "viewer", "B never showed Bob's new role")
    assert b.api("GET", f"/v2/orgs/{ORG}/apps", token=bob).status_code == 200
    assert b.api("POST", f"/v2/orgs/{ORG}/tokens/bob-key", token=bob, json={}).status_code == 403

    # A console session begun on A is accepted on B, as the same person.
    browser = sign_in_with_sso(a, ADMIN_LOGIN)
    on_b = browser.get(f"{b.base_url}/", timeout=10)
    assert on_b.status_code == 200 and "/login" not in on_b.url, on_b.url
    assert ADMIN_EMAIL in on_b.text

    # Bob's console session on B ends, on B, once A removed him; his token is refused there too.
    bob_browser = sign_in_with_sso(b, "bob")
    assert "bob@example.com" in bob_browser.get(f"{b.base_url}/", timeout=10).text
    removed = a.api("DELETE", f"/v2/orgs/{ORG}/members/bob", token=ada)
    assert removed.status_code == 200 and removed.json()["email"] == "bob@example.com"
    eventually(lambda: b.api("GET", f"/v2/orgs/{ORG}/apps", token=bob).status_code == 403,
               "B still let a removed member in")
    page = bob_browser.get(f"{b.base_url}/", timeout=10)
    assert urlsplit(page.url).path == "/login", page.url
    assert "no longer a member" in page.text
