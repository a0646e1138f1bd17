"""Request bodies and connections at the edge, against a real `relay serve` with short settings (issue 34, point 6).

- Slow bodies: 20 POSTs to /login trickle their body a byte at a time; each is cut (408, closed) within
  RELAY_HANDSHAKE_TIMEOUT_S plus a margin, while /healthz and an executor keep being served; a body sent above
  RELAY_BODY_MIN_BYTES_PER_S but taking longer than RELAY_BODY_TIMEOUT_S is cut at that deadline; one at a fair
  rate goes through.
- Body caps: a `Content-Length` over the route's cap is answered 413 before a byte of the body is sent; a large
  route (workflow import) takes more than the default cap; a chunked body is cut (413) once past the cap.
- RELAY_MAX_HTTP_CONNECTIONS: past it a new connection gets 503 with `Retry-After` at once, unread; executor
  sockets already open are not counted and keep working; once connections close, new ones are served again.
Before the fix every slow body stayed open for as long as its sender wanted.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.integration.fake_executor import FakeExecutor, create_key, register_app, wait_status
from tests.support import reliability_report
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

APP = "bodies-app"
GRACE_S = 1.0  # RELAY_HANDSHAKE_TIMEOUT_S: a body's first allowance
BODY_TIMEOUT_S = 4.0
MIN_RATE = 200  # bytes per second
MAX_BODY = 64 * 1024
MAX_LARGE_BODY = 1024 * 1024
MARGIN_S = 2.0
SLOW_SENDERS = 20
HTTP_CAP = 6
EXECUTORS_BESIDE_CAP = 3


@dataclass
class Served:
    relay: RelayProcess
    key: str


def serve(env: dict[str, str]) -> Iterator[Served]:
    with RelayProcess(env=env) as relay:
        register_app(relay, APP)
        yield Served(relay, create_key(relay, "bodies-key"))
        relay.assert_no_secrets_logged()


@pytest.fixture(scope="module")
def bodies() -> Iterator[Served]:
    yield from serve({"RELAY_HANDSHAKE_TIMEOUT_S": str(GRACE_S), "RELAY_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
                      "RELAY_BODY_MIN_BYTES_PER_S": str(MIN_RATE), "RELAY_MAX_BODY_BYTES": str(MAX_BODY),
                      "RELAY_MAX_LARGE_BODY_BYTES": str(MAX_LARGE_BODY)})


def connect(relay: RelayProcess) -> socket.socket:
    return socket.create_connection((relay.host, relay.port), timeout=10)


def post_head(path: str, length: int | None, content_type: str = "application/x-www-form-urlencoded",
              token: str | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: relay", f"Content-Type: {content_type}"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket, timeout: float) -> tuple[int | None, bytes]:
    """The status of what Relay answers on ``sock`` (None: nothing) and all it sent, read until it closes or
    ``timeout`` passes in all."""
    deadline = time.monotonic() + timeout
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            break
        data += chunk
        head, separator, body = data.partition(b"\r\n\r\n")
        lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")]
        if separator and lengths and len(body) >= lengths[0]:
            break  # a whole answer (the connection may stay open)
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None
    return status, data


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether Relay closes ``sock`` within ``timeout`` (whatever it answers first)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        if not chunk:
            return True
    return False


def healthz_ms(relay: RelayProcess) -> float:
    started = time.monotonic()
    response = relay.session.get(f"{relay.base_url}/healthz", timeout=2)
    assert response.status_code == 200
    return (time.monotonic() - started) * 1000


class Trickle:
    """Sends one byte to each socket every ``interval`` seconds (the attack's pace) until each is closed."""

    def __init__(self, sockets: list[socket.socket], interval: float) -> None:
        self.sockets = sockets
        self.interval = interval
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        live = list(self.sockets)
        while live and not self.stop.wait(self.interval):
            for sock in list(live):
                try:
                    sock.send(b"a")
                    self.sent += 1
                except OSError:
                    live.remove(sock)

    def __enter__(self) -> Trickle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def test_slow_bodies_are_cut_while_others_are_served(bodies: Served) -> None:
    relay = bodies.relay
    with FakeExecutor(relay, APP, bodies.key) as executor:
        executor.connect_and_identify()
        wait_status(relay, APP, executor.executor_id, "HEALTHY")
        sockets = [connect(relay) for _ in range(SLOW_SENDERS)]
        for sock in sockets:
            sock.sendall(post_head("/login", 1000))
        started = time.monotonic()
        slowest_ms = 0.0
        with Trickle(sockets, interval=0.5):
            # Others are served meanwhile: /healthz, and the executor's socket.
            while time.monotonic() - started < GRACE_S:
                slowest_ms = max(slowest_ms, healthz_ms(relay))
            executor.ping_pong()
            cut = [closed_by_peer(sock, GRACE_S + MARGIN_S - (time.monotonic() - started)) for sock in sockets]
            took = time.monotonic() - started
        for sock in sockets:
            sock.close()
        assert all(cut), f"{cut.count(False)} of {SLOW_SENDERS} slow bodies still open after {took:.1f} s"
        slowest_ms = max(slowest_ms, healthz_ms(relay))
        executor.ping_pong()
    assert "Traceback" not in relay.log_text()
    reliability_report.record(
        "http_slow_bodies", area="HTTP edge",
        tried={"POST /login bodies trickled at 2 bytes/s": SLOW_SENDERS,
               "all cut within (s)": round(took, 2), "slowest /healthz meanwhile (ms)": round(slowest_ms, 1)},
        outcome=f"each cut (408, closed) past RELAY_HANDSHAKE_TIMEOUT_S ({GRACE_S:g} s) at under "
                f"RELAY_BODY_MIN_BYTES_PER_S; /healthz and an executor served throughout",
    )


def test_a_body_at_a_fair_rate_has_until_the_body_timeout(bodies: Served) -> None:
    relay = bodies.relay
    # Above the minimum rate throughout, but 60,000 bytes at 2,000 bytes/s would take 30 s: cut at the timeout.
    slow = connect(relay)
    slow.sendall(post_head("/login", 60_000))
    fair = connect(relay)
    form = b"token=not-a-token&next=" + b"x" * 1000
    fair.sendall(post_head("/login", len(form)))
    started = time.monotonic()
    stop = threading.Event()

    def send_fairly() -> None:
        sent = 0
        while not stop.wait(0.1):
            try:
                slow.send(b"a" * 200)
            except OSError:
                return
            if sent < len(form):
                fair.send(form[sent:sent + 300])  # 3,000 bytes/s: the whole form within half a second
                sent += 300

    sender = threading.Thread(target=send_fairly, daemon=True)
    sender.start()
    try:
        status, _ = read_answer(fair, timeout=BODY_TIMEOUT_S)
        assert status in (401, 403)  # read whole and answered (no CSRF token, or an unknown token): not cut
        assert closed_by_peer(slow, BODY_TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - started
        assert BODY_TIMEOUT_S - 0.5 <= took <= BODY_TIMEOUT_S + MARGIN_S, took
    finally:
        stop.set()
        sender.join(timeout=5)
        slow.close()
        fair.close()
    reliability_report.record(
        "http_body_timeout", area="HTTP edge",
        tried={"body sent at 2,000 bytes/s, 60,000 bytes announced": 1, "cut after (s)": round(took, 2)},
        outcome=f"cut at RELAY_BODY_TIMEOUT_S ({BODY_TIMEOUT_S:g} s); a form at a fair rate answered meanwhile",
    )


def test_a_body_over_its_routes_cap_is_refused_unread(bodies: Served) -> None:
    relay = bodies.relay
    token = relay.admin_token
    refused = 0
    # The login form: 100,000 bytes announced, none sent.
    for path, length in (("/login", 100_000), ("/v2/orgs/local/apps/x/workflows/search", MAX_BODY + 1),
                         ("/v2/orgs/local/apps/x/workflows/import", MAX_LARGE_BODY + 1)):
        sock = connect(relay)
        sock.sendall(post_head(path, length, "application/json", token=token))
        status, answer = read_answer(sock, timeout=2)
        assert status == 413, (path, answer[:200])
        assert closed_by_peer(sock, 2)
        sock.close()
        refused += 1
    # The import route takes more than the default cap: read whole, then answered (no executor: not 413).
    body = b'{"workflow": "' + b"x" * (MAX_BODY * 2) + b'"}'
    response = relay.api("POST", f"/v2/orgs/local/apps/{APP}/workflows/import", data=body,
                         headers={"Content-Type": "application/json"})
    assert response.status_code not in (408, 413), response.text
    # A chunked body is counted as it is read: past the cap, 413 and closed.
    sock = connect(relay)
    sock.sendall(post_head(f"/v2/orgs/local/apps/{APP}/workflows/search", None, "application/json", token=token))
    chunk = b"x" * 8192
    sent = 0
    status = None
    while sent <= MAX_BODY * 2 and status is None:
        try:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:
            break
        sent += len(chunk)
    status, answer = read_answer(sock, timeout=5)
    assert status == 413, answer[:300]
    sock.close()
    assert healthz_ms(relay) < 2000
    reliability_report.record(
        "http_body_caps", area="HTTP edge",
        tried={"over-cap Content-Length (login 100,000 B; API past 64 KiB; import past 1 MiB)": refused,
               "chunked body past the cap (bytes sent)": sent},
        outcome="413 before the body is read, connection closed; the import route takes its larger cap",
    )


@pytest.fixture(scope="module")
def capped() -> Iterator[Served]:
    yield from serve({"RELAY_MAX_HTTP_CONNECTIONS": str(HTTP_CAP), "RELAY_HANDSHAKE_TIMEOUT_S": "30",
                      "RELAY_MAX_HANDSHAKES_IN_FLIGHT": "1"})


def held_get(relay: RelayProcess) -> tuple[socket.socket, int | None]:
    """A keep-alive connection that got an answer to GET /healthz (it stays open) and that answer's status."""
    sock = connect(relay)
    with contextlib.suppress(OSError):  # refused at once: Relay may have closed it already
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
    status, _ = read_answer(sock, timeout=5)
    return sock, status


def served(relay: RelayProcess) -> bool:
    """Whether a new connection is served (GET /healthz answered 200); the connection is closed after."""
    sock, status = held_get(relay)
    sock.close()
    return status == 200


def test_connections_past_the_cap_are_refused_and_served_again(capped: Served) -> None:
    relay = capped.relay
    executors = [FakeExecutor(relay, APP, capped.key) for _ in range(EXECUTORS_BESIDE_CAP)]
    held: list[socket.socket] = []
    try:
        for executor in executors:
            executor.connect_and_identify()
            wait_status(relay, APP, executor.executor_id, "HEALTHY")
        relay.session.close()  # its keep-alive connection would hold a place
        refusal = None
        for _ in range(HTTP_CAP + 2):
            sock, status = held_get(relay)
            if status == 200:
                held.append(sock)
                continue
            refusal = status
            sock.close()
            break
        # Executors' sockets hold no place: every place but the one the session may still hold went to HTTP.
        assert HTTP_CAP - 1 <= len(held) <= HTTP_CAP, len(held)
        assert refusal == 503
        # A new connection is answered at once, without sending anything.
        started = time.monotonic()
        sock = connect(relay)
        status, answer = read_answer(sock, timeout=2)
        refused_in = time.monotonic() - started
        sock.close()
        assert status == 503 and b"Retry-After: 1" in answer, answer[:300]
        for executor in executors:
            executor.ping_pong()
        for sock in held:
            sock.close()
        wait_until(lambda: served(relay), timeout=5, message="new connections not served again")
    finally:
        for sock in held:
            sock.close()
        for executor in executors:
            executor.close()
    assert "connections refused (503)" in relay.log_text()
    reliability_report.record(
        "http_connection_cap", area="HTTP edge",
        tried={"RELAY_MAX_HTTP_CONNECTIONS": HTTP_CAP, "connections held": len(held),
               "executor sockets open beside them": EXECUTORS_BESIDE_CAP,
               "refusal answered in (ms)": round(refused_in * 1000, 1)},
        outcome="503 with Retry-After at once past the cap; executor sockets not counted and served; "
                "served again once connections closed",
    )


def test_executor_handshakes_hold_no_http_place(capped: Served) -> None:
    """Executor upgrades waiting for a handshake place (RELAY_MAX_HANDSHAKES_IN_FLIGHT, up to 2 s each) are
    bounded by that limit, not by RELAY_MAX_HTTP_CONNECTIONS: as many of them as the HTTP cap leave the API
    reachable."""
    relay = capped.relay
    relay.session.close()
    upgrade = (f"GET /websocket/{APP}/{capped.key} HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "\r\n").encode()
    with FakeExecutor(relay, APP, capped.key) as blocker:
        blocker.connect()  # not identified: it holds the one handshake place
        waiting = [connect(relay) for _ in range(HTTP_CAP)]
        try:
            for sock in waiting:
                sock.sendall(upgrade)
            started = time.monotonic()
            # Within the 2 s they wait for a handshake place, a new HTTP connection is served.
            wait_until(lambda: served(relay), timeout=1.5,
                       message="executor upgrades waiting for a handshake place held every HTTP place")
            served_after = time.monotonic() - started
            answers = [read_answer(sock, timeout=5)[0] for sock in waiting]
            assert answers == [503] * HTTP_CAP  # then refused by the handshake limit, as before
        finally:
            for sock in waiting:
                sock.close()
    reliability_report.record(
        "http_connection_cap_executors", area="HTTP edge",
        tried={"executor upgrades waiting for a handshake place": HTTP_CAP, "RELAY_MAX_HTTP_CONNECTIONS": HTTP_CAP,
               "API served meanwhile after (ms)": round(served_after * 1000, 1)},
        outcome="executor handshakes are bounded by their own limits, never by the HTTP connection cap",
    )
