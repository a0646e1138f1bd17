"""Declarative configuration (`relay apply|diff -f relay.yaml`): the document, checked, and the plan that brings an
organization to it.

A document (``apiVersion: relay/v1``, ``kind: Config``) states applications with their settings, data plane and
alerting rules, and API keys by name and scope (never their secrets). `parse_config` checks it whole and names
every bad item by its path (``apps[1].settings.gcRowsThreshold: must be an integer >= 1``). `plan` compares it
with the organization as it stands (`State`, read from the views) and lists the changes (`Change`: + / ~ / -).

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

Pure: no I/O, no clock (validation builds a rule aggregate with a fixed time, and throws it away).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from relay.events.alerting import AlertingRule, check_min_interval, check_rule_metadata
from relay.events.application import DEFAULT_SETTINGS
from relay.events.data_plane import check_data_plane
from relay.events.errors import InvalidValueError
from relay.events.names import APP_NAME, ORG_NAME, TOKEN_NAME
from relay.events.organization import DEFAULT_KEY_PERMISSIONS, PERMISSIONS

API_VERSION = "relay/v1"
KIND = "Config"
_TOP = ("apiVersion", "kind", "org", "prune", "apps", "keys")
_APP = ("name", "settings", "dataPlane", "alertRules")
_RULE = ("type", "metadata", "receivingApp", "minIntervalSecs")
_KEY = ("name", "apps", "permissions")
_CLEARABLE = ("gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs")
INT64_MAX = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
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
    metadata: dict[str, Any]
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

    def to_json(self) -> dict[str, Any]:
        return {"type": self.rule_type, "metadata": self.metadata, "receivingApp": self.receiving_app,
                "minIntervalSecs": self.min_interval_secs}


@dataclass(frozen=True)
class AppSpec:
    name: str
    settings: dict[str, Any]  # only the settings the file gives
    data_plane: dict[str, Any] | None = None  # with its defaults; None: none (when data_plane_given)
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
class _Checker:
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def fields(self, value: Any, path: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> bool:
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

    def items(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, "must be a list")
            return []
        return value


def parse_config(document: Any) -> Config:
    """The document, checked; ConfigInvalidError listing every bad item by its path otherwise."""
    check = _Checker()
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


def _unique(check: _Checker, names: list[str | None], path: str, what: str) -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name is not None and name in seen:
            check.error(f"{path}[{index}].name", f"{what} '{name}' is listed twice")
        if name is not None:
            seen.add(name)


def _app(check: _Checker, raw: Any, path: str) -> AppSpec | None:
    before = len(check.errors)
    if not check.fields(raw, path, _APP, ("name",)):
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not APP_NAME.fullmatch(name):
        check.error(f"{path}.name", "must be 3-30 characters of [a-z0-9-_]")
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


def _settings(check: _Checker, raw: Any, path: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not check.fields(raw, path, tuple(DEFAULT_SETTINGS)):
        return {}
    out: dict[str, Any] = {}
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
        out[key] = value
    return out


def _data_plane(check: _Checker, raw: Any, path: str) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        check.error(path, "must be an object (or null: no data plane)")
        return None
    try:
        return check_data_plane(raw)
    except InvalidValueError as error:
        field_name = next((f for f in raw if isinstance(f, str) and f in str(error)), None)
        check.error(f"{path}.{field_name}" if field_name else path, str(error))
        return None


def _rule(check: _Checker, raw: Any, path: str) -> RuleSpec | None:
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


def _key(check: _Checker, raw: Any, path: str) -> KeySpec | None:
    before = len(check.errors)
    if not check.fields(raw, path, _KEY, ("name",)):
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name):
        check.error(f"{path}.name", "must be 1-64 characters of [A-Za-z0-9_.-]")
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


# -- the organization as it stands --------------------------------------------------------------------------------
@dataclass(frozen=True)
class AppState:
    settings: dict[str, Any]  # Conductor's settings (DEFAULT_SETTINGS' keys)
    data_plane: dict[str, Any] | None = None
    rules: tuple[tuple[str, RuleSpec], ...] = ()  # (rule id, rule), oldest first


@dataclass(frozen=True)
class State:
    """What a plan is made against: the organization's live applications and active keys."""

    apps: dict[str, AppState] = field(default_factory=dict)
    keys: dict[str, KeySpec] = field(default_factory=dict)
    # Rules of deleted applications: they are the application's again when it is registered again.
    dormant_rules: dict[str, tuple[tuple[str, RuleSpec], ...]] = field(default_factory=dict)

    def digest(self) -> str:
        """A fingerprint of this state: an apply made on a plan refuses to run when the state has moved since."""
        shape = {
            "apps": {name: {"settings": a.settings, "dataPlane": a.data_plane,
                            "rules": [[rule_id, r.to_json()] for rule_id, r in a.rules]}
                     for name, a in sorted(self.apps.items())},
            "keys": {name: [list(k.apps), list(k.permissions)] for name, k in sorted(self.keys.items())},
            "dormant": {name: [[rule_id, r.to_json()] for rule_id, r in rules]
                        for name, rules in sorted(self.dormant_rules.items())},
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()


def rule_from_row(row: dict[str, Any]) -> RuleSpec:
    """A rule of the alerting view as a RuleSpec (its receiving app None when it is the rule's own app)."""
    receiver = row["receiving_app"] if row["receiving_app"] != row["app"] else None
    return RuleSpec(row["rule_type"], dict(row["metadata"]), receiver, row["min_interval_secs"])


# -- the plan -----------------------------------------------------------------------------------------------------
APP, SETTINGS, DATA_PLANE, RULE, KEY = "app", "settings", "dataPlane", "alertRule", "key"


@dataclass(frozen=True)
class Change:
    """One change of a plan. ``before`` is what the plan expects to find (applying refuses when the aggregate
    holds something else), ``after`` what it leaves. For a rule: ``before`` the RuleSpec deleted (with its
    ``rule_id``), ``after`` the one created; for a key: KeySpecs."""

    op: str  # "+" creates, "~" changes, "-" removes
    kind: str  # APP, SETTINGS, DATA_PLANE, RULE, KEY
    app: str | None
    name: str
    before: Any = None
    after: Any = None
    rule_id: str | None = None

    @property
    def replaces_key(self) -> bool:
        return self.kind == KEY and self.op == "~"

    @property
    def target(self) -> str:
        """What the audit trail names: ``app:orders``, ``key:ci``, ``alertRule:orders/<id>``..."""
        if self.kind == RULE:
            return f"alertRule:{self.app}/{self.rule_id}" if self.rule_id else f"alertRule:{self.app}"
        return f"{self.kind}:{self.name}"

    def text(self) -> str:
        """The plan's line for this change (never a secret: keys are shown by name and scope)."""
        head = f"{self.op} {self.kind} {self.name}"
        detail = {SETTINGS: self._settings_text, DATA_PLANE: self._data_plane_text, KEY: self._key_text}.get(self.kind)
        if self.kind == RULE:
            rule = self.after if self.op == "+" else self.before
            what = f" {self.rule_id}" if self.rule_id else ""
            return f"{self.op} alertRule {self.app}{what}: {rule.describe(self.app)}"
        return f"{head}: {detail()}" if detail is not None else head

    def _settings_text(self) -> str:
        return ", ".join(f"{key} {_show(self.before.get(key))} -> {_show(value)}" for key, value in self.after.items())

    def _data_plane_text(self) -> str:
        if self.op == "-":
            return f"{self.before['systemDatabaseUrlFrom']} removed"
        if self.op == "+":
            return ", ".join(f"{k}={v}" for k, v in self.after.items())
        return ", ".join(f"{k} {self.before.get(k)} -> {v}" for k, v in self.after.items() if self.before.get(k) != v)

    def _key_text(self) -> str:
        if self.op == "~":
            return (f"{self.before.describe()} -> {self.after.describe()} (a key cannot change: replaced, with a new "
                    "secret, only with --replace-keys)")
        return (self.after or self.before).describe()

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "kind": self.kind, "app": self.app, "name": self.name, "ruleId": self.rule_id,
                "text": self.text()}


def _show(value: Any) -> str:
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Plan:
    changes: tuple[Change, ...]
    basis: str  # State.digest() of the state it was made against

    @property
    def key_replacements(self) -> list[str]:
        return [c.name for c in self.changes if c.replaces_key]


def plan(config: Config, state: State, *, org: str, prune: bool) -> Plan:
    """The changes that bring ``state`` to ``config``; ConfigInvalidError (with paths) for what cannot be done
    in this organization (a key or rule naming an application that will not exist, a rule the domain
    refuses)."""
    prune = prune or config.prune
    check = _Checker()
    changes: list[Change] = []
    in_file = {a.name for a in config.apps}
    will_exist = in_file | (set() if prune else set(state.apps))
    for index, spec in enumerate(config.apps):
        changes += _app_changes(check, spec, state, org, will_exist, prune, f"apps[{index}]")
    for index, key in enumerate(config.keys):
        for app in key.apps:
            if app not in will_exist:
                check.error(f"keys[{index}].apps", _missing(app, app in state.apps))
        current = state.keys.get(key.name)
        if current is None:
            changes.append(Change("+", KEY, None, key.name, after=key))
        elif current != key:
            changes.append(Change("~", KEY, None, key.name, before=current, after=key))
    if prune:
        listed = {k.name for k in config.keys}
        changes += [Change("-", KEY, None, name, before=key) for name, key in sorted(state.keys.items())
                    if name not in listed]
        changes += [Change("-", APP, name, name) for name in sorted(state.apps) if name not in in_file]
    if check.errors:
        raise ConfigInvalidError(check.errors)
    return Plan(tuple(changes), state.digest())


def _missing(app: str, exists: bool) -> str:
    if exists:
        return f"application '{app}' is not in the file, and pruning deletes it"
    return f"no application '{app}' (neither in the file nor registered)"


def _app_changes(check: _Checker, spec: AppSpec, state: State, org: str, will_exist: set[str], prune: bool,
                 path: str) -> list[Change]:
    changes: list[Change] = []
    name = spec.name
    current = state.apps.get(name)
    if current is None:
        changes.append(Change("+", APP, name, name))
        current = AppState(settings=dict(DEFAULT_SETTINGS), rules=state.dormant_rules.get(name, ()))
    wanted = dict(spec.settings)
    if prune:
        wanted = {**DEFAULT_SETTINGS, **wanted}
    differ = {k: v for k, v in wanted.items() if current.settings.get(k) != v}
    if differ:
        changes.append(Change("~", SETTINGS, name, name, before={k: current.settings.get(k) for k in differ},
                              after=differ))
    plane = spec.data_plane if spec.data_plane_given or prune else current.data_plane
    if plane != current.data_plane:
        op = "+" if current.data_plane is None else "-" if plane is None else "~"
        changes.append(Change(op, DATA_PLANE, name, name, before=current.data_plane, after=plane))
    wanted_rules = {r.identity(name): (index, r) for index, r in enumerate(spec.rules)}
    kept: set[str] = set()
    for rule_id, rule in current.rules:
        identity = rule.identity(name)
        if identity in wanted_rules and identity not in kept:
            kept.add(identity)
        elif prune:
            changes.append(Change("-", RULE, name, name, before=rule, rule_id=rule_id))
    for identity, (index, rule) in wanted_rules.items():
        if identity in kept:
            continue
        rule_path = f"{path}.alertRules[{index}]"
        if rule.receiving_app is not None and rule.receiving_app not in will_exist:
            check.error(f"{rule_path}.receivingApp", _missing(rule.receiving_app, rule.receiving_app in state.apps))
            continue
        try:  # the aggregate's own checks (a type's constraints beyond its metadata), on a throwaway
            AlertingRule.create(org, name, "plan", rule.rule_type, rule.metadata, rule.receiving_app,
                                rule.min_interval_secs, _EPOCH)
        except InvalidValueError as error:
            check.error(rule_path, str(error))
            continue
        changes.append(Change("+", RULE, name, name, after=rule))
    return changes
