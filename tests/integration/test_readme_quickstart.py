"""The README's quick start, as a newcomer pastes it: `relay apps create`, `relay keys create`, then the Python
example (dbos 3.2.0, SQLite system database) run unmodified but for the port against a real `relay serve`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.support.ports import wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, RelayProcess

pytestmark = pytest.mark.integration

README_URL = "ws://127.0.0.1:8090"


def quickstart_blocks(language: str) -> list[str]:
    """The ```language blocks of the README's Quick start section."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)


def relay_commands() -> list[list[str]]:
    """The `relay ...` commands of the Quick start's shell blocks (``key=$(relay ...)`` included)."""
    commands = []
    for block in quickstart_blocks("sh"):
        for raw in block.splitlines():
            command = raw.split("#", 1)[0].strip()
            if command.startswith("key=$(") and command.endswith(")"):
                command = command.removeprefix("key=$(").removesuffix(")")
            if command.startswith("relay "):
                commands.append(shlex.split(command)[1:])
    return commands


def test_the_readme_quick_start_runs(tmp_path: Path) -> None:
    (source,) = quickstart_blocks("python")
    assert README_URL in source  # the address `make run` listens on, replaced by this server's below
    commands = relay_commands()
    assert [args[:2] for args in commands] == [["apps", "create"], ["keys", "create"]]
    with RelayProcess(tmp_path / "relay-data") as relay:
        for args in commands:
            result = relay.run_cli(args)
            assert result.returncode == 0, result.stderr
        key = result.stdout.strip()  # what `key=$(relay keys create ...)` holds
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
            _relay_events_show_what_the_readme_says(relay, executors[0]["executorId"])


def _relay_events_show_what_the_readme_says(relay: RelayProcess, executor_id: str) -> None:
    """The quick start says `relay events --app my-app` shows the executor connecting, and a workflow only once
    Relay was asked to act on it (an Operation naming it): never the workflows an executor ran on its own."""
    section = (REPO_ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "`relay events --app my-app`" in section, "the quick start does not say what `relay events` shows"
    claim = " ".join(section.split("`relay events --app my-app`", 1)[1].split("\n\n", 1)[0].split())
    assert claim.startswith("shows the executor connecting (`Executor.Connected`, with its id)"), claim

    def events() -> list[list[str]]:
        result = relay.run_cli(["events", "--app", "my-app"])
        assert result.returncode == 0, result.stderr
        return [line.split("\t") for line in result.stdout.splitlines()[1:]]

    connected = [row[4] for row in events() if row[2] == "Executor.Connected"]
    assert connected == [executor_id]
    [greet] = relay.api("GET", "/v2/orgs/local/apps/my-app/workflows").json()
    assert greet["workflowId"] not in {row[4] for row in events()}  # ran on the executor: not an event
    assert relay.api("POST", f"/v2/orgs/local/apps/my-app/workflows/{greet['workflowId']}/cancel").status_code == 204
    operations = [row for row in events() if row[2] == "Operation.Performed" and row[4] == greet["workflowId"]]
    assert len(operations) == 1 and '"operation": "cancelWorkflow"' in operations[0][5], operations
