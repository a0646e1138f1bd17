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

from relay.actors.policies.config import Config, ConfigInvalidError, KeySpec, parse_config
from relay.actors.policies.config_plan import DATA_PLANE, KEY, AppState, Plan, State, plan, rule_from_row
from relay.events.application import DEFAULT_SETTINGS
from relay.events.errors import InvalidValueError
from relay.projections.identity import Principal, hash_key, new_api_key
from relay.web.api.openapi import operation
from relay.web.api.openapi_schemas import COMPONENTS, STR, _all_required, _obj, _t
from relay.web.api.requests_ import json_body
from relay.web.auth import require
from relay.web.context import ask, authorize, check_bound_reference, runtime
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


def current_state(org: str) -> State:
    """The organization as the views show it: live applications (settings, data plane, rules), active keys, and the
    rules of deleted applications (which come back with them)."""
    views = runtime().views
    apps = {}
    for row in views.applications.apps(org):
        settings = {key: row["settings"].get(key, default) for key, default in DEFAULT_SETTINGS.items()}
        rules = tuple((r["rule_id"], rule_from_row(r)) for r in views.alerting.rules(org, row["name"]))
        apps[row["name"]] = AppState(settings, row["settings"].get("dataPlane"), rules)
    keys = {r["name"]: KeySpec(r["name"], tuple(r["apps"]), tuple(r["permissions"]))
            for r in views.applications.keys(org) if r["revoked_at"] is None}
    dormant = {app: tuple((r["rule_id"], rule_from_row(r)) for r in views.alerting.rules(org, app))
               for ruled_org, app in sorted(views.alerting.ruled_apps()) if ruled_org == org and app not in apps}
    return State(apps, keys, dormant)


def _check_data_plane_references(config: Config, made: Plan, org: str) -> None:
    """The data planes the plan sets follow PUT .../data-plane's rules: only references the operator bound to
    each application, never a file Relay does not read; refused before anything is recorded."""
    index = {spec.name: position for position, spec in enumerate(config.apps)}
    errors = []
    for change in made.changes:
        if change.kind != DATA_PLANE or change.after is None:
            continue
        try:
            check_bound_reference(change.after, org, change.name)
        except InvalidValueError as error:
            errors.append((f"apps[{index.get(change.name, 0)}].dataPlane.systemDatabaseUrlFrom", str(error)))
    if errors:
        raise ConfigInvalidError(errors)


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
        config = parse_config(body["config"])
        if config.org is not None and config.org != org:
            raise ConfigInvalidError([("org", f"is '{config.org}', not this request's organization '{org}'")])
        made = plan(config, current_state(org), org=org, prune=prune)
        _check_data_plane_references(config, made, org)
    except ConfigInvalidError as error:
        raise ApiError(422, str(error), title="Unprocessable Entity", errors=[
            {"location": f"body.config.{path}", "message": message} for path, message in error.errors
        ]) from None
    return made, prune or config.prune


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
    if basis is not None and basis != made.basis:
        raise ApiError(409, "the organization changed since the plan was made: nothing was applied; plan again")
    if made.key_replacements and not replace_keys:
        raise ApiError(409, "API keys cannot change, and the file changes the scope of "
                            f"{', '.join(made.key_replacements)}: nothing was applied. Replacing such keys (revoked, "
                            "then issued again with new secrets; executors using the old ones are disconnected) "
                            "needs replaceKeys (relay apply --replace-keys)")
    issued = [c for c in made.changes if c.kind == KEY and c.op != "-"]
    if not who.admin:
        beyond = sorted({p for c in issued for p in c.after.permissions} - who.permissions)
        if beyond:
            raise ApiError(403, f"a token cannot grant more than its own permissions ({', '.join(beyond)})")
    if not made.changes:
        g.audit_nothing_done = True  # idempotent: applying what is already there records nothing at all
        return jsonify({"changes": [], "keys": []})
    secrets = {c.name: new_api_key() for c in issued}
    g.audit_targets = [c.target for c in made.changes]
    instance = runtime().instance
    assert instance is not None
    ask(lambda: instance.proxy().apply_config(org, made.changes, {n: hash_key(k) for n, k in secrets.items()},
                                              who.display))
    return jsonify({"changes": [c.to_json() for c in made.changes],
                    "keys": [{"tokenName": name, "token": key} for name, key in secrets.items()]})
