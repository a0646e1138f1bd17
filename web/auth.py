"""Bearer authentication of API calls: the Authorization header to a principal (projections/identity.py), and
permission checks, as HTTP errors.

A `dbos_` API key or the admin token is looked up as always. With OAuth on (`rt.tokens`, RELAY_OIDC_ISSUER) any
other bearer that looks like a JWT is a person's access token: checked by the identity provider's keys
(actors/adapters/oidc/verifier.py), then the person is looked up (People.sign_in: no write). A refused token is
a 401 whose detail says why, never what the token was."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.actors.errors import IdentityProviderUnavailableError, TokenRefusedError
from relay.actors.services.people import People
from relay.projections.identity import KEY_PREFIX, Principal
from relay.web.problems import ApiError

if TYPE_CHECKING:
    from relay.actors.adapters.oidc.verifier import VerifiedClaims
    from relay.actors.runtime import Runtime

# RFC 6750: a refused bearer says so in WWW-Authenticate as well as in the problem body.
_INVALID_TOKEN = {"WWW-Authenticate": 'Bearer error="invalid_token"'}


@dataclass(frozen=True)
class Bearer:
    """Who presented the bearer token, and, for a person's access token, its verified claims (None for an API
    key or the admin token: registerUser and getCurrentUser need a person)."""

    principal: Principal
    claims: VerifiedClaims | None = None


def _token(header: str | None) -> str:
    if not header:
        raise ApiError(401, "missing bearer token")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "the Authorization header must be 'Bearer <token>'")
    return token.strip()


def _looks_like_jwt(token: str) -> bool:
    return not token.startswith(KEY_PREFIX) and token.count(".") == 2


def authenticate(rt: Runtime, header: str | None) -> Bearer:
    """The bearer of `header`: an API key, the admin token, or (OAuth on) a person's verified access token."""
    token = _token(header)
    principal = rt.auth.principal_for(token)
    if principal is not None:
        return Bearer(principal)
    if rt.tokens is None or not _looks_like_jwt(token):
        raise ApiError(401, "unknown or revoked token")
    try:
        claims = rt.tokens.verify(token)
    except TokenRefusedError as refused:
        raise ApiError(401, f"access token refused: {refused.reason}", headers=_INVALID_TOKEN) from None
    except IdentityProviderUnavailableError as down:  # no decision possible: not the caller's failed login
        raise ApiError(503, f"cannot check the access token now: {down.detail}",
                       title="Identity Provider Unavailable") from None
    return Bearer(People(rt).sign_in(claims), claims)


def require(principal: Principal, permission: str, org: str, app: str | None = None) -> None:
    if not principal.allows(permission, org, app):
        raise ApiError(403, f"this token lacks '{permission}' for this resource")
