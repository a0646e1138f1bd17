"""Alerting rules (Conductor API v2) and what they fired (Relay-only), served from Relay's own store.

- ``GET|POST /v2/orgs/{org}/apps/{app}/alerting-rules``, ``DELETE .../alerting-rules/{ruleId}``: the
  reference's ``AlertingRule`` and ``CreateAlertInputBody``. ``ruleMetadata`` per type (camelCase, or the
  snake_case the alert metadata uses): WorkflowFailure ``workflowName`` (default every workflow),
  ``threshold`` (1), ``periodSecs`` (60); SlowQueue ``queueName`` (every queue), ``thresholdSecs`` (60);
  UnresponsiveApplication none (``receivingAppName`` must then name another application). Relay's own types
  (an extension of the reference's enum): RecoveryFlapping ``threshold`` (3), ``periodSecs`` (600);
  StrandedVersion ``minPending`` (1), ``thresholdSecs`` (60). Every body goes through
  actors/services/alerting_rules.py (the console's form too) and events/alerting.py `check_rule_metadata` (in
  `AlertingRule.create`), so whatever creates rules gets the same checks and the same 422s.
- ``GET /relay/v1/orgs/{org}/apps/{app}/alerts``: alerts fired, newest first, and where each went.
- ``GET /relay/v1/orgs/{org}/apps/{app}/retention-runs``: managed retention runs and their outcomes.

The runtime (actors/runtime.py) gives the actors their alerting configuration and starts the actors of the
applications that have rules or retention settings, so they are watched from the start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Response, jsonify

from relay.actors.services.alerting_rules import AlertingRules
from relay.events.alerting import RULE_TYPES
from relay.events.ids import app_id
from relay.web.api.openapi_schemas import COMPONENTS, INT32, INT64, NSTR, NTIME, STR, TIME, _all_required, _obj, _t
from relay.web.context import authorize, require_app, runtime
from relay.web.http_inputs import json_body, page_args
from relay.web.operations import operation, query
from relay.web.shapes.values import api_record, page_description, view_time

bp = Blueprint("alerting", __name__)

APP = "/v2/orgs/<org>/apps/<app>"
RELAY_APP = "/relay/v1/orgs/<org>/apps/<app>"
READ, WRITE = "application.read", "application.write"
_RULE_TYPE = _t("string", enum=list(RULE_TYPES))
# renotifyIntervalSecs: Relay's extension (issue 32), accepted but kept out of the reference's body schema.
_FIELDS = {"ruleType", "ruleMetadata", "minIntervalSecs", "receivingAppName", "renotifyIntervalSecs"}
_PAGE = (query("limit", "integer", "int64", description=page_description(100, 1000)),
         query("offset", "integer", "int64"))

# The shapes of these routes, as components of /openapi.json (the v2 ones are the reference's).
COMPONENTS.update({
    "AlertingRule": _all_required({
        "id": STR, "appId": STR, "receivingAppId": STR, "ruleType": _RULE_TYPE, "ruleMetadata": {},
        "minIntervalSecs": _t(["integer", "null"], "int32"), "lastFiredAt": NTIME,
    }),
    "CreateAlertInputBody": _obj({
        "ruleType": _RULE_TYPE, "ruleMetadata": {}, "minIntervalSecs": INT32, "receivingAppName": STR,
    }, ["ruleType", "ruleMetadata"]),
    "RelayAlertFailure": _all_required({"executorId": STR, "reason": STR}),
    "RelayAlertWebhook": _all_required({
        "outcome": _t("string", enum=["delivered", "failed"]), "attempts": INT32,
        "status": _t(["integer", "null"], "int32"), "error": NSTR,
    }),
    "RelayAlert": _all_required({
        "alertId": STR, "ruleId": STR, "ruleType": _RULE_TYPE, "sequence": INT64, "message": STR,
        "metadata": _t("object", additionalProperties=STR), "receivingApp": STR, "instance": NSTR,
        "firedAt": TIME, "deliveredAt": NTIME, "deliveredTo": _t(["array", "null"], items=STR),
        "failed": _t(["array", "null"], items={"$ref": "#/components/schemas/RelayAlertFailure"}),
        "webhook": {"oneOf": [{"$ref": "#/components/schemas/RelayAlertWebhook"}, {"type": "null"}]},
        # Each other sink's outcome (`slack`, `pagerduty`), the webhook's shape: never a URL or a key.
        "sinks": _t("object", additionalProperties={"$ref": "#/components/schemas/RelayAlertWebhook"}),
    }),
    "RelayAlertList": _all_required({"alerts": _t("array", items={"$ref": "#/components/schemas/RelayAlert"})}),
    "RelayRetentionRun": _all_required({
        "slot": INT64, "executorId": STR, "instance": NSTR, "startedAt": TIME, "outcome": NSTR, "reason": NSTR,
        "finishedAt": NTIME, "policy": _t("object", additionalProperties=_t(["integer", "null"], "int64")),
        "settings": _t("object", additionalProperties=_t(["integer", "null"], "int64")),
    }),
    "RelayRetentionRunList": _all_required({
        "runs": _t("array", items={"$ref": "#/components/schemas/RelayRetentionRun"}),
    }),
})


# -- translation: the view's rows as the API's shapes


def rule_v2(org: str, row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["rule_id"],
        "appId": str(app_id(org, row["app"])),
        "receivingAppId": str(app_id(org, row["receiving_app"])),
        "ruleType": row["rule_type"],
        "ruleMetadata": row["metadata"],
        "minIntervalSecs": row["min_interval_secs"],
        "lastFiredAt": view_time(row["last_fired_at"]),
    }


_ALERT_COLUMNS = (
    "id", "rule_id", "rule_type", "sequence", "message", "metadata", "receiving_app", "instance", "fired_at",
    "delivered_at", "delivered_to", "failed", "webhook", "sinks",
)  # fmt: skip


def alert_v1(row: Mapping[str, object]) -> dict[str, object]:
    return api_record(row, _ALERT_COLUMNS, times=("fired_at", "delivered_at"), names={"id": "alertId"})


_RETENTION_RUN_COLUMNS = (
    "slot", "executor", "instance", "started_at", "outcome", "reason", "finished_at", "policy", "settings",
)


def retention_run_v1(row: Mapping[str, object]) -> dict[str, object]:
    return api_record(row, _RETENTION_RUN_COLUMNS, times=("started_at", "finished_at"),
                      names={"executor": "executorId"})


def _create_body(org: str, app: str) -> dict[str, object]:
    return AlertingRules(runtime()).check_body(org, json_body(required=True, allowed=_FIELDS))


# -- Conductor v2


@bp.get(APP + "/alerting-rules")
@operation("listAlertingRules", summary="List alerting rules", tag="Alerting", returns="AlertingRule[]")
def list_rules(org: str, app: str) -> Response:
    authorize(READ, org, app)
    require_app(org, app)
    return jsonify([rule_v2(org, r) for r in runtime().views.alerting.rules(org, app)])


@bp.post(APP + "/alerting-rules")
@operation("createAlertingRule", summary="Create alerting rule", tag="Alerting", status=201,
           returns="AlertingRule", body="CreateAlertInputBody", body_required=True)
def create_rule(org: str, app: str) -> Response:
    who = authorize(WRITE, org, app)
    require_app(org, app)
    response = jsonify(rule_v2(org, AlertingRules(runtime()).create(org, app, _create_body(org, app), who)))
    response.status_code = 201
    return response


@bp.delete(APP + "/alerting-rules/<rule_id>")
@operation("deleteAlertingRule", summary="Delete alerting rule", tag="Alerting", status=204,
           path_names={"rule_id": "ruleId"})
def delete_rule(org: str, app: str, rule_id: str) -> Response:
    who = authorize(WRITE, org, app)
    require_app(org, app)
    AlertingRules(runtime()).delete(org, app, rule_id, who.display)
    return Response(status=204)


# -- Relay-only


@bp.get(RELAY_APP + "/alerts")
@operation("listRelayAlerts", summary="Alerts fired by the application's rules, newest first, and where each "
           "went", tag="Relay", returns="RelayAlertList", query=_PAGE)
def list_alerts(org: str, app: str) -> Response:
    authorize(READ, org, app)
    require_app(org, app)
    rows = runtime().views.alerting.alerts(org, app, **page_args())
    return jsonify({"alerts": [alert_v1(r) for r in rows]})


@bp.get(RELAY_APP + "/retention-runs")
@operation("listRelayRetentionRuns", summary="Managed retention runs of the application, newest first",
           tag="Relay", returns="RelayRetentionRunList", query=_PAGE)
def list_retention_runs(org: str, app: str) -> Response:
    authorize(READ, org, app)
    require_app(org, app)
    rows = runtime().views.operations.retention_runs(org, app, **page_args())
    return jsonify({"runs": [retention_run_v1(r) for r in rows]})
