"""`relay serve` over TLS (RELAY_TLS_CERT, RELAY_TLS_KEY), with a test CA made here by the openssl CLI.

- The API answers over https:// to a client trusting the CA, and to nobody else (an untrusting client fails its
  certificate check, a plain-HTTP client gets nothing); a failed or silent TLS handshake costs one log line and
  is cut off at RELAY_HANDSHAKE_TIMEOUT_S.
- A real DBOS 3.2.0 executor connects over wss://: its conductor client (the `websockets` library) builds its
  TLS context with ssl.create_default_context(), which reads SSL_CERT_FILE, so pointing that at the CA is all it
  takes; without it the executor is refused by its own certificate check, and never connects.
- A missing, unreadable or mismatched certificate or key stops `relay serve` at once, naming the variables.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from relay.actors.adapters.forwarder import Forwarder
from relay.actors.cluster import RemoteExecutor
from relay.actors.errors import ForwardRefusedError
from relay.wire.errors import ExecutorGoneError
from relay.wire.requests import ExecutorInfoRequest
from tests.integration.fake_executor import DBOS_EXECUTOR_SOURCE, create_key, executors, register_app
from tests.support.console_http import csrf_token
from tests.support.ports import wait_until
from tests.support.procs import ExecutorProcess, RelayProcess, run_cli
from tests.support.reliability_report import record

pytestmark = pytest.mark.integration

APP = "tls-app"
STATS: Counter[str] = Counter()


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    other_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, and a server certificate it signed for 127.0.0.1 and localhost (EC P-256, valid for a day)."""
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=Relay test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=d)
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "1", "-extfile", "server.ext", cwd=d)
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "other.key", cwd=d)
    return Pki(ca=d / "ca.pem", cert=d / "server.pem", key=d / "server.key", other_key=d / "other.key")


@pytest.fixture(scope="module", autouse=True)
def _trust_the_ca(pki: Pki) -> Iterator[None]:
    """The test process trusts the CA (REQUESTS_CA_BUNDLE), from before `relay` starts to after it stops."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca))
        yield


@pytest.fixture(scope="module")
def relay_env(pki: Pki) -> dict[str, str]:
    return {"RELAY_TLS_CERT": str(pki.cert), "RELAY_TLS_KEY": str(pki.key), "RELAY_HANDSHAKE_TIMEOUT_S": "2"}


@pytest.fixture(scope="module", autouse=True)
def _figures(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before and STATS["executors"]:
        record("tls-1", area="TLS: `relay serve` with RELAY_TLS_CERT/RELAY_TLS_KEY, a CA made by the test",
               tried={"dbos 3.2.0 executors over wss://": STATS["executors"],
                      "clients refused (untrusting, plain HTTP, silent)": STATS["refused"],
                      "bad certificate settings": STATS["bad settings"]},
               outcome="executor HEALTHY and serving over wss:// with SSL_CERT_FILE; every other client refused; "
                       "bad settings stop `relay serve` by name")


def test_the_api_is_served_over_https_to_whoever_trusts_the_ca(relay: RelayProcess, pki: Pki) -> None:
    assert "listening on https://" in relay.log_text()
    assert relay.api("GET", "/healthz", token="").status_code == 200
    register_app(relay, APP)
    assert relay.api("GET", f"/v2/orgs/local/apps/{APP}").status_code == 200
    context = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_under_tls_the_session_cookie_is_secure_and_every_answer_carries_hsts(relay: RelayProcess) -> None:
    """Issue 34, point 10: a browser never sends the console's cookie over plain HTTP, and keeps to https."""
    for path, token in (("/healthz", ""), ("/v2/orgs/local/apps", None), ("/login", "")):
        answer = relay.api("GET", path, token=token)
        assert answer.headers["Strict-Transport-Security"] == "max-age=31536000", path
    browser = relay.http_session()
    form = csrf_token(browser.get(f"{relay.base_url}/login", timeout=10).text)
    landed = browser.post(f"{relay.base_url}/login", data={"token": relay.admin_token, "csrf_token": form},
                          timeout=10, allow_redirects=False)
    assert landed.status_code == 302
    cookie = [c.strip().lower() for c in landed.headers["Set-Cookie"].split(";")]
    assert cookie[0].startswith("relay_console=") and "secure" in cookie and "httponly" in cookie
    assert landed.headers["Strict-Transport-Security"] == "max-age=31536000"


def test_clients_that_do_not_trust_it_or_do_not_speak_tls_get_nothing(relay: RelayProcess) -> None:
    STATS["refused"] += 3
    with pytest.raises(requests.exceptions.SSLError):  # the usual public roots, not the test CA
        requests.get(f"{relay.base_url}/healthz", timeout=10, verify=requests.certs.where())
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{relay.port}/healthz", timeout=10)
    # A client that opens the connection and never starts the handshake is cut off at the deadline.
    with socket.create_connection(("127.0.0.1", relay.port), timeout=20) as silent:
        started = time.monotonic()
        assert silent.recv(1) == b""
        assert 1.5 < time.monotonic() - started < 10
    wait_until(lambda: relay.log_text().count("TLS handshake from 127.0.0.1 failed") >= 3, timeout=10,
               message=relay.log_tail())
    assert "Traceback" not in relay.log_text()
    assert relay.api("GET", "/healthz", token="").status_code == 200


def _executor(relay: RelayProcess, key: str, cwd: Path, ca: Path | None, name: str) -> ExecutorProcess:
    env = {"TEST_APP_NAME": APP, "TEST_CONDUCTOR_URL": relay.ws_url, "TEST_CONDUCTOR_KEY": key}
    if ca is not None:
        env["SSL_CERT_FILE"] = str(ca)
    return ExecutorProcess(source=DBOS_EXECUTOR_SOURCE, env=env, cwd=cwd, name=name)


def test_a_dbos_executor_connects_over_wss_with_the_test_ca(relay: RelayProcess, pki: Pki, tmp_path: Path) -> None:
    if relay.api("GET", f"/v2/orgs/local/apps/{APP}").status_code == 404:
        register_app(relay, APP)
    key = create_key(relay, "tls-executor")
    with _executor(relay, key, tmp_path / "untrusting", None, "untrusting") as untrusting, \
            _executor(relay, key, tmp_path / "trusting", pki.ca, "trusting") as trusting:
        found = wait_until(lambda: [e for e in executors(relay, APP).values() if e["status"] == "HEALTHY"],
                           timeout=60, message=f"no executor over wss://:\n{trusting.log_tail()}")
        STATS["executors"] += 1
        assert len(found) == 1 and found[0]["language"] == "python" and found[0]["dbosVersion"] == "3.2.0"
        # Served through the TLS WebSocket: an executor-served call answers.
        queues = relay.api("GET", f"/v2/orgs/local/apps/{APP}/queues")
        assert queues.status_code == 200, queues.text
        # The executor without the CA refuses Relay's certificate itself, and keeps trying.
        untrusting.wait_for_log("CERTIFICATE_VERIFY_FAILED", timeout=30)
        STATS["refused"] += 1
        assert untrusting.running
        assert len([e for e in executors(relay, APP).values() if e["status"] == "HEALTHY"]) == 1
    assert key not in relay.log_text()


@pytest.mark.parametrize("case", ["cert only", "missing file", "key of another cert", "not a certificate"])
def test_bad_certificate_settings_stop_serve_by_name(case: str, pki: Pki, tmp_path: Path) -> None:
    settings = {
        "cert only": {"RELAY_TLS_CERT": str(pki.cert)},
        "missing file": {"RELAY_TLS_CERT": str(tmp_path / "nope.pem"), "RELAY_TLS_KEY": str(pki.key)},
        "key of another cert": {"RELAY_TLS_CERT": str(pki.cert), "RELAY_TLS_KEY": str(pki.other_key)},
        "not a certificate": {"RELAY_TLS_CERT": str(pki.ca.parent / "server.ext"), "RELAY_TLS_KEY": str(pki.key)},
    }[case]
    STATS["bad settings"] += 1
    result = run_cli(["serve"], {"RELAY_DATA_DIR": str(tmp_path / "data"),
                                 "RELAY_ADMIN_TOKEN": "relay-tls-test-" + "t" * 32, **settings}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "RELAY_TLS_CERT" in result.stderr
    assert "Traceback" not in result.stderr


class _OneApp:
    """The applications view's part the Forwarder reads: the target application's id."""

    def app(self, org: str, app: str) -> dict[str, str]:
        return {"id": "0b8d4c58-8f0e-4c55-9b39-3f0c1a6f7f10"}


def test_forwards_to_a_tls_peer_trust_the_given_ca_and_check_its_certificate(relay: RelayProcess, pki: Pki) -> None:
    """An instance forwards to a peer over https (RELAY_TLS_CERT set): with the peer's CA given (RELAY_CA_FILE,
    or its own RELAY_TLS_CERT) the TLS handshake succeeds and the peer answers (here 401: this forward is
    signed with another secret than the peer's, which has none); without it the certificate check refuses."""
    peer = RemoteExecutor(executor_id="e1", application_version="v1", language="python", dbos_version="3.2.0",
                          connected_at=0.0, instance="relay-peer", address="127.0.0.1", port=relay.port)

    def forward(cafiles: list[Path]) -> Exception:
        forwarder = Forwarder(cluster=None, applications=_OneApp(), secret="s" * 32,  # type: ignore[arg-type]
                              poll_s=1.0, max_bytes=1 << 20, scheme="https", cafiles=cafiles)
        with pytest.raises((ForwardRefusedError, ExecutorGoneError)) as failed:
            forwarder.call(peer, "local", APP, ExecutorInfoRequest(), timeout=5)
        return failed.value

    # The peer's own answer, over TLS: it has no forwarding secret, so it refuses (its 401, read into a refusal).
    trusted = forward([pki.ca])
    assert isinstance(trusted, ForwardRefusedError), trusted
    assert "forwarding is not configured on this instance" in str(trusted), trusted
    untrusted = forward([])  # not reached at all: the certificate check refused it
    assert isinstance(untrusted, ExecutorGoneError) and "unreachable (SSL" in str(untrusted), untrusted
    assert "s" * 32 not in str(untrusted) and "s" * 32 not in str(trusted)
