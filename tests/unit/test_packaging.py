"""The wheel installs one top-level name, `relay`, with the console's templates and static files inside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# A copy of the sources: setuptools builds in the source folder, and a build/ left there would both litter the
# checkout and carry modules of an earlier tree into later wheels.
_NOT_SOURCES = shutil.ignore_patterns(".*", "node_modules", "target", "bin", "build", "relay-data", "test-output",
                                      "*.egg-info", "__pycache__", "tests", "bench")


def test_the_wheel_has_one_top_level_name_relay_and_carries_the_console_files(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCES)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-q", "-w", str(tmp_path), str(source)],
                   check=True, cwd=tmp_path, timeout=300)
    (wheel,) = tmp_path.glob("relay-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"relay"}
    for module in ("relay/projections/store/log.py", "relay/actors/executor.py", "relay/projections/views.py",
                   "relay/web/cli/main.py", "relay/actors/adapters/dataplane/client.py",
                       "relay/web/transport/server.py", "relay/web/api/workflows.py",
                       "relay/wire/codec.py", "relay/wire/responses.py",
                   "relay/web/console/__init__.py",
                   "relay/web/templates/console/layout.html", "relay/web/static/redoc.standalone.js",
                   "relay/web/static/redoc.LICENSE.txt", "relay/web/static/docs.js"):
        assert module in names, module
    assert any(name.startswith("relay/web/static/") for name in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "relay = relay.web.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
