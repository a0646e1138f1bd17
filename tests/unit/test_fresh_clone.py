"""The suite runs from a fresh clone with nothing beside it (issue 29).

A `git clone` of the committed HEAD into an empty temporary folder collects the whole suite without an error,
every test module of the clone contributes tests, and a module unchanged since HEAD collects exactly the tests it
collects here. No file of the repository's tests, benchmarks or build reads anything beside the repository
(the workplace's shared folder): the suite keeps its own copy of Conductor's OpenAPI document, whose notes name
its sha256.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.openapi_ref import REFERENCE_PATH

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "conductor-openapi.json"
FIXTURE_NOTES = REPO / "tests" / "fixtures" / "conductor-openapi.md"
# The whole suite has about 2,000 tests: a collection far below that lost modules without saying so.
SANE_FLOOR = 1500
# Paths into the folder beside the repository: "../shared", ".parent / 'shared'", "/work/shared".
OUTSIDE = re.compile(r"\.\./shared\b|/\s*[\"']shared[\"']|/work/shared\b")


def collecting(root: Path, import_root: Path | None = None) -> subprocess.Popen[str]:
    """`pytest --collect-only -q` under ``root``, started (``collected`` waits for it: two collections run side by
    side); ``import_root`` is put first on the path (where a clone's own code is importable as ``relay``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (import_root, root) if p is not None)
    # --assert=plain: a collection runs no assert, and rewriting every module's asserts was most of its time.
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--assert=plain"]
    return subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collected(process: subprocess.Popen[str]) -> dict[str, list[str]]:
    """The test ids a collection (``collecting``) found, by file."""
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, f"collection in {process.args} failed:\n{stdout[-4000:]}\n{stderr[-2000:]}"
    assert " error" not in stdout.splitlines()[-1], stdout[-4000:]
    by_file: dict[str, list[str]] = defaultdict(list)
    for line in stdout.splitlines():
        if "::" in line:
            by_file[line.split("::", 1)[0]].append(line)
    return dict(by_file)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("fresh-clone")
    target = parent / "relay"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(target)], check=True, timeout=60,
                   capture_output=True, text=True)
    assert [p.name for p in parent.iterdir()] == ["relay"], "the clone must have nothing beside it"
    return target


@pytest.fixture(scope="module")
def clone_as_relay(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder (elsewhere) whose ``relay`` is the clone: the harness's editable install maps ``relay`` to this
    working tree, and a fresh clone's own `make venv` would map it to the clone. Entries on PYTHONPATH come before
    the editable install's finder."""
    import_root = tmp_path_factory.mktemp("import-root")
    (import_root / "relay").symlink_to(clone, target_is_directory=True)
    return import_root


def test_a_fresh_clone_collects_the_whole_suite(clone: Path, clone_as_relay: Path) -> None:
    clone_collecting, here_collecting = collecting(clone, clone_as_relay), collecting(REPO)
    try:
        theirs, ours = collected(clone_collecting), collected(here_collecting)
    finally:
        here_collecting.kill()
    assert sum(len(ids) for ids in theirs.values()) > SANE_FLOOR
    tracked = subprocess.run(["git", "ls-files", "tests/**/test_*.py"], cwd=clone, capture_output=True,
                             text=True, check=True).stdout.split()
    assert set(theirs) == set(tracked), "test modules of the clone that collected nothing"

    # Here, other work may be under way: compare only the modules the clone has unchanged.
    unchanged = [f for f in tracked if (REPO / f).is_file() and (REPO / f).read_bytes() == (clone / f).read_bytes()]
    assert unchanged, "no test module is the same in the clone and here"
    for name in unchanged:
        assert theirs[name] == ours.get(name), f"{name} collects differently in a fresh clone"


def test_nothing_reads_beside_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files", "tests", "bench", "ops", ".ci", "Makefile"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = REPO / name
        # This module holds the patterns themselves; data files hold no paths the suite opens.
        if path == Path(__file__).resolve() or not path.is_file() or path.suffix in {".json", ".jsonl", ".png"}:
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                      if OUTSIDE.search(line)]
    assert offenders == []


def test_the_openapi_fixture_is_the_one_its_notes_describe() -> None:
    assert REFERENCE_PATH == FIXTURE  # what every test comparing with Conductor reads
    digest = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    notes = FIXTURE_NOTES.read_text()
    assert f"sha256: `{digest}`" in notes
    assert "Taken on: 2026-12-05" in notes
    assert "shared/reference/conductor-openapi.json" in notes
