"""A tiny identity provider for the token checks' unit tests: a real HTTP server (stdlib, in a thread, on a free
port) serving a discovery document and a JWKS the test controls, and signing keys generated with cryptography.

`FakeProvider.jwks` is the document served (a dict, or raw bytes for garbage); `hits` counts requests per path;
`gate` (a threading.Event, set by default) holds every answer while cleared (a slow provider); `stop()` closes
the port and `start()` opens the same one again (a provider that went down and came back)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tests.support.ports import free_port

AUDIENCE = "relay-api"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    algorithm: str
    private: Any

    def jwk(self, **extra: object) -> dict[str, Any]:
        """The public JWK, with kid, alg and use (`extra` overrides or adds members)."""
        public = self.private.public_key()
        maker = {"RS256": RSAAlgorithm, "PS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}
        document = maker[self.algorithm].to_jwk(public, as_dict=True)
        document.update({"kid": self.kid, "alg": self.algorithm, "use": "sig"})
        document.update(extra)
        return {k: v for k, v in document.items() if v is not None}


def rsa_key(kid: str, bits: int = 2048, algorithm: str = "RS256") -> SigningKey:
    return SigningKey(kid, algorithm, rsa.generate_private_key(public_exponent=65537, key_size=bits))


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def ed_key(kid: str) -> SigningKey:
    return SigningKey(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())


class FakeProvider:
    def __init__(self) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.jwks: dict[str, Any] | bytes = {"keys": []}
        self.discovery: dict[str, Any] | bytes | None = None  # None: the right document
        self.hits: Counter[str] = Counter()
        self.gate = threading.Event()
        self.gate.set()
        self._server: ThreadingHTTPServer | None = None

    def discovery_document(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks",
            "authorization_endpoint": f"{self.issuer}/auth", "token_endpoint": f"{self.issuer}/token",
            "end_session_endpoint": f"{self.issuer}/session/end",
        }

    def publish(self, *keys: SigningKey) -> None:
        self.jwks = {"keys": [key.jwk() for key in keys]}

    def mint(self, key: SigningKey, *, kid: str | None = "", headers: Mapping[str, object] | None = None,
             **claims: object) -> str:
        """A token signed by `key` with good claims by default (`claims` override; None removes one)."""
        now = int(time.time())
        payload: dict[str, object] = {"iss": self.issuer, "aud": AUDIENCE, "sub": "person-1", "iat": now,
                                      "exp": now + 300, "email": "ada@example.com", "email_verified": True}
        payload.update(claims)
        header = dict(headers or {})
        if kid is not None:
            header["kid"] = kid or key.kid
        return jwt.encode({k: v for k, v in payload.items() if v is not None}, key.private,
                          algorithm=key.algorithm, headers=header)

    def start(self) -> None:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                provider.hits[self.path] += 1
                provider.gate.wait(30)
                if self.path == "/.well-known/openid-configuration":
                    body = provider.discovery if provider.discovery is not None else provider.discovery_document()
                elif self.path == "/jwks":
                    body = provider.jwks
                else:
                    self.send_error(404)
                    return
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up (a timeout test)
                    self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self.gate.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextmanager
def running_provider() -> Iterator[FakeProvider]:
    provider = FakeProvider()
    provider.start()
    try:
        yield provider
    finally:
        provider.stop()
