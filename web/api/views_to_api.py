"""Translation from Relay's views to the Conductor API v2 schemas (camelCase, RFC 3339 times)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from relay.web.shapes.values import api_record, view_time
from relay.wire.json_types import JSONObject

# GET /v2/orgs/{org}: the reference's Organization, for a self-hosted Relay. Conductor's fields describe a DBOS
# Cloud subscription; Relay has none: it limits neither applications nor keys, keeps its event log (the audit
# log) for ever, provisions no database, VM or RDS instance class, and has no team members (keys instead).
NO_LIMIT = 2**31 - 1  # "no limit" in the reference's int32 quota fields: the largest value they can hold
SUBSCRIPTION_PLAN = "free"  # the enum's only value that does not claim a paid subscription


def organization(name: str, created_at: str, audit_log_retention_days: int | None = None) -> JSONObject:
    """`audit_log_retention_days`: what updateOrg recorded (issue 31); unset, the log is kept for ever."""
    return {
        "id": name,  # as Application.orgId
        "name": name,
        "createdAt": created_at,
        "subscriptionPlan": SUBSCRIPTION_PLAN,
        "maxApps": NO_LIMIT,
        "maxConductorApps": NO_LIMIT,
        "maxDatabaseInstances": 0,
        "maxVms": 0,
        "maxTeamMembers": 0,
        "defaultRdsInstanceClassType": "",
        "auditLogRetentionDays": NO_LIMIT if audit_log_retention_days is None else audit_log_retention_days,
    }


def application(row: dict[str, Any], counts: dict[str, int], language: str | None) -> dict[str, Any]:
    settings = row["settings"]
    return {
        "id": row["id"],
        "name": row["name"],
        "orgId": row["org"],
        "status": "AVAILABLE" if counts.get("HEALTHY", 0) > 0 else "UNAVAILABLE",
        "language": language,
        "executorTimeoutSecs": settings["executorTimeoutSecs"],
        "gcRowsThreshold": settings["gcRowsThreshold"],
        "gcTimeThresholdMs": settings["gcTimeThresholdMs"],
        "globalTimeoutMs": settings["globalTimeoutMs"],
        "privateMode": settings["privateMode"],
        "dbosCloud": False,
    }


def executor(row: dict[str, Any], app_id: str) -> dict[str, Any]:
    return {
        "executorId": row["executor_id"],
        "appId": app_id,
        "appVersion": row["app_version"] or "",
        "status": row["status"],
        "hostId": row["instance"],
        "hostname": row["hostname"],
        "createdAt": view_time(row["created_at"]),
        "updatedAt": view_time(row["updated_at"]),
        "language": row["language"],
        "dbosVersion": row["dbos_version"],
        "executorMetadata": json.loads(row["metadata"]) if row["metadata"] else None,
    }


def token(row: Mapping[str, object]) -> dict[str, object]:
    return api_record(row, ("name", "issued_at", "permissions", "apps"), times=("issued_at",),
                      names={"name": "tokenName", "issued_at": "createdAt", "apps": "appIds"})


_EVENT_COLUMNS = ("position", "event", "kind", "at", "recorded_at", "org", "app", "subject", "details")


def event_entry(row: Mapping[str, object]) -> dict[str, object]:
    """An entry of Relay's event log (/relay/v1/events)."""
    return api_record(row, _EVENT_COLUMNS, times=("at", "recorded_at"))
