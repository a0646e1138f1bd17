"""GET /v2/orgs/{org}/audit-logs: Conductor's audit log, served from Relay's event log.

Entries are the operations someone asked for: `Operation` events (web/audit_trail.py records one per API
call or console action that changes something, with who, from where, on what, and the outcome). Executor
lifecycle events are not operations; they are in /relay/v1/events.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Blueprint, Response, jsonify, request

from relay.web.context import authorize, runtime
from relay.web.http_inputs import int_arg, page_limit_arg
from relay.web.operations import operation, query
from relay.web.problems import invalid
from relay.web.shapes.values import page_description, view_time

bp = Blueprint("v2_audit", __name__)

_TARGETS = {"App": "application", "Organization": "organization", "AlertingRule": "alerting_rule"}
# Audit scans this many recent entries at most per request; the log view is the bulk interface.
_SCAN_LIMIT = 5000


def _time_arg(name: str) -> str | None:
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise invalid(f"query.{name}", "must be an RFC 3339 date-time", raw) from None
    if parsed.tzinfo is None:
        raise invalid(f"query.{name}", "must carry a time zone offset", raw)
    return parsed.isoformat()


def _subject(by: str) -> dict[str, str]:
    if by.startswith("api_key:"):
        name = by.split(":", 1)[1]
        return {"type": "api_key", "id": name, "display": name}
    return {"type": "user", "id": by, "display": by}


# The people's operations (web/api/org_access.py, people.py): what their first target id names.
_PEOPLE_TARGETS = {"registerUser": "user", "removeMember": "user", "grantRole": "user", "createRole": "role",
                   "deleteRole": "role", "requestDomainClaim": "domain_claim", "releaseDomainClaim": "domain_claim"}


def _operation_target(details: dict[str, Any]) -> dict[str, str]:
    """An operation's target: what its first target id is, by the kind of operation."""
    name, targets = str(details.get("operation", "")), details.get("targets") or []
    if name in _PEOPLE_TARGETS and targets:
        return {"type": _PEOPLE_TARGETS[name], "id": str(targets[0])}
    for word, kind in (("Workflow", "workflow"), ("Schedule", "schedule"), ("Token", "token"),
                       ("AlertingRule", "alerting_rule")):
        if word in name and targets:
            return {"type": kind, "id": str(targets[0])}
    if details.get("app"):
        return {"type": "application", "id": str(details["app"])}
    return {"type": "organization", "id": str(details.get("org") or "")}


def _target(row: dict[str, Any]) -> dict[str, str]:
    details = row["details"]
    if "key_name" in details:
        return {"type": "token", "id": str(details["key_name"])}
    return {"type": _TARGETS.get(row["kind"], "organization"), "id": str(row["subject"] or "")}


def audit_entry(row: dict[str, Any]) -> dict[str, Any]:
    """An `Operation` event (events/operation.py) as Conductor's AuditLogEntry; an older log's change events
    that name who made them (`by`) too."""
    details = dict(row["details"])
    if row["kind"] == "Operation":
        return {
            "id": str(row["position"]),
            "emitTime": view_time(row["at"] or row["recorded_at"]),
            "operation": details["operation"],
            "status": details["outcome"],
            "subject": _subject(str(details["by"])),
            "target": _operation_target(details),
            "sourceIp": str(details.get("source") or ""),
            "details": {k: details.get(k) for k in ("app", "via", "targets", "more_targets", "status", "detail")},
        }
    by = str(details.pop("by", "relay"))
    return {
        "id": str(row["position"]),
        "emitTime": view_time(row["at"] or row["recorded_at"]),
        "operation": row["event"],
        "status": "success",
        "subject": _subject(by),
        "target": _target(row),
        "sourceIp": "",
        "details": details,
    }


def _listed(row: dict[str, Any], operations_since: int | None) -> bool:
    """Operations are the audit log. Change events that name who made them stand in for the operations of
    a log written before Relay recorded operations (before its first one), not beside them (twice)."""
    if row["kind"] == "Operation":
        return True
    return "by" in row["details"] and (operations_since is None or row["position"] < operations_since)


@bp.get("/v2/orgs/<org>/audit-logs")
@operation("listAuditLogs", summary="List audit logs", tag="Audit", returns="AuditLogEntry[]",
           query=(query("startTime", "string", "date-time"), query("endTime", "string", "date-time"),
                  query("operation", "string"), query("subject", "string"), query("target", "string"),
                  query("limit", "integer", "int64", description=page_description(100, 1000)),
                  query("offset", "integer", "int64")))
def list_audit_logs(org: str) -> Response:
    who = authorize("organization.read", org)
    runtime().wait_for_views()  # read-your-writes: the caller's own last action is listed
    start, end = _time_arg("startTime"), _time_arg("endTime")
    limit = page_limit_arg(100, 1000)
    offset = int_arg("offset", 0, maximum=1_000_000)
    operation, subject, target = (request.args.get(k) or None for k in ("operation", "subject", "target"))
    rows = runtime().views.audit.entries(
        org=org, start_time=start, end_time=end, limit=_SCAN_LIMIT, newest_first=True,
        apps=who.apps if who.app_scoped else None,  # a key limited to some applications: theirs only (issue 34)
    )
    operations_since = runtime().views.audit.first_position(org=org, kind="Operation")
    entries = [audit_entry(r) for r in rows if _listed(r, operations_since)]
    if operation:
        entries = [e for e in entries if e["operation"] == operation]
    if subject:
        entries = [e for e in entries if subject in (e["subject"]["id"], e["subject"]["display"])]
    if target:
        entries = [e for e in entries if e["target"]["id"] == target]
    return jsonify(entries[offset : offset + limit])
