"""/openapi-3.0.json is useful: openapi-python-client (a real generator, pinned in
tests/integration/requirements/openapi-client.txt, installed in .venv-openapi-client by make test-deps) generates
a Python client from the document a real `relay serve` serves, and that client, in its own environment, calls
Relay: registers an app (a body), mints an API key (a body), lists and gets apps with that key, and is refused
without one (generated_client_calls.py makes the calls and prints what the client parsed).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import requests

from tests.integration.fake_executor import unique
from tests.support.procs import REPO_ROOT, RelayProcess, clean_env

pytestmark = pytest.mark.integration

CLIENT_VENV = REPO_ROOT / ".venv-openapi-client"
CALLS = Path(__file__).parent / "generated_client_calls.py"
ORG = "local"
GENERATE_TIMEOUT_S = 180
CALLS_TIMEOUT_S = 120


def _client_env(extra: dict[str, str]) -> dict[str, str]:
    # the generator runs ruff (its own dependency) on what it wrote: its venv's bin comes first on PATH
    return clean_env({"PATH": f"{CLIENT_VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", **extra})


def _generate(document: Path, output: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLIENT_VENV / "bin" / "openapi-python-client"), "generate", "--path", str(document),
         "--meta", "none", "--output-path", str(output)],
        cwd=output.parent, env=_client_env({}), capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S,
        check=False,
    )


def test_a_generated_client_calls_relay(relay: RelayProcess, tmp_path: Path) -> None:
    assert (CLIENT_VENV / ".installed").exists(), "run `make test-deps` (it installs .venv-openapi-client)"
    served = requests.get(f"{relay.base_url}/openapi-3.0.json", timeout=10)  # public: no credentials
    assert served.status_code == 200, served.text
    document = tmp_path / "relay-openapi-3.0.json"
    document.write_bytes(served.content)

    generated = _generate(document, tmp_path / "relay_client")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    # the only piece left out: the YAML rendering of the document (the generator reads JSON bodies only)
    said = generated.stdout + generated.stderr
    warnings = [line for line in said.splitlines() if line.startswith("WARNING")]
    assert warnings == ["WARNING parsing GET /openapi.yaml within relay."], said
    assert (tmp_path / "relay_client" / "api" / "applications" / "list_apps.py").exists()

    app, key_name = unique("generated"), unique("generated-key")
    calls = subprocess.run(
        [str(CLIENT_VENV / "bin" / "python"), str(CALLS)],
        env=_client_env({"PYTHONPATH": str(tmp_path), "RELAY_URL": relay.base_url, "ORG": ORG, "APP": app,
                         "KEY_NAME": key_name, "RELAY_ADMIN_TOKEN": relay.admin_token}),
        capture_output=True, text=True, timeout=CALLS_TIMEOUT_S, check=False,
    )
    assert calls.returncode == 0, calls.stderr[-3000:]
    parsed = json.loads(calls.stdout)

    assert parsed["register_status"] == 204
    assert parsed["token"] == {"type": "TokenCreated", "token_name": key_name, "prefix": "dbos_",
                               "length": parsed["token"]["length"]}
    assert parsed["token"]["length"] > 20
    mine = {"type": "Application", "name": app, "status": "UNAVAILABLE", "private_mode": True,
            "executor_timeout_secs": parsed["app"]["executor_timeout_secs"]}
    assert parsed["app"] == mine  # no executor has connected: unavailable
    assert parsed["apps"] == [mine]  # the key is limited to this app
    assert parsed["unauthenticated"] == {"status": 401, "type": "ErrorModel"}
    # and Relay saw the same: the app exists, registered as the client asked
    shown = relay.api("GET", f"/v2/orgs/{ORG}/apps/{app}")
    assert shown.status_code == 200 and shown.json()["privateMode"] is True
