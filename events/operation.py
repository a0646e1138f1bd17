"""Operations: every control-plane action someone asked Relay for, as one `Operation` aggregate each.

An operation is what an API call or a console form asked for (cancel, resume, fork, delete, import, export,
the bulk operations, schedule actions, set-latest-version, raw requests, application and key changes), who
asked (an API key's name, the admin, a console user), from which address, on which targets, and what came of
it (success or failure, the HTTP status, a short reason). It is recorded whether the action succeeded or not:
a refused or failed attempt is as much an auditor's business as a successful one. Nothing of the request's
body is kept but the ids it targets (a body may carry workflow inputs; secrets never reach it).

Each operation is an aggregate of its own, created once and never changed, so recording one never conflicts
with another (no shared aggregate to contend on). Its id comes in (the web layer draws it per request).

Pure: no I/O, no clock (`at` comes in), no randomness (the id comes in).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate

from relay.events.errors import InvalidValueError
from relay.events.names import check_app_name, check_org_name
from relay.events.versions import versioned

SUCCESS = "success"
FAILURE = "failure"
OUTCOMES = (SUCCESS, FAILURE)
VIA = ("api", "console")

MAX_TARGETS = 100
MAX_TARGET_CHARS = 256
MAX_NAME_CHARS = 100
MAX_DETAIL_CHARS = 500
MAX_SOURCE_CHARS = 64


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@versioned({"Performed": 1})
@dataclass(eq=False, repr=False)  # the aggregate's own equality and repr, as before
class Operation(Aggregate, created_event_name="Performed"):
    """One control-plane action and its outcome. A record, never changed: its fields are its `Performed` event's,
    in this order (eventsourcing makes the event from the dataclass's __init__)."""

    operation_id: UUID
    org: str
    app: str | None
    operation: str
    via: str
    targets: list[str]
    more_targets: int
    outcome: str
    status: int
    detail: str | None
    by: str
    source: str
    at: datetime

    @staticmethod
    def create_id(operation_id: UUID, **_: object) -> UUID:
        return operation_id

    @classmethod
    def perform(
        cls,
        operation_id: UUID,
        *,
        org: str,
        app: str | None,
        operation: str,
        via: str,
        targets: Sequence[str],
        status: int,
        detail: str | None,
        by: str,
        source: str,
        at: datetime,
    ) -> Operation:
        """Record an action: `status` is the HTTP status it was answered with (below 400: success).
        Targets past MAX_TARGETS are counted, not listed (a bulk operation may name thousands)."""
        check_org_name(org)
        if app is not None:
            check_app_name(app)
        if not isinstance(operation, str) or not operation or len(operation) > MAX_NAME_CHARS:
            raise InvalidValueError(f"an operation needs a name of 1-{MAX_NAME_CHARS} characters")
        if via not in VIA:
            raise InvalidValueError(f"an operation comes via one of {', '.join(VIA)}")
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise InvalidValueError("an operation's status is an HTTP status (100-599)")
        if not isinstance(by, str) or not by:
            raise InvalidValueError("an operation needs who asked for it")
        if not all(isinstance(t, str) for t in targets):
            raise InvalidValueError("an operation's targets are ids (strings)")
        listed = [_bounded(t, MAX_TARGET_CHARS) for t in targets[:MAX_TARGETS]]
        return cls(
            operation_id=operation_id, org=org, app=app, operation=operation, via=via, targets=listed,
            more_targets=max(0, len(targets) - MAX_TARGETS), outcome=SUCCESS if status < 400 else FAILURE,
            status=status, detail=_bounded(detail, MAX_DETAIL_CHARS) if detail else None,
            by=_bounded(by, MAX_NAME_CHARS), source=_bounded(source or "", MAX_SOURCE_CHARS), at=at,
        )
