"""An application's incidents (issue 32, Relay-only, beside Conductor's alerting routes; docs/adr/0049).

- ``GET /relay/v1/orgs/{org}/apps/{app}/incidents?state=open|resolved|all``: newest first, each with its state
  (open, acknowledged, silenced, resolved), opening and resolution times and duration;
- ``GET .../incidents/{incidentId}``: one, with each notification and where it went (never a URL or a key);
- ``POST .../incidents/{incidentId}/acknowledge``: no repeats from now on;
- ``POST .../incidents/{incidentId}/silence`` ``{"seconds": N}`` or ``{"until": "<RFC 3339>"}``: nothing sent until
  then (``POST .../unsilence`` ends it early).

404 for an unknown incident, 409 for a resolved one, 400 for a silence that is not 1 s to a year. Changes are
audited as every other (web/audit_trail.py: the incident's id is the target).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Blueprint, Response, g, jsonify, request

from relay.actors.services.incidents import STATES, Incidents, seconds_until
from relay.events.alerting import RULE_TYPES
from relay.events.incidents import MAX_SILENCE_SECS
from relay.web.api.openapi_schemas import COMPONENTS, INT32, INT64, NSTR, NTIME, STR, TIME, _all_required, _obj, _t
from relay.web.context import authorize, require_app, runtime
from relay.web.http_inputs import json_body, page_args
from relay.web.operations import operation, query
from relay.web.problems import bad_request
from relay.web.shapes.values import api_record

bp = Blueprint("incidents", __name__)

INCIDENTS = "/relay/v1/orgs/<org>/apps/<app>/incidents"
ONE = INCIDENTS + "/<incident_id>"
READ, WRITE = "application.read", "application.write"
_PATH = {"incident_id": "incidentId"}
_STATE = _t("string", enum=["open", "acknowledged", "silenced", "resolved"])
_OUTCOME = {"$ref": "#/components/schemas/RelayAlertWebhook"}

COMPONENTS.update({
    "RelayIncident": _all_required({
        "incidentId": STR, "ruleId": STR, "ruleType": _t("string", enum=list(RULE_TYPES)), "number": INT64,
        "state": _STATE, "message": STR, "metadata": _t("object", additionalProperties=STR), "receivingApp": STR,
        "instance": NSTR, "openedAt": TIME, "resolvedAt": NTIME, "durationSecs": INT64,
        "acknowledged": _t("boolean"), "acknowledgedAt": NTIME, "acknowledgedBy": NSTR,
        "silenced": _t("boolean"), "silencedUntil": NTIME, "silencedBy": NSTR,
        "renotified": INT32, "lastNotifiedAt": NTIME,
    }),
    "RelayIncidentNotification": _all_required({
        "kind": _t("string", enum=["open", "renotify", "resolve"]), "at": TIME,
        "deliveredTo": _t("array", items=STR),
        "failed": _t("array", items={"$ref": "#/components/schemas/RelayAlertFailure"}),
        "webhook": {"oneOf": [_OUTCOME, {"type": "null"}]},
        "sinks": _t("object", additionalProperties=_OUTCOME),
    }),
    "RelayIncidentList": _all_required({
        "incidents": _t("array", items={"$ref": "#/components/schemas/RelayIncident"}),
    }),
    "RelaySilenceBody": _obj({"seconds": INT64, "until": TIME}),
})
COMPONENTS["RelayIncidentDetail"] = {
    **COMPONENTS["RelayIncident"],
    "properties": {**COMPONENTS["RelayIncident"]["properties"],
                   "notifications": _t("array", items={"$ref": "#/components/schemas/RelayIncidentNotification"})},
    "required": [*COMPONENTS["RelayIncident"]["required"], "notifications"],
}

_COLUMNS = (
    "id", "rule_id", "rule_type", "number", "state", "message", "metadata", "receiving_app", "instance", "opened_at",
    "resolved_at", "duration_secs", "acknowledged", "acknowledged_at", "acknowledged_by", "silenced",
    "silenced_until", "silenced_by", "renotified", "last_notified_at",
)  # fmt: skip
_TIMES = ("opened_at", "resolved_at", "acknowledged_at", "silenced_until", "last_notified_at")


def incident_v1(row: dict[str, Any]) -> dict[str, Any]:
    out = api_record(row, _COLUMNS, times=_TIMES, names={"id": "incidentId"})
    if "notifications" in row:
        out["notifications"] = [api_record(n, ("kind", "at", "delivered_to", "failed", "webhook", "sinks"),
                                           times=("at",)) for n in row["notifications"]]
    return out


def _silence_seconds(body: dict[str, Any], now: datetime) -> int:
    """``seconds`` or ``until`` (one of them), as whole seconds from now: 400 unless 1 s to MAX_SILENCE_SECS."""
    if ("seconds" in body) == ("until" in body):
        raise bad_request("body", "give either seconds or until")
    if "seconds" in body:
        seconds = body["seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise bad_request("body.seconds", "must be an integer")
        where = "body.seconds"
    else:
        try:
            until = datetime.fromisoformat(str(body["until"]))
        except ValueError:
            raise bad_request("body.until", "must be an RFC 3339 time") from None
        if until.tzinfo is None:
            raise bad_request("body.until", "must name its time zone (Z for UTC)")
        seconds, where = seconds_until(until, now), "body.until"
    if not 1 <= seconds <= MAX_SILENCE_SECS:
        raise bad_request(where, f"a silence lasts between 1 and {MAX_SILENCE_SECS} seconds")
    return int(seconds)


def _targets(incident_id: str) -> None:
    g.audit_targets = [incident_id]


@bp.get(INCIDENTS)
@operation("listRelayIncidents", summary="The application's incidents, newest first, with state and duration",
           tag="Relay", returns="RelayIncidentList", query=(
               query("state", "string", description="open (not resolved), resolved or all (the default)"),
               query("limit", "integer", "int64"), query("offset", "integer", "int64")))
def list_incidents(org: str, app: str) -> Response:
    authorize(READ, org, app)
    require_app(org, app)
    state = request.args.get("state", "all")
    if state not in STATES:
        raise bad_request("query.state", f"must be one of {', '.join(STATES)}")
    rows = Incidents(runtime()).list(org, app, state, **page_args())
    return jsonify({"incidents": [incident_v1(r) for r in rows]})


@bp.get(ONE)
@operation("getRelayIncident", summary="One incident, with each notification and where it went", tag="Relay",
           returns="RelayIncidentDetail", path_names=_PATH)
def get_incident(org: str, app: str, incident_id: str) -> Response:
    authorize(READ, org, app)
    require_app(org, app)
    return jsonify(incident_v1(Incidents(runtime()).get(org, app, incident_id)))


@bp.post(ONE + "/acknowledge")
@operation("acknowledgeRelayIncident", summary="Acknowledge an open incident: it is not notified again",
           tag="Relay", returns="RelayIncident", path_names=_PATH)
def acknowledge_incident(org: str, app: str, incident_id: str) -> Response:
    who = authorize(WRITE, org, app)
    require_app(org, app)
    _targets(incident_id)
    return jsonify(incident_v1(Incidents(runtime()).acknowledge(org, app, incident_id, who.display)))


@bp.post(ONE + "/silence")
@operation("silenceRelayIncident", summary="Silence an open incident for a while: nothing is sent about it "
           "meanwhile", tag="Relay", returns="RelayIncident", body="RelaySilenceBody", body_required=True,
           path_names=_PATH)
def silence_incident(org: str, app: str, incident_id: str) -> Response:
    who = authorize(WRITE, org, app)
    require_app(org, app)
    _targets(incident_id)
    incidents = Incidents(runtime())
    seconds = _silence_seconds(json_body(required=True, allowed={"seconds", "until"}), incidents.now())
    return jsonify(incident_v1(incidents.silence(org, app, incident_id, seconds, who.display)))


@bp.post(ONE + "/unsilence")
@operation("unsilenceRelayIncident", summary="End an incident's silence", tag="Relay", returns="RelayIncident",
           path_names=_PATH)
def unsilence_incident(org: str, app: str, incident_id: str) -> Response:
    who = authorize(WRITE, org, app)
    require_app(org, app)
    _targets(incident_id)
    return jsonify(incident_v1(Incidents(runtime()).unsilence(org, app, incident_id, who.display)))
