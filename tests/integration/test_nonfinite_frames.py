"""An executor answering with NaN / Infinity (not JSON) against a real `relay serve`: the frame is refused
at decode like any malformed frame (logged without its content, the socket kept), so the API caller gets
valid JSON (a 502 problem naming the malformed frame: the refused frame named the pending request) rather
than the NaN; a good answer afterwards goes through. Before the fix the NaN reached the caller as
`{"value": NaN}`, which strict JSON parsers refuse."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import requests

from tests.integration.fake_executor import (
    FakeExecutor,
    create_key,
    register_app,
    wait_log_count,
    wait_status,
)
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

APP = "nonfinite-app"
REQUEST_TIMEOUT_S = 10.0
REFUSED = "sent a bad frame: frame holds a non-finite number"


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def relay_env() -> dict[str, str]:
    return {"RELAY_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S)}


@pytest.fixture(scope="module", autouse=True)
def _app(relay: RelayProcess) -> None:
    register_app(relay, APP)


def raw_call(relay: RelayProcess, executor_id: str, out: dict[str, requests.Response]) -> threading.Thread:
    def run() -> None:
        out["response"] = relay.api(
            "POST", f"/relay/v1/orgs/local/apps/{APP}/executors/{executor_id}/requests",
            json={"type": "some_future_type", "n": 1}, timeout=30,
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_answer_never_reaches_the_caller(relay: RelayProcess, number: str) -> None:
    key = create_key(relay, f"nonfinite-{number.strip('-').lower()}-{len(number)}")
    with FakeExecutor(relay, APP, key) as fake:
        fake.connect_and_identify()
        wait_status(relay, APP, fake.executor_id, "HEALTHY")
        before = relay.log_text().count(REFUSED)

        out: dict[str, requests.Response] = {}
        thread = raw_call(relay, fake.executor_id, out)
        request = fake.recv_json()
        assert request["type"] == "some_future_type"
        rid = request["request_id"]
        fake.send_text(f'{{"type": "some_future_type", "request_id": "{rid}", "value": {number}, '
                       '"note": "nonfinite-marker"}')
        thread.join(timeout=30)
        response = out["response"]
        body = strict_json(response.text)  # valid JSON, whatever the status
        assert response.status_code == 502, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert body["status"] == 502
        assert "malformed frame: frame holds a non-finite number" in body["detail"]
        assert "nonfinite-marker" not in response.text
        wait_log_count(relay, REFUSED, before + 1)
        assert "nonfinite-marker" not in relay.log_text()

        # The socket is still served: a good answer to the next request goes through.
        fake.ping_pong()
        thread = raw_call(relay, fake.executor_id, out)
        request = fake.recv_json()
        fake.send_text(json.dumps({"type": "some_future_type", "request_id": request["request_id"], "value": 1.5}))
        thread.join(timeout=30)
        assert out["response"].status_code == 200, out["response"].text
        assert strict_json(out["response"].text)["value"] == 1.5
        assert relay.api("GET", f"/v2/orgs/local/apps/{APP}/executors").json()
