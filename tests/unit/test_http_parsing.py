"""web/transport/http_parsing.py reads a request's headers as gevent's pywsgi does (through http.client and the email
parser), only faster: the same pairs, the same environ entries, the same refusals, for ordinary and odd input."""

from __future__ import annotations

import http.client
import inspect
import io

import pytest
from gevent import pywsgi

from relay.web.transport.http_parsing import MAX_HEADERS, MAX_LINE, environ_headers, parse_headers

BLOCKS = [
    b"\r\n",
    b"",
    b"Host: a\r\n\r\n",
    b"Host: a\n\n",
    (b"Host: 127.0.0.1:8080\r\nAuthorization: Bearer dbos_x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 12\r\nConnection: keep-alive\r\n\r\nbody-follows"),
    b"X-Empty:\r\nX-Blanks:   \t  v  \r\nX-Tab:\tv\r\n\r\n",
    b"Accept: a\r\nAccept: b\r\nCookie: c=1\r\nCookie: d=2\r\n\r\n",
    b"X-Under_Score: dropped\r\nX-Dash-Name: kept\r\n\r\n",
    b"X-Long: first\r\n  continued\r\n\tagain\r\nHost: h\r\n\r\n",  # obsolete line folding
    b"  starts-folded\r\nHost: h\r\n\r\n",
    b"Bad Name: value\r\nHost: h\r\n\r\n",  # not a header line: the rest is body to the email parser
    b"NoColonHere\r\nHost: h\r\n\r\n",
    b":no-name\r\nHost: h\r\n\r\n",
    b"From someone\r\nHost: h\r\n\r\n",
    b"Host: h\r\nFrom x\r\n\r\n",
    b"X-CR: a\rb\r\nHost: h\r\n\r\n",  # a lone CR: the email parser splits the line there
    b"X-Trailing-CR: a\r\r\nHost: h\r\n\r\n",
    b"X-Latin: caf\xe9\r\n\r\n",
    b"Host: cut-short",  # the connection ends inside a line
    b"Host: h\r\nX: y\r\n",  # ends without the blank line
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
]


def _both(block: bytes) -> tuple[object, object]:
    return pywsgi.headers_factory(io.BytesIO(block)), parse_headers(io.BytesIO(block))


@pytest.mark.parametrize("block", BLOCKS)
def test_the_same_headers_as_pywsgi(block: bytes) -> None:
    theirs, ours = _both(block)
    assert type(ours) is type(theirs)
    assert ours._headers == theirs._headers  # type: ignore[attr-defined]
    assert ours.status == theirs.status  # type: ignore[attr-defined]
    assert list(ours.headers) == list(theirs.headers)  # type: ignore[attr-defined]
    assert ours.typeheader == theirs.typeheader  # type: ignore[attr-defined]
    assert ours.get("content-length") == theirs.get("content-length")  # type: ignore[attr-defined]


@pytest.mark.parametrize("block", BLOCKS)
def test_the_same_environ_entries_as_pywsgi(block: bytes) -> None:
    theirs, ours = _both(block)
    handler = pywsgi.WSGIHandler.__new__(pywsgi.WSGIHandler)
    handler.headers = theirs
    assert environ_headers(ours) == list(handler._headers())


def test_a_line_over_the_limit_is_flagged_as_pywsgi_flags_it() -> None:
    block = b"X: " + b"a" * MAX_LINE + b"\r\n\r\n"
    theirs, ours = _both(block)
    assert ours.status == theirs.status == "Line too long"  # type: ignore[attr-defined]


def test_too_many_headers_are_refused_as_http_client_refuses_them() -> None:
    block = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n"
    with pytest.raises(http.client.HTTPException, match="more than 100 headers"):
        pywsgi.headers_factory(io.BytesIO(block))
    with pytest.raises(http.client.HTTPException, match="more than 100 headers"):
        parse_headers(io.BytesIO(block))


def test_pywsgi_still_has_what_the_handler_overrides() -> None:
    """web/transport/handler.py RelayHandler replaces MessageClass, _headers and _write_with_headers (gevent 26.9.0)."""
    handler = pywsgi.WSGIHandler
    assert "self.headers = self.MessageClass(self.rfile, 0)" in inspect.getsource(handler.read_request)
    assert "self._headers()" in inspect.getsource(handler.get_environ)
    for name in ("_write_with_headers", "finalize_headers", "_write", "_sendall"):
        assert callable(getattr(handler, name))
    assert "self._write_with_headers(data)" in inspect.getsource(handler.write)
    assert pywsgi.headers_factory.__module__ == "gevent.pywsgi" and hasattr(pywsgi, "OldMessage")
