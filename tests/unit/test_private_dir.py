"""projections/backend.py private_dir (issue 29, point 5): the data directory 0700, Relay's own files in it
0600, anything else there left as it was."""

from __future__ import annotations

import stat
from pathlib import Path

from relay.projections.backend import private_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_data_directory_is_made_owner_only(tmp_path: Path) -> None:
    private_dir(tmp_path / "a" / "relay-data")
    assert mode(tmp_path / "a" / "relay-data") == 0o700


def test_an_open_data_directory_is_closed_up_but_other_files_are_left_alone(tmp_path: Path) -> None:
    data = tmp_path / "relay-data"
    data.mkdir()
    data.chmod(0o755)
    names = ("events.sqlite", "events.sqlite-wal", "view_registry.sqlite-shm", "admin_token", "notes.sh")
    for name in names:
        (data / name).write_text("x")
        (data / name).chmod(0o755 if name == "notes.sh" else 0o644)
    private_dir(data)
    assert mode(data) == 0o700
    assert {name: mode(data / name) for name in names} == {
        "events.sqlite": 0o600, "events.sqlite-wal": 0o600, "view_registry.sqlite-shm": 0o600, "admin_token": 0o600,
        "notes.sh": 0o755}
