"""Request-time access to the runtime, the caller, the services and actors (domain errors reach HTTP through
web/problems.py's table)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from flask import current_app, g, request

from relay.actors.services.executor_calls import ExecutorCalls
from relay.actors.services.workflows import WorkflowActions
from relay.projections.identity import Principal
from relay.web import login_throttle
from relay.web.auth import Bearer, authenticate, require
from relay.web.http_inputs import check_path_names
from relay.web.problems import ApiError, not_found

if TYPE_CHECKING:
    from relay.actors.adapters.oidc.verifier import VerifiedClaims
    from relay.actors.runtime import Runtime

T = TypeVar("T")


def runtime() -> Runtime:
    return current_app.extensions["relay"]


def principal() -> Principal:
    return _bearer().principal


def person_claims() -> VerifiedClaims:
    """The verified access token of the person calling (registerUser, getCurrentUser): 403 for an API key or the
    admin token, which stand for no person."""
    claims = _bearer().claims
    if claims is None:
        raise ApiError(403, "this operation needs a person's token from the identity provider, not an API key "
                            "or the admin token")
    return claims


def _bearer() -> Bearer:
    found: Bearer | None = g.get("bearer")
    if found is None:
        found = g.bearer = _logged_in(request.headers.get("Authorization"))
        g.principal = found.principal  # what the audit trail names
    return found


def _logged_in(header: str | None) -> Bearer:
    """The bearer; a header that names no live token (or a refused access token) is a failed login, throttled per
    address (web/login_throttle.py). No header at all is no login: a plain 401. An identity provider that cannot
    be reached (503) is no failed login either."""
    if not header:
        return authenticate(runtime(), header)
    login_throttle.refuse_if_throttled()
    try:
        return authenticate(runtime(), header)
    except ApiError as error:
        if error.status == 401:
            login_throttle.failed()
        raise


def authorize(permission: str, org: str, app: str | None = None, *, admin_creates_org: bool = False) -> Principal:
    """Authenticate, validate path names, check the permission, and check the org exists
    (with `admin_creates_org`, the admin may name a new organization: the command creates it)."""
    who = principal()
    check_path_names(org, app)
    require(who, permission, org, app)
    if admin_creates_org and who.admin:
        return who
    if not runtime().views.applications.organization_exists(org):
        raise not_found(f"organization '{org}' not found")
    return who


def require_app(org: str, app: str) -> dict[str, Any]:
    row = runtime().views.applications.app(org, app)
    if row is None:
        raise not_found(f"application '{app}' not found in organization '{org}'")
    return row


def executor_calls() -> ExecutorCalls:
    """This request's calls to executors (one object per request: it remembers which path answered, the
    `X-Relay-Served-From` header)."""
    found: ExecutorCalls | None = g.get("relay_calls")
    if found is None:
        found = g.relay_calls = ExecutorCalls(runtime())
    return found


def workflow_actions() -> WorkflowActions:
    """The workflow, queue, schedule and version use cases, over this request's executor calls."""
    return WorkflowActions(executor_calls())


def authorize_app(permission: str, org: str, app: str) -> None:
    """Authenticate, check the permission, and find the application (401/403/404/422), before any frame."""
    authorize(permission, org, app)
    if not runtime().views.applications.app_exists(org, app):
        require_app(org, app)  # its 404


def refuse_beyond_scope(who: Principal, org: str, name: str) -> None:
    """A key limited to some applications revokes only keys within them (issue 34: an alpha key revoked bravo's
    executor key). Another key is answered as if it did not exist, as its list leaves it out."""
    if not who.app_scoped:
        return
    row = next((r for r in runtime().views.applications.keys(org) if r["name"] == name and r["revoked_at"] is None),
               None)
    if row is not None and not who.covers(row["apps"]):
        raise not_found(f"no active API key named '{name}' in '{org}'")
