"""Request headers for gevent's pywsgi without `email.parser`: the common, well-formed header block is parsed
by one regex per line; anything else goes through exactly the parser pywsgi uses (`http.client`'s email
parser), so odd input (continuation lines, a stray CR, a line that is no header) means what it always meant.

The result is pywsgi's own header class (`OldMessage`, an `email.message.Message`) holding the same
(name, value) pairs the email parser would have stored, so everything reading it behaves as before.

Also the Date header's text and the access log's timestamp, each made once a second."""

from __future__ import annotations

import email.parser
import http.client
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from gevent.pywsgi import OldMessage, format_date_time  # type: ignore[attr-defined]

T = TypeVar("T")

# http.client's limits, as parse_headers applies them.
MAX_LINE = 65536
MAX_HEADERS = 100
# What email's feedparser takes for a header line (a name of printable non-colon characters, then a colon)
# and what compat32's header_source_parse keeps of it (the value without leading blanks and the line ending),
# for a line with no CR or LF but its ending.
_SIMPLE = re.compile(r"([\x21-\x39\x3b-\x7e]+):[ \t]*([^\r\n]*)\r?\n\Z")


def parse_headers(fp: Any) -> object:
    """`gevent.pywsgi.headers_factory(fp)`: the header block read from `fp`; `.status` says 'Line too long'
    when a line is over http.client's limit (more than 100 headers raise http.client.HTTPException, as there)."""
    lines: list[bytes] = []
    while True:
        line = fp.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            message = OldMessage()
            message.status = "Line too long"
            return message
        lines.append(line)
        if len(lines) > MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")
        if line in (b"\r\n", b"\n", b""):
            break
    pairs = []
    for raw in lines[:-1]:
        match = _SIMPLE.match(raw.decode("iso-8859-1"))
        if match is None:  # a continuation, a stray CR, no colon, a line cut short by the connection's end...
            return _parsed_by_email(lines)
        pairs.append((match.group(1), match.group(2)))
    message = OldMessage()
    message._headers = pairs  # type: ignore[attr-defined]  # what email.message.Message parses into
    return message


def _parsed_by_email(lines: list[bytes]) -> object:
    """http.client._parse_header_lines with pywsgi's class."""
    return email.parser.Parser(_class=OldMessage).parsestr(b"".join(lines).decode("iso-8859-1"))


def environ_headers(message: Any) -> list[tuple[str, str]]:
    """pywsgi's `WSGIHandler._headers()` for a message: ('HTTP_NAME', value) for each header, names with an
    underscore dropped, Content-Type/Length left out (pywsgi sets them from the message itself)."""
    found = []
    for name, value in message._headers:
        if "_" in name:
            continue
        key = name.replace("-", "_").upper()
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            continue
        found.append(("HTTP_" + key, value.strip()))
    return found


def _once_a_second(make: Callable[[int], T]) -> Callable[[], T]:
    """``make(int(time.time()))``, made again only when the second changes (every request wants one)."""
    known: tuple[int, Any] = (-1, None)  # (second, its value): replaced whole, never one second with another's

    def current() -> T:
        nonlocal known
        now = int(time.time())
        if known[0] != now:
            known = (now, make(now))
        return known[1]

    return current


# pywsgi's Date header text, and its access-log timestamp (`datetime.now().replace(microsecond=0)`).
http_date = _once_a_second(format_date_time)
log_time = _once_a_second(lambda now: str(datetime.fromtimestamp(now)))  # noqa: DTZ006 (pywsgi logs local time)
