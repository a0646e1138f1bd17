"""The console's sign-in with SSO, in parts a browser test does not reach (web/console/sso.py, auth.py): the token
client's TLS trust (RELAY_CA_FILE, as the token checks), the page policy that lets logout continue at the provider,
and the user name suggested at registration. The flow itself: tests/e2e/test_console_sso.py."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from relay.actors.adapters.oidc.verifier import VerifiedClaims
from relay.actors.configuration.settings import Settings
from relay.web.console.auth import CSP, _csp
from relay.web.console.sso import _suggested_name, token_client


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
                 issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer.subject if issuer is not None else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
        builder = builder.add_extension(x509.SubjectAlternativeName([loopback]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def private_ca_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An https server on 127.0.0.1 whose certificate a private CA signed; its URL and the CA's file."""
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("Relay test CA", ca_key, None, ca_key, ca=True)
    leaf = _certificate("127.0.0.1", leaf_key, ca, ca_key, ca=False)
    (tmp_path / "ca.pem").write_bytes(_pem(ca))
    (tmp_path / "leaf.pem").write_bytes(_pem(leaf))
    (tmp_path / "leaf.key").write_bytes(leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/", tmp_path / "ca.pem"
    finally:
        server.shutdown()
        server.server_close()


def test_the_token_client_trusts_relay_ca_file_as_the_token_checks_do(private_ca_server: tuple[str, Path]) -> None:
    url, ca_file = private_ca_server
    trusting = Settings.from_env({"RELAY_CA_FILE": str(ca_file)})
    with token_client(trusting, "https://relay.example/oauth/callback") as client:
        assert client.get(url, timeout=5, withhold_token=True).status_code == 200
    with token_client(Settings.from_env({}), "https://relay.example/oauth/callback") as client, \
            pytest.raises(requests.exceptions.SSLError):
        client.get(url, timeout=5, withhold_token=True)


def test_logout_may_continue_at_the_issuers_origin_only_in_oauth_mode() -> None:
    assert _csp(None) == CSP
    policy = _csp("https://login.example.com/tenant-id/v2.0")
    assert "form-action 'self' https://login.example.com;" in policy
    assert policy.replace(" https://login.example.com", "") == CSP


@pytest.mark.parametrize(("email", "subject", "suggested"), [
    ("Jane.Doe@example.com", "x", "jane_doe"),
    ("ab@example.com", "x", "ab_"),
    (None, "248289761001", "248289761001"),
    ("--@example.com", "x", "user"),
    ("a-very-long-local-part-of-an-address-indeed@example.com", "x", "a_very_long_local_part_of_an_a"),
])
def test_registration_suggests_a_user_name_from_the_email(email: str | None, subject: str, suggested: str) -> None:
    claims = VerifiedClaims(issuer="https://idp", subject=subject, email=email, email_verified=True, name=None,
                            given_name=None, family_name=None, groups=(), expires_at=0.0, raw={})
    assert _suggested_name(claims) == suggested
