"""The identity provider's discovery document (OpenID Connect Discovery 1.0): where its keys and endpoints are.
Fetched once from `{issuer}/.well-known/openid-configuration` and kept; a failed fetch is tried again on a later
call. Its `issuer` must be the configured one exactly (else a provider could vouch for another's tokens).

Also the one fetch of a JSON document from the provider (`fetch_json`), with a time and a size limit, that the
key set (actors/adapters/oidc/keys.py) shares. A failure is an IdentityProviderUnavailableError whose reason says
what went wrong, never more of the answer than its status."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from relay.actors.adapters.http_client import HttpClient, UnreachableError
from relay.actors.configuration.oidc import check_issuer
from relay.actors.errors import IdentityProviderUnavailableError

log = logging.getLogger("relay.actors.oidc")

MAX_DOCUMENT_BYTES = 256 * 1024  # a discovery document or key set is a few KiB; more is not a provider's answer
WELL_KNOWN = "/.well-known/openid-configuration"


def fetch_json(http: HttpClient, url: str, what: str, timeout_s: float) -> Mapping[str, object]:
    """The JSON object at `url` (`what` names it in the reason: "discovery document", "key set")."""
    try:
        answer = http.request("GET", url, None, {"Accept": "application/json"}, timeout_s,
                              max_bytes=MAX_DOCUMENT_BYTES)
    except TimeoutError:
        raise IdentityProviderUnavailableError(
            f"the identity provider did not send its {what} within {timeout_s:g} s") from None
    except UnreachableError as error:
        raise IdentityProviderUnavailableError(
            f"the identity provider is unreachable ({type(error.reason).__name__})") from None
    if answer.status != 200:
        raise IdentityProviderUnavailableError(f"the identity provider answered HTTP {answer.status} for its {what}")
    if len(answer.body) > MAX_DOCUMENT_BYTES:
        raise IdentityProviderUnavailableError(
            f"the identity provider's {what} is larger than {MAX_DOCUMENT_BYTES // 1024} KiB")
    try:
        document = json.loads(answer.body)
    except (ValueError, RecursionError):  # RecursionError: nested a few thousand levels deep
        raise IdentityProviderUnavailableError(f"the identity provider's {what} is not JSON") from None
    if not isinstance(document, dict):
        raise IdentityProviderUnavailableError(f"the identity provider's {what} is not a JSON object")
    return document


@dataclass(frozen=True)
class ProviderMetadata:
    """What Relay uses of the discovery document (the console's sign-in: the endpoints; token checks: jwks_uri)."""

    issuer: str
    jwks_uri: str
    authorization_endpoint: str
    token_endpoint: str
    end_session_endpoint: str | None = None
    device_authorization_endpoint: str | None = None

    @classmethod
    def from_document(cls, document: Mapping[str, object], expected_issuer: str) -> ProviderMetadata:
        if document.get("issuer") != expected_issuer:
            raise IdentityProviderUnavailableError(
                "the identity provider's discovery document names another issuer than RELAY_OIDC_ISSUER")
        return cls(
            issuer=expected_issuer,
            jwks_uri=_endpoint(document, "jwks_uri", required=True) or "",
            authorization_endpoint=_endpoint(document, "authorization_endpoint", required=True) or "",
            token_endpoint=_endpoint(document, "token_endpoint", required=True) or "",
            end_session_endpoint=_endpoint(document, "end_session_endpoint"),
            device_authorization_endpoint=_endpoint(document, "device_authorization_endpoint"),
        )


def _endpoint(document: Mapping[str, object], name: str, *, required: bool = False) -> str | None:
    """An endpoint URL of the document: https (http only to a loopback address, as for the issuer)."""
    value = document.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise IdentityProviderUnavailableError(f"the identity provider's discovery document has no valid {name}")
    try:
        check_issuer(value)  # the same rule as RELAY_OIDC_ISSUER: https, or http to a loopback address
    except ValueError:
        raise IdentityProviderUnavailableError(
            f"the identity provider's {name} is not an https:// URL (http:// only to a loopback address)") from None
    return value


class Discovery:
    """The provider's metadata, fetched on first use and kept. One fetch at a time: callers that arrive while
    one is under way wait for it and take its outcome (threading.Lock is gevent's under `relay serve`)."""

    def __init__(self, issuer: str, http: HttpClient, timeout_s: float) -> None:
        self.issuer = issuer
        self.url = issuer.rstrip("/") + WELL_KNOWN
        self._http = http
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._metadata: ProviderMetadata | None = None
        self._attempts = 0
        self._last_error: IdentityProviderUnavailableError | None = None

    def metadata(self) -> ProviderMetadata:
        """The metadata; IdentityProviderUnavailableError when it could not be fetched (tried again next call)."""
        if self._metadata is not None:
            return self._metadata
        attempts = self._attempts
        with self._lock:
            if self._metadata is not None:
                return self._metadata
            if self._attempts != attempts and self._last_error is not None:
                raise self._last_error  # the fetch this caller waited for failed just now: not again at once
            self._attempts += 1
            try:
                self._metadata = ProviderMetadata.from_document(
                    fetch_json(self._http, self.url, "discovery document", self._timeout_s), self.issuer)
            except IdentityProviderUnavailableError as error:
                self._last_error = error
                log.warning("OIDC discovery failed: %s", error.detail)
                raise
            self._last_error = None
            return self._metadata
