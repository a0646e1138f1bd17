"""Schemathesis against the HTTP API of a real `relay serve`, driven by the server's own GET /openapi.json.

In-process (schemathesis's Python API and its Hypothesis strategies, no CLI; loopback only; its pytest plugin's
lazy loading does not run under pytest 9): every operation of the document gets generated requests, valid and
invalid (positive and negative modes: wrong types, missing and extra fields, out-of-range values, malformed paths
and queries, missing credentials), 6 examples per operation and mode, not shrunk. Half of
the requests name the application a real DBOS 3.2.0 executor serves, so executor-served operations are exercised
through a live WebSocket as well. The admin token is sent, so authorization does not hide what validation does
(test_auth_matrix.py covers the 401/403 side).

The same again with requests generated from Conductor's reference document (the operations Relay serves).

What must hold for every request: no 500 (nor any 5xx but the documented 502, Relay passing on an executor's own
refusal, or 503, the application having no executor connected), a problem+json body for every API error (the
console's pages answer theirs as HTML), no traceback, and the server and the executor still up afterwards.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from tests.fuzz.hypothesis_settings import SCALE
from tests.integration.fake_executor import create_key, dbos_executor, executors, register_app
from tests.support.openapi_ref import REFERENCE_PATH
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

APP = "schemathesis-app"
MAX_EXAMPLES = 6 * SCALE  # per operation and mode: ~1,000 requests, about a minute on 2 cores
STATUSES: Counter[int] = Counter()
STATS: Counter[str] = Counter()
SERVER: dict[str, Any] = {}
# Operations whose generated requests would take the test's own fixtures away (the app, or every socket).
_DESTRUCTIVE_ON_OUR_APP = {("DELETE", "/v2/orgs/{orgName}/apps/{appName}")}
API_PREFIXES = ("/v2/", "/relay/", "/internal/", "/websocket/", "/healthz", "/readyz", "/openapi.json",
                "/openapi-3.0.json", "/metrics", "/v1/")


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    return {"RELAY_REQUEST_TIMEOUT_S": "10"}


@pytest.fixture(scope="module", autouse=True)
def _executor(relay: RelayProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The application, and a real DBOS executor serving it, for the whole module."""
    register_app(relay, APP)
    key = create_key(relay, "schemathesis-key")
    with dbos_executor(relay, APP, key, cwd=tmp_path_factory.mktemp("dbos-executor")) as executor:
        wait_until(lambda: any(e["status"] == "HEALTHY" for e in executors(relay, APP).values()),
                   timeout=60, message=f"the DBOS executor did not connect:\n{executor.log_tail()}")
        SERVER.update(relay=relay, executor=executor)
        yield
        assert executor.running, executor.log_tail()


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["requests"]:
        record(
            "fuzz-3-http", area="HTTP API under schemathesis (valid and invalid requests from /openapi.json)",
            tried={"operations": STATS["operations"], "requests": STATS["requests"],
                   "invalid requests (negative mode)": STATS["negative"],
                   "4xx answers": sum(n for s, n in STATUSES.items() if 400 <= s < 500),
                   "2xx answers": sum(n for s, n in STATUSES.items() if 200 <= s < 300),
                   "executor refusals passed on (502)": STATUSES[502]},
            outcome="no 500, no 5xx of Relay's own; every API error problem+json; server and executor up after",
        )


def check(relay: RelayProcess, case: Any, mode: GenerationMode) -> None:
    """One generated request: sent (sometimes at the live application), and what must hold of its answer."""
    rng = random.Random(f"{case.method} {case.path} {case.path_parameters} {case.query} {case.body}")
    params = case.path_parameters
    ours = (case.method.upper(), case.path) not in _DESTRUCTIVE_ON_OUR_APP
    if isinstance(params, dict) and "appName" in params and ours and rng.random() < 0.5:
        params["orgName"], params["appName"] = "local", APP
    response = case.call(base_url=relay.base_url, headers={"Authorization": f"Bearer {relay.admin_token}"},
                         timeout=30)
    STATS["requests"] += 1
    STATS[mode.value] += 1
    STATUSES[response.status_code] += 1
    content_type = (response.headers.get("content-type") or [""])[0]
    where = (f"{case.method} {case.formatted_path} ({mode.value}) -> {response.status_code} {content_type} "
             f"{response.text[:300]!r}")
    assert response.status_code != 500, where
    console = not case.path.startswith(API_PREFIXES)  # HTML pages (/docs) answer errors as HTML pages
    if response.status_code >= 400 and not console:
        assert content_type.startswith("application/problem+json"), where
        body = response.json()
        assert body["status"] == response.status_code and body["detail"], where
    assert "Traceback" not in response.text, where
    if response.status_code >= 500:
        detail = response.json()["detail"]
        passed_on = response.status_code == 502 and response.json().get("title") == "Executor Error"
        no_executor = response.status_code == 503 and "is connected" in detail
        assert passed_on or no_executor, where
    assert relay.running and SERVER["executor"].running


def fuzz_operation(relay: RelayProcess, strategy: Any, mode: GenerationMode) -> Any:
    """A Hypothesis test of one operation in one mode, without shrinking (a failure is reported as found)."""

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        check(relay, case, mode)

    return run


def test_no_request_breaks_relay(relay: RelayProcess) -> None:
    fuzz_document(relay, schemathesis.openapi.from_url(f"{relay.base_url}/openapi.json"))


def test_no_request_of_the_reference_document_breaks_relay(relay: RelayProcess) -> None:
    """The same, with requests generated from Conductor's reference document, for the operations Relay serves:
    what a Conductor client may send, read as Conductor describes it (another source of shapes than Relay's own)."""
    served = {(method.upper(), path) for path, ops in relay.api("GET", "/openapi.json").json()["paths"].items()
              for method in ops}
    before = STATS["operations"]
    fuzz_document(relay, schemathesis.openapi.from_path(str(REFERENCE_PATH)), served)
    assert STATS["operations"] - before >= 40  # the v2 operations Relay claims (test_openapi_conformance.py)


def fuzz_document(relay: RelayProcess, schema: Any, only: set[tuple[str, str]] | None = None) -> None:
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if only is not None and (operation.method.upper(), operation.path) not in only:
            continue
        STATS["operations"] += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                strategy = operation.as_strategy(generation_mode=mode)
            except Exception as error:  # an operation with nothing to make invalid
                STATS[f"no {mode.value} strategy"] += 1
                del error
                continue

            try:
                fuzz_operation(relay, strategy, mode)()
            except AssertionError as error:
                failures.append(next((line for line in str(error).splitlines() if "(" + mode.value + ")" in line),
                                     str(error))[:500])
            except Exception as error:
                if "Unsatisfiable" in type(error).__name__ or "Unsatisfiable" in str(error):
                    continue
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): "
                                f"{type(error).__name__}: {str(error)[:300]}")
    assert not failures, "\n".join(failures)


def test_relay_and_its_executor_are_fine_afterwards(relay: RelayProcess) -> None:
    executor: ExecutorProcess = SERVER["executor"]
    assert STATS["requests"] > 0
    assert relay.api("GET", "/readyz", token="").status_code == 200
    listed = relay.api("GET", f"/v2/orgs/local/apps/{APP}/queues")
    assert listed.status_code == 200, listed.text
    assert executor.running
