"""A real OpenID Provider for the identity tests: npm ``oidc-provider`` (tests/idp/provider.mjs) run by node on
a free port, with RSA keys generated here.

``IdentityProvider`` (a context manager; the ``identity_provider`` fixture in tests/conftest.py gives one per
test module) starts it and knows its keys, so a test can

- get real tokens without a browser: ``access_token(login)`` (authorization code + PKCE through the provider's
  development login and consent pages, driven over HTTP) and ``device_flow_tokens(login)`` (RFC 8628: started,
  approved through the provider's pages, then polled for by Authlib's client);
- sign tokens of its own with the provider's current key (``mint``): expired, not yet valid, wrong issuer or
  audience, ``alg: none``, HS256 keyed with the public key, another key under the current kid;
- ``rotate()`` the signing key (new kid; the old one no longer published), ``stop()``/``start()`` the provider
  (down, then back on the same port), and ``allow_relay(base_url)`` a Relay's console redirect URIs.

Logins: any login and password; the account id (``sub``) is the login, its e-mail ``<login>@example.com`` (a
login with "@" is its own e-mail), ``name`` the login. Every token obtained or minted here is added to the
session's secrets (tests/support/procs.py), which no Relay log may contain.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urljoin, urlsplit

import jwt
import requests
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.requests_client import OAuth2Session
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support import procs
from tests.support.ports import free_port, wait_until

IDP_DIR = procs.REPO_ROOT / "tests" / "idp"
PROVIDER_SCRIPT = IDP_DIR / "provider.mjs"
START_TIMEOUT_S = 20.0
HTTP_TIMEOUT_S = 10.0
DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
CONSOLE_CALLBACK_PATH = "/oauth/callback"
# Where a Relay console may send people back after logging out at the provider (registered by allow_relay:
# post-logout redirect URIs must match exactly).
POST_LOGOUT_PATHS = ("/", "/console", "/console/", "/console/login")
_MAX_PAGES = 20  # redirects plus form submissions in one flow: more means the flow is looping


def new_private_jwk(kid: str | None = None) -> dict[str, str]:
    """A fresh RSA-2048 private JWK (RS256, use sig) with ``kid`` (a random one when not given)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk: dict[str, str] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    jwk.update(kid=kid or f"test-{uuid.uuid4().hex[:12]}", alg="RS256", use="sig")
    return jwk


def public_jwk(private: Mapping[str, str]) -> dict[str, str]:
    """The public half of an RSA JWK."""
    return {name: private[name] for name in ("kty", "n", "e", "kid", "alg", "use") if name in private}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _Forms(HTMLParser):
    """The forms of a page: action, method, and the named inputs' values (hidden ones and pre-filled ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.forms.append({"id": attributes.get("id", ""), "action": attributes.get("action", ""),
                               "method": attributes.get("method", "get").lower(), "fields": {}})
        elif tag == "input" and self.forms and attributes.get("name"):
            self.forms[-1]["fields"][attributes["name"]] = attributes.get("value", "")


def page_forms(html: str) -> list[dict[str, Any]]:
    parser = _Forms()
    parser.feed(html)
    return parser.forms


class _NodeProvider(procs.ManagedProcess):
    """The node process serving tests/idp/provider.mjs."""

    name = "identity-provider"

    def __init__(self, port: int, issuer: str, jwks_path: Path, config_path: Path, log_path: Path) -> None:
        super().__init__(log_path)
        self.args = ["--port", str(port), "--issuer", issuer, "--jwks", str(jwks_path),
                     "--config", str(config_path)]

    def command(self) -> list[str]:
        node = shutil.which("node")
        if node is None:
            raise AssertionError("node is not installed: the identity provider tests need Node.js 20")
        return [node, str(PROVIDER_SCRIPT), *self.args]

    def environment(self) -> dict[str, str]:
        return procs.clean_env()

    def workdir(self) -> Path:
        return IDP_DIR


class IdentityProvider:
    """oidc-provider on a free port of 127.0.0.1 (see the module's doc). ``workdir`` holds its keys, settings and
    log (``log_path``). Lifetimes in seconds."""

    def __init__(
        self,
        workdir: Path,
        *,
        audience: str = "relay-api",
        resource: str = "urn:relay:api",
        console_client_id: str = "relay-console",
        device_client_id: str = "relay-cli",
        access_token_ttl: int = 300,
        id_token_ttl: int = 300,
        refresh_token_ttl: int = 3600,
    ) -> None:
        if not (IDP_DIR / "node_modules" / "oidc-provider").is_dir():
            raise AssertionError(f"{IDP_DIR}/node_modules is missing: `make test-deps` (npm ci in tests/idp)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.audience = audience
        self.resource = resource
        self.console_client_id = console_client_id
        self.device_client_id = device_client_id
        # The provider's own callback: where access_token() has the console client sent back (never served).
        self.test_redirect_uri = f"{self.issuer}/__test/callback"
        self._settings: dict[str, Any] = {
            "audience": audience, "resource": resource, "resourceScope": "relay",
            "consoleClientId": console_client_id, "deviceClientId": device_client_id,
            "consoleRedirectUris": [self.test_redirect_uri], "consolePostLogoutRedirectUris": [],
            "accessTokenTtl": access_token_ttl, "idTokenTtl": id_token_ttl, "refreshTokenTtl": refresh_token_ttl,
        }
        self.private_jwk = new_private_jwk()
        self.jwks_path = self.workdir / "jwks.json"
        self.config_path = self.workdir / "config.json"
        self._write_jwks([self.private_jwk])
        self.config_path.write_text(json.dumps(self._settings))
        self.log_path = self.workdir / f"idp-{self.port}.log"
        self._process = _NodeProvider(self.port, self.issuer, self.jwks_path, self.config_path, self.log_path)
        self.http = requests.Session()
        self.http.trust_env = False  # no proxy between the tests and 127.0.0.1

    # -- lifecycle

    def start(self) -> Self:
        """Start node (again after ``stop()``: same port, current keys and clients; sessions and grants of the
        previous run are gone) and wait until discovery answers."""
        if self._process.running:
            return self
        self._process.start()
        try:
            wait_until(self._serving, timeout=START_TIMEOUT_S, interval=0.05,
                       message=f"identity provider not serving on {self.issuer}",
                       ignore=(requests.RequestException,))
        except BaseException:
            self._process.kill()
            raise AssertionError(f"identity provider did not start; log {self.log_path}:\n"
                                 f"{self._process.log_tail()}") from None
        return self

    def _serving(self) -> bool:
        if not self._process.running:
            raise AssertionError(f"identity provider exited ({self._process.returncode}):\n"
                                 f"{self._process.log_tail()}")
        response = self.http.get(self.discovery_url, timeout=1)
        return response.status_code == 200 and response.json().get("issuer") == self.issuer

    def stop(self) -> None:
        """Stop node (by its PID): the provider is down (connections to its port are refused)."""
        self._process.stop()

    @property
    def running(self) -> bool:
        return self._process.running

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self.http.close()

    # -- what Relay is configured with

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def metadata(self) -> dict[str, Any]:
        response = self.http.get(self.discovery_url, timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        return dict(response.json())

    def published_jwks(self) -> dict[str, Any]:
        """The JWKS the provider serves at its ``jwks_uri`` now."""
        response = self.http.get(self.metadata()["jwks_uri"], timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        return dict(response.json())

    def relay_env(self) -> dict[str, str]:
        """The ``RELAY_OIDC_*`` settings of a Relay that trusts this provider (merge into ``relay_env``)."""
        return {
            "RELAY_OIDC_ISSUER": self.issuer,
            "RELAY_OIDC_AUDIENCE": self.audience,
            "RELAY_OIDC_CLIENT_ID": self.console_client_id,
            "RELAY_OIDC_RESOURCE": self.resource,
        }

    def allow_relay(self, base_url: str, post_logout_paths: Iterable[str] = POST_LOGOUT_PATHS) -> None:
        """Register a Relay's console with the console client: ``{base_url}/oauth/callback`` as a redirect URI,
        ``{base_url}{path}`` for each path as post-logout redirect URIs (added to those already there)."""
        base = base_url.rstrip("/")
        redirects = self._settings["consoleRedirectUris"]
        post_logout = self._settings["consolePostLogoutRedirectUris"]
        redirects.extend(uri for uri in [f"{base}{CONSOLE_CALLBACK_PATH}"] if uri not in redirects)
        post_logout.extend(uri for uri in (f"{base}{p}" for p in post_logout_paths) if uri not in post_logout)
        self.config_path.write_text(json.dumps(self._settings))
        self._reconfigure({"settings": self._settings})

    # -- keys

    @property
    def kid(self) -> str:
        return self.private_jwk["kid"]

    def _write_jwks(self, keys: list[dict[str, str]]) -> None:
        self.jwks_path.write_text(json.dumps({"keys": keys}))

    def _reconfigure(self, body: Mapping[str, Any]) -> None:
        if not self._process.running:
            return  # start() reads the files
        response = self.http.post(f"{self.issuer}/__test/reconfigure", json=body, timeout=HTTP_TIMEOUT_S)
        if response.status_code != 200:
            raise AssertionError(f"identity provider refused the new configuration: {response.text[:300]}")

    def rotate(self, *, keep_old: bool = False) -> str:
        """A new signing key with a new kid; return the kid. New tokens are signed with it; the JWKS publishes
        only its public key (``keep_old``: the previous one too, after it). Tokens issued before stay valid
        at the provider (refresh tokens keep working)."""
        previous = self.private_jwk
        self.private_jwk = new_private_jwk()
        keys = [self.private_jwk, previous] if keep_old else [self.private_jwk]
        self._write_jwks(keys)
        self._reconfigure({"jwks": {"keys": keys}})
        return self.kid

    def mint(
        self,
        claims: Mapping[str, Any],
        *,
        kid: str | None = None,
        alg: str = "RS256",
        key: Mapping[str, str] | bytes | None = None,
        header_extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Sign ``claims`` as they are (see ``claims``) with the provider's current private key, or ``key`` (a
        private JWK, e.g. ``new_private_jwk(kid=idp.kid)`` for a bad signature under the current kid).
        ``kid``: the header's kid (default: the signing key's). ``alg="none"``: unsigned. ``alg="HS256"``:
        HMAC keyed with ``key`` bytes, by default the provider's public key in PEM (the key-confusion attack;
        PyJWT refuses to do it, so the signature is computed here)."""
        signing_jwk = dict(key) if isinstance(key, Mapping) else self.private_jwk
        header: dict[str, Any] = {"alg": alg, "typ": "JWT", "kid": kid or signing_jwk.get("kid", self.kid)}
        header.update(header_extra or {})
        if alg == "none":
            token = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(dict(claims)).encode())}."
        elif alg.startswith("HS"):
            secret = key if isinstance(key, bytes) else self.public_pem()
            digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
            signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(dict(claims)).encode())}"
            signature = hmac.new(secret, signing_input.encode(), digest).digest()
            token = f"{signing_input}.{_b64url(signature)}"
        else:
            private = jwt.PyJWK(signing_jwk, algorithm=alg).key
            token = jwt.encode(dict(claims), private, algorithm=alg, headers=header)
        return self._remember(token)

    def claims(self, login: str, **overrides: Any) -> dict[str, Any]:
        """Claims like those of the provider's access tokens for ``login`` (iss, aud, sub, email, name, iat,
        exp in 5 minutes), with ``overrides`` on top (a value of None removes the claim)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer, "aud": self.audience, "sub": login, "email": self.email_of(login),
            "email_verified": True, "name": login, "iat": now, "exp": now + 300, "jti": secrets.token_hex(8),
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    @staticmethod
    def email_of(login: str) -> str:
        return login if "@" in login else f"{login}@example.com"

    def public_pem(self) -> bytes:
        public = jwt.PyJWK(self.private_jwk, algorithm="RS256").key.public_key()
        return bytes(public.public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo))

    @staticmethod
    def _remember(token: str) -> str:
        procs.SESSION_SECRETS.setdefault(token, "OIDC token")
        return token

    # -- real tokens, without a browser

    def authorization_code_tokens(
        self, login: str, *, scope: str = "openid email profile", resource: str | None = None
    ) -> dict[str, Any]:
        """The token response (access_token, id_token, ...) of the console client's authorization code + PKCE
        flow, logged in as ``login`` through the development pages (``resource``: sent when given; the
        provider defaults to Relay's)."""
        client = OAuth2Session(self.console_client_id, scope=scope, redirect_uri=self.test_redirect_uri,
                               code_challenge_method="S256", token_endpoint_auth_method="none")
        client.trust_env = False
        verifier = secrets.token_urlsafe(48)
        extra = {"resource": resource} if resource else {}
        metadata = self.metadata()
        url, state = client.create_authorization_url(
            metadata["authorization_endpoint"], code_verifier=verifier, nonce=secrets.token_urlsafe(16), **extra)
        callback = self._browse(url, login, until=self.test_redirect_uri)
        token = client.fetch_token(metadata["token_endpoint"], authorization_response=callback, state=state,
                                   code_verifier=verifier, timeout=HTTP_TIMEOUT_S, **extra)
        return self._remember_all(dict(token))

    def access_token(self, login: str, **kwargs: Any) -> str:
        """A real JWT access token for Relay's audience, for the person ``login`` (see authorization_code_tokens)."""
        return str(self.authorization_code_tokens(login, **kwargs)["access_token"])

    def start_device_flow(
        self, *, scope: str = "openid offline_access email profile", client_id: str | None = None
    ) -> dict[str, Any]:
        """RFC 8628 device authorization request: device_code, user_code, verification_uri(_complete), ..."""
        response = self.http.post(self.metadata()["device_authorization_endpoint"],
                                  data={"client_id": client_id or self.device_client_id, "scope": scope},
                                  timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        return dict(response.json())

    def approve_user_code(self, login: str, user_code: str) -> None:
        """The person ``login`` enters ``user_code`` at the verification page, signs in and consents."""
        self._browse(f"{self.metadata()['device_authorization_endpoint'].rsplit('/auth', 1)[0]}", login,
                     user_code=user_code)

    def device_flow_tokens(
        self, login: str, *, scope: str = "openid offline_access email profile", client_id: str | None = None,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """The device flow done as a CLI does it: the device authorization request, the person approving the
        user code in "a browser" (requests), the client polling the token endpoint (Authlib's OAuth2Session;
        authorization_pending/slow_down answered by waiting the interval). Returns the token response
        (access_token, refresh_token, id_token)."""
        started = self.start_device_flow(scope=scope, client_id=client_id)
        self.approve_user_code(login, started["user_code"])
        return self.poll_device_token(started["device_code"], client_id=client_id, timeout=timeout,
                                      interval=float(started.get("interval", 5)))

    def poll_device_token(
        self, device_code: str, *, client_id: str | None = None, timeout: float = 30.0, interval: float = 5.0
    ) -> dict[str, Any]:
        """Poll the token endpoint with Authlib for ``device_code`` until tokens come (or fail at ``timeout``)."""
        client = OAuth2Session(client_id or self.device_client_id, token_endpoint_auth_method="none")
        client.trust_env = False
        token_endpoint = self.metadata()["token_endpoint"]
        deadline = time.monotonic() + timeout
        while True:
            try:
                token = client.fetch_token(token_endpoint, grant_type=DEVICE_CODE_GRANT, device_code=device_code,
                                           timeout=HTTP_TIMEOUT_S)
                return self._remember_all(dict(token))
            except OAuthError as exc:
                if exc.error not in ("authorization_pending", "slow_down") or time.monotonic() >= deadline:
                    raise
                interval += 5 if exc.error == "slow_down" else 0
                time.sleep(min(interval, max(0.0, deadline - time.monotonic())))

    def refresh(self, refresh_token: str, *, client_id: str | None = None) -> dict[str, Any]:
        """The refresh_token grant for a public client (the device client by default)."""
        client = OAuth2Session(client_id or self.device_client_id, token_endpoint_auth_method="none")
        client.trust_env = False
        token = client.refresh_token(self.metadata()["token_endpoint"], refresh_token=refresh_token,
                                     timeout=HTTP_TIMEOUT_S)
        return self._remember_all(dict(token))

    def end_session(self, post_logout_redirect_uri: str, *, id_token_hint: str | None = None,
                    client_id: str | None = None, state: str | None = None) -> str:
        """RP-initiated logout as the console starts it (client_id + post_logout_redirect_uri, optionally
        id_token_hint and state), confirmed on the provider's page; returns the URL the provider sends the person
        back to (fails if it does not)."""
        params = {"client_id": client_id or self.console_client_id,
                  "post_logout_redirect_uri": post_logout_redirect_uri}
        params.update({name: value for name, value in (("id_token_hint", id_token_hint), ("state", state))
                       if value})
        url = requests.Request("GET", self.metadata()["end_session_endpoint"], params=params).prepare().url
        return self._browse(str(url), "", until=post_logout_redirect_uri)

    def _remember_all(self, token: dict[str, Any]) -> dict[str, Any]:
        for name in ("access_token", "refresh_token", "id_token"):
            if isinstance(token.get(name), str):
                self._remember(token[name])
        return token

    def _browse(self, url: str, login: str, *, until: str | None = None, user_code: str | None = None) -> str:
        """A person at the provider's pages with a fresh cookie jar: follow redirects, fill in and submit each
        page's form (user code, confirmation, login, consent) until a redirect to ``until`` (returned) or a page
        without a form (the device flow's success page; returns its URL)."""
        browser = requests.Session()
        browser.trust_env = False
        method, data = "GET", None
        for _ in range(_MAX_PAGES):
            response = browser.request(method, url, data=data, allow_redirects=False, timeout=HTTP_TIMEOUT_S)
            if response.is_redirect:
                url = urljoin(url, response.headers["Location"])
                if until is not None and url.startswith(until):
                    return self._checked_callback(url)
                method, data = "GET", None
                continue
            if response.status_code >= 400:
                raise AssertionError(f"identity provider page {url} answered {response.status_code}: "
                                     f"{response.text[:500]}")
            forms = [form for form in page_forms(response.text) if form["method"] == "post"]
            if not forms:
                if until is not None:
                    raise AssertionError(f"identity provider flow stopped at {url}: {response.text[:500]}")
                return url
            form = forms[0]
            fields: dict[str, str] = dict(form["fields"])
            if "login" in fields:
                fields.update(login=login, password="any password")
            if "user_code" in fields and user_code is not None and not fields["user_code"]:
                fields["user_code"] = user_code
            if form["id"] == "op.logoutForm":
                fields["logout"] = "yes"  # the "Yes, sign me out" button
            url, method, data = urljoin(url, form["action"]), "POST", fields
        raise AssertionError(f"identity provider flow did not finish within {_MAX_PAGES} pages (at {url})")

    @staticmethod
    def _checked_callback(url: str) -> str:
        query = parse_qs(urlsplit(url).query)
        if "error" in query:
            raise AssertionError(f"identity provider refused the authorization: {query}")
        return url
