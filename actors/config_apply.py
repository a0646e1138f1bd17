"""Recording a configuration plan (actors/policies/config_plan.py), in the instance actor (actors/instance.py):
`apply_config` loads through the event log, runs `apply_changes` and saves every aggregate it returns in ONE save
(one store transaction). Each change's ``before`` is checked against its aggregate, not against the view the plan
was read from: when anything moved since (another request, an HA peer), ConcurrentChangeError is raised and nothing
is saved. The use case around it (plan, check, permissions, new keys' secrets) is actors/services/configuration.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from relay.actors.policies.config import KeySpec, RuleSpec
from relay.actors.policies.config_plan import APP, DATA_PLANE, KEY, RULE, SETTINGS, Change
from relay.events.alerting import AlertingRule, rule_aggregate_id
from relay.events.application import App
from relay.events.errors import ConcurrentChangeError
from relay.events.ids import app_id, organization_id
from relay.events.organization import Organization
from relay.projections.store.log import RelayLog

A = TypeVar("A", bound=Aggregate)
Loader = Callable[[UUID, type[Any]], Any]


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
