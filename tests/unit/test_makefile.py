"""The Makefile's install stamps: `make run` installs Relay alone, `make test` (venv) adds the test extras and the
DBOS SDK on top of that same runtime install. `make -n -B` prints every recipe without running one."""

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


def test_make_run_installs_the_runtime_only() -> None:
    lines = recipes("run")
    installs = [line for line in lines if "pip install" in line]
    assert len(installs) == 1
    assert installs[0].endswith("-c constraints.txt -e .")
    assert "touch .venv/.runtime-installed" in lines
    assert lines[-1].startswith(".venv/bin/relay serve")


def test_the_test_environment_is_the_runtime_plus_the_test_extras() -> None:
    lines = recipes("venv")
    installs = [line for line in lines if "pip install" in line]
    assert len(installs) == 2
    assert installs[0].endswith("-c constraints.txt -e .")
    assert "-c constraints.txt -e '.[test]' 'dbos==3.2.0'" in installs[1]
    assert lines.index("touch .venv/.runtime-installed") < lines.index("touch .venv/.installed")
