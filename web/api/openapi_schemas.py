"""The JSON Schemas of what Relay's HTTP API accepts and returns, as named components of /openapi.json.

The Conductor v2 shapes say what web/shapes/wire_to_api.py, api_to_wire.py and web/api/views_to_api.py produce
and read; their names, fields,
types and formats are those of Conductor's reference document (tests/unit/test_openapi_conformance.py holds
them to it). Relay-only shapes follow. The request bodies are not written here: each is built from the one
declaration web/shapes/api_to_wire.py validates and translates it with (`body_schema`).
"""

from __future__ import annotations

from relay.web.shapes import api_to_wire as bodies
from relay.web.shapes import wire_to_api as records
from relay.web.shapes.json_schema import (
    ANY_OBJECT,
    BOOL,
    INT32,
    INT64,
    NSTR,
    NSTRS,
    NTIME,
    STR,
    STRS,
    TIME,
    Schema,
    array_of,
    body_schema,
    ref,
)
from relay.web.shapes.json_schema import all_required as _all_required
from relay.web.shapes.json_schema import null as _null
from relay.web.shapes.json_schema import obj as _obj
from relay.web.shapes.json_schema import t as _t

COMPONENTS: dict[str, Schema] = {
    # -- problems
    "ErrorDetail": _obj({"location": STR, "message": STR, "value": {}}),
    "ErrorModel": _obj({
        "type": _t("string", "uri", default="about:blank"), "title": STR, "status": INT64, "detail": STR,
        "instance": _t("string", "uri"), "errors": _t(["array", "null"], items=ref("ErrorDetail")),
    }),
    # -- served by executors
    "Workflow": records.WORKFLOW.schema(),
    "Step": records.STEP.schema(),
    "Event": records.EVENT.schema(),
    "Notification": records.NOTIFICATION.schema(),
    "StreamEntry": records.STREAM_ENTRY.schema(),
    "WorkflowAggregate": _obj({
        "group": _t("object", additionalProperties=NSTR), "count": INT64, "minCreatedAt": TIME,
        "maxQueueWaitMs": INT64, "maxTotalLatencyMs": INT64,
    }, ["group"]),
    "StepAggregate": _obj({
        "group": _t("object", additionalProperties=NSTR), "count": INT64, "maxDurationMs": INT64,
    }, ["group"]),
    "Queue": records.QUEUE.schema(),
    "Schedule": records.SCHEDULE.schema(),
    "ApplicationVersion": records.APPLICATION_VERSION.schema(),
    "Metric": _all_required({
        "appId": STR, "metricType": STR, "metricName": STR, "granularity": INT32, "timeBucket": TIME,
        "value": INT64,
    }),
    # -- request bodies
    "WorkflowSearchBody": body_schema(bodies.SEARCH_BODY),
    "WorkflowAggregatesBody": body_schema(bodies.WORKFLOW_AGGREGATES_BODY),
    "StepAggregatesBody": body_schema(bodies.STEP_AGGREGATES_BODY),
    "CancelWorkflowInputBody": body_schema(bodies.CANCEL_BODY),
    "ResumeWorkflowInputBody": body_schema(bodies.RESUME_BODY),
    "ForkWorkflowInputBody": body_schema(bodies.FORK_BODY),
    "ForkWorkflowOutputBody": _all_required({"workflowId": STR}),
    "ExportWorkflowOutputBody": _all_required({"serializedWorkflow": STR}),
    "ImportWorkflowInputBody": body_schema(bodies.IMPORT_BODY, ["serializedWorkflow"]),
    "BulkCancelInputBody": body_schema(bodies.BULK_CANCEL_BODY, ["workflowIds"]),
    "BulkResumeInputBody": body_schema(bodies.BULK_RESUME_BODY, ["workflowIds"]),
    "BulkDeleteInputBody": body_schema(bodies.BULK_DELETE_BODY, ["workflowIds"]),
    "BulkForkFromFailureBody": body_schema(bodies.BULK_FORK_BODY, ["workflowIds"]),
    "BulkForkFromFailureOutputBody": _all_required({"workflowIds": STRS}),
    "BackfillInputBody": body_schema(bodies.BACKFILL_BODY, ["startTime", "endTime"]),
    "BackfillOutputBody": _all_required({"workflowIds": STRS}),
    "TriggerOutputBody": _all_required({"workflowId": STR}),
    "PatchLatestVersionInputBody": body_schema(bodies.LATEST_VERSION_BODY, ["versionName"]),
    # -- autoscaling (web/api/autoscaling.py; the policy is checked by events/autoscaling.py)
    "QueueAutoscale": _obj({
        "applicationVersion": STR, "desiredExecutors": INT64, "isLatest": BOOL, "observedAt": INT64,
        "queueDepth": INT64, "queueName": STR,
    }, ["applicationVersion", "isLatest", "desiredExecutors", "queueDepth", "observedAt"]),
    "RolloutPolicy": _obj({
        "maxExecutorsForOldApplicationVersions": _t("integer", "int64", minimum=0),
        "maxOldApplicationVersions": _t("integer", "int64", minimum=0),
    }),
    "AutoscalePolicy": _obj({"queue": STR, "rollout": ref("RolloutPolicy")}, ["queue"]),
    "PolicyOutputBody": _obj({"policy": ref("AutoscalePolicy")}, ["policy"]),
    # -- served from Relay's store (web/api/views_to_api.py)
    # The reference's Organization (web/api/views_to_api.py organization() fills every field it requires).
    "Organization": _all_required({
        "id": STR, "name": STR, "createdAt": TIME,
        "subscriptionPlan": _t("string", enum=["free", "pro", "past_limit", "team"]),
        "maxDatabaseInstances": INT32, "maxApps": INT32, "maxVms": INT32, "defaultRdsInstanceClassType": STR,
        "maxTeamMembers": INT32, "maxConductorApps": INT32, "auditLogRetentionDays": INT32,
    }),
    "Application": _all_required({
        "id": STR, "name": STR, "orgId": STR, "status": _t("string", enum=["AVAILABLE", "UNAVAILABLE"]),
        "language": NSTR, "gcTimeThresholdMs": _null("integer", "int64"),
        "gcRowsThreshold": _null("integer", "int64"), "globalTimeoutMs": _null("integer", "int64"),
        "executorTimeoutSecs": INT64, "privateMode": BOOL, "dbosCloud": BOOL,
    }),
    "PutAppInputBody": _obj({"privateMode": BOOL}),
    "PatchAppInputBody": _obj({
        "executorTimeoutSecs": INT64, "gcRowsThreshold": INT64, "gcTimeThresholdMs": INT64,
        "globalTimeoutMs": INT64, "privateMode": BOOL,
    }),
    "Executor": _all_required({
        "executorId": STR, "appId": STR, "appVersion": STR,
        "status": _t("string", enum=["HEALTHY", "DISCONNECTED", "DEAD"]), "hostId": NSTR, "hostname": NSTR,
        "createdAt": TIME, "updatedAt": TIME, "language": NSTR, "dbosVersion": NSTR,
        "executorMetadata": _t(["object", "null"], additionalProperties={}),
    }),
    "Token": _all_required({"tokenName": STR, "createdAt": TIME, "permissions": STRS, "appIds": STRS}),
    "TokenCreated": _all_required({"token": STR, "tokenName": STR}),
    "CreateTokenInputBody": _obj({"appNames": _t(["array", "null"], items=STR, uniqueItems=True),
                                  "permissions": NSTRS}),
    "AuditSubject": _all_required({"type": _t("string", enum=["user", "api_key"]), "id": STR, "display": STR}),
    "AuditTarget": _all_required({"type": _t("string", enum=[
        "application", "token", "role", "user", "organization", "workflow", "schedule", "alerting_rule",
        "domain_claim",
    ]), "id": STR}),
    "AuditLogEntry": _obj({
        "id": STR, "emitTime": TIME, "operation": STR, "status": _t("string", enum=["success", "failure"]),
        "subject": ref("AuditSubject"), "target": ref("AuditTarget"), "sourceIp": STR,
        "details": _t(["object", "null"], additionalProperties={}),
    }, ["id", "emitTime", "operation", "status", "subject", "sourceIp", "details"]),
    # -- people, members, roles, join secrets, domain claims: served only with OAuth on (web/api/people.py,
    # web/api/org_access.py)
    "UpdateOrgInputBody": _obj({
        "auditLogRetentionDays": _t("integer", "int32", minimum=7, maximum=3650),
        "newName": _t("string", minLength=3, maxLength=30, pattern="^[a-z0-9_]+$"),
    }),
    "DomainClaim": _obj({
        "id": STR, "domain": STR, "status": _t("string", enum=["pending", "approved", "denied"]), "orgName": STR,
        "requestedBy": STR, "requestedAt": TIME, "decidedAt": TIME, "decidedBy": STR, "decisionNote": STR,
    }, ["id", "domain", "status", "orgName", "requestedBy", "requestedAt"]),
    "ListDomainClaimsOutputBody": _obj({"claims": array_of("DomainClaim")}, ["claims"]),
    "RequestDomainClaimInputBody": _obj({"domain": _t("string", minLength=4, maxLength=253)}, ["domain"]),
    "JoinOrgInputBody": _obj({"secret": STR}, ["secret"]),
    "GenerateSecretOutputBody": _obj({"secret": STR}, ["secret"]),
    "RoleOutput": _obj({"name": STR, "isGlobal": BOOL, "permissions": STRS}, ["name", "isGlobal", "permissions"]),
    "OrgMembers": _obj({"orgName": STR, "users": _t("object", additionalProperties=ref("RoleOutput"))},
                       ["orgName", "users"]),
    "Member": _all_required({
        "id": STR, "orgId": STR, "email": STR, "name": STR, "givenName": STR, "familyName": STR, "company": STR,
    }),
    "CreateRoleInputBody": _obj({
        "name": _t("string", minLength=3, maxLength=30, pattern="^[a-zA-Z0-9_]+$"), "permissions": NSTRS,
    }, ["name"]),
    "CreateRoleOutputBody": _obj({"name": STR, "permissions": STRS}, ["name", "permissions"]),
    "RegisterUserInputBody": _obj({
        "name": _t("string", minLength=3, maxLength=30, pattern="^[a-z0-9_]+$"), "secret": STR, "givenName": STR,
        "familyName": STR, "company": STR,
    }, ["name"]),
    "RegisterUserOutputBody": _obj({"id": STR}, ["id"]),
    "UserProfile": _obj({
        "name": STR, "email": STR, "orgName": STR, "orgId": STR,
        "subscriptionPlan": _t("string", enum=["free", "pro", "past_limit", "team"]), "createdAt": TIME,
        "role": ref("RoleOutput"), "isDbosAdmin": BOOL,
    }, ["name", "email", "orgName", "orgId", "subscriptionPlan", "createdAt"]),
    # -- Relay-only
    "Health": _all_required({"status": STR}),
    "Readiness": _all_required({"status": _t("string", enum=["ready", "not ready"]), "detail": STR}),
    "RelayEvent": _all_required({
        "position": INT64, "event": STR, "kind": STR, "at": NTIME, "recordedAt": NTIME, "org": NSTR,
        "app": NSTR, "subject": NSTR, "details": ANY_OBJECT,
    }),
    "RelayEventList": _all_required({"events": array_of("RelayEvent")}),
    "RelayRecovery": _all_required({
        "executorId": STR, "attempt": INT32, "peer": STR, "instance": NSTR, "dispatchedAt": NTIME,
        "outcome": _t("string", enum=["pending", "failed", "acknowledged"]), "reason": NSTR, "finishedAt": NTIME,
    }),
    "RelayRecoveryList": _all_required({"recoveries": array_of("RelayRecovery")}),
    "DataPlaneInput": _obj({
        "systemDatabaseUrlFrom": _t("string", pattern="^(env:[A-Za-z_][A-Za-z0-9_]*|file:/.+)$"),
        "mode": _t("string", enum=["read", "read-write"]), "statementTimeoutMs": INT32, "poolSize": INT32,
        "schema": STR,
    }, ["systemDatabaseUrlFrom"]),
    "DataPlaneState": _all_required({
        "status": _t("string", enum=["ready", "refused", "unreachable", "unresolved", "unavailable", "unchecked"]),
        "detail": STR, "schemaVersion": _null("integer", "int64"),
    }),
    "DataPlane": _all_required({
        "systemDatabaseUrlFrom": STR, "mode": _t("string", enum=["read", "read-write"]),
        "statementTimeoutMs": INT32, "poolSize": INT32, "schema": STR, "state": ref("DataPlaneState"),
    }),
    "RawRequestBody": _obj({"type": STR}, ["type"], closed=False),
    "RawResponse": _obj({"type": STR, "request_id": STR, "error_message": NSTR},
                        ["type", "request_id", "error_message"], closed=False),
    "OpenAPIDocument": _obj({"openapi": STR, "info": ANY_OBJECT, "paths": ANY_OBJECT}, ["openapi", "paths"],
                            closed=False),
}
