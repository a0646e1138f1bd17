"""The side-by-side bench with dbos-argus (bench/argus.py) on a machine without Python >= 3.12: it finds none, says
so, installs nothing, and its report leaves argus' columns empty. No server is started."""

from __future__ import annotations

import stat
from pathlib import Path

from bench import argus


def fake_python(folder: Path, name: str, version: str) -> str:
    """An executable that answers the version probe as an interpreter of `version` ("3 11") would."""
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_only_a_python_of_3_12_or_newer_is_taken(tmp_path: Path) -> None:
    old = fake_python(tmp_path, "python3.11", "3 11")
    broken = str(tmp_path / "python3.12-missing")
    new = fake_python(tmp_path, "python3.13", "3 13")
    assert argus.find_python([old, broken]) is None
    assert argus.find_python([old, broken, new]) == new


def test_without_python_3_12_the_peer_is_left_out(tmp_path: Path) -> None:
    said: list[str] = []
    venv = tmp_path / "venv-argus"
    peer, note = argus.ensure_peer(said.append, venv=venv,
                                   options=[fake_python(tmp_path, "python3.11", "3 11")])
    assert peer is None
    assert "no Python >= 3.12" in note
    assert not venv.exists()
    assert said == []


def test_the_report_leaves_argus_columns_empty() -> None:
    row = {"relay_ms": 5.0, "argus_ms": None, "ratio": None}
    results = {
        "peer": "no Python >= 3.12 on this machine (dbos-argus needs one): argus' columns are left empty",
        "peer_ok": False, "repeats": 11, "browser_repeats": 5, "search_text": argus.SEARCH_TEXT,
        "database": {"workflows": 50_001, "statuses": {"SUCCESS": 50_001}, "fill_s": 2.0, "prepare_s": 3.0,
                     "matching": 15},
        "questions": {"newest 50 workflows": row, "counts by status": row},
        "table_shown": row,
    }
    lines: list[str] = []
    argus.details(results, lines.append)
    text = "\n".join(lines)
    assert "argus: no Python >= 3.12" in text
    newest = next(line for line in lines if line.startswith("| newest 50 workflows |"))
    assert newest.endswith("| 5.0 ms | — | — |")
    assert argus.summary_rows(results)[0][1] == "5.0 ms vs — (—)"
