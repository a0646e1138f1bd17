"""tests/support/http_session.py: the tests' HTTP clients reuse a keep-alive connection only while it is fresh,
so they never send a request on a connection Relay is closing as idle (RemoteDisconnected in a clean CI run)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.support.http_session import session_idle_below


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    served = 0  # requests answered on this connection (one handler per connection)
    attempts = 0  # every request line seen, across connections

    def do_POST(self) -> None:
        _Handler.attempts += 1
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        # "/idle-close": the second request on a connection finds it closed unanswered (as a server's idle close
        # crossing the request on the wire); "/always-close": every request is.
        if self.path == "/always-close" or (self.path == "/idle-close" and self.served >= 1):
            self.close_connection = True
            return
        self.served += 1
        self.do_GET()

    def do_GET(self) -> None:
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _CountingServer(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0

    def process_request(self, request: object, client_address: object) -> None:
        self.connections += 1
        super().process_request(request, client_address)  # type: ignore[arg-type]


@pytest.fixture
def server() -> Iterator[_CountingServer]:
    httpd = _CountingServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_a_fresh_connection_is_reused(server: _CountingServer) -> None:
    session = session_idle_below(10.0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    for _ in range(3):
        assert session.get(url, timeout=5).text == "ok"
    assert server.connections == 1


def test_a_connection_idle_past_half_the_servers_limit_is_replaced(server: _CountingServer) -> None:
    session = session_idle_below(0.2)  # reuse only while idle < 0.1 s
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    assert session.get(url, timeout=5).text == "ok"
    time.sleep(0.15)  # the test's input: the connection stays idle past the 0.1 s it may be reused within
    assert session.get(url, timeout=5).text == "ok"
    assert server.connections == 2


def test_a_reused_connection_closed_unanswered_is_sent_once_more_on_a_new_one(server: _CountingServer) -> None:
    session = session_idle_below(60.0)
    url = f"http://127.0.0.1:{server.server_address[1]}/idle-close"
    assert session.post(url, json={"n": 1}, timeout=5).text == "ok"
    _Handler.attempts = 0
    assert session.post(url, json={"n": 2}, timeout=5).text == "ok"
    assert (_Handler.attempts, server.connections) == (2, 2)


def test_a_new_connection_closed_unanswered_is_an_error_not_a_retry(server: _CountingServer) -> None:
    session = session_idle_below(60.0)
    _Handler.attempts = 0
    with pytest.raises(requests.ConnectionError):
        session.post(f"http://127.0.0.1:{server.server_address[1]}/always-close", json={}, timeout=5)
    assert _Handler.attempts == 1
