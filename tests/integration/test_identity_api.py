"""The people's HTTP API (issue 31) against a real `relay serve` trusting a real identity provider (npm
oidc-provider, tests/support/idp.py): registerUser and getCurrentUser, members, roles, join secrets, domain
claims, updateOrg; permissions from a person's role; a removed member refused at once; every refusal of a bad
access token a 401 whose problem says why without echoing the token; key rotation and the provider down; a
person's API keys; the device flow's token on every operation Relay serves.

Tokens: real ones from the provider's flows where the flow is the point (authorization code + PKCE, device
flow); elsewhere minted by the test with the provider's own current key and kid (``idp.mint``), which Relay
cannot tell from the provider's, so each person costs no browser flow.
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.fake_executor import create_key, register_app
from tests.support.idp import IdentityProvider, new_private_jwk
from tests.support.openapi_ref import check, reference, response_schema
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

ORG = "local"  # the default organization (RELAY_DEFAULT_ORG)
BOSS = "boss"  # RELAY_OIDC_ADMIN_EMAILS: boss@example.com
ADMIN = "Organization Admin"
MEMBER = "Organization Member"
READ_ONLY = ["application.read", "metric.read", "organization.read"]


@pytest.fixture(scope="module")
def relay_env(identity_provider: IdentityProvider) -> dict[str, str]:
    return {
        **identity_provider.relay_env(),
        "RELAY_OIDC_ADMIN_EMAILS": identity_provider.email_of(BOSS),
        # Every refusal below is a failed login from 127.0.0.1: the throttle (test_logins.py) must not answer first.
        "RELAY_LOGIN_FAILURES_PER_MIN": "1000000",
        # A rotated key is fetched on the first token that names it, even just after an unknown kid was looked up.
        "RELAY_OIDC_JWKS_MIN_REFETCH_S": "0",
    }


def unique(prefix: str) -> str:
    """A user, role or organization name ([a-z0-9_], at most 30 characters), unique within the run."""
    return f"{prefix}_{secrets.token_hex(3)}"


def token_of(idp: IdentityProvider, login: str, **claims: Any) -> str:
    """An access token of ``login`` signed with the provider's current key (see the module's doc)."""
    return idp.mint(idp.claims(login, **claims))


def problem(response: requests.Response, status: int, says: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["detail"], body
    if says is not None:
        assert says in body["detail"], body
    return body


def conforms(response: requests.Response, path: str, method: str) -> Any:
    """The response's JSON, checked against the reference's schema of the operation's success answer."""
    body = response.json()
    errors = check(reference(), response_schema(reference(), path, method), body)
    assert errors == [], errors
    return body


def register(relay: RelayProcess, token: str, name: str, **body: Any) -> str:
    response = relay.api("POST", "/v2/users", token=token, json={"name": name, **body})
    assert response.status_code == 201, response.text
    return str(conforms(response, "/v2/users", "post")["id"])


def me(relay: RelayProcess, token: str) -> dict[str, Any]:
    response = relay.api("GET", "/v2/users/me", token=token)
    assert response.status_code == 200, response.text
    return dict(conforms(response, "/v2/users/me", "get"))


def new_person(relay: RelayProcess, idp: IdentityProvider, prefix: str, **body: Any) -> tuple[str, str]:
    """A registered person: (their token, their user name)."""
    name = unique(prefix)
    token = token_of(idp, name)
    register(relay, token, name, **body)
    return token, name


def join_secret(relay: RelayProcess, token: str, org: str) -> str:
    response = relay.api("POST", f"/v2/orgs/{org}/secrets", token=token)
    assert response.status_code == 201, response.text
    secret = str(conforms(response, "/v2/orgs/{orgName}/secrets", "post")["secret"])
    relay.remember_secret(secret, "join secret")
    return secret


@pytest.fixture(scope="module")
def boss(relay: RelayProcess, identity_provider: IdentityProvider) -> str:
    """The first administrator: RELAY_OIDC_ADMIN_EMAILS makes them Organization Admin of the default org."""
    token = token_of(identity_provider, BOSS)
    register(relay, token, unique("boss"))
    return token


# -- registering, and who I am ---------------------------------------------------------------------


def test_register_then_users_me(relay: RelayProcess, identity_provider: IdentityProvider) -> None:
    """A real access token (authorization code + PKCE at the provider): not registered, then registered with an
    organization of their own whose Organization Admin they are."""
    name = unique("alice")
    token = identity_provider.access_token(name)
    problem(relay.api("GET", "/v2/users/me", token=token), 404, "not registered: POST /v2/users")
    problem(relay.api("GET", f"/v2/orgs/{ORG}/apps", token=token), 403)
    user_id = register(relay, token, name, givenName="Alice", familyName="Liddell", company="Wonderland")
    profile = me(relay, token)
    assert (profile["name"], profile["email"], profile["orgName"]) == (name, f"{name}@example.com", name)
    assert profile["role"]["name"] == ADMIN and profile["role"]["isGlobal"] is True
    assert "organization.write" in profile["role"]["permissions"]
    problem(relay.api("POST", "/v2/users", token=token, json={"name": unique("again")}), 409)
    # The organization is theirs: listed members, and the audit log names the person.
    members = relay.api("GET", f"/v2/orgs/{name}/members", token=token)
    assert conforms(members, "/v2/orgs/{orgName}/members", "get")["users"][name]["name"] == ADMIN
    entries = relay.api("GET", f"/v2/orgs/{name}/audit-logs", token=token, params={"operation": "registerUser"})
    assert entries.status_code == 200, entries.text
    [entry] = entries.json()
    assert entry["subject"] == {"type": "user", "id": f"{name}@example.com", "display": f"{name}@example.com"}
    assert entry["target"] == {"type": "user", "id": name}
    assert entry["sourceIp"] == "127.0.0.1"
    assert user_id


@pytest.mark.parametrize(("body", "location"), [
    ({}, "body.name"), ({"name": "No Caps"}, "body"), ({"name": "ab"}, "body"), ({"name": 7}, "body.name"),
    ({"name": "okname", "extra": 1}, "body.extra"),
])
def test_register_refuses_bad_bodies(relay: RelayProcess, identity_provider: IdentityProvider,
                                     body: dict[str, Any], location: str) -> None:
    response = relay.api("POST", "/v2/users", token=token_of(identity_provider, unique("bad")), json=body)
    assert problem(response, 422)["errors"][0]["location"].startswith(location)


def test_api_keys_and_the_admin_token_are_no_person(relay: RelayProcess, boss: str) -> None:
    key = create_key(relay, unique("not_a_person"), permissions=["application.read"])
    for token in (relay.admin_token, key):
        problem(relay.api("GET", "/v2/users/me", token=token), 403, "needs a person's token")
        problem(relay.api("POST", "/v2/users", token=token, json={"name": unique("x")}), 403,
                "needs a person's token")
        problem(relay.api("POST", f"/v2/orgs/{ORG}/join", token=token, json={"secret": "s"}), 403)


def test_admin_emails_make_the_first_administrator(relay: RelayProcess, boss: str) -> None:
    profile = me(relay, boss)
    assert (profile["orgName"], profile["role"]["name"]) == (ORG, ADMIN)
    assert relay.api("GET", f"/v2/orgs/{ORG}/apps", token=boss).status_code == 200
    assert relay.api("GET", f"/v2/orgs/{ORG}", token=boss).json()["name"] == ORG


# -- joining, roles, members ----------------------------------------------------------------------


def test_people_join_with_a_secret_as_members(relay: RelayProcess, identity_provider: IdentityProvider) -> None:
    owner, org = new_person(relay, identity_provider, "owner")
    secret = join_secret(relay, owner, org)
    # At registration ...
    bob, _ = new_person(relay, identity_provider, "bob", secret=secret)
    assert (me(relay, bob)["orgName"], me(relay, bob)["role"]["name"]) == (org, MEMBER)
    # ... or later, leaving the organization they were in (not as its last Organization Admin).
    problem(relay.api("POST", f"/v2/orgs/{org}/join", token=token_of(identity_provider, "nobody"),
                      json={"secret": secret}), 404, "not registered")
    elsewhere, other_org = new_person(relay, identity_provider, "elsewhere")
    problem(relay.api("POST", f"/v2/orgs/{org}/join", token=elsewhere, json={"secret": secret}), 409,
            "last Organization Admin")
    carol, carol_name = new_person(relay, identity_provider, "carol", secret=join_secret(relay, elsewhere, other_org))
    problem(relay.api("POST", f"/v2/orgs/{org}/join", token=carol, json={"secret": "not-the-secret"}), 422)
    assert relay.api("POST", f"/v2/orgs/{org}/join", token=carol, json={"secret": secret}).status_code == 204
    assert (me(relay, carol)["orgName"], me(relay, carol)["role"]["name"]) == (org, MEMBER)
    # A member reads the organization but does not change who is in it.
    assert relay.api("GET", f"/v2/orgs/{org}/members", token=carol).json()["users"][carol_name]["name"] == MEMBER
    problem(relay.api("POST", f"/v2/orgs/{org}/secrets", token=carol), 403, "organization.write")
    problem(relay.api("GET", f"/v2/orgs/{ORG}/apps", token=carol), 403)  # not their organization
    assert carol_name not in relay.api("GET", f"/v2/orgs/{other_org}/members", token=elsewhere).json()["users"]


def test_a_read_only_role_reads_but_changes_nothing(relay: RelayProcess, identity_provider: IdentityProvider,
                                                    boss: str) -> None:
    app = f"viewed-{secrets.token_hex(3)}"
    register_app(relay, app)
    role = unique("Viewer")
    created = relay.api("POST", f"/v2/orgs/{ORG}/roles", token=boss, json={"name": role, "permissions": READ_ONLY})
    assert created.status_code == 201, created.text
    assert conforms(created, "/v2/orgs/{orgName}/roles", "post") == {"name": role, "permissions": READ_ONLY}
    assert created.headers["Location"] == f"/v2/orgs/{ORG}/roles/{role}"
    viewer, viewer_name = new_person(relay, identity_provider, "viewer", secret=join_secret(relay, boss, ORG))
    granted = relay.api("PUT", f"/v2/orgs/{ORG}/members/{viewer_name}/roles/{role}", token=boss)
    assert granted.status_code == 204, granted.text
    assert me(relay, viewer)["role"] == {"name": role, "isGlobal": False, "permissions": READ_ONLY}
    listed = relay.api("GET", f"/v2/orgs/{ORG}/apps", token=viewer)
    assert listed.status_code == 200 and app in [a["name"] for a in listed.json()]
    problem(relay.api("POST", f"/v2/orgs/{ORG}/tokens/{unique('k')}", token=viewer, json={}), 403)
    problem(relay.api("POST", f"/v2/orgs/{ORG}/apps/{app}/workflows/some-wf/cancel", token=viewer, json={}), 403)
    problem(relay.api("PUT", f"/v2/orgs/{ORG}/apps/{unique('new')}", token=viewer, json={}), 403)
    problem(relay.api("PATCH", f"/v2/orgs/{ORG}", token=viewer, json={"auditLogRetentionDays": 30}), 403)


def test_roles_are_created_listed_and_deleted(relay: RelayProcess, identity_provider: IdentityProvider) -> None:
    owner, org = new_person(relay, identity_provider, "roles")
    role, spare = unique("Ops"), unique("Spare")
    for name in (role, spare):
        assert relay.api("POST", f"/v2/orgs/{org}/roles", token=owner,
                         json={"name": name, "permissions": ["metric.read"]}).status_code == 201
    problem(relay.api("POST", f"/v2/orgs/{org}/roles", token=owner, json={"name": role}), 409)
    bad = relay.api("POST", f"/v2/orgs/{org}/roles", token=owner, json={"name": unique("X"), "permissions": ["root"]})
    assert problem(bad, 422)["errors"][0]["location"] == "body.permissions[0]"
    problem(relay.api("POST", f"/v2/orgs/{org}/roles", token=owner, json={"name": "no spaces"}), 422)
    listed = relay.api("GET", f"/v2/orgs/{org}/roles", token=owner)
    roles = {r["name"]: r for r in conforms(listed, "/v2/orgs/{orgName}/roles", "get")}
    assert roles[ADMIN]["isGlobal"] and roles[MEMBER]["isGlobal"] and not roles[role]["isGlobal"]
    assert "organization.write" not in roles[MEMBER]["permissions"]
    # In use: not deletable; built-ins never.
    _, holder = new_person(relay, identity_provider, "holder", secret=join_secret(relay, owner, org))
    assert relay.api("PUT", f"/v2/orgs/{org}/members/{holder}/roles/{role}", token=owner).status_code == 204
    problem(relay.api("DELETE", f"/v2/orgs/{org}/roles/{role}", token=owner), 409)
    for builtin in (ADMIN, MEMBER):
        problem(relay.api("DELETE", f"/v2/orgs/{org}/roles/{builtin}", token=owner), 409, "built-in")
    assert relay.api("DELETE", f"/v2/orgs/{org}/roles/{spare}", token=owner).status_code == 204
    problem(relay.api("DELETE", f"/v2/orgs/{org}/roles/{spare}", token=owner), 404)
    problem(relay.api("PUT", f"/v2/orgs/{org}/members/{holder}/roles/{spare}", token=owner), 404)


def test_a_removed_member_is_refused_at_once(relay: RelayProcess, identity_provider: IdentityProvider) -> None:
    owner, org = new_person(relay, identity_provider, "remover")
    dave, dave_name = new_person(relay, identity_provider, "dave", secret=join_secret(relay, owner, org))
    key = relay.api("POST", f"/v2/orgs/{org}/tokens/{unique('daves')}", token=dave,
                    json={"permissions": ["application.read"]})
    assert key.status_code == 201, key.text
    dave_key = key.json()["token"]
    assert relay.api("GET", f"/v2/orgs/{org}/apps", token=dave_key).status_code == 200
    removed = relay.api("DELETE", f"/v2/orgs/{org}/members/{dave_name}", token=owner)
    assert removed.status_code == 200, removed.text
    member = conforms(removed, "/v2/orgs/{orgName}/members/{username}", "delete")
    assert (member["name"], member["email"], member["orgId"]) == (dave_name, f"{dave_name}@example.com", org)
    problem(relay.api("GET", f"/v2/orgs/{org}/apps", token=dave), 403)
    problem(relay.api("GET", f"/v2/orgs/{org}/apps", token=dave_key), 401)
    problem(relay.api("GET", "/v2/users/me", token=dave), 404, "no organization")
    assert dave_name not in relay.api("GET", f"/v2/orgs/{org}/members", token=owner).json()["users"]
    problem(relay.api("DELETE", f"/v2/orgs/{org}/members/{dave_name}", token=owner), 404)
    owner_name = org
    problem(relay.api("DELETE", f"/v2/orgs/{org}/members/{owner_name}", token=owner), 409)  # the last admin


def test_a_claimed_domain_brings_its_people_in(relay: RelayProcess, identity_provider: IdentityProvider) -> None:
    owner, org = new_person(relay, identity_provider, "claimer")
    domain = f"acme-{secrets.token_hex(3)}.example"
    claimed = relay.api("POST", f"/v2/orgs/{org}/domain-claims", token=owner, json={"domain": domain})
    assert claimed.status_code == 201, claimed.text
    claim = conforms(claimed, "/v2/orgs/{orgName}/domain-claims", "post")
    assert (claim["domain"], claim["orgName"], claim["status"]) == (domain, org, "approved")
    listed = relay.api("GET", f"/v2/orgs/{org}/domain-claims", token=owner)
    assert [c["domain"] for c in conforms(listed, "/v2/orgs/{orgName}/domain-claims", "get")["claims"]] == [domain]
    erin = token_of(identity_provider, f"erin@{domain}")
    register(relay, erin, unique("erin"))
    assert (me(relay, erin)["orgName"], me(relay, erin)["role"]["name"]) == (org, MEMBER)
    problem(relay.api("POST", f"/v2/orgs/{org}/domain-claims", token=owner, json={"domain": "nodot"}), 422)
    assert relay.api("DELETE", f"/v2/orgs/{org}/domain-claims/{domain}", token=owner).status_code == 204
    assert relay.api("GET", f"/v2/orgs/{org}/domain-claims", token=owner).json() == {"claims": []}
    frank = token_of(identity_provider, f"frank@{domain}")
    register(relay, frank, unique("frank"))
    assert me(relay, frank)["orgName"] != org


def test_update_org_sets_the_retention_and_refuses_a_new_name(relay: RelayProcess,
                                                              identity_provider: IdentityProvider) -> None:
    owner, org = new_person(relay, identity_provider, "retainer")
    assert relay.api("PATCH", f"/v2/orgs/{org}", token=owner, json={"auditLogRetentionDays": 30}).status_code == 204
    assert relay.api("GET", f"/v2/orgs/{org}", token=owner).json()["auditLogRetentionDays"] == 30
    problem(relay.api("PATCH", f"/v2/orgs/{org}", token=owner, json={"newName": unique("other")}), 409, "rename")
    problem(relay.api("PATCH", f"/v2/orgs/{org}", token=owner, json={"auditLogRetentionDays": 3}), 422)


# -- a person's API keys --------------------------------------------------------------------------


def test_a_person_grants_keys_within_their_role(relay: RelayProcess, identity_provider: IdentityProvider,
                                                boss: str) -> None:
    member, _ = new_person(relay, identity_provider, "keymaker", secret=join_secret(relay, boss, ORG))
    problem(relay.api("POST", f"/v2/orgs/{ORG}/tokens/{unique('too_much')}", token=member,
                      json={"permissions": ["organization.write"]}), 403, "organization.write")
    name = unique("boss_key")
    created = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}", token=boss, json={"permissions": ["token.read"]})
    assert created.status_code == 201, created.text
    # dbos_ keys keep working beside people's tokens.
    assert relay.api("GET", f"/v2/orgs/{ORG}/tokens", token=created.json()["token"]).status_code == 200
    entries = relay.api("GET", f"/v2/orgs/{ORG}/audit-logs", token=boss,
                        params={"operation": "createToken", "target": name}).json()
    assert [(e["subject"]["display"], e["sourceIp"]) for e in entries] == [("boss@example.com", "127.0.0.1")]


# -- refused tokens -------------------------------------------------------------------------------

REFUSALS = {
    "expired": ({"exp": -3600, "iat": -7200}, "expired"),
    "not yet valid": ({"nbf": 3600}, "not yet valid"),
    "wrong issuer": ({"iss": "https://evil.example"}, "issuer"),
    "wrong audience": ({"aud": "someone-else"}, "audience"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_bad_claims_are_refused_with_why(relay: RelayProcess, identity_provider: IdentityProvider, boss: str,
                                         case: str) -> None:
    changes, reason = REFUSALS[case]
    now = int(time.time())
    claims = {k: (now + v if k in ("exp", "iat", "nbf") else v) for k, v in changes.items()}
    token = token_of(identity_provider, BOSS, **claims)
    assert_refused(relay, token, reason)


FORGERIES = {  # what is done to the provider's own claims for the person, and what the refusal says
    "bad signature": ({"key": "another key, same kid"}, "signature"),
    "alg none": ({"alg": "none"}, "none"),
    "HS256 keyed with the public key": ({"alg": "HS256"}, "HS256"),
    "huge": ({"pad": 12_000}, "too large"),
}


@pytest.mark.parametrize("case", list(FORGERIES))
def test_forged_and_huge_tokens_are_refused(relay: RelayProcess, identity_provider: IdentityProvider, boss: str,
                                            case: str) -> None:
    idp = identity_provider
    how, reason = FORGERIES[case]
    claims = idp.claims(BOSS)
    if "key" in how:
        token = idp.mint(claims, key=new_private_jwk(kid=idp.kid))
    elif "alg" in how:
        token = idp.mint(claims, alg=str(how["alg"]))
    else:
        token = idp.mint({**claims, "pad": "x" * int(how["pad"])})
    assert_refused(relay, token, reason)


def test_garbage_bearers_are_refused(relay: RelayProcess) -> None:
    assert_refused(relay, "x.y.z", "malformed")
    problem(relay.api("GET", "/v2/users/me", token="just-garbage"), 401, "unknown or revoked")


def assert_refused(relay: RelayProcess, token: str, reason: str) -> None:
    for method, path in (("GET", "/v2/users/me"), ("GET", f"/v2/orgs/{ORG}/apps")):
        response = relay.api(method, path, token=token)
        body = problem(response, 401)
        assert reason in body["detail"], body
        assert token not in response.text and token[-20:] not in response.text
        if "." in token:  # a JWT refused: RFC 6750's answer too
            assert "invalid_token" in response.headers.get("WWW-Authenticate", "")


def test_refused_access_tokens_are_failed_logins(identity_provider: IdentityProvider, tmp_path: Path) -> None:
    """The login throttle (web/login_throttle.py) counts a refused access token as it counts a wrong key: past the
    limit, the address gets 429 whatever it sends, a good token included."""
    now = int(time.time())
    env = {**identity_provider.relay_env(), "RELAY_LOGIN_FAILURES_PER_MIN": "3"}
    with RelayProcess(tmp_path / "throttled", env=env) as throttled:
        expired = token_of(identity_provider, "late", exp=now - 3600, iat=now - 7200)
        for _ in range(3):
            problem(throttled.api("GET", "/v2/users/me", token=expired), 401, "expired")
        problem(throttled.api("GET", "/v2/users/me", token=token_of(identity_provider, "late")), 429)


def test_a_rotated_key_is_taken_without_restart(relay: RelayProcess, identity_provider: IdentityProvider,
                                                boss: str) -> None:
    old_kid = identity_provider.kid
    assert identity_provider.rotate() != old_kid
    assert me(relay, token_of(identity_provider, BOSS))["orgName"] == ORG
    real = identity_provider.access_token(BOSS)  # signed by the provider itself with the new key
    assert me(relay, real)["orgName"] == ORG


def test_unknown_kid_with_the_provider_down_fails_closed(relay: RelayProcess, identity_provider: IdentityProvider,
                                                          boss: str) -> None:
    known = token_of(identity_provider, BOSS)
    assert me(relay, known)["orgName"] == ORG  # its key is cached
    identity_provider.stop()
    try:
        stranger = identity_provider.mint(identity_provider.claims(BOSS), key=new_private_jwk())
        assert_refused(relay, stranger, "unknown signing key")
        assert me(relay, known)["orgName"] == ORG  # cached keys keep working
    finally:
        identity_provider.start()


# -- the device flow, then everything -------------------------------------------------------------

PATH_VALUES = {"orgName": ORG, "workflowId": "no-such-workflow", "queueName": "no-such-queue",
               "scheduleName": "no-such-schedule", "executorId": "no-such-executor", "ruleId": "no-such-rule",
               "tokenName": "device_flow_key", "username": "no_such_user", "roleName": "No_such_role",
               "domain": "no-such.example", "name": "no-such-key", "action": "cancel", "appID": "no-such-app-id",
               "filename": "console.css", "conductorKey": "dbos_not-a-key", "incidentId": "no-such-incident"}


def test_the_device_flow_token_works_on_every_operation(relay: RelayProcess, identity_provider: IdentityProvider,
                                                         boss: str) -> None:
    """What dbosctl does: the device flow at the provider (Authlib polling), GET /v2/users/me, then the access
    token as Bearer on any call. Every operation of Relay's own document, with its path filled in: never a 401
    (the token is good) nor a 5xx; a 403 only where a person may not go (admin-only Relay operations)."""
    tokens = identity_provider.device_flow_tokens(BOSS)
    token = tokens["access_token"]
    assert me(relay, token)["email"] == "boss@example.com"
    app = f"device-{secrets.token_hex(3)}"  # an application of no executor: its executor operations answer 404
    doc = relay.api("GET", "/openapi.json", token="").json()
    seen: dict[int, int] = {}
    for path, operations in doc["paths"].items():
        if path.startswith(("/internal/", "/websocket/")):
            continue  # instance-to-instance (the forward secret) and the executors' socket: no bearer tokens
        for method, op in operations.items():
            values = {**PATH_VALUES, "appName": "no-such-app"}
            if op["operationId"] == "registerApp":
                values["appName"] = app
            url = re.sub(r"\{([^}]+)\}", lambda m, v=values: v[m.group(1)], path)  # type: ignore[misc]
            body = {} if method in ("post", "put", "patch") else None
            response = relay.api(method.upper(), url, token=token, json=body)
            where = f"{method.upper()} {url} ({op['operationId']}) -> {response.status_code} {response.text[:200]}"
            assert response.status_code != 401 and response.status_code < 500, where
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
    assert sum(seen.values()) > 60 and seen.get(200, 0) > 10, seen


def test_the_people_operations_need_a_bearer(relay: RelayProcess) -> None:
    """The 14 operations served only with OAuth on: flagged in the document, 401 without a token or with a wrong
    one, before anything is read of the request."""
    doc = relay.api("GET", "/openapi.json", token="").json()
    flagged = [(method, path) for path, ops in doc["paths"].items() for method, op in ops.items()
               if op.get("x-dbos-requires-oauth")]
    assert len(flagged) == 14
    for method, path in flagged:
        url = re.sub(r"\{([^}]+)\}", lambda m: PATH_VALUES[m.group(1)], path)
        for token in ("", "dbos_not-a-key", "a.b.c"):
            problem(relay.api(method.upper(), url, token=token, json={}), 401)
