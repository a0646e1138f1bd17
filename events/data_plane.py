"""An application's data plane settings (issue 15): where Relay finds the app's DBOS system database, and what it
may do there. Pure: the system database URL itself never comes here, only a reference to where the server
reads it (an environment variable or a file), so the URL is never stored, recorded or shown."""

from __future__ import annotations

import re
from typing import Any

from relay.events.errors import InvalidValueError

READ, READ_WRITE = "read", "read-write"
MODES = (READ, READ_WRITE)
DEFAULTS: dict[str, Any] = {"mode": READ, "statementTimeoutMs": 10_000, "poolSize": 2, "schema": "dbos"}
FIELDS = ("systemDatabaseUrlFrom", *DEFAULTS)
MAX_STATEMENT_TIMEOUT_MS = 600_000
MAX_POOL_SIZE = 50

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def reference_kind(reference: str) -> tuple[str, str]:
    """``env:NAME`` or ``file:/absolute/path`` as (kind, target); InvalidValueError otherwise. The message never
    repeats a value that is not a reference: it may be the URL itself, pasted by mistake."""
    kind, sep, target = reference.partition(":")
    if sep and kind == "env" and _ENV_NAME.fullmatch(target):
        if target.upper().startswith("RELAY_"):  # Relay's own settings (its admin token, its secrets)
            raise InvalidValueError("systemDatabaseUrlFrom cannot name Relay's own RELAY_* settings")
        return kind, target
    if sep and kind == "file" and target.startswith("/") and "\x00" not in target and len(target) <= 4096:
        return kind, target
    raise InvalidValueError(
        "systemDatabaseUrlFrom must be 'env:NAME' (an environment variable of the Relay server) or "
        "'file:/absolute/path' (a file it can read); the URL itself is never given to Relay"
    )


def check_data_plane(body: dict[str, Any]) -> dict[str, Any]:
    """A data plane configuration with its defaults filled in; InvalidValueError naming the bad field."""
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise InvalidValueError(f"unknown data plane field '{unknown[0]}' (fields: {', '.join(FIELDS)})")
    reference = body.get("systemDatabaseUrlFrom")
    if not isinstance(reference, str):
        raise InvalidValueError("systemDatabaseUrlFrom is required: 'env:NAME' or 'file:/absolute/path'")
    reference_kind(reference)
    config = {"systemDatabaseUrlFrom": reference, **DEFAULTS}
    config.update({k: v for k, v in body.items() if k in DEFAULTS and v is not None})
    if config["mode"] not in MODES:
        raise InvalidValueError(f"mode must be one of {', '.join(MODES)}")
    _check_int(config, "statementTimeoutMs", 1, MAX_STATEMENT_TIMEOUT_MS)
    _check_int(config, "poolSize", 1, MAX_POOL_SIZE)
    if not isinstance(config["schema"], str) or not _SCHEMA_NAME.fullmatch(config["schema"]):
        raise InvalidValueError("schema must be a PostgreSQL schema name (letters, digits, underscores)")
    return config


def _check_int(config: dict[str, Any], name: str, low: int, high: int) -> None:
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidValueError(f"{name} must be an integer from {low} to {high}")
