"""Issue 29, point 5: what `relay serve` keeps on disk is its owner's only, and the login page does not show
unauthenticated visitors where the data directory is.

- the data directory is 0700, the store's files (events.sqlite, the views, their -wal and -shm files) and the
  generated admin token 0600; a directory left 0755 with 0644 files (by an older Relay) is closed up at start;
- GET /login names the token's file relative to the data directory, never its absolute path.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import requests

from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration


def relays_own_file(name: str) -> bool:
    return name.startswith(("events.sqlite", "view_")) or name == "admin_token"


def modes(data_dir: Path) -> dict[str, int]:
    """Relay's own files in the data directory, and the directory itself ("."), with their permission bits."""
    found = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data_dir.iterdir() if relays_own_file(p.name)}
    return {".": stat.S_IMODE(data_dir.stat().st_mode), **found}


def test_the_data_directory_and_its_files_are_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "relay-data"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    # No RELAY_ADMIN_TOKEN: `relay serve` generates the admin_token file.
    relay = RelayProcess(data_dir, env={"RELAY_ADMIN_TOKEN": ""})
    with relay:
        relay.start()
        found = modes(data_dir)
        assert {"admin_token", "events.sqlite", "events.sqlite-wal", "events.sqlite-shm"} <= set(found), found
        assert any(name.startswith("view_") and name.endswith("-wal") for name in found), found
        assert found == {name: 0o700 if name == "." else 0o600 for name in found}
        relay.stop()
        # As an older Relay left them: the next start closes them up before opening the store.
        data_dir.chmod(0o755)
        for name in modes(data_dir):  # the -wal and -shm files went with the clean stop
            if name != ".":
                (data_dir / name).chmod(0o644)
        relay.start()
        again = modes(data_dir)
        assert again == {name: 0o700 if name == "." else 0o600 for name in again}, again


def test_the_login_page_does_not_show_the_data_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "relay-data"
    with RelayProcess(data_dir) as relay:
        relay.start()
        page = requests.get(f"{relay.base_url}/login", timeout=10)
        assert page.status_code == 200
        assert "admin_token" in page.text and "RELAY_DATA_DIR" in page.text
        assert str(tmp_path) not in page.text and str(data_dir.resolve()) not in page.text
