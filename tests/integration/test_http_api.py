"""The Conductor API v2 that Relay serves from its own store (apps, tokens) and its auth, against a real
`relay serve`. Every error is RFC 9457 problem+json with status, title and detail."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.integration.fake_executor import FakeExecutor, create_key, executors, register_app, unique
from tests.support.api_shapes import RFC3339, times
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

ORG = "local"

# The v2 `Application` schema (tests/fixtures/conductor-openapi.json): every field required, no others.
APPLICATION_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "name": (str,),
    "orgId": (str,),
    "status": (str,),
    "language": (str, type(None)),
    "executorTimeoutSecs": (int,),
    "gcRowsThreshold": (int, type(None)),
    "gcTimeThresholdMs": (int, type(None)),
    "globalTimeoutMs": (int, type(None)),
    "privateMode": (bool,),
    "dbosCloud": (bool,),
}
TOKEN_FIELDS = {"tokenName", "createdAt", "permissions", "appIds"}


@pytest.fixture
def app(relay: RelayProcess) -> str:
    name = unique("api-app")
    register_app(relay, name)
    return name


def app_path(app: str, org: str = ORG) -> str:
    return f"/v2/orgs/{org}/apps/{app}"


def problem(response: requests.Response, status: int) -> dict[str, Any]:
    """Assert ``response`` is a problem+json error with ``status``; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in response.text
    return body


def validation(response: requests.Response, location: str, status: int = 422) -> dict[str, Any]:
    body = problem(response, status)
    assert body["errors"][0]["location"] == location, body
    assert body["errors"][0]["message"]
    return body


def assert_application(doc: dict[str, Any], name: str) -> None:
    assert set(doc) == set(APPLICATION_FIELDS), doc
    for field, kinds in APPLICATION_FIELDS.items():
        value = doc[field]
        assert isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds), (field, value)
    assert doc["name"] == name
    assert doc["orgId"] == ORG
    assert doc["status"] in ("AVAILABLE", "UNAVAILABLE")


# ------------------------------------------------------------------------------------------------ apps


def test_put_registers_and_is_idempotent(relay: RelayProcess) -> None:
    name = unique("api-put")
    first = relay.api("PUT", app_path(name), json={})
    assert first.status_code == 204 and first.content == b""
    got = relay.api("GET", app_path(name)).json()
    assert relay.api("PATCH", app_path(name), json={"executorTimeoutSecs": 77}).status_code == 204
    # Again, with and without a body: still 204, same id, settings kept.
    assert relay.api("PUT", app_path(name), json={}).status_code == 204
    assert relay.api("PUT", app_path(name)).status_code == 204
    again = relay.api("GET", app_path(name)).json()
    assert again["id"] == got["id"]
    assert again["executorTimeoutSecs"] == 77
    assert [a["name"] for a in relay.api("GET", f"/v2/orgs/{ORG}/apps").json()].count(name) == 1


def test_get_list_and_one_are_v2_applications(relay: RelayProcess, app: str) -> None:
    listed = relay.api("GET", f"/v2/orgs/{ORG}/apps")
    assert listed.status_code == 200
    assert listed.headers["Content-Type"].startswith("application/json")
    docs = {d["name"]: d for d in listed.json()}
    assert app in docs
    for name, doc in docs.items():
        assert_application(doc, name)
    one = relay.api("GET", app_path(app))
    assert one.status_code == 200
    assert one.json() == docs[app]
    assert_application(one.json(), app)
    # No executor ever connected: unavailable, language unknown, Conductor's defaults.
    assert one.json()["status"] == "UNAVAILABLE"
    assert one.json()["language"] is None
    assert one.json()["dbosCloud"] is False


def test_patch_settings_and_read_back(relay: RelayProcess, app: str) -> None:
    change = {
        "executorTimeoutSecs": 120,
        "gcRowsThreshold": 5000,
        "gcTimeThresholdMs": 86_400_000,
        "globalTimeoutMs": 3_600_000,
        "privateMode": True,
    }
    response = relay.api("PATCH", app_path(app), json=change)
    assert response.status_code == 204 and response.content == b""
    doc = relay.api("GET", app_path(app)).json()
    assert {k: doc[k] for k in change} == change
    # A partial patch changes only what it names.
    assert relay.api("PATCH", app_path(app), json={"executorTimeoutSecs": 30}).status_code == 204
    doc = relay.api("GET", app_path(app)).json()
    assert doc["executorTimeoutSecs"] == 30
    assert doc["gcRowsThreshold"] == 5000 and doc["privateMode"] is True


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"executorTimeoutSecs": "sixty"}, "body.executorTimeoutSecs"),
        ({"executorTimeoutSecs": -5}, "body.executorTimeoutSecs"),
        ({"executorTimeoutSecs": 0}, "body.executorTimeoutSecs"),
        ({"executorTimeoutSecs": 1.5}, "body.executorTimeoutSecs"),
        ({"executorTimeoutSecs": True}, "body.executorTimeoutSecs"),
        ({"gcRowsThreshold": [1]}, "body.gcRowsThreshold"),
        ({"gcTimeThresholdMs": {"ms": 1}}, "body.gcTimeThresholdMs"),
        ({"globalTimeoutMs": "1000"}, "body.globalTimeoutMs"),
        ({"privateMode": "yes"}, "body.privateMode"),
        ({"privateMode": 1}, "body.privateMode"),
        ({"noSuchSetting": 1}, "body.noSuchSetting"),
        ({"executorTimeoutSecs": 10, "name": "renamed"}, "body.name"),
        ([{"executorTimeoutSecs": 10}], "body"),
    ],
)
def test_patch_bad_body_is_422_naming_the_field(relay: RelayProcess, app: str, body: Any, location: str) -> None:
    before = relay.api("GET", app_path(app)).json()
    error = validation(relay.api("PATCH", app_path(app), json=body), location)
    assert location in error["detail"]
    assert relay.api("GET", app_path(app)).json() == before  # nothing changed


@pytest.mark.parametrize("raw", ["{not json", "executorTimeoutSecs=5", '{"executorTimeoutSecs": 5'])
def test_patch_non_json_is_400(relay: RelayProcess, app: str, raw: str) -> None:
    response = relay.api("PATCH", app_path(app), data=raw, headers={"Content-Type": "application/json"})
    problem(response, 400)


def test_patch_without_body_is_400(relay: RelayProcess, app: str) -> None:
    problem(relay.api("PATCH", app_path(app)), 400)


def test_patch_unknown_app_is_404(relay: RelayProcess) -> None:
    problem(relay.api("PATCH", app_path(unique("api-nope")), json={"executorTimeoutSecs": 5}), 404)


def test_delete_app(relay: RelayProcess, app: str) -> None:
    response = relay.api("DELETE", app_path(app))
    assert response.status_code == 204 and response.content == b""
    problem(relay.api("GET", app_path(app)), 404)
    problem(relay.api("DELETE", app_path(app)), 404)
    problem(relay.api("PATCH", app_path(app), json={"executorTimeoutSecs": 5}), 404)
    assert app not in [a["name"] for a in relay.api("GET", f"/v2/orgs/{ORG}/apps").json()]


@pytest.mark.parametrize("org", ["ab", "Upper", "has-dash", "x" * 31, "sp ace", "dot.ted", "local%0A"])
def test_bad_org_name_is_422(relay: RelayProcess, org: str) -> None:
    for method, path in (("GET", f"/v2/orgs/{org}/apps"), ("PUT", f"/v2/orgs/{org}/apps/good-app")):
        validation(relay.api(method, path, json={}), "path.orgName")


@pytest.mark.parametrize("name", ["ab", "Upper", "x" * 31, "dot.ted", "sp ace", "bad!name", "trailing-newline%0A"])
def test_bad_app_name_is_422(relay: RelayProcess, name: str) -> None:
    for method in ("GET", "PUT", "PATCH", "DELETE"):
        body = {"executorTimeoutSecs": 5} if method == "PATCH" else {}
        validation(relay.api(method, app_path(name), json=body), "path.appName")


def test_unknown_org_is_404(relay: RelayProcess) -> None:
    org = "no_such_org"
    problem(relay.api("GET", f"/v2/orgs/{org}/apps"), 404)
    problem(relay.api("GET", f"/v2/orgs/{org}/apps/some-app"), 404)
    problem(relay.api("GET", f"/v2/orgs/{org}/tokens"), 404)
    problem(relay.api("GET", f"/v2/orgs/{org}"), 404)


def test_unknown_app_is_404(relay: RelayProcess) -> None:
    name = unique("api-missing")
    problem(relay.api("GET", app_path(name)), 404)
    problem(relay.api("GET", f"{app_path(name)}/executors"), 404)
    problem(relay.api("DELETE", app_path(name)), 404)


def test_unknown_route_is_problem_json(relay: RelayProcess) -> None:
    problem(relay.api("GET", "/v2/no/such/route"), 404)


# ---------------------------------------------------------------------------------------------- tokens


def test_token_create_list_delete(relay: RelayProcess, app: str) -> None:
    name = unique("tok")
    created = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}", json={"appNames": [app]})
    assert created.status_code == 201
    body = created.json()
    assert set(body) == {"token", "tokenName"}
    assert body["tokenName"] == name
    token = body["token"]
    assert token.startswith("dbos_") and len(token) > 30

    listed = relay.api("GET", f"/v2/orgs/{ORG}/tokens")
    assert listed.status_code == 200
    assert token not in listed.text  # shown once: never listed
    docs = {d["tokenName"]: d for d in listed.json()}
    assert set(docs[name]) == TOKEN_FIELDS
    assert docs[name]["appIds"] == [app]
    assert "websocket.connect" in docs[name]["permissions"]
    assert isinstance(docs[name]["createdAt"], str) and docs[name]["createdAt"]
    # The new key works...
    assert relay.api("GET", app_path(app), token=token).status_code == 200

    deleted = relay.api("DELETE", f"/v2/orgs/{ORG}/tokens/{name}")
    assert deleted.status_code == 204 and deleted.content == b""
    assert name not in {d["tokenName"] for d in relay.api("GET", f"/v2/orgs/{ORG}/tokens").json()}
    problem(relay.api("DELETE", f"/v2/orgs/{ORG}/tokens/{name}"), 404)
    # ...and no longer once deleted.
    problem(relay.api("GET", app_path(app), token=token), 401)
    assert token not in relay.log_text()


def test_token_permissions_are_kept(relay: RelayProcess) -> None:
    name = unique("tok-perm")
    relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}", json={"permissions": ["token.read", "metric.read"]})
    docs = {d["tokenName"]: d for d in relay.api("GET", f"/v2/orgs/{ORG}/tokens").json()}
    assert sorted(docs[name]["permissions"]) == ["metric.read", "token.read"]
    assert docs[name]["appIds"] == []


def test_permissions_lists_what_tokens_can_be_granted(relay: RelayProcess) -> None:
    """GET /v2/orgs/{org}/permissions (listPermissions, an array of names; dbosctl's `permission list`)."""
    listed = relay.api("GET", f"/v2/orgs/{ORG}/permissions")
    assert listed.status_code == 200 and listed.headers["Content-Type"] == "application/json"
    names = listed.json()
    assert {"application.read", "application.write", "token.read", "websocket.connect"} <= set(names)
    # Each name is one a token really can be given, and the token keeps it.
    name = unique("tok-all")
    assert relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}", json={"permissions": names}).status_code == 201
    docs = {d["tokenName"]: d for d in relay.api("GET", f"/v2/orgs/{ORG}/tokens").json()}
    assert sorted(docs[name]["permissions"]) == sorted(names)
    reader = create_key(relay, unique("tok-reader"), permissions=["token.read"])
    assert relay.api("GET", f"/v2/orgs/{ORG}/permissions", token=reader).json() == names
    problem(relay.api("GET", f"/v2/orgs/{ORG}/permissions", token=create_key(relay, unique("app-only"))), 403)
    problem(relay.api("GET", "/v2/orgs/no_such_org/permissions"), 404)


def test_current_user_is_404_without_oauth(relay: RelayProcess) -> None:
    """The reference: GET /v2/users/me "is not registered when the server runs with OAuth disabled (self-hosted
    no-auth mode), where it responds 404"; Relay has no OAuth users."""
    problem(relay.api("GET", "/v2/users/me"), 404)


def test_token_duplicate_name_is_409(relay: RelayProcess) -> None:
    name = unique("tok-dup")
    create_key(relay, name)
    problem(relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}", json={}), 409)


def test_delete_unknown_token_is_404(relay: RelayProcess) -> None:
    problem(relay.api("DELETE", f"/v2/orgs/{ORG}/tokens/{unique('never')}"), 404)


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"permissions": ["application.superuser"]}, "body.permissions[0]"),
        ({"permissions": ["application.read", "root"]}, "body.permissions[1]"),
        ({"permissions": "application.read"}, "body.permissions"),
        ({"permissions": [7]}, "body.permissions"),
        ({"appNames": ["no-such-app-here"]}, "body.appNames[0]"),
        ({"appNames": "one-app"}, "body.appNames"),
        ({"scopes": ["x"]}, "body.scopes"),
    ],
)
def test_token_bad_body_is_422(relay: RelayProcess, body: dict[str, Any], location: str) -> None:
    name = unique("tok-bad")
    validation(relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}", json=body), location)
    assert name not in {d["tokenName"] for d in relay.api("GET", f"/v2/orgs/{ORG}/tokens").json()}


@pytest.mark.parametrize("name", ["x" * 65, "has space", "star*", "newline%0A"])
def test_token_bad_name_is_422(relay: RelayProcess, name: str) -> None:
    validation(relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}", json={}), "path.tokenName")


# ------------------------------------------------------------------------------------------------ auth


def test_no_authorization_is_401(relay: RelayProcess, app: str) -> None:
    for method, path in (
        ("GET", f"/v2/orgs/{ORG}/apps"),
        ("GET", app_path(app)),
        ("PUT", app_path(unique("api-anon"))),
        ("PATCH", app_path(app)),
        ("DELETE", app_path(app)),
        ("GET", f"/v2/orgs/{ORG}/tokens"),
        ("POST", f"/v2/orgs/{ORG}/tokens/anon"),
        ("GET", "/relay/v1/events"),
    ):
        problem(relay.api(method, path, token="", json={}), 401)
    assert relay.api("GET", app_path(app)).status_code == 200  # nothing was deleted


@pytest.mark.parametrize(
    "header",
    ["Bearer dbos_wrongwrongwrongwrongwrong", "Bearer not-a-token", "Basic dXNlcjpwYXNz", "Bearer ", "dbos_abc"],
)
def test_wrong_token_is_401(relay: RelayProcess, app: str, header: str) -> None:
    problem(relay.api("GET", app_path(app), headers={"Authorization": header}), 401)


def test_admin_token_is_not_a_prefix_match(relay: RelayProcess, app: str) -> None:
    problem(relay.api("GET", app_path(app), token=relay.admin_token + "x"), 401)
    problem(relay.api("GET", app_path(app), token=relay.admin_token[:-1]), 401)


def test_key_without_permission_is_403(relay: RelayProcess, app: str) -> None:
    reader = create_key(relay, unique("reader"), permissions=["application.read"])
    assert relay.api("GET", app_path(app), token=reader).status_code == 200
    problem(relay.api("PATCH", app_path(app), token=reader, json={"executorTimeoutSecs": 9}), 403)
    problem(relay.api("DELETE", app_path(app), token=reader), 403)
    problem(relay.api("PUT", app_path(unique("api-ro")), token=reader, json={}), 403)
    problem(relay.api("GET", f"/v2/orgs/{ORG}/tokens", token=reader), 403)
    problem(relay.api("POST", f"/v2/orgs/{ORG}/tokens/{unique('minted')}", token=reader, json={}), 403)
    assert relay.api("GET", app_path(app)).json()["executorTimeoutSecs"] != 9

    socket_only = create_key(relay, unique("socket-only"), permissions=["websocket.connect"])
    problem(relay.api("GET", app_path(app), token=socket_only), 403)
    problem(relay.api("GET", f"/v2/orgs/{ORG}/apps", token=socket_only), 403)


def test_key_cannot_mint_more_than_it_has(relay: RelayProcess, app: str) -> None:
    minter = create_key(relay, unique("minter"), permissions=["token.write", "application.read"])
    ok = relay.api(
        "POST", f"/v2/orgs/{ORG}/tokens/{unique('sub')}", token=minter, json={"permissions": ["application.read"]}
    )
    assert ok.status_code == 201
    problem(
        relay.api(
            "POST", f"/v2/orgs/{ORG}/tokens/{unique('sub')}", token=minter, json={"permissions": ["application.write"]}
        ),
        403,
    )


def test_app_scoped_key_cannot_read_another_app(relay: RelayProcess, app: str) -> None:
    other = unique("api-other")
    register_app(relay, other)
    scoped = create_key(relay, unique("scoped"), appNames=[app])
    assert relay.api("GET", app_path(app), token=scoped).status_code == 200
    problem(relay.api("GET", app_path(other), token=scoped), 403)
    problem(relay.api("GET", f"{app_path(other)}/executors", token=scoped), 403)
    problem(relay.api("PATCH", app_path(other), token=scoped, json={"executorTimeoutSecs": 9}), 403)
    problem(relay.api("DELETE", app_path(other), token=scoped), 403)
    # The list shows only what the key may see.
    names = [a["name"] for a in relay.api("GET", f"/v2/orgs/{ORG}/apps", token=scoped).json()]
    assert names == [app]


def test_key_of_one_org_cannot_read_another(relay: RelayProcess, app: str) -> None:
    other_org = "api_other_org"
    register_app(relay, unique("api-theirs"), org=other_org)
    theirs = create_key(relay, unique("theirs"), org=other_org)
    ours = create_key(relay, unique("ours"))
    assert relay.api("GET", f"/v2/orgs/{other_org}/apps", token=theirs).status_code == 200
    problem(relay.api("GET", f"/v2/orgs/{ORG}/apps", token=theirs), 403)
    problem(relay.api("GET", app_path(app), token=theirs), 403)
    problem(relay.api("GET", f"/v2/orgs/{other_org}/apps", token=ours), 403)
    problem(relay.api("GET", f"/v2/orgs/{other_org}/tokens", token=ours), 403)
    # An unknown org is forbidden to a key too, rather than revealing whether it exists.
    problem(relay.api("GET", "/v2/orgs/no_such_org/apps", token=ours), 403)


def test_revoked_key_is_401(relay: RelayProcess, app: str) -> None:
    name = unique("api-revoked")
    key = create_key(relay, name)
    assert relay.api("GET", app_path(app), token=key).status_code == 200
    assert relay.api("DELETE", f"/v2/orgs/{ORG}/tokens/{name}").status_code == 204
    problem(relay.api("GET", app_path(app), token=key), 401)


def test_errors_never_echo_the_token(relay: RelayProcess, app: str) -> None:
    secret = "dbos_" + "s3cr3t" * 8
    for response in (
        relay.api("GET", app_path(app), token=secret),
        relay.api("GET", f"/v2/orgs/{ORG}/apps/{secret[:20]}", token=secret),
        relay.api("GET", app_path(app), headers={"Authorization": f"Token {secret}"}),
    ):
        problem(response, 401)
        assert secret not in response.text
    assert secret not in relay.log_text()
    assert relay.admin_token not in relay.log_text()


# ---------------------------------------------------------------------------------------------- health


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_endpoints_need_no_auth(relay: RelayProcess, path: str) -> None:
    response = relay.api("GET", path, token="")
    assert response.status_code == 200
    assert response.json()["status"] in ("ok", "ready")
    # A wrong token does not make them fail either.
    assert relay.api("GET", path, token="dbos_wrong").status_code == 200


# ------------------------------------------------------------------------------ one time format, empty answers

def _empty(response: requests.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.content == b""
    assert "Content-Type" not in response.headers, response.headers


def test_every_time_is_rfc3339_utc_and_no_empty_answer_has_a_type(relay: RelayProcess) -> None:
    """Walk the API (every GET whose answer carries a time, after the writes that make them): each time field
    matches one RFC 3339 form; a 204 (or a 201 without a body) has no body and no Content-Type."""
    app = unique("times-app")
    _empty(relay.api("PUT", app_path(app), json={}), 204)
    _empty(relay.api("PATCH", app_path(app), json={"executorTimeoutSecs": 30}), 204)
    token_name = unique("times-key")
    created = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{token_name}", json={"appNames": [app]})
    assert created.status_code == 201 and created.headers["Content-Type"] == "application/json"
    rule = relay.api("POST", f"{app_path(app)}/alerting-rules",
                     json={"ruleType": "SlowQueue", "ruleMetadata": {"queue_name": "q", "thresholdSecs": 30}})
    assert rule.status_code == 201 and rule.headers["Content-Type"] == "application/json", rule.text
    key = create_key(relay, unique("times-exec"), appNames=[app])
    with FakeExecutor(relay, app, key) as executor:
        executor.connect_and_identify()
        wait_until(lambda: executors(relay, app), 15, message="the executor is listed")
    seen = set()
    for path in (
        f"/v2/orgs/{ORG}", f"/v2/orgs/{ORG}/apps", app_path(app), f"{app_path(app)}/executors",
        f"/v2/orgs/{ORG}/tokens", f"/v2/orgs/{ORG}/audit-logs", f"{app_path(app)}/alerting-rules",
        "/relay/v1/events?limit=10000", "/relay/v1/instances", f"/relay/v1/orgs/{ORG}/apps/{app}/recoveries",
        f"/relay/v1/orgs/{ORG}/apps/{app}/alerts", f"/relay/v1/orgs/{ORG}/apps/{app}/retention-runs",
    ):
        response = relay.api("GET", path)
        assert response.status_code == 200, (path, response.text)
        for where, value in times(response.json()):
            seen.add(where.rsplit(".", 1)[-1])
            assert value is None or (isinstance(value, str) and RFC3339.match(value)), (path, where, value)
    # the walk did meet the kinds of time Relay writes
    assert {"createdAt", "updatedAt", "at", "recordedAt", "emitTime", "startedAt"} <= seen, seen
    _empty(relay.api("DELETE", f"{app_path(app)}/alerting-rules/{rule.json()['id']}"), 204)
    _empty(relay.api("DELETE", f"/v2/orgs/{ORG}/tokens/{token_name}"), 204)
    _empty(relay.api("DELETE", app_path(app)), 204)
