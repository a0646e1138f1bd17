"""The Makefile's two environments: `make run` installs Relay with its data plane in .venv-relay (and nothing for
the tests); `make venv` builds the test harness (.venv: the test extras and the DBOS SDK of the test executors);
`make test` builds both. `make -n -B` prints every recipe without running one."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def recipes(target: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.fail("make is not installed (the README's two commands are make targets)", pytrace=False)
    # Run from `make test` (CI), a nested make inherits MAKEFLAGS/MAKELEVEL and prints "Entering directory"
    # lines: a clean environment and --no-print-directory keep the output to the recipes.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEFILES")}
    result = subprocess.run(["make", "--no-print-directory", "-n", "-B", target], cwd=REPO, capture_output=True,
                            text=True, check=True, timeout=60, env=env)
    return [line for line in result.stdout.splitlines() if not line.startswith("make")]


def test_make_run_installs_relay_with_its_data_plane_only() -> None:
    lines = recipes("run")
    installs = [line for line in lines if "pip install" in line]
    assert len(installs) == 1
    assert installs[0].startswith(".venv-relay/bin/python -m pip install")
    assert installs[0].endswith("-c constraints.txt -e '.[dataplane]'")
    assert "touch .venv-relay/.installed" in lines
    assert lines[-1].startswith(".venv-relay/bin/relay serve")


def test_the_test_harness_has_the_test_extras_and_the_executors_sdk() -> None:
    lines = recipes("venv")
    installs = [line for line in lines if "pip install" in line]
    assert len(installs) == 1
    assert installs[0].startswith(".venv/bin/python -m pip install")
    assert installs[0].endswith("-c constraints.txt -e '.[test]' 'dbos==3.2.0'")
    assert "touch .venv/.installed" in lines


def test_make_test_builds_both_environments() -> None:
    lines = recipes("test")
    assert "touch .venv-relay/.installed" in lines
    assert "touch .venv/.installed" in lines
    assert lines[-1].startswith(".venv/bin/python -m pytest")
