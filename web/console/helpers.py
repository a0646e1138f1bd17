"""What every console page shares: name checks, error pages, template filters."""

from __future__ import annotations

import ast
import json
import logging
from datetime import UTC, datetime
from typing import Any

from flask import abort, render_template, request, url_for
from markupsafe import Markup, escape
from werkzeug.exceptions import HTTPException

from relay.events.names import APP_NAME, ORG_NAME
from relay.web.console import bp
from relay.web.console.auth import current
from relay.web.console.stored_values import decode, to_html
from relay.web.context import runtime
from relay.web.problems import ApiError
from relay.wire.json_depth import nests_deeper
from relay.wire.json_types import JSONObject
from relay.wire.messages import MAX_DEPTH

PAGE_SIZE = 25

log = logging.getLogger("relay.console")


def check_org(org: str) -> None:
    """404 for a malformed or unknown organization, and for one the key does not belong to."""
    who = current()
    if not ORG_NAME.match(org) or not runtime().views.applications.organization_exists(org):
        abort(404, f"no organization '{org}'")
    if not who.admin and who.org != org:
        abort(404, f"no organization '{org}'")


def check_app(org: str, app: str, permission: str = "application.read") -> dict[str, Any]:
    """The application's row; 404 when unknown, 403 when the key may not `permission` it."""
    check_org(org)
    if not APP_NAME.match(app):
        abort(404, f"no application '{app}'")
    if not current().allows(permission, org, app):
        abort(403, f"your key lacks '{permission}' for '{app}'")
    row = runtime().views.applications.app(org, app)
    if row is None:
        abort(404, f"no application '{app}' in '{org}'")
    return row


def page_number(raw: str | None) -> int:
    try:
        return max(1, min(int(raw or 1), 100_000))
    except ValueError:
        return 1


# -- error pages (HTML for the console; the API keeps problem+json) -----------------------------
@bp.errorhandler(HTTPException)
def _http_error(error: HTTPException) -> tuple[str, int]:
    status = error.code or 500
    return render_template("console/error.html", status=status, title=error.name,
                           detail=error.description), status


@bp.errorhandler(Exception)
def _unexpected(error: Exception) -> tuple[str, int]:
    log.error("console error on %s %s", request.method, request.path, exc_info=error)
    return render_template("console/error.html", status=500, title="Internal error",
                           detail="Something went wrong; the Relay log has the details."), 500


@bp.errorhandler(ApiError)
def _api_error(error: ApiError) -> tuple[str, int]:
    return render_template("console/error.html", status=error.status, title=error.title,
                           detail=error.detail), error.status


# -- template filters -----------------------------------------------------------------------------
def _parse_time(value: object) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    text = str(value)
    if text.isdigit():
        return datetime.fromtimestamp(int(text) / 1000, tz=UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@bp.app_template_filter("ts")
def format_time(value: object) -> str:
    parsed = _parse_time(value)
    if parsed is None:
        return "—" if value in (None, "") else str(value)
    # A no-break space before "UTC": in a narrow column the time wraps after its date, never before its zone.
    return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S\u00a0UTC")


@bp.app_template_filter("ago")
def format_ago(value: object) -> str:
    parsed = _parse_time(value)
    if parsed is None:
        return ""
    seconds = int((datetime.now(UTC) - parsed).total_seconds())
    if seconds < 0:
        return "in the future"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


@bp.app_template_filter("thousands")
def format_thousands(value: object) -> str:
    """A count with thin spaces between thousands (50 942 → "50 942"), readable at a glance."""
    try:
        return f"{int(value):,}".replace(",", "\u202f")  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return str(value)


@bp.app_template_filter("highlight")
def highlight(value: object, needle: str | None) -> Markup:
    """`value` escaped, every case-insensitive occurrence of `needle` marked (a substring search's hits)."""
    text = "" if value is None else str(value)
    if not needle:
        return Markup(escape(text))  # noqa: S704 - escaped
    folded, key = text.casefold(), needle.casefold()
    if len(folded) != len(text):  # casefold changed the length (e.g. "ß"): positions no longer line up
        return Markup(escape(text))  # noqa: S704 - escaped
    parts, at = [], 0
    while (found := folded.find(key, at)) >= 0:
        parts += [escape(text[at:found]), Markup('<mark class="hit">'), escape(text[found:found + len(key)]),
                  Markup("</mark>")]
        at = found + len(key)
    parts.append(escape(text[at:]))
    return Markup("").join(parts)


@bp.app_template_filter("duration")
def format_duration(ms: Any) -> str:
    if ms is None:
        return "—"
    ms = float(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    return f"{ms / 60_000:.1f} min"


_NOT_PARSED = object()
JSON_OPEN_LINES = 12  # a value this short is shown unfolded; longer ones start collapsed
LITERAL_MAX_CHARS = 200_000  # larger texts are not parsed as Python literals (the parser's cost grows with them)


def _decoded(text: str) -> object:
    """A serialized value as data: JSON first; else a Python literal (SDKs that send ``repr()`` of their
    arguments, e.g. ``{'args': ('x',), 'kwargs': {}}``: `ast.literal_eval` evaluates literals only, nothing
    else); else `_NOT_PARSED`."""
    if nests_deeper(text, MAX_DEPTH):  # shown as text: parsing (and rendering) it would recurse that deep
        return _NOT_PARSED
    try:
        return json.loads(text)
    except ValueError:
        pass
    if len(text) > LITERAL_MAX_CHARS:
        return _NOT_PARSED
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NOT_PARSED


def _summary(value: object) -> str:
    if isinstance(value, dict):
        return f"object · {len(value)} key{'' if len(value) == 1 else 's'}"
    if isinstance(value, list | tuple):
        return f"array · {len(value)} item{'' if len(value) == 1 else 's'}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else "string"


@bp.app_template_filter("json_view")
def json_view(value: object) -> JSONObject:
    """A value for the `json` macro (_macros.html): pretty-printed JSON (``json.dumps(indent=2)``) when the
    value is or parses as data, else the raw text; a one-line summary; whether it starts unfolded."""
    data = _decoded(value) if isinstance(value, str) else value
    if data is _NOT_PARSED:
        text, summary, parsed = str(value), "text", False
    else:
        text = json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=False)
        summary, parsed = _summary(data), True
    return {"text": text, "summary": summary, "parsed": parsed, "open": text.count("\n") < JSON_OPEN_LINES,
            "missing": value is None}


@bp.app_template_filter("pretty")
def pretty_json(value: object) -> str:
    """Show a serialized value readably: JSON (or a Python literal) re-indented, anything else as it is."""
    if value is None:
        return "—"
    return str(json_view(value)["text"])


@bp.app_template_filter("stored_value")
def stored_value(value: object, label: str = "value", error: bool = False) -> Markup:
    """A value the Python SDK stored as a pickle, decoded for display without loading it (stored_values.py, ADR
    0045): its summary, its structure, the stored text one click away. Empty for any other value, and for a
    pickle that does not decode: the `stored` macro (_macros.html) then shows the value as before."""
    decoded = decode(value, error=error)  # None unless `looks_pickled(value)` and it decodes
    return Markup("") if decoded is None else to_html(decoded, str(value), label)


def millis_between(start: object, end: object) -> float | None:
    a, b = _parse_time(start), _parse_time(end)
    if a is None or b is None:
        return None
    return max(0.0, (b - a).total_seconds() * 1000)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@bp.app_template_global()
def page_url(page: int) -> str:
    """This page's URL with its filters and another page number."""
    args: dict[str, Any] = request.args.to_dict(flat=False)
    args["page"] = [str(page)]
    return url_for(str(request.endpoint), **(request.view_args or {}), **args)
