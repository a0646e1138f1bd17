"""What every API answer must look like, whatever its operation: one time format (issue 14)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# RFC 3339 as the API writes every time (web/api_values.format_time): UTC, milliseconds, "Z".
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_TIME_KEY = re.compile(r"(?:At|Time|_at|^at|^timeBucket)$")


def times(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) of a time-named key in a JSON value, event details included."""
    if isinstance(value, dict):
        for key, item in value.items():
            if _TIME_KEY.search(key) and not isinstance(item, dict | list):
                yield f"{where}.{key}", item
            else:
                yield from times(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from times(item, f"{where}[{index}]")


def bad_times(value: Any) -> list[tuple[str, Any]]:
    """The time fields of ``value`` not in the API's one format (null is fine)."""
    return [(where, v) for where, v in times(value) if v is not None and not (isinstance(v, str) and RFC3339.match(v))]
