"""Bearer authentication of API calls: the Authorization header to a principal (projections/identity.py), and
permission checks, as HTTP errors."""

from __future__ import annotations

from relay.projections.identity import Authenticator, Principal
from relay.web.problems import ApiError


def principal_from_header(authenticator: Authenticator, header: str | None) -> Principal:
    if not header:
        raise ApiError(401, "missing bearer token")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "the Authorization header must be 'Bearer <token>'")
    principal = authenticator.principal_for(token.strip())
    if principal is None:
        raise ApiError(401, "unknown or revoked token")
    return principal


def require(principal: Principal, permission: str, org: str, app: str | None = None) -> None:
    if not principal.allows(permission, org, app):
        raise ApiError(403, f"this token lacks '{permission}' for this resource")
