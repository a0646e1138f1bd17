"""RFC 9457 problem details: every error the HTTP API returns, the exception that carries one, and the one table
that maps the domain's errors (events/errors.py, actors/errors.py) to HTTP for the API and the console."""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from flask import Flask, Response, json

from relay.actors.errors import (
    CallerMistakeError,
    DataPlaneFailedError,
    DataPlaneRefusedError,
    DataPlaneTimedOutError,
    DataPlaneUnavailableError,
    ExecutorDisconnectedError,
    ExecutorFailedError,
    ExecutorsBusyError,
    ExecutorUnavailableError,
    ForwardRefusedError,
    IdentityProviderUnavailableError,
    InstanceStoppingError,
    InvalidFieldError,
    NotAllowedError,
    NotSupportedError,
    ServiceError,
    TargetConflictError,
    TargetInvalidError,
    TargetNotFoundError,
    TimedOutError,
    TokenRefusedError,
)
from relay.events.errors import (
    AlreadyExistsError,
    ConcurrentChangeError,
    ConflictError,
    DomainError,
    IllegalTransitionError,
    InvalidValueError,
    NotFoundError,
)


class ApiError(Exception):
    """Raise anywhere in a request to answer with application/problem+json."""

    def __init__(
        self, status: int, detail: str, *, errors: list[dict[str, Any]] | None = None, title: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.title = title or HTTPStatus(status).phrase
        self.headers = headers or {}  # e.g. Retry-After


def problem_response(error: ApiError) -> Response:
    body: dict[str, object] = {"type": "about:blank", "title": error.title, "status": error.status,
                            "detail": error.detail}
    if error.errors:
        body["errors"] = error.errors
    response = Response(json.dumps(body), status=error.status, mimetype="application/problem+json")
    response.headers.update(error.headers)
    return response


def invalid(location: str, message: str, value: object = None) -> ApiError:
    """A 422 naming the bad field, e.g. invalid('body.executorTimeoutSecs', 'must be a positive integer')."""
    return ApiError(
        422,
        f"{location}: {message}",
        errors=[{"location": location, "message": message, "value": value}],
        title="Unprocessable Entity",
    )


def bad_request(location: str, message: str) -> ApiError:
    return ApiError(400, f"{location}: {message}", errors=[{"location": location, "message": message}])


def not_found(detail: str) -> ApiError:
    return ApiError(404, detail)


@dataclass(frozen=True)
class Mapping:
    """How one kind of domain error reaches HTTP: its status, its title (None: the status's phrase), and the
    `kind` the console's pages show (no-executor, timeout, unsupported, invalid, not-found, error)."""

    status: int
    kind: str
    title: str | None = None


# The one table: the first row whose class the error is an instance of (subclasses before their bases).
MAPPINGS: tuple[tuple[type[Exception], Mapping], ...] = (
    (ExecutorUnavailableError, Mapping(503, "no-executor")),
    (NotSupportedError, Mapping(501, "unsupported")),
    (ExecutorsBusyError, Mapping(429, "error")),
    (TimedOutError, Mapping(504, "timeout")),
    (ExecutorDisconnectedError, Mapping(502, "error")),
    (ForwardRefusedError, Mapping(502, "error")),
    (ExecutorFailedError, Mapping(502, "error", "Executor Error")),
    (TargetNotFoundError, Mapping(404, "not-found")),
    (TargetConflictError, Mapping(409, "error")),
    (TargetInvalidError, Mapping(422, "invalid")),
    (DataPlaneUnavailableError, Mapping(503, "no-executor", "Data Plane Error")),
    (DataPlaneTimedOutError, Mapping(504, "timeout", "Data Plane Error")),
    (DataPlaneFailedError, Mapping(502, "error", "Data Plane Error")),
    (DataPlaneRefusedError, Mapping(422, "invalid")),
    (InvalidFieldError, Mapping(422, "invalid")),
    (NotAllowedError, Mapping(403, "error")),
    (TokenRefusedError, Mapping(401, "error")),
    (IdentityProviderUnavailableError, Mapping(503, "error", "Identity Provider Unavailable")),
    (InstanceStoppingError, Mapping(503, "error", "Instance Stopping")),
    (NotFoundError, Mapping(404, "not-found")),
    (AlreadyExistsError, Mapping(409, "error")),
    (IllegalTransitionError, Mapping(409, "error")),
    (ConcurrentChangeError, Mapping(409, "error")),
    (ConflictError, Mapping(409, "error")),
    (InvalidValueError, Mapping(422, "invalid")),
    (DomainError, Mapping(400, "invalid")),
)

DomainFailure: tuple[type[Exception], ...] = (ServiceError, DomainError)
"""What the services and the aggregates raise: catch these to show a problem (web/console)."""


def mapping_of(error: Exception) -> Mapping:
    """The table's row for a domain error (an ApiError: the request was not readable)."""
    if isinstance(error, ApiError):
        return Mapping(error.status, "invalid", error.title)
    for kind, mapping in MAPPINGS:
        if isinstance(error, kind):
            return mapping
    raise TypeError(f"not a domain error: {type(error).__name__}")


def api_error(error: Exception) -> ApiError:
    """A domain error as the problem details the API answers (an ApiError as it is)."""
    if isinstance(error, ApiError):
        return error
    mapping = mapping_of(error)
    if isinstance(error, InvalidFieldError):  # one field of the input, named
        return invalid(error.location, error.message, error.value)
    if isinstance(error, InvalidValueError):  # the aggregates' refusal of a value in the body
        return invalid("body", str(error))
    detail = error.detail if isinstance(error, ServiceError) else str(error)
    errors = None
    if isinstance(error, CallerMistakeError) and error.location is not None:
        errors = [{"location": error.location, "message": error.explanation}]
    return ApiError(mapping.status, detail, errors=errors, title=mapping.title)


def answer_problems(app: Flask) -> None:
    """Answer an ApiError, and the services' and the aggregates' errors through the table, as problem details."""

    @app.errorhandler(ApiError)
    def _api_error(error: ApiError) -> Response:
        return problem_response(error)

    @app.errorhandler(ServiceError)
    @app.errorhandler(DomainError)
    def _domain_error(error: Exception) -> Response:
        return problem_response(api_error(error))
