"""Version skew: an older DBOS Python release and 3.2.0 executors of one application, through the Conductor API v2.

The older release is the ``dbos`` 2.x pinned in the Makefile (``DBOS2_SDK``), installed in ``.venv-dbos2``.
Which message types it lacks is not written down here: the test reads the ``MessageType`` enum of both
installed SDKs (``dbos/_conductor/protocol.py``) and checks every lacking type that has a v2 route:

1. with only the old executor connected, each such route answers 501 (problem+json) naming the SDK language
   and release; the types it has work through it (list, get, steps);
2. once a 3.2.0 executor of the same application (same ``application_version``, same system database)
   is connected too, the same routes answer 200 with the real data (served by 3.2.0: the old one cannot),
   and Relay does not keep sending the old executor types it already refused.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.sdk_apps import OLD_PYTHON, OLD_VENV, SKEW_APP, OldSdkExecutor, ready_info
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

ORG = "local"
APP = "skew-app"
APP_VERSION = "skew-v1"
PREFIX = "old"
QUEUE = "skew_queue"


def route_for(message_type: str, workflows: dict[str, str]) -> tuple[str, str, dict[str, Any] | None] | None:
    """The v2 route (method, path under the app, JSON body) that needs ``message_type``; None if none does."""
    chatty, flaky = workflows["chatty"], workflows["flaky"]
    routes: dict[str, tuple[str, str, dict[str, Any] | None]] = {
        "list_workflows": ("POST", "/workflows/search", {"workflowIdPrefix": [PREFIX]}),
        "get_workflow": ("GET", f"/workflows/{chatty}", None),
        "list_steps": ("GET", f"/workflows/{chatty}/steps", None),
        "get_workflow_events": ("GET", f"/workflows/{chatty}/events", None),
        "get_workflow_notifications": ("GET", f"/workflows/{chatty}/notifications", None),
        "get_workflow_streams": ("GET", f"/workflows/{chatty}/streams", None),
        "get_workflow_aggregates": (
            "POST", "/workflows/aggregates",
            {"groupByStatus": True, "selectCount": True, "workflowIdPrefix": [PREFIX]},
        ),
        "get_step_aggregates": ("POST", "/steps/aggregates", {"groupByFunctionName": True, "selectCount": True}),
        "fork_from_failure": (
            "POST", "/workflows/bulk-fork-from-failure", {"workflowIds": [flaky], "fromLastFailure": True},
        ),
        "export_workflow": ("GET", f"/workflows/{chatty}/export", None),
        "list_queues": ("GET", "/queues", None),
        "get_queue": ("GET", f"/queues/{QUEUE}", None),
        "list_schedules": ("GET", "/schedules", None),
        "list_application_versions": ("GET", "/versions", None),
    }  # fmt: skip
    return routes.get(message_type)


def message_types(python: Path) -> set[str]:
    """The values of ``MessageType`` in the conductor protocol of the dbos installed for ``python``."""
    located = subprocess.run(
        [str(python), "-c", "import dbos._conductor.protocol as p; print(p.__file__)"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    tree = ast.parse(Path(located.stdout.strip()).read_text())
    [enum] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MessageType"]
    return {
        node.value.value
        for node in enum.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def sdk_version(python: Path) -> str:
    result = subprocess.run(
        [str(python), "-c", "from importlib.metadata import version; print(version('dbos'))"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout.strip()



def test_old_sdk_lacks_types_clearly_and_routing_prefers_an_executor_that_has_them(
    relay: RelayProcess, pg_url: str, tmp_path: Path
) -> None:
    if not OLD_PYTHON.exists():
        pytest.fail(f"{OLD_PYTHON} is missing: `make test-deps` creates {OLD_VENV.name} with the older dbos")
    old_version = sdk_version(OLD_PYTHON)
    assert old_version.startswith("2."), old_version
    assert sdk_version(Path(sys.executable)) == "3.2.0"
    lacking = sorted(message_types(Path(sys.executable)) - message_types(OLD_PYTHON))

    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{APP}", json={}).status_code == 204
    created = relay.api("POST", f"/v2/orgs/{ORG}/tokens/skew-key", json={"appNames": [APP]})
    assert created.status_code == 201, created.text
    env = {"APP_NAME": APP, "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": created.json()["token"],
           "SYSTEM_DATABASE_URL": pg_url, "APP_VERSION": APP_VERSION}  # fmt: skip
    base = f"/v2/orgs/{ORG}/apps/{APP}"

    def api(method: str, path: str, body: dict[str, Any] | None = None) -> requests.Response:
        return relay.api(method, base + path, json=body, timeout=30)

    def healthy_versions() -> list[str]:
        return sorted(e["dbosVersion"] for e in api("GET", "/executors").json() if e["status"] == "HEALTHY")

    old = OldSdkExecutor(SKEW_APP, name="old-sdk", cwd=tmp_path / "old", env={**env, "SCENARIO_PREFIX": PREFIX})
    new = ExecutorProcess(SKEW_APP, name="new-sdk", cwd=tmp_path / "new", env=env)
    with old:
        old_ready = ready_info(old)
        workflows = old_ready["workflows"]
        assert old_ready["dbos_version"] == old_version
        wait_until(lambda: healthy_versions() == [old_version], 30, message="old executor never HEALTHY")
        [executor] = api("GET", "/executors").json()
        assert executor["language"] == "python" and executor["appVersion"] == APP_VERSION

        routed = {t: route for t in lacking if (route := route_for(t, workflows)) is not None}
        assert routed, f"dbos {old_version} lacks no type Relay routes ({lacking}): pick an older 2.x"

        # What the old release has works through it.
        found = api("POST", "/workflows/search", {"workflowIdPrefix": [PREFIX]})
        assert found.status_code == 200, found.text
        assert {w["workflowId"]: w["status"] for w in found.json()} == {
            workflows["greet"]: "SUCCESS", workflows["chatty"]: "SUCCESS", workflows["flaky"]: "ERROR",
        }  # fmt: skip
        steps = api("GET", f"/workflows/{workflows['greet']}/steps").json()
        assert [s["stepName"].rsplit(".", 1)[-1] for s in steps] == ["shout", "exclaim"]
        assert api("GET", f"/workflows/{workflows['chatty']}").json()["status"] == "SUCCESS"

        # What it lacks: 501, saying which SDK lacks it.
        for message_type, (method, path, body) in routed.items():
            response = api(method, path, body)
            assert response.status_code == 501, f"{message_type}: {response.status_code} {response.text}"
            assert response.headers["Content-Type"].startswith("application/problem+json")
            problem = response.json()
            assert problem["status"] == 501
            assert "python" in problem["detail"] and old_version in problem["detail"], problem
            assert message_type in problem["detail"], problem

        # The raw passthrough carries the old executor's own answer.
        raw = relay.api("POST", f"/relay/v1/orgs/{ORG}/apps/{APP}/executors/{old_ready['executor_id']}/requests",
                        json={"type": "list_queues", "body": {}}, timeout=30)  # fmt: skip
        assert raw.status_code == 200, raw.text
        assert raw.json()["error_message"] == "Unknown message type"

        with new:
            new_ready = ready_info(new)
            assert new_ready["dbos_version"] == "3.2.0"
            wait_until(lambda: healthy_versions() == sorted([old_version, "3.2.0"]), 30,
                       message="both executors never HEALTHY together")  # fmt: skip

            answers = {}
            for message_type, (method, path, body) in routed.items():
                response = api(method, path, body)
                assert response.status_code == 200, f"{message_type}: {response.status_code} {response.text}"
                answers[message_type] = response.json()
            check_answers(answers, workflows)

            # Repeat them: Relay remembers who refused what.
            for method, path, body in routed.values():
                assert api(method, path, body).status_code == 200
        refusals = [line for line in old.log_text().splitlines() if "Unexpected message type" in line]
        for message_type in routed:
            sent = sum(line.rstrip().endswith(message_type) for line in refusals)
            # Once by the first routed call at most (Relay may also know it from the release), once by the raw call.
            assert sent <= (2 if message_type == "list_queues" else 1), (message_type, refusals)


def check_answers(answers: dict[str, Any], workflows: dict[str, str]) -> None:
    """The real data behind each type the old release lacked, as the 3.2.0 executor served it."""
    if "get_workflow_events" in answers:
        events = answers["get_workflow_events"]
        assert [e["key"] for e in events] == ["progress"] and "done skew" in events[0]["value"]
    if "get_workflow_notifications" in answers:
        [note] = answers["get_workflow_notifications"]
        assert note["topic"] == "ping" and "pong" in note["message"] and note["consumed"] is True
    if "get_workflow_streams" in answers:
        [stream] = answers["get_workflow_streams"]
        assert stream["key"] == "log" and len(stream["values"]) == 2 and "line-1" in stream["values"][0]
    if "get_workflow_aggregates" in answers:
        counts = {row["group"]["status"]: row["count"] for row in answers["get_workflow_aggregates"]}
        assert counts == {"SUCCESS": 2, "ERROR": 1}, answers["get_workflow_aggregates"]
    if "get_step_aggregates" in answers:
        rows = answers["get_step_aggregates"]
        names = {str(next(iter(row["group"].values()))).rsplit(".", 1)[-1]: row["count"] for row in rows}
        assert names.get("shout") == 1 and names.get("fragile") == 1, rows
    if "fork_from_failure" in answers:
        [fork] = answers["fork_from_failure"]["workflowIds"]
        assert fork != workflows["flaky"]
    if "list_queues" in answers:
        assert QUEUE in [q["name"] for q in answers["list_queues"]]
    if "get_queue" in answers:
        assert answers["get_queue"]["name"] == QUEUE and answers["get_queue"]["workerConcurrency"] == 2
