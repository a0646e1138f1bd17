"""An application's data plane settings (issue 15): where Relay finds the app's DBOS system database, and what it
may do there. Pure: the system database URL itself never comes here, only a reference to where the server
reads it (an environment variable or a file), so the URL is never stored, recorded or shown."""

from __future__ import annotations

import re

from relay.events.errors import InvalidValueError
from relay.events.names import APP_NAME, ORG_NAME
from relay.wire.json_types import JSONObject

READ, READ_WRITE = "read", "read-write"
MODES = (READ, READ_WRITE)
DEFAULTS: JSONObject = {"mode": READ, "statementTimeoutMs": 10_000, "poolSize": 2, "schema": "dbos"}
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


AllowedReferences = dict[tuple[str, str], frozenset[str]]


def parse_allowed_references(text: str) -> AllowedReferences:
    """RELAY_DATA_PLANE_REFERENCES: the references the operator binds to each application, as
    ``org/app=env:NAME`` or ``org/app=file:/absolute/path`` entries separated by commas or whitespace (an
    application may have several, a reference belongs to one). InvalidValueError naming the bad entry's
    position, never its text."""
    allowed: dict[tuple[str, str], set[str]] = {}
    entries = [entry for entry in re.split(r"[\s,]+", text) if entry]
    for position, entry in enumerate(entries, start=1):
        owner, sep, reference = entry.partition("=")
        org, slash, app = owner.partition("/")
        if not sep or not slash or not ORG_NAME.fullmatch(org) or not APP_NAME.fullmatch(app):
            raise InvalidValueError(f"entry {position} must be org/app=env:NAME or org/app=file:/absolute/path")
        try:
            reference_kind(reference)
        except InvalidValueError as error:
            raise InvalidValueError(f"entry {position} ({org}/{app}): {error}") from None
        owners = [o for o, references in allowed.items() if reference in references and o != (org, app)]
        if owners:  # one system database, one application: a reference shared would reopen the door
            raise InvalidValueError(f"entry {position} ({org}/{app}): the same reference is bound to "
                                    f"{owners[0][0]}/{owners[0][1]}; each reference belongs to one application")
        allowed.setdefault((org, app), set()).add(reference)
    return {owner: frozenset(references) for owner, references in allowed.items()}


def check_reference_allowed(reference: str, org: str, app: str, allowed: AllowedReferences) -> None:
    """InvalidValueError unless the operator bound this reference to this application (RELAY_DATA_PLANE_REFERENCES):
    an application reaches only the system database the operator gave it, never another one's."""
    if reference not in allowed.get((org, app), frozenset()):
        raise InvalidValueError(
            f"systemDatabaseUrlFrom is not a reference the operator of this Relay server bound to application "
            f"'{app}' (RELAY_DATA_PLANE_REFERENCES)")


def check_data_plane(body: JSONObject) -> JSONObject:
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


def _check_int(config: JSONObject, name: str, low: int, high: int) -> None:
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidValueError(f"{name} must be an integer from {low} to {high}")
