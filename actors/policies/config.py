"""Declarative configuration (`relay apply|diff -f relay.yaml`): the document, checked with paths, and the
decisions that shape its plan.

A document (``apiVersion: relay/v1``, ``kind: Config``) states applications with their settings, data plane and
alerting rules, and API keys by name and scope (never their secrets). `parse_config` checks it whole and names
every bad item by its path (``apps[1].settings.gcRowsThreshold: must be an integer >= 1``).
actors/policies/config_plan.py compares it with the organization as it stands and lists the changes;
actors/services/configuration.py runs them.

Decisions (README, "Declarative configuration"):
- Nothing is removed or reset unless pruning is asked for (``prune: true`` in the file or ``--prune``): then apps,
  keys, rules and data planes absent from the file are removed, and settings absent from an app are reset to
  their defaults.
- Alerting rules have server-made ids and no name: they are matched by content (type, metadata with its defaults,
  receiving app, minimum interval). A rule is never changed in place: an edited rule is a new one (+), and the
  old one is deleted (-) only when pruning.
- API keys cannot change (Relay records an issue and a revoke, never an edit): a key whose scope differs is shown
  as ~ and replaced (revoked and issued again, with a new secret) only when the caller asks for it
  (``--replace-keys``); otherwise applying refuses the whole plan.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from relay.events.alerting import check_min_interval, check_rule_metadata
from relay.events.application import DEFAULT_SETTINGS, MAX_EXECUTOR_TIMEOUT_SECS
from relay.events.data_plane import check_data_plane
from relay.events.errors import InvalidValueError
from relay.events.names import APP_NAME, ORG_NAME, TOKEN_NAME
from relay.events.organization import DEFAULT_KEY_PERMISSIONS, PERMISSIONS
from relay.wire.json_types import JSONObject

API_VERSION = "relay/v1"
KIND = "Config"
_TOP = ("apiVersion", "kind", "org", "prune", "apps", "keys")
_APP = ("name", "settings", "dataPlane", "alertRules")
_RULE = ("type", "metadata", "receivingApp", "minIntervalSecs")
_KEY = ("name", "apps", "permissions")
_CLEARABLE = ("gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs")
INT64_MAX = 2**63 - 1
# "ruleMetadata.threshold must be ..." (events/alerting.py): the key after the prefix becomes part of the path.
_METADATA_ERROR = re.compile(r"ruleMetadata\.(\w+) (.*)")


class ConfigInvalidError(InvalidValueError):
    """A document (or its plan) refused; ``errors`` lists (path, message), every one found."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {message}" for path, message in errors))
        self.errors = errors


@dataclass(frozen=True)
class RuleSpec:
    """An alerting rule as the file states it: its metadata canonical (defaults filled in), ``receiving_app``
    None for the rule's own application."""

    rule_type: str
    metadata: JSONObject
    receiving_app: str | None
    min_interval_secs: int | None

    def identity(self, app: str) -> str:
        """What two rules of ``app`` are compared by (the receiving app resolved)."""
        return json.dumps([self.rule_type, self.metadata, self.receiving_app or app, self.min_interval_secs],
                          sort_keys=True)

    def describe(self, app: str) -> str:
        parts = [self.rule_type]
        given = {k: v for k, v in sorted(self.metadata.items()) if v is not None}  # the views keep no order
        if given:
            parts.append(" ".join(f"{k}={v}" for k, v in given.items()))
        if (self.receiving_app or app) != app:
            parts.append(f"receivingApp={self.receiving_app}")
        if self.min_interval_secs is not None:
            parts.append(f"minIntervalSecs={self.min_interval_secs}")
        return ", ".join(parts)

    def to_json(self) -> JSONObject:
        return {"type": self.rule_type, "metadata": self.metadata, "receivingApp": self.receiving_app,
                "minIntervalSecs": self.min_interval_secs}


@dataclass(frozen=True)
class AppSpec:
    name: str
    settings: JSONObject  # only the settings the file gives
    data_plane: JSONObject | None = None  # with its defaults; None: none (when data_plane_given)
    data_plane_given: bool = False
    rules: tuple[RuleSpec, ...] = ()


@dataclass(frozen=True)
class KeySpec:
    name: str
    apps: tuple[str, ...]  # sorted; () is every application of the organization
    permissions: tuple[str, ...]  # sorted

    def describe(self) -> str:
        return f"apps={','.join(self.apps) or '*'} permissions={','.join(self.permissions)}"


@dataclass(frozen=True)
class Config:
    org: str | None
    prune: bool
    apps: tuple[AppSpec, ...]
    keys: tuple[KeySpec, ...]


# -- the document -----------------------------------------------------------------------------------------------
class Checker:
    """Collects (path, message) errors, so that a document is refused with every bad item at once."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def fields(self, value: object, path: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> bool:
        """An object with only ``known`` keys and every ``required`` one; False (errors noted) otherwise."""
        if not isinstance(value, dict):
            self.error(path or "(document)", "must be an object")
            return False
        prefix = f"{path}." if path else ""
        for key in value:
            if key not in known:
                self.error(f"{prefix}{key}", f"unknown key (known: {', '.join(known)})")
        for key in required:
            if key not in value:
                self.error(f"{prefix}{key}", "is required")
        return True

    def named(self, value: Any, path: str, known: tuple[str, ...], pattern: re.Pattern[str], rule: str) -> bool:
        """An object of ``known`` keys whose ``name`` matches ``pattern`` (else ``<path>.name`` must be ``rule``);
        False when it is not an object at all."""
        if not self.fields(value, path, known, ("name",)):
            return False
        name = value.get("name")
        if not isinstance(name, str) or not pattern.fullmatch(name):
            self.error(f"{path}.name", rule)
        return True

    def items(self, value: object, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, "must be a list")
            return []
        return value


def parse_config(document: Any) -> Config:
    """The document, checked; ConfigInvalidError listing every bad item by its path otherwise."""
    check = Checker()
    if not check.fields(document, "", _TOP, ("apiVersion", "kind")):
        raise ConfigInvalidError(check.errors)
    if "apiVersion" in document and document["apiVersion"] != API_VERSION:
        check.error("apiVersion", f"must be {API_VERSION}")
    if "kind" in document and document["kind"] != KIND:
        check.error("kind", f"must be {KIND}")
    org = document.get("org")
    if org is not None and (not isinstance(org, str) or not ORG_NAME.fullmatch(org)):
        check.error("org", "must be 3-30 characters of [a-z0-9_]")
    prune = document.get("prune", False)
    if not isinstance(prune, bool):
        check.error("prune", "must be true or false")
    apps = [_app(check, raw, f"apps[{i}]") for i, raw in enumerate(check.items(document.get("apps"), "apps"))]
    keys = [_key(check, raw, f"keys[{i}]") for i, raw in enumerate(check.items(document.get("keys"), "keys"))]
    _unique(check, [a.name if a else None for a in apps], "apps", "application")
    _unique(check, [k.name if k else None for k in keys], "keys", "key")
    if check.errors:
        raise ConfigInvalidError(check.errors)
    return Config(org=org, prune=prune is True, apps=tuple(a for a in apps if a), keys=tuple(k for k in keys if k))


def _unique(check: Checker, names: list[str | None], path: str, what: str) -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name is not None and name in seen:
            check.error(f"{path}[{index}].name", f"{what} '{name}' is listed twice")
        if name is not None:
            seen.add(name)


def _app(check: Checker, raw: Any, path: str) -> AppSpec | None:
    before = len(check.errors)
    if not check.named(raw, path, _APP, APP_NAME, "must be 3-30 characters of [a-z0-9-_]"):
        return None
    name = raw.get("name")
    settings = _settings(check, raw.get("settings"), f"{path}.settings")
    data_plane = None
    if raw.get("dataPlane") is not None:
        data_plane = _data_plane(check, raw["dataPlane"], f"{path}.dataPlane")
    rules: list[RuleSpec] = []
    for index, rule in enumerate(check.items(raw.get("alertRules"), f"{path}.alertRules")):
        parsed = _rule(check, rule, f"{path}.alertRules[{index}]")
        if parsed is not None:
            rules.append(parsed)
    if len(check.errors) > before:
        return None
    seen: dict[str, int] = {}
    for index, rule in enumerate(rules):
        identity = rule.identity(name)
        if identity in seen:
            check.error(f"{path}.alertRules[{index}]", f"the same rule as alertRules[{seen[identity]}]")
        seen.setdefault(identity, index)
    return AppSpec(name=name, settings=settings, data_plane=data_plane, data_plane_given="dataPlane" in raw,
                   rules=tuple(rules))


def _settings(check: Checker, raw: Any, path: str) -> JSONObject:
    if raw is None:
        return {}
    if not check.fields(raw, path, tuple(DEFAULT_SETTINGS)):
        return {}
    out: JSONObject = {}
    for key, value in raw.items():
        if key not in DEFAULT_SETTINGS:
            continue
        if key == "privateMode":
            if not isinstance(value, bool):
                check.error(f"{path}.{key}", "must be true or false")
                continue
        elif value is None:
            if key not in _CLEARABLE:
                check.error(f"{path}.{key}", "must be an integer >= 1 (it cannot be cleared)")
                continue
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT64_MAX:
            what = " or null (no limit)" if key in _CLEARABLE else ""
            check.error(f"{path}.{key}", f"must be an integer >= 1{what}")
            continue
        elif key == "executorTimeoutSecs" and value > MAX_EXECUTOR_TIMEOUT_SECS:
            check.error(f"{path}.{key}", f"must be at most {MAX_EXECUTOR_TIMEOUT_SECS} (a day)")
            continue
        out[key] = value
    return out


def _data_plane(check: Checker, raw: Any, path: str) -> JSONObject | None:
    if not isinstance(raw, dict):
        check.error(path, "must be an object (or null: no data plane)")
        return None
    try:
        return check_data_plane(raw)
    except InvalidValueError as error:
        field_name = next((f for f in raw if isinstance(f, str) and f in str(error)), None)
        check.error(f"{path}.{field_name}" if field_name else path, str(error))
        return None


def _rule(check: Checker, raw: Any, path: str) -> RuleSpec | None:
    if not check.fields(raw, path, _RULE, ("type",)):
        return None
    rule_type = raw.get("type")
    if not isinstance(rule_type, str):
        check.error(f"{path}.type", "must be a rule type")
        return None
    try:
        metadata = check_rule_metadata(rule_type, raw.get("metadata"))
    except InvalidValueError as error:
        message = str(error)
        found = _METADATA_ERROR.fullmatch(message)
        if found:
            check.error(f"{path}.metadata.{found.group(1)}", found.group(2))
        elif message.startswith("ruleType"):
            check.error(f"{path}.type", message.removeprefix("ruleType "))
        else:
            check.error(f"{path}.metadata", message.removeprefix("ruleMetadata "))
        return None
    receiver = raw.get("receivingApp")
    if receiver is not None and (not isinstance(receiver, str) or not APP_NAME.fullmatch(receiver)):
        check.error(f"{path}.receivingApp", "must be an application name (3-30 characters of [a-z0-9-_])")
        return None
    try:
        interval = check_min_interval(raw.get("minIntervalSecs"))
    except InvalidValueError:
        check.error(f"{path}.minIntervalSecs", "must be an integer >= 0")
        return None
    return RuleSpec(rule_type, metadata, receiver, interval)


def _key(check: Checker, raw: Any, path: str) -> KeySpec | None:
    before = len(check.errors)
    if not check.named(raw, path, _KEY, TOKEN_NAME, "must be 1-64 characters of [A-Za-z0-9_.-]"):
        return None
    name = raw.get("name")
    apps = check.items(raw.get("apps"), f"{path}.apps")
    for index, app in enumerate(apps):
        if not isinstance(app, str) or not APP_NAME.fullmatch(app):
            check.error(f"{path}.apps[{index}]", "must be an application name (3-30 characters of [a-z0-9-_])")
    permissions = raw.get("permissions")
    if permissions is None:
        permissions = list(DEFAULT_KEY_PERMISSIONS)
    for index, permission in enumerate(check.items(permissions, f"{path}.permissions")):
        if permission not in PERMISSIONS:
            check.error(f"{path}.permissions[{index}]", f"unknown permission (known: {', '.join(PERMISSIONS)})")
    if isinstance(permissions, list) and not permissions:
        check.error(f"{path}.permissions", "must name at least one permission (or be left out: the defaults)")
    if len(check.errors) > before:
        return None
    return KeySpec(name=name, apps=tuple(sorted(set(apps))), permissions=tuple(sorted(set(permissions))))
