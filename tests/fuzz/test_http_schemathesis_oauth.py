"""Schemathesis against the operations Relay serves only with OAuth on (issue 31): registerUser, getCurrentUser,
updateOrg, members, roles, join secrets, domain claims, with getOrg and listAuditLogs (the reference's 16
`x-dbos-requires-oauth` operations), against a real `relay serve` trusting a real identity provider
(tests/support/idp.py), from Relay's own /openapi.json and from Conductor's reference document.

The requests carry the access token of a registered person who is Organization Admin of the default organization
(RELAY_OIDC_ADMIN_EMAILS), so authorization does not hide what validation does; half of them name that
organization. test_http_schemathesis.py covers every other operation (OAuth off). What must hold: no 5xx, a
problem+json body for every error, no traceback, the server up, and the person still who they were.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from tests.fuzz.hypothesis_settings import SCALE
from tests.support.idp import IdentityProvider
from tests.support.openapi_ref import REFERENCE_PATH
from tests.support.procs import RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

ORG = "local"
LOGIN = "fuzzer"
MAX_EXAMPLES = 6 * SCALE  # per operation and mode
STATUSES: Counter[int] = Counter()
STATS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def relay_env(identity_provider: IdentityProvider) -> dict[str, str]:
    return {**identity_provider.relay_env(), "RELAY_OIDC_ADMIN_EMAILS": identity_provider.email_of(LOGIN),
            "RELAY_LOGIN_FAILURES_PER_MIN": "1000000"}


@pytest.fixture(scope="module")
def person(relay: RelayProcess, identity_provider: IdentityProvider) -> str:
    """The access token of a registered Organization Admin of the default organization (valid for an hour)."""
    token = identity_provider.mint(identity_provider.claims(LOGIN, exp=int(time.time()) + 3600))
    registered = relay.api("POST", "/v2/users", token=token, json={"name": "fuzz_admin"})
    assert registered.status_code == 201, registered.text
    return token


def _oauth_operations(relay: RelayProcess) -> set[tuple[str, str]]:
    doc = relay.api("GET", "/openapi.json", token="").json()
    found = {(method.upper(), path) for path, ops in doc["paths"].items() for method, op in ops.items()
             if op.get("x-dbos-requires-oauth")}
    return found | {("GET", "/v2/orgs/{orgName}"), ("GET", "/v2/orgs/{orgName}/audit-logs")}


def check(relay: RelayProcess, token: str, case: Any, mode: GenerationMode) -> None:
    rng = random.Random(f"{case.method} {case.path} {case.path_parameters} {case.body}")
    params = case.path_parameters
    if isinstance(params, dict) and "orgName" in params and rng.random() < 0.5:
        params["orgName"] = ORG
    response = case.call(base_url=relay.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    STATS["requests"] += 1
    STATS[mode.value] += 1
    STATUSES[response.status_code] += 1
    where = f"{case.method} {case.formatted_path} ({mode.value}) -> {response.status_code} {response.text[:300]!r}"
    assert response.status_code < 500, where
    if response.status_code >= 400:
        assert (response.headers.get("content-type") or [""])[0].startswith("application/problem+json"), where
        body = response.json()
        assert body["status"] == response.status_code and body["detail"], where
    assert "Traceback" not in response.text and token not in response.text, where
    assert relay.running


def fuzz_operation(relay: RelayProcess, token: str, strategy: Any, mode: GenerationMode) -> Any:
    """A Hypothesis test of one operation in one mode, without shrinking (a failure is reported as found)."""

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        check(relay, token, case, mode)

    return run


def fuzz(relay: RelayProcess, token: str, schema: Any, only: set[tuple[str, str]]) -> int:
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) not in only:
            continue
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                strategy = operation.as_strategy(generation_mode=mode)
            except Exception:  # an operation with nothing to make invalid
                continue
            try:
                fuzz_operation(relay, token, strategy, mode)()
            except AssertionError as error:
                failures.append(str(error).splitlines()[0][:500])
            except Exception as error:
                if "Unsatisfiable" not in type(error).__name__ and "Unsatisfiable" not in str(error):
                    failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): "
                                    f"{type(error).__name__}: {str(error)[:300]}")
    assert not failures, "\n".join(failures)
    return operations


def test_no_request_to_the_people_operations_breaks_relay(relay: RelayProcess, person: str) -> None:
    only = _oauth_operations(relay)
    assert len(only) == 16
    assert fuzz(relay, person, schemathesis.openapi.from_url(f"{relay.base_url}/openapi.json"), only) == 16
    STATS["operations"] += 16


def test_no_request_of_the_reference_document_breaks_them(relay: RelayProcess, person: str) -> None:
    """The same operations, requests generated from Conductor's reference document."""
    assert fuzz(relay, person, schemathesis.openapi.from_path(str(REFERENCE_PATH)), _oauth_operations(relay)) == 16
    STATS["operations"] += 16


def test_the_person_is_still_who_they_were(relay: RelayProcess, person: str) -> None:
    me = relay.api("GET", "/v2/users/me", token=person)
    assert me.status_code == 200, me.text
    assert (me.json()["orgName"], me.json()["role"]["name"]) == (ORG, "Organization Admin")
    assert STATS["requests"] > 0 and STATUSES[500] == 0
    record(
        "fuzz-3b-http-oauth", area="The OAuth-only operations under schemathesis (a person's access token)",
        tried={"operations": STATS["operations"], "requests": STATS["requests"],
               "invalid requests (negative mode)": STATS["negative"],
               "4xx answers": sum(n for s, n in STATUSES.items() if 400 <= s < 500),
               "2xx answers": sum(n for s, n in STATUSES.items() if 200 <= s < 300)},
        outcome="no 5xx; every error problem+json; the token never echoed; the person unchanged",
    )
