"""Reading py-spy's raw (collapsed-stack) output: where the samples were, by function."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# A frame reads "function (path/to/file.py:123)" or "function (path/to/file.py)".
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")
_PROJECT = ("actors/", "events/", "projections/", "web/")


@dataclass
class Profile:
    samples: int
    self_time: Counter[str]
    inclusive: Counter[str]

    def top_self(self, n: int = 12) -> list[tuple[str, float]]:
        return [(k, 100 * v / self.samples) for k, v in self.self_time.most_common(n)] if self.samples else []

    def top_inclusive(self, n: int = 15, project_only: bool = True) -> list[tuple[str, float]]:
        rows = [(k, v) for k, v in self.inclusive.most_common() if not project_only or _is_project(k)]
        return [(k, 100 * v / self.samples) for k, v in rows[:n]] if self.samples else []


def _short(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match.group('func')}"


def _is_project(name: str) -> bool:
    return name.startswith(_PROJECT)


def parse(path: Path) -> Profile:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f.strip()]
        # py-spy may lead with a thread/process name frame: keep only frames with a file
        frames = [f for f in frames if ":" in f]
        if not frames:
            continue
        samples += count
        self_time[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return Profile(samples, self_time, inclusive)
