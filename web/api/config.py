"""Relay-only: declarative configuration of an organization (`relay diff|apply -f relay.yaml`; README,
"Declarative configuration"; the document and the plan are actors/policies/config.py's).

- ``POST /relay/v1/orgs/{org}/config/plan`` ``{"config": {...}, "prune": false}``: the changes that would bring the
  organization to the document, and the ``basis`` they were computed on. Reads only: not audited, records nothing.
- ``POST /relay/v1/orgs/{org}/config/apply`` ``{"config", "prune", "replaceKeys", "basis"}``: the same plan, made
  again from the views and refused (409) when ``basis`` is given and the organization moved since; then recorded
  by the instance actor in one save (all of it or nothing). The keys it issues are in the answer, once.

The plan reads the views (web/ reads, never writes); the instance actor records the events (actors/instance.py).
"""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify

from relay.actors.policies.config import ConfigInvalidError
from relay.actors.policies.config_plan import Plan
from relay.actors.services.configuration import Configurations
from relay.projections.identity import Principal
from relay.web.api.openapi_schemas import COMPONENTS, STR, _all_required, _obj, _t
from relay.web.auth import require
from relay.web.context import authorize, runtime
from relay.web.http_inputs import json_body
from relay.web.operations import operation
from relay.web.problems import ApiError, invalid
from relay.wire.json_types import JSONObject

bp = Blueprint("relay_config", __name__)

PATH = "/relay/v1/orgs/<org>/config"
_BOOL = _t("boolean")
_CHANGE = _all_required({
    "op": _t("string", enum=["+", "~", "-"]), "kind": _t("string", enum=["app", "settings", "dataPlane",
                                                                          "alertRule", "key"]),
    "app": _t(["string", "null"]), "name": STR, "ruleId": _t(["string", "null"]), "text": STR,
})
COMPONENTS.update({
    "RelayConfigRequest": _obj({"config": _t("object", additionalProperties={}), "prune": _BOOL,
                                "replaceKeys": _BOOL, "basis": STR}, ["config"]),
    "RelayConfigChange": _CHANGE,
    "RelayConfigPlan": _all_required({
        "changes": _t("array", items={"$ref": "#/components/schemas/RelayConfigChange"}), "basis": STR,
        "keyReplacements": _t("array", items=STR), "prune": _BOOL,
    }),
    "RelayConfigApplied": _all_required({
        "changes": _t("array", items={"$ref": "#/components/schemas/RelayConfigChange"}),
        "keys": _t("array", items={"$ref": "#/components/schemas/TokenCreated"}),
    }),
})


def _authorize(org: str, *, write: bool) -> Principal:
    """The admin, or a key of the organization not limited to some applications, with the right to read (plan)
    or write (apply) both its applications and its keys."""
    apps, keys = ("application.write", "token.write") if write else ("application.read", "token.read")
    who = authorize(apps, org)
    require(who, keys, org)
    if not who.admin and who.apps:
        raise ApiError(403, "a key limited to some applications cannot manage the organization's configuration")
    return who


def _flag(body: JSONObject, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise invalid(f"body.{name}", "must be a boolean", value)
    return value


def _plan(org: str, body: JSONObject) -> tuple[Plan, bool]:
    if "config" not in body:
        raise invalid("body.config", "is required")
    prune = _flag(body, "prune")
    try:
        return Configurations(runtime()).plan(org, body["config"], prune=prune)
    except ConfigInvalidError as error:
        raise ApiError(422, str(error), title="Unprocessable Entity", errors=[
            {"location": f"body.config.{path}", "message": message} for path, message in error.errors
        ]) from None


@bp.post(PATH + "/plan")
@operation("planConfig", summary="The changes a configuration document would make to the organization (nothing is "
           "changed)", tag="Relay", body="RelayConfigRequest", body_required=True, returns="RelayConfigPlan")
def plan_config(org: str) -> Response:
    _authorize(org, write=False)
    made, prune = _plan(org, json_body(required=True, allowed={"config", "prune"}))
    return jsonify({"changes": [c.to_json() for c in made.changes], "basis": made.basis,
                    "keyReplacements": made.key_replacements, "prune": prune})


@bp.post(PATH + "/apply")
@operation("applyConfig", summary="Bring the organization to a configuration document: every change or none",
           tag="Relay", body="RelayConfigRequest", body_required=True, returns="RelayConfigApplied")
def apply_config(org: str) -> Response:
    who = _authorize(org, write=True)
    body = json_body(required=True, allowed={"config", "prune", "replaceKeys", "basis"})
    replace_keys = _flag(body, "replaceKeys")
    basis = body.get("basis")
    if basis is not None and not isinstance(basis, str):
        raise invalid("body.basis", "must be the basis of a plan (a string)", basis)
    made, _ = _plan(org, body)
    configurations = Configurations(runtime())
    configurations.check(made, basis=basis, replace_keys=replace_keys, who=who)
    if not made.changes:
        g.audit_nothing_done = True  # idempotent: applying what is already there records nothing at all
    else:
        g.audit_targets = [c.target for c in made.changes]
    applied = configurations.apply(org, made, who)
    return jsonify({"changes": [c.to_json() for c in applied.changes],
                    "keys": [{"tokenName": name, "token": key} for name, key in applied.secrets.items()]})
