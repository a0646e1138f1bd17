"""A console change, run through its service: noted in the audit trail under the API's operation name and said to
the person in a flash, whether the service made it or refused it (with the detail the API would have answered).
Changes asked of executors go through web/console/workflows.py `_act` instead (their failures are
`remote.ExecutorProblem`s)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from flask import flash

from relay.web import audit_trail
from relay.web.problems import ApiError, DomainFailure, api_error

T = TypeVar("T")

# What a service refuses a change with (ApiError: e.g. a key beyond the caller's scope, answered as its 404).
REFUSALS: tuple[type[Exception], ...] = (*DomainFailure, ApiError)


def change(operation: str, targets: Sequence[str], work: Callable[[], T], *, failed: str,
           done: str | Callable[[T], str] | None = None, app: str | None = None) -> tuple[bool, T | None]:
    """Run `work`; say `done` (or, given a function, what it makes of the result; nothing when None) after it, or
    "`failed`: <why>" when it was refused. Whether it was made, and its result."""
    try:
        result = work()
    except REFUSALS as error:
        problem = api_error(error)
        audit_trail.note(operation, targets, failed=problem.detail, status=problem.status, app=app)
        flash(f"{failed}: {problem.detail}", "error")
        return False, None
    audit_trail.note(operation, targets, app=app)
    if done is not None:
        flash(done(result) if callable(done) else done, "ok")
    return True, result
