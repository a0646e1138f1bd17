"""The overview's long-range series, kept a minute (issue 33, point 6).

The 7-day and 30-day charts are one GROUP BY over every workflow created in the range: at 1,000,000 workflows
no index of the DBOS schema serves it and it takes about a second (bench/RESULTS.md, docs/adr/0057). A chart of
days changes little in a minute, so its answer is kept for `KEEP_S` per application and range and the page says
how old it is; the other figures (in flight, queued, failed in the last hour and day) are asked every time. Kept
per process, bounded; read only after the page's own permission check, so it holds nothing a reader may not see.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

KEEP_S = 60.0
LONG_RANGES = frozenset({"7d", "30d"})
MAX_KEPT = 256  # applications x ranges; the least recently used goes first


@dataclass(frozen=True)
class Kept:
    rows: list[dict[str, Any]]
    at: float  # time.monotonic() when it was answered

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.at)


class SeriesCache:
    def __init__(self, keep_s: float = KEEP_S, max_kept: int = MAX_KEPT) -> None:
        self.keep_s = keep_s
        self.max_kept = max_kept
        self._kept: OrderedDict[tuple[str, str, str], Kept] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, org: str, app: str, range_key: str, now: float | None = None) -> Kept | None:
        """The range's series answered less than `keep_s` ago; None for a short range or none kept."""
        if range_key not in LONG_RANGES:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            kept = self._kept.get((org, app, range_key))
            if kept is None or kept.age_s(now) >= self.keep_s:
                return None
            self._kept.move_to_end((org, app, range_key))
            return kept

    def put(self, org: str, app: str, range_key: str, rows: list[dict[str, Any]], now: float | None = None) -> None:
        if range_key not in LONG_RANGES:
            return
        with self._lock:
            self._kept[(org, app, range_key)] = Kept(rows, time.monotonic() if now is None else now)
            self._kept.move_to_end((org, app, range_key))
            while len(self._kept) > self.max_kept:
                self._kept.popitem(last=False)


SERIES = SeriesCache()
