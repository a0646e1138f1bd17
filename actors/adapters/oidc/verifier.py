"""A person's token checked (issue 31): an access token sent as Bearer, or the console's ID token. PyJWT checks
the signature with the provider's key (actors/adapters/oidc/keys.py) and the claims: `iss` exactly, `aud` one of
the audiences, `exp` (required), `nbf` and `iat`, all with RELAY_OIDC_LEEWAY_S. Only the algorithms of
ALLOWED_ALGORITHMS are accepted, whatever the token's header says.

A refusal is a TokenRefusedError whose reason says why ("token expired", "wrong audience", ...): it never
contains the token or any part of it (a reason reaches the caller and may reach a log)."""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

import jwt
from jwt.algorithms import get_default_algorithms
from jwt.exceptions import (
    DecodeError,
    ExpiredSignatureError,
    ImmatureSignatureError,
    InvalidAlgorithmError,
    InvalidAudienceError,
    InvalidIssuedAtError,
    InvalidIssuerError,
    InvalidKeyError,
    InvalidSignatureError,
    InvalidTokenError,
    MissingRequiredClaimError,
)

from relay.actors.adapters.http_client import HttpClient
from relay.actors.adapters.oidc.discovery import Discovery
from relay.actors.adapters.oidc.keys import ALLOWED_ALGORITHMS, JwksCache
from relay.actors.errors import TokenRefusedError

if TYPE_CHECKING:
    from relay.actors.configuration.settings import Settings

MAX_TOKEN_CHARS = 16 * 1024
REQUIRED_CLAIMS = ("iss", "aud", "exp", "sub")
# Names a reason may repeat from a token's header: the JWA names PyJWT knows (anything else is not echoed).
_KNOWN_ALGORITHMS = frozenset(get_default_algorithms()) | {"none"}
# PyJWT's refusals, most specific first (InvalidSignatureError is a DecodeError).
_REASONS: tuple[tuple[type[InvalidTokenError], str], ...] = (
    (ExpiredSignatureError, "token expired"),
    (ImmatureSignatureError, "token not yet valid"),
    (InvalidIssuerError, "wrong issuer"),
    (InvalidAudienceError, "wrong audience"),
    (InvalidSignatureError, "bad signature"),
    (InvalidAlgorithmError, "the token's algorithm does not match its signing key"),
    (InvalidIssuedAtError, "the token's `iat` claim is not a time"),
    (DecodeError, "malformed token"),
)


@dataclass(frozen=True)
class VerifiedClaims:
    """A checked token's claims, as Relay uses them; `raw` is every claim (read-only)."""

    issuer: str
    subject: str
    email: str | None
    email_verified: bool | None
    name: str | None
    given_name: str | None
    family_name: str | None
    groups: tuple[str, ...]
    expires_at: float
    raw: Mapping[str, object]


def _text(claims: Mapping[str, object], name: str) -> str | None:
    value = claims.get(name)
    return value if isinstance(value, str) and value else None


def _flag(claims: Mapping[str, object], name: str) -> bool | None:
    value = claims.get(name)
    if isinstance(value, str):  # a few providers send "true"/"false"
        value = {"true": True, "false": False}.get(value.lower())
    return value if isinstance(value, bool) else None


def groups_of(claims: Mapping[str, object], claim: str | None) -> tuple[str, ...]:
    """The person's groups from `claim`: a list of strings or a space-separated string. A dotted name reaches
    into objects when no claim has the whole name (Keycloak's `realm_access.roles`)."""
    if claim is None:
        return ()
    value: object = claims.get(claim)
    if value is None and "." in claim:
        value = claims
        for part in claim.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(item for item in value if isinstance(item, str) and item)
    return ()


def _algorithm_refused(algorithm: object) -> TokenRefusedError:
    if algorithm == "none":
        return TokenRefusedError("algorithm 'none' is not accepted")
    if isinstance(algorithm, str) and algorithm in _KNOWN_ALGORITHMS:
        return TokenRefusedError(f"algorithm {algorithm} is not accepted")
    return TokenRefusedError("the token's algorithm is not accepted")


class TokenVerifier:
    def __init__(self, issuer: str, audiences: Sequence[str], keys: JwksCache, discovery: Discovery, *,
                 leeway_s: float, roles_claim: str | None = None) -> None:
        self.issuer = issuer
        self.audiences = tuple(audiences)
        self.keys = keys
        self.discovery = discovery  # the console's sign-in reads the provider's endpoints from it
        self._leeway_s = leeway_s
        self._roles_claim = roles_claim

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenVerifier | None:
        """The verifier of RELAY_OIDC_*; None when OAuth is off. Nothing is fetched until a token comes."""
        if settings.oidc_issuer is None:
            return None
        context = ssl.create_default_context()
        if settings.ca_file is not None:  # a private CA, as for peers and the CLI
            context.load_verify_locations(cafile=str(settings.ca_file))
        http = HttpClient(context)
        discovery = Discovery(settings.oidc_issuer, http, settings.oidc_timeout_s)
        keys = JwksCache(discovery, http, timeout_s=settings.oidc_timeout_s,
                         min_refetch_s=settings.oidc_jwks_min_refetch_s)
        return cls(settings.oidc_issuer, settings.oidc_audiences, keys, discovery, leeway_s=settings.oidc_leeway_s,
                   roles_claim=settings.oidc_roles_claim)

    def verify(self, token: str, audience: Sequence[str] | None = None, nonce: str | None = None) -> VerifiedClaims:
        """The token's claims when it is valid; TokenRefusedError saying why when not. `audience`: the ones it may
        be for (default: RELAY_OIDC_AUDIENCE; the console passes its client id for ID tokens); `nonce`: the one
        the console sent with the sign-in (an ID token must carry it)."""
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRefusedError("token too large")
        if not token.isascii() or token.count(".") != 2:
            raise TokenRefusedError("malformed token")
        try:
            header = jwt.get_unverified_header(token)
        except InvalidTokenError:
            raise TokenRefusedError("malformed token") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm not in ALLOWED_ALGORITHMS:
            raise _algorithm_refused(algorithm)
        key = self.keys.signing_key(kid if isinstance(kid, str) else None, algorithm)
        try:
            claims = jwt.decode(
                token, key, algorithms=[algorithm], audience=list(audience or self.audiences), issuer=self.issuer,
                leeway=self._leeway_s, options={"require": list(REQUIRED_CLAIMS), "enforce_minimum_key_length": True},
            )
        except MissingRequiredClaimError as missing:
            raise TokenRefusedError(f"the token has no `{missing.claim}` claim") from None
        except InvalidKeyError:
            raise TokenRefusedError("the token's signing key is too weak") from None
        except InvalidTokenError as error:
            raise TokenRefusedError(next((reason for kind, reason in _REASONS if isinstance(error, kind)),
                                         "invalid token")) from None
        if nonce is not None:
            sent = claims.get("nonce")
            if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), nonce.encode()):
                raise TokenRefusedError("wrong nonce")
        return self._claims(claims)

    def _claims(self, claims: Mapping[str, object]) -> VerifiedClaims:
        subject, expires = claims.get("sub"), claims.get("exp")
        if not isinstance(subject, str) or not subject or not isinstance(expires, int | float):
            raise TokenRefusedError("malformed token")
        return VerifiedClaims(
            issuer=self.issuer, subject=subject, email=_text(claims, "email"),
            email_verified=_flag(claims, "email_verified"), name=_text(claims, "name"),
            given_name=_text(claims, "given_name"), family_name=_text(claims, "family_name"),
            groups=groups_of(claims, self._roles_claim), expires_at=float(expires),
            raw=MappingProxyType(dict(claims)),
        )
