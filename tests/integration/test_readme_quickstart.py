"""The README's quick start, as a newcomer pastes it: `relay apps create`, `relay keys create`, then the Python
example (dbos 3.2.0, SQLite system database) run unmodified but for the port against a real `relay serve`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.ports import wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

README_URL = "ws://127.0.0.1:8090"


def quickstart_python() -> str:
    """The one ```python block of the README's Quick start section."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return block


def test_the_readme_quick_start_runs(tmp_path: Path) -> None:
    source = quickstart_python()
    assert README_URL in source  # the address `make run` listens on, replaced by this server's below
    with RelayProcess(tmp_path / "relay-data") as relay:
        for args in (["apps", "create", "my-app"], ["keys", "create", "my-app-key", "--app", "my-app"]):
            result = relay.run_cli(args)
            assert result.returncode == 0, result.stderr
        key = result.stdout.strip()
        app = ExecutorProcess(source=source.replace(README_URL, relay.ws_url), env={"CONDUCTOR_KEY": key},
                              cwd=tmp_path / "app", name="app")
        with app:
            app.wait_for_log("HELLO RELAY", timeout=90)
            executors = relay.api("GET", "/v2/orgs/local/apps/my-app/executors").json()
            assert [(e["status"], e["language"], e["dbosVersion"]) for e in executors] == [
                ("HEALTHY", "python", "3.2.0")
            ]

            def greeted() -> bool:
                workflows = relay.api("GET", "/v2/orgs/local/apps/my-app/workflows").json()
                return [(w["workflowName"], w["status"], w["queueName"]) for w in workflows] == [
                    ("greet", "SUCCESS", "greetings")
                ]

            wait_until(greeted, timeout=30)
            assert key not in app.log_text()
