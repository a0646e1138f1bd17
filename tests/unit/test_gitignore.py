"""What the README's quick start makes in the repository's folder (the app's environment, the app, its SQLite
system database) is ignored by git, and nothing the repository tracks is."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def quick_start_files() -> list[str]:
    """The names the quick start tells the reader to create, read from the README itself."""
    section = (REPO / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    venv = re.search(r"python3 -m venv (\S+?)[ `]", section)
    app = re.search(r"saved as `([^`]+)`", section)
    database = re.search(r'"sqlite:///([^"]+)"', section)
    assert venv and app and database, "the quick start no longer names its environment, app or database"
    return [f"{venv.group(1)}/", app.group(1), database.group(1), f"{database.group(1)}-wal",
            f"{database.group(1)}-shm"]


def test_the_quick_starts_files_are_ignored() -> None:
    names = quick_start_files()
    assert names[:3] == ["app-env/", "app.py", "my-app.sqlite"]
    result = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", *names], cwd=REPO,
                            capture_output=True, text=True, check=False)
    ignored = [line.split("\t", 1)[1] for line in result.stdout.splitlines()]
    assert ignored == names, result.stdout + result.stderr


def test_nothing_tracked_is_ignored() -> None:
    tracked_but_ignored = subprocess.run(["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
                                         cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert tracked_but_ignored == []
