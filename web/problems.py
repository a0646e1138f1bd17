"""RFC 9457 problem details: every error the HTTP API returns, and the exception that carries one."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from flask import Response, json


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
    body: dict[str, Any] = {"type": "about:blank", "title": error.title, "status": error.status,
                            "detail": error.detail}
    if error.errors:
        body["errors"] = error.errors
    response = Response(json.dumps(body), status=error.status, mimetype="application/problem+json")
    response.headers.update(error.headers)
    return response


def invalid(location: str, message: str, value: Any = None) -> ApiError:
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
