"""Request-time access to the runtime, the caller, and actors (with domain errors mapped to HTTP)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pykka
from flask import current_app, g, request

from relay.events.errors import (
    AlreadyExistsError,
    ConcurrentChangeError,
    DomainError,
    IllegalTransitionError,
    InvalidValueError,
    NotFoundError,
)
from relay.projections.identity import Principal
from relay.web import login_throttle
from relay.web.api.problems import ApiError, invalid, not_found
from relay.web.api.requests_ import check_path_names
from relay.web.auth import principal_from_header, require

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

T = TypeVar("T")

ASK_TIMEOUT_S = 15.0


def runtime() -> Runtime:
    return current_app.extensions["relay"]


def principal() -> Principal:
    found = g.get("principal")
    if found is None:
        found = g.principal = _logged_in(request.headers.get("Authorization"))
    return found


def _logged_in(header: str | None) -> Principal:
    """The bearer's principal; a header that names no live token is a failed login, throttled per address
    (web/login_throttle.py). No header at all is no login: a plain 401."""
    if not header:
        return principal_from_header(runtime().auth, header)
    login_throttle.refuse_if_throttled()
    try:
        return principal_from_header(runtime().auth, header)
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


def ask(call: Callable[[], pykka.Future[T]], timeout: float = ASK_TIMEOUT_S) -> T:
    """Call an actor and wait; map domain errors to problem details; then wait for the views."""
    try:
        result = call().get(timeout=timeout)
    except NotFoundError as error:
        raise not_found(str(error)) from None
    except AlreadyExistsError as error:
        raise ApiError(409, str(error)) from None
    except (IllegalTransitionError, ConcurrentChangeError) as error:
        raise ApiError(409, str(error)) from None
    except InvalidValueError as error:
        raise invalid("body", str(error)) from None
    except DomainError as error:
        raise ApiError(400, str(error)) from None
    except pykka.Timeout:
        raise ApiError(504, "Relay did not finish the command in time") from None
    runtime().wait_for_views()
    return result
