"""Values as the Conductor API v2 writes them: RFC 3339 UTC times (the SDKs send epoch milliseconds, as
numbers or numeric strings, and a few ISO 8601 strings), integers, and the limits and statuses it accepts."""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from relay.web.problems import invalid

WORKFLOW_STATUSES = frozenset(
    {"ENQUEUED", "DELAYED", "PENDING", "SUCCESS", "ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED", "CANCELLED"}
)
# Every list's page (issue 34, README "Pages"): DEFAULT_LIMIT when the caller sets no limit, and a limit above
# MAX_LIMIT is served as MAX_LIMIT (clamped, not refused: Conductor's reference declares no maximum, so its
# clients may ask for more and must still get a page).
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000


def page_description(default: int = DEFAULT_LIMIT, maximum: int = MAX_LIMIT) -> str:
    """How a list's `limit` is read, as /openapi.json declares it."""
    return (f"Page size: {default} when unset; a limit above {maximum} is served as {maximum} (clamped). Page on "
            "with offset: a page shorter than the limit served is the last.")


PAGE_DESCRIPTION = page_description()
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# ------------------------------------------------------------------------------------------------ times

_DIGITS = re.compile(r"^-?\d+(\.\d+)?$")


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, e.g. ``2024-04-05T19:34:38.901Z``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Epoch milliseconds formatted from integers (the SDKs' usual times), below 2**31 seconds (2038): there the
# float division of the general path is exact to the microsecond, so both give the same text
# (tests/unit/test_translate.py compares them).
_FAST_MS_LIMIT = 2**31 * 1000
_FAST_MS_DIGITS = len(str(_FAST_MS_LIMIT)) - 1


def _plain_ms(value: object) -> int | None:
    """The value as epoch milliseconds when it is a plain one the fast path takes (an int, or a string of
    digits, in range), else None."""
    if type(value) is int:
        return value if 0 <= value < _FAST_MS_LIMIT else None
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit() and text.isascii() and len(text) <= _FAST_MS_DIGITS and int(text) < _FAST_MS_LIMIT:
            return int(text)
    return None


def _ms_text(ms: int) -> str:
    """`format_time(datetime.fromtimestamp(ms / 1000, UTC))` for 0 <= ms < _FAST_MS_LIMIT."""
    seconds, millis = divmod(ms, 1000)
    t = time.gmtime(seconds)
    return (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
            f".{millis:03d}Z")


def time_from_wire(value: object) -> str | None:
    """An SDK time (epoch ms as int, float or numeric string; or an ISO 8601 string) as RFC 3339; None
    for null or anything unreadable (a wrong time is not worth failing a whole listing for)."""
    if value is None or isinstance(value, bool):
        return None
    if (ms := _plain_ms(value)) is not None:
        return _ms_text(ms)
    return _time_text(value)


def _time_text(value: object) -> str | None:
    """time_from_wire's general path."""
    try:
        if isinstance(value, int | float):
            return format_time(datetime.fromtimestamp(float(value) / 1000, UTC))
        if isinstance(value, str):
            text = value.strip()
            if _DIGITS.match(text):
                return format_time(datetime.fromtimestamp(float(text) / 1000, UTC))
            return format_time(datetime.fromisoformat(text))
    except (ValueError, OverflowError, OSError):
        return None
    return None


def view_time(value: object) -> str | None:
    """A time as a view stores it (``datetime.isoformat()``, microseconds and ``+00:00``) in the API's one
    format, format_time's: every time Relay writes in JSON goes through one of these two functions."""
    return time_from_wire(value) if isinstance(value, str) else None


def api_record(
    row: Mapping[str, object], columns: Sequence[str], *, times: Collection[str] = (),
    names: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """A view's row as an API object: each of ``columns``, in order, under its camelCase name (or its name in
    ``names``), the ``times`` among them in the API's time format (view_time)."""
    return {
        (names or {}).get(column) or _camel(column): view_time(row[column]) if column in times else row[column]
        for column in columns
    }


@cache  # column names are the views' constants: a small fixed set, met on every row
def _camel(column: str) -> str:
    head, *rest = column.split("_")
    return head + "".join(word.capitalize() for word in rest)


def int_from_wire(value: object) -> int | None:
    """An SDK integer (a number or a numeric string, as the Python SDK sends most of them) or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(float(value)) if isinstance(value, float | str) else None
    except (ValueError, OverflowError):
        return None


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def parse_time(location: str, value: object) -> datetime:
    """An RFC 3339 date-time from the caller (an offset or ``Z`` is required), or 422 at ``location``."""
    if not isinstance(value, str):
        raise invalid(location, "must be an RFC 3339 date-time string", value)
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise invalid(location, "must be an RFC 3339 date-time, e.g. 2024-01-01T00:00:00Z", value) from None
    if "T" not in value.upper() or moment.tzinfo is None:
        raise invalid(location, "must be an RFC 3339 date-time with a time zone, e.g. 2024-01-01T00:00:00Z",
                      value)
    return moment


def _wire_time(moment: datetime) -> str:
    # ISO 8601 with an explicit +00:00: Python's fromisoformat before 3.11 refuses "Z", JavaScript takes both.
    return moment.astimezone(UTC).isoformat()
