"""`make test` checks its toolchains first (tests/support/check_toolchains.py): on this machine they pass; with a
toolchain missing or too old (fake ones on a PATH of their own) it stops, naming the toolchain, the version the
pins need and how to get it; `make test` runs the check before building anything."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import check_toolchains

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "check_toolchains.py"
GOOD = {
    "go": "go version go1.26.8 linux/amd64",
    "node": "v20.20.2",
    "npm": "10.8.2",
    "javac": "javac 17.0.15",
    "mvn": "Apache Maven 3.8.7 (b89d5959fcde851dcb1c8946a785a163f14e1e29)",
}


def go_needed() -> str:
    """The newest `go` directive of the Go test apps: what the check must ask for."""
    versions = [re.search(r"^go (\S+)$", (REPO / "tests/integration" / app / "go.mod").read_text(),
                          re.MULTILINE).group(1)
                for app in ("go_app", "go_current_app")]
    return max(versions, key=lambda v: tuple(int(p) for p in v.split(".")))


def fake_bin(tmp_path: Path, outputs: dict[str, str]) -> Path:
    """A folder of fake toolchain commands, each printing its version line."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, line in outputs.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\necho '{line}'\n")
        path.chmod(0o755)
    return folder


def run_check(path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GOTOOLCHAIN"}
    env["PATH"] = path
    return subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_toolchains_of_this_machine_pass() -> None:
    result = run_check(os.environ["PATH"])
    assert (result.returncode, result.stderr) == (0, "")


def test_fake_toolchains_of_the_needed_versions_pass(tmp_path: Path) -> None:
    result = run_check(str(fake_bin(tmp_path, GOOD)))
    assert (result.returncode, result.stderr) == (0, "")


def test_a_missing_go_stops_naming_it_the_version_and_where_to_get_it(tmp_path: Path) -> None:
    result = run_check(str(fake_bin(tmp_path, {k: v for k, v in GOOD.items() if k != "go"})))
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "needed" in line]
    assert len(lines) == 1
    assert f"Go {go_needed()} or newer is needed" in lines[0]
    assert "not found" in lines[0]
    assert "https://go.dev/dl/" in lines[0]


def test_an_old_go_and_an_old_jdk_stop_naming_both(tmp_path: Path) -> None:
    outputs = dict(GOOD, go="go version go1.19.8 linux/amd64", javac="javac 1.8.0_392")
    result = run_check(str(fake_bin(tmp_path, outputs)))
    assert result.returncode != 0
    assert f"Go {go_needed()} or newer is needed (tests/integration/go_current_app/go.mod), found 1.19.8" \
        in result.stderr
    assert "JDK 17.0.0 or newer is needed" in result.stderr
    assert "found 1.8.0: apt-get install openjdk-17-jdk-headless" in result.stderr
    assert "Maven" not in result.stderr


@pytest.mark.parametrize(("tool", "line", "named"), [
    ("node", "v18.19.0", "Node.js 20.0.0 or newer is needed"),
    ("mvn", "Apache Maven 3.6.0", "Maven 3.6.3 or newer is needed"),
])
def test_an_old_node_or_maven_stops_naming_it(tmp_path: Path, tool: str, line: str, named: str) -> None:
    result = run_check(str(fake_bin(tmp_path, dict(GOOD, **{tool: line}))))
    assert result.returncode != 0
    assert named in result.stderr


def test_node_without_npm_is_not_enough(tmp_path: Path) -> None:
    result = run_check(str(fake_bin(tmp_path, {k: v for k, v in GOOD.items() if k != "npm"})))
    assert result.returncode != 0
    assert "Node.js 20.0.0 or newer is needed" in result.stderr
    assert "with npm" in result.stderr


def test_an_old_python_is_named_with_the_version_pyproject_needs() -> None:
    needed = check_toolchains.required()
    found = dict(dict.fromkeys(needed, (99, 0, 0)), Python=(3, 10, 12))
    lines = check_toolchains.problems(needed, found)
    assert lines == ["Python 3.11.0 or newer is needed (pyproject.toml requires-python), found 3.10.12: "
                     + check_toolchains.HOW["Python"] + "."]


def test_make_test_checks_the_toolchains_before_building_anything() -> None:
    if shutil.which("make") is None:
        pytest.fail("make is not installed", pytrace=False)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEFILES")}
    lines = subprocess.run(["make", "--no-print-directory", "-n", "-B", "test"], cwd=REPO, capture_output=True,
                           text=True, check=True, timeout=60, env=env).stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if "tests/support/check_toolchains.py" in line)
    first_build = next(i for i, line in enumerate(lines)
                       if " -m venv " in line or line.startswith(("apt-get", "DEBIAN_FRONTEND")))
    assert check < first_build


def test_the_readme_lists_each_toolchain_with_the_version_the_check_needs() -> None:
    section = (REPO / "README.md").read_text().split("## The tests", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line.split("|")[2] for line in section.splitlines()
            if line.startswith("| ") and "---" not in line}
    names = {"Python": "Python (`python3`, with `venv`)", "Go": "Go", "Node.js": "Node.js, with npm",
             "JDK": "a JDK (`javac`)", "Maven": "Maven"}
    for name, (minimum, _source) in check_toolchains.required().items():
        listed = re.match(r"\s*([\d.]+) or newer", rows[names[name]])
        assert listed and check_toolchains._version(listed.group(1)) == minimum, (name, rows[names[name]])
