"""Parsing of HTTP inputs: JSON bodies and query parameters, with 4xx errors that name the field."""

from __future__ import annotations

import json
import math

from flask import g, request
from werkzeug.exceptions import HTTPException

from relay.events.names import APP_NAME, ORG_NAME
from relay.web.problems import ApiError, bad_request, invalid
from relay.wire.codec import json_loads_with
from relay.wire.json_depth import nests_deeper
from relay.wire.json_types import JSONObject

MAX_BODY_BYTES = 16 * 1024 * 1024
# Arrays/objects a body may nest: Conductor's bodies nest a few levels; the parser recurses once per level.
MAX_BODY_DEPTH = 64


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: valid JSON syntax, but no float holds it
        raise ValueError("number out of range")
    return value


_STRICT_BODY = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def json_body(*, required: bool = False, allowed: set[str] | None = None) -> JSONObject:
    """The request's JSON object body ({} when absent and not required)."""
    raw = request.get_data(cache=True)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "request body too large")
    if not raw.strip():
        if required:
            raise bad_request("body", "a JSON object is required")
        return {}
    if nests_deeper(raw, MAX_BODY_DEPTH):
        raise bad_request("body", f"nests deeper than {MAX_BODY_DEPTH} levels")
    try:
        # Strict JSON: NaN, Infinity and -Infinity (which Python's parser admits) are not JSON, and would
        # reach executors and the log as values no other client can read.
        body = json_loads_with(_STRICT_BODY, raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise bad_request("body", "not valid JSON") from None
    if not isinstance(body, dict):
        raise invalid("body", "must be a JSON object", None)
    body.pop("$schema", None)
    g.relay_json_body = dict(body)  # the audit trail reads the same body (web/audit_trail.py), without parsing it again
    if allowed is not None:
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise invalid(f"body.{unknown[0]}", "unexpected property", body[unknown[0]])
    return body


def body_for_audit() -> JSONObject:
    """The body as the audit trail reads it to name an action's targets: the one a view parsed, else a parse
    that never fails (too deep, malformed, not an object: {}), so no body can cost an action its entry."""
    if "relay_json_body" in g:
        return dict(g.relay_json_body)
    if not request.is_json:
        return {}
    try:
        raw = request.get_data(cache=True)
    except (HTTPException, OSError):  # the body cut (too slow, over its route's cap: web/transport/body_limits.py)
        return {}
    if len(raw) > MAX_BODY_BYTES or nests_deeper(raw, MAX_BODY_DEPTH):
        return {}
    try:
        body = json_loads_with(_STRICT_BODY, raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return body if isinstance(body, dict) else {}


def check_path_names(org: str, app: str | None = None) -> None:
    if not ORG_NAME.fullmatch(org):
        raise invalid("path.orgName", "must be 3-30 characters of [a-z0-9_]", org)
    if app is not None and not APP_NAME.fullmatch(app):
        raise invalid("path.appName", "must be 3-30 characters of [a-z0-9-_]", app)


def int_arg(name: str, default: int, *, minimum: int = 0, maximum: int = 10_000) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid(f"query.{name}", "must be an integer", raw) from None
    if not minimum <= value <= maximum:
        raise invalid(f"query.{name}", f"must be between {minimum} and {maximum}", value)
    return value


def page_limit_arg(default: int, maximum: int, name: str = "limit") -> int:
    """A list's page size: ``default`` when unset, at least 1, and above ``maximum`` served as ``maximum``
    (clamped, like the workflow lists: web/shapes/values.py)."""
    return min(int_arg(name, default, minimum=1, maximum=2**63 - 1), maximum)


def page_args(default: int = 100, maximum: int = 1000) -> dict[str, int]:
    """The page a Relay list asks for: ``limit`` (page_limit_arg) and ``offset`` (0 to 2**31)."""
    return {"limit": page_limit_arg(default, maximum), "offset": int_arg("offset", 0, maximum=2**31)}
