"""The plan of a declarative configuration (actors/policies/config.py): the changes (+ / ~ / -) that bring an
organization, as it stands (`State`, read from the views by web/api/config.py), to a checked document.

Nothing is removed or reset unless pruning is asked for; alerting rules are matched by content; a key whose scope
differs is a ``~`` that only a replacement can apply (actors/policies/config.py says why). Each change carries what it
expects to find (``before``): actors/services/configuration.py checks it against the aggregates.

Pure: no I/O, no clock (a rule to create is checked by building its aggregate at a fixed time, thrown away).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from relay.actors.policies.config import AppSpec, Checker, Config, ConfigInvalidError, KeySpec, RuleSpec
from relay.events.alerting import AlertingRule
from relay.events.application import DEFAULT_SETTINGS
from relay.events.errors import InvalidValueError
from relay.wire.json_types import JSONObject

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- the organization as it stands --------------------------------------------------------------------------------
@dataclass(frozen=True)
class AppState:
    settings: JSONObject  # Conductor's settings (DEFAULT_SETTINGS' keys)
    data_plane: JSONObject | None = None
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
        described: str = (self.after or self.before).describe()
        return described

    def to_json(self) -> JSONObject:
        return {"op": self.op, "kind": self.kind, "app": self.app, "name": self.name, "ruleId": self.rule_id,
                "text": self.text()}


def _show(value: object) -> str:
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
    check = Checker()
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


def _app_changes(check: Checker, spec: AppSpec, state: State, org: str, will_exist: set[str], prune: bool,
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
