"""Declarative configuration as a use case (`relay diff|apply`, POST .../config/plan and .../config/apply; the HTTP
API is web/api/config.py): plan a document (actors/policies/config*.py) against the organization as the views show
it, and apply that plan, all of it or nothing.

- `Configurations.plan` reads the views (`current_state`), makes the plan and checks its data planes' references as
  PUT .../data-plane does. ConfigInvalidError names every bad item by its path.
- `Configurations.apply` refuses a plan made on another basis (ConcurrentChangeError) or replacing keys unasked
  (KeysCannotChangeError), or granting more than the caller holds (NotAllowedError), draws the new keys' secrets
  and has the instance actor record it (actors/instance.py).
- `apply_config`, in the actor, loads through the event log, runs `apply_changes` and saves every aggregate it
  returns in ONE save (one store transaction). Each change's ``before`` is checked against its aggregate, not
  against the view the plan was read from: when anything moved since (another request, an HA peer),
  ConcurrentChangeError is raised and nothing is saved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from relay.actors.adapters.dataplane.reference import check_reference
from relay.actors.policies.config import Config, ConfigInvalidError, KeySpec, RuleSpec, parse_config
from relay.actors.policies.config_plan import (
    APP,
    DATA_PLANE,
    KEY,
    RULE,
    SETTINGS,
    AppState,
    Change,
    Plan,
    State,
    plan,
    rule_from_row,
)
from relay.actors.services.commands import run_command
from relay.actors.services.errors import NotAllowedError
from relay.events.alerting import AlertingRule, rule_aggregate_id
from relay.events.application import DEFAULT_SETTINGS, App
from relay.events.errors import AlreadyExistsError, ConcurrentChangeError, InvalidValueError
from relay.events.ids import app_id, organization_id
from relay.events.organization import Organization
from relay.projections.identity import Principal, hash_key, new_api_key
from relay.projections.store.log import RelayLog
from relay.projections.views import Views

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

A = TypeVar("A", bound=Aggregate)
Loader = Callable[[UUID, type[Any]], Any]


class KeysCannotChangeError(AlreadyExistsError):
    """The document changes the scope of keys that exist, and replacing them was not asked for."""


@dataclass(frozen=True)
class Applied:
    """What an apply did: the plan's changes (none: nothing was recorded) and each issued key's secret, by name
    (shown once)."""

    changes: tuple[Change, ...]
    secrets: dict[str, str]


def current_state(views: Views, org: str) -> State:
    """The organization as the views show it: live applications (settings, data plane, rules), active keys, and the
    rules of deleted applications (which come back with them)."""
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


class Configurations:
    """An organization's declarative configuration, planned from the views and applied through the instance actor."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def plan(self, org: str, document: Any, *, prune: bool) -> tuple[Plan, bool]:
        """The plan that brings ``org`` to ``document``, and whether it prunes (asked, or by the file);
        ConfigInvalidError naming every bad item by its path."""
        config = parse_config(document)
        if config.org is not None and config.org != org:
            raise ConfigInvalidError([("org", f"is '{config.org}', not this request's organization '{org}'")])
        made = plan(config, current_state(self.rt.views, org), org=org, prune=prune)
        self._check_data_plane_references(config, made, org)
        return made, prune or config.prune

    def _check_data_plane_references(self, config: Config, made: Plan, org: str) -> None:
        """The data planes the plan sets follow PUT .../data-plane's rules: only references the operator bound to
        each application, never a file Relay does not read; refused before anything is recorded."""
        settings = self.rt.settings
        index = {spec.name: position for position, spec in enumerate(config.apps)}
        errors = []
        for change in made.changes:
            if change.kind != DATA_PLANE or change.after is None:
                continue
            try:
                check_reference(change.after["systemDatabaseUrlFrom"], org, change.name,
                                settings.data_plane_references, private=(settings.data_dir,))
            except InvalidValueError as error:
                errors.append((f"apps[{index.get(change.name, 0)}].dataPlane.systemDatabaseUrlFrom", str(error)))
        if errors:
            raise ConfigInvalidError(errors)

    def check(self, made: Plan, *, basis: str | None, replace_keys: bool, who: Principal) -> None:
        """Whether ``made`` (planned just now) may be applied for ``who``: on the plan's ``basis`` when the caller
        gives one (ConcurrentChangeError), replacing keys only when asked (KeysCannotChangeError), granting no
        permission the caller lacks (NotAllowedError)."""
        if basis is not None and basis != made.basis:
            raise ConcurrentChangeError("the organization changed since the plan was made: nothing was applied; "
                                        "plan again")
        if made.key_replacements and not replace_keys:
            raise KeysCannotChangeError(
                "API keys cannot change, and the file changes the scope of "
                f"{', '.join(made.key_replacements)}: nothing was applied. Replacing such keys (revoked, then issued "
                "again with new secrets; executors using the old ones are disconnected) needs replaceKeys (relay "
                "apply --replace-keys)")
        issued = [c for c in made.changes if c.kind == KEY and c.op != "-"]
        if not who.admin:
            beyond = sorted({p for c in issued for p in c.after.permissions} - who.permissions)
            if beyond:
                raise NotAllowedError(f"a token cannot grant more than its own permissions ({', '.join(beyond)})")

    def apply(self, org: str, made: Plan, who: Principal) -> Applied:
        """Record ``made`` (`check`ed) for ``who``, every change or none; nothing at all when it changes nothing."""
        if not made.changes:
            return Applied((), {})
        secrets = {c.name: new_api_key() for c in made.changes if c.kind == KEY and c.op != "-"}
        instance = self.rt.instance
        assert instance is not None
        hashes = {name: hash_key(secret) for name, secret in secrets.items()}
        run_command(self.rt, lambda: instance.proxy().apply_config(org, made.changes, hashes, who.display))
        return Applied(made.changes, secrets)


def apply_config(relay_log: RelayLog, org: str, changes: tuple[Change, ...], key_hashes: dict[str, str],
                 new_rule_id: Callable[[], str], at: datetime, by: str = "relay") -> list[Aggregate]:
    """Every change of a configuration plan, on the organization, its applications and their rules, in ONE save:
    all of them or none. A change whose aggregate no longer holds what the plan expected raises
    ConcurrentChangeError, as does a concurrent append that keeps conflicting."""
    def apply() -> list[Aggregate]:
        return apply_changes(org, changes, relay_log.load, key_hashes, iter(new_rule_id, None), at, by)

    try:
        return relay_log.run_together(apply)  # reloaded on a conflict: the plan's expectations are checked again
    except IntegrityError:
        raise ConcurrentChangeError("the organization kept changing while the plan was applied: nothing was applied; "
                                    "plan again") from None


def rule_of(aggregate: AlertingRule) -> RuleSpec:
    receiver = aggregate.receiving_app if aggregate.receiving_app != aggregate.app else None
    return RuleSpec(aggregate.rule_type, dict(aggregate.metadata), receiver, aggregate.min_interval_secs)


def apply_changes(org: str, changes: tuple[Change, ...], get: Loader, key_hashes: dict[str, str],
                  rule_ids: Iterator[str], at: datetime, by: str) -> list[Aggregate]:
    """Run ``changes`` on the aggregates ``get(id, kind)`` loads (each once); return those changed, to be saved
    together. ``key_hashes``: the hash of each key issued, by name; ``rule_ids``: ids of the rules created."""
    run = _Run(org, get, key_hashes, rule_ids, at, by)
    for change in changes:
        run.apply(change)
    return list(run.touched.values())


class _Run:
    def __init__(self, org: str, get: Loader, key_hashes: dict[str, str], rule_ids: Iterator[str], at: datetime,
                 by: str) -> None:
        self.org, self.get, self.key_hashes, self.rule_ids, self.at, self.by = org, get, key_hashes, rule_ids, at, by
        self.touched: dict[UUID, Aggregate] = {}

    def apply(self, change: Change) -> None:
        handler = {APP: self.app, SETTINGS: self.settings, DATA_PLANE: self.data_plane, RULE: self.rule,
                   KEY: self.key}[change.kind]
        handler(change)

    def fetch(self, aggregate_id: UUID, kind: type[A]) -> A | None:
        found = self.touched.get(aggregate_id)
        return found if isinstance(found, kind) else self.get(aggregate_id, kind)

    def keep(self, aggregate: A) -> A:
        self.touched[aggregate.id] = aggregate
        return aggregate

    @staticmethod
    def stale(change: Change) -> ConcurrentChangeError:
        return ConcurrentChangeError(f"{change.target} changed since the plan was made: nothing was applied; "
                                     "plan again")

    def live_app(self, change: Change) -> App:
        found = self.fetch(app_id(self.org, change.name), App)
        if found is None or found.deleted:
            raise self.stale(change)
        return self.keep(found)

    def app(self, change: Change) -> None:
        if change.op == "-":
            self.live_app(change).delete(self.at, self.by)
            return
        found = self.fetch(app_id(self.org, change.name), App)
        if found is None:
            self.keep(App.register(self.org, change.name, self.at, self.by))
        elif found.deleted:
            self.keep(found).register_again(self.at, self.by)
        else:
            raise self.stale(change)  # registered meanwhile

    def settings(self, change: Change) -> None:
        app = self.live_app(change)
        if any(app.settings.get(k) != change.before.get(k) for k in change.after):
            raise self.stale(change)
        app.change_settings(dict(change.after), self.at, self.by)

    def data_plane(self, change: Change) -> None:
        app = self.live_app(change)
        if app.data_plane != change.before:
            raise self.stale(change)
        if change.after is None:
            app.remove_data_plane(self.at, self.by)
        else:
            app.configure_data_plane(dict(change.after), self.at, self.by)

    def rule(self, change: Change) -> None:
        if change.op == "+":
            self.live_app(change)
            rule: RuleSpec = change.after
            self.keep(AlertingRule.create(self.org, change.name, next(self.rule_ids), rule.rule_type, rule.metadata,
                                          rule.receiving_app, rule.min_interval_secs, self.at, self.by))
            return
        assert change.rule_id is not None
        found = self.fetch(rule_aggregate_id(self.org, change.name, change.rule_id), AlertingRule)
        if found is None or found.deleted or rule_of(found) != change.before:
            raise self.stale(change)
        self.keep(found).delete(self.at, self.by)

    def key(self, change: Change) -> None:
        owner = self.fetch(organization_id(self.org), Organization)
        if owner is None:
            raise self.stale(change)
        self.keep(owner)
        current = owner.active_key(change.name)
        if change.op == "+":
            if current is not None:
                raise self.stale(change)  # issued meanwhile
        else:
            before: KeySpec = change.before
            if current is None or (tuple(current["apps"]), tuple(current["permissions"])) != (
                    before.apps, before.permissions):
                raise self.stale(change)
            owner.revoke_key(change.name, self.at, self.by)
        if change.op != "-":
            key: KeySpec = change.after
            owner.issue_key(change.name, self.key_hashes[change.name], list(key.apps), list(key.permissions),
                            self.at, self.by)
