"""Relay's own alert rules (events/alerting.py RELAY_RULE_TYPES), evaluated from what Relay knows of the fleet.

- ``RecoveryFlapping`` reads Relay's registry alone (its recoveries history: `registry.recovered_deaths`), so it
  is evaluated whether or not any executor of the application is connected. What counts is an executor death
  whose recovery Relay dispatched (the first dispatch of that death): the retries of one recovery on other
  peers are one recovery, and a death with no peer to recover it is not a recovery (UnresponsiveApplication
  is the rule for an application with nobody left).
- ``StrandedVersion`` needs the pending workflows per application version, from the application's system
  database when a data plane is configured (the routing rule: aggregates prefer the database, and it is the
  only source left when every executor is down), else from a connected executor (`get_workflow_aggregates`
  grouped by application version, or `list_workflows` on an SDK without it). Without either it cannot be
  evaluated and is skipped (CannotAskError), as the other executor-read rules are. Which versions connected
  executors run comes from Relay's registry (any instance).

Used by actors/alerting.py `evaluate`; the judgement itself is actors/policies/alerting.py's (pure).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from relay.actors.policies.alerting import (
    Finding,
    recovery_flapping,
    recovery_window_start,
    stranded_version,
)
from relay.actors.policies.dataplane_aggregates import count_by_version
from relay.wire.errors import CannotAskError
from relay.wire.json_types import JSONObject
from relay.wire.workflow_requests import (
    GetWorkflowAggregatesBody,
    GetWorkflowAggregatesRequest,
    ListWorkflowsBody,
    ListWorkflowsRequest,
)

LIST_LIMIT = 10_000  # list_workflows fallback: counted up to this many rows per status
PENDING_STATUSES = ("PENDING", "ENQUEUED")


class FleetSources(Protocol):
    def recovered_deaths(self, since: datetime) -> list[JSONObject]:
        """Deaths of the application's executors whose recovery was first dispatched at or after ``since``."""
        ...

    def executors(self) -> list[JSONObject]:
        """The registry's rows of the application's executors (every instance, the deleted ones too)."""
        ...

    def ask_database(self, request: object) -> Any:
        """The system database's answer (CannotAskError without a data plane, or when it cannot answer)."""
        ...

    def ask(self, request: object) -> Any:
        """The answer of the best local executor (CannotAskError when none gave one)."""
        ...


# ------------------------------------------------------------------------------------- RecoveryFlapping


def evaluate_recovery_flapping(app: str, metadata: JSONObject, sources: FleetSources,
                               now: datetime) -> Finding | None:
    return recovery_flapping(app, metadata, sources.recovered_deaths(recovery_window_start(metadata, now)))


# -------------------------------------------------------------------------------------- StrandedVersion


def pending_by_version(sources: FleetSources) -> tuple[dict[str, int], str]:
    """PENDING and ENQUEUED workflows per application version, and which source said so ("database" or
    "executor"). CannotAskError when neither can."""
    aggregate = GetWorkflowAggregatesRequest(body=GetWorkflowAggregatesBody(
        group_by_application_version=True, select_count=True, status=list(PENDING_STATUSES),
    ))
    try:
        return count_by_version(sources.ask_database(aggregate).output), "database"
    except CannotAskError as no_database:
        database_reason = str(no_database)
    try:
        return count_by_version(sources.ask(aggregate).output), "executor"
    except CannotAskError as error:
        if not error.unsupported:
            raise CannotAskError(f"{error}; the database: {database_reason}") from None
    counts: dict[str, int] = {}
    for status in PENDING_STATUSES:  # an SDK without aggregates: list them (the version is in every row)
        listing = ListWorkflowsRequest(body=ListWorkflowsBody(status=status, limit=LIST_LIMIT))
        for row in sources.ask(listing).output or []:
            version = row.get("ApplicationVersion") if isinstance(row, dict) else None
            if version:
                counts[str(version)] = counts.get(str(version), 0) + 1
    return counts, "executor"


def evaluate_stranded_version(app: str, metadata: JSONObject, sources: FleetSources,
                              now: datetime) -> Finding | None:
    executors = sources.executors()  # read before the pending workflows, as a run always has
    pending, source = pending_by_version(sources)
    return stranded_version(app, metadata, executors, pending, source, now)
