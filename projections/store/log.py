"""RelayLog: the eventsourcing Application through which actors record every state change.

It is the only place that loads and saves aggregates. Which store it uses (SQLite or PostgreSQL)
comes from the environment it is given; the domain does not know.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError, Notification, Recording, StoredEvent

from relay.events.alerting import Alert, AlertingRule, alert_aggregate_id, rule_aggregate_id
from relay.events.application import App
from relay.events.config_apply import apply_changes
from relay.actors.policies.config_plan import Change
from relay.events.errors import AlreadyExistsError, ConcurrentChangeError, NotFoundError
from relay.events.executor import Executor, ExecutorInfo
from relay.events.ids import app_id, executor_id, instance_id, organization_id
from relay.events.instance import RelayInstance
from relay.events.names import check_app_name
from relay.events.operation import Operation
from relay.events.organization import Organization
from relay.events.retention import RetentionRun, retention_run_id
from relay.events.topics import register_moved_topics
from relay.projections.store.group_commit import GroupCommitter

A = TypeVar("A", bound=Aggregate)

# Optimistic concurrency: another writer (an HA peer) may append between our load and save.
_SAVE_ATTEMPTS = 3


class RelayLog(Application[UUID]):
    """Commands that load, change and save aggregates. `position` is the highest notification id
    this object has appended, so a reader can wait until the views have caught up with it."""

    name = "relay"

    def __init__(self, env: dict[str, str] | None = None,
                 offload: Callable[[Callable[[], Any]], Any] | None = None) -> None:
        """``offload`` runs each append transaction (a batch of concurrent saves, projections/store/group_commit.py):
        `relay serve` passes gevent's threadpool for SQLite, whose calls would otherwise block the hub."""
        register_moved_topics()  # before the first read: older logs name the pre-namespace modules
        super().__init__(env)
        self.position = 0
        self.listeners: list[Callable[[int], None]] = []
        # Called with how long each append transaction took, in seconds: metrics.
        self.save_observers: list[Callable[[float], None]] = []
        # Appends run off the hub get a connection pool of their own: its locks (gevent's, once monkey-patched)
        # are then taken by one thread at a time (one batch is written at a time), never contended across
        # threads with the hub's reads.
        self._writer_factory = type(self.factory)(self.env) if offload is not None else None
        self._writes = self._writer_factory.application_recorder() if self._writer_factory else self.recorder
        self.committer: GroupCommitter[list[StoredEvent], list[int]] = GroupCommitter(
            self._insert, **({"offload": offload} if offload is not None else {}), observe=self._observe_save)

    def close(self) -> None:
        if self._writer_factory is not None:
            self._writer_factory.close()
        super().close()

    def _observe_save(self, seconds: float, _requests: int) -> None:
        for observe in self.save_observers:
            observe(seconds)

    def _insert(self, batches: list[list[StoredEvent]]) -> list[list[int]]:
        """One transaction for the stored events of several saves; each save's notification ids."""
        ids = self._writes.insert_events([e for batch in batches for e in batch]) or []
        out, at = [], 0
        for batch in batches:
            out.append(list(ids[at:at + len(batch)]))
            at += len(batch)
        return out

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """Application.save, group-committed: appended in one transaction with the concurrent saves of other
        callers (IntegrityError still means one of `objs` changed meanwhile). No snapshots, no tracking."""
        if kwargs:
            raise TypeError(f"RelayLog.save takes no options ({', '.join(kwargs)})")
        processing: ProcessingEvent[UUID] = ProcessingEvent()
        processing.collect_events(*objs)
        events = processing.events
        if not events:
            return []
        stored = [self.mapper.to_stored_event(e) for e in events]
        ids = self.committer.commit([e.originator_id for e in events], stored)
        if self.repository.cache and not self.repository.fastforward:
            for aggregate_id, aggregate in processing.aggregates.items():
                self.repository.cache.put(aggregate_id, aggregate)
        return [
            Recording(d, Notification(originator_id=s.originator_id, originator_version=s.originator_version,
                                      topic=s.topic, state=s.state, id=n))
            for d, s, n in zip(events, stored, ids, strict=True)
        ]

    # -- generic load/mutate/save with retry on a concurrent append -------------------------------
    def _get(self, aggregate_id: UUID, kind: type[A]) -> A | None:
        try:
            aggregate = self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None
        assert isinstance(aggregate, kind)
        return aggregate

    def _update(self, aggregate_id: UUID, kind: type[A], change: Callable[[A | None], A]) -> A:
        for attempt in range(_SAVE_ATTEMPTS):
            aggregate = change(self._get(aggregate_id, kind))
            try:
                recordings = self.save(aggregate)
            except IntegrityError:
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise
                continue
            self._appended([r.notification.id for r in recordings])
            return aggregate
        raise AssertionError("unreachable")  # pragma: no cover

    def _appended(self, positions: list[int]) -> None:
        if not positions:
            return
        self.position = max(self.position, *positions)
        for listener in self.listeners:
            listener(self.position)

    # -- organizations and keys -------------------------------------------------------------------
    def organization(self, org: str) -> Organization | None:
        return self._get(organization_id(org), Organization)

    def ensure_organization(self, org: str, at: datetime) -> Organization:
        def change(found: Organization | None) -> Organization:
            return found if found is not None else Organization.create(org, at)

        return self._update(organization_id(org), Organization, change)

    def issue_key(
        self,
        org: str,
        key_name: str,
        key_hash: str,
        apps: list[str],
        permissions: list[str],
        at: datetime,
        by: str = "relay",
    ) -> Organization:
        def change(found: Organization | None) -> Organization:
            organization = found if found is not None else Organization.create(org, at)
            organization.issue_key(key_name, key_hash, apps, permissions, at, by)
            return organization

        return self._update(organization_id(org), Organization, change)

    def revoke_key(self, org: str, key_name: str, at: datetime, by: str = "relay") -> Organization:
        def change(found: Organization | None) -> Organization:
            if found is None:
                raise NotFoundError(f"no organization '{org}'")
            found.revoke_key(key_name, at, by)
            return found

        return self._update(organization_id(org), Organization, change)

    # -- applications -----------------------------------------------------------------------------
    def app(self, org: str, name: str) -> App | None:
        return self._get(app_id(org, name), App)

    def register_app(self, org: str, name: str, at: datetime, by: str = "relay") -> App:
        """Register an application; AlreadyExistsError if it is registered and not deleted."""
        check_app_name(name)  # before ensure_organization: a refused registration records nothing
        self.ensure_organization(org, at)

        def change(found: App | None) -> App:
            if found is None:
                return App.register(org, name, at, by)
            if not found.deleted:
                raise AlreadyExistsError(f"application '{name}' exists in '{org}'")
            found.register_again(at, by)
            return found

        return self._update(app_id(org, name), App, change)

    def change_app_settings(
        self, org: str, name: str, changes: dict[str, Any], at: datetime, by: str = "relay"
    ) -> App:
        def change(found: App | None) -> App:
            if found is None or found.deleted:
                raise NotFoundError(f"no application '{name}' in '{org}'")
            found.change_settings(changes, at, by)
            return found

        return self._update(app_id(org, name), App, change)

    def configure_data_plane(
        self, org: str, name: str, config: dict[str, Any] | None, at: datetime, by: str = "relay"
    ) -> App:
        """Set (``config``) or remove (None) an application's data plane."""
        def change(found: App | None) -> App:
            if found is None or found.deleted:
                raise NotFoundError(f"no application '{name}' in '{org}'")
            if config is None:
                found.remove_data_plane(at, by)
            else:
                found.configure_data_plane(config, at, by)
            return found

        return self._update(app_id(org, name), App, change)

    def set_autoscaling_policy(
        self, org: str, name: str, policy: dict[str, Any] | None, at: datetime, by: str = "relay"
    ) -> App:
        """Store (``policy``) or clear (None) an application's autoscaling policy."""
        def change(found: App | None) -> App:
            if found is None or found.deleted:
                raise NotFoundError(f"no application '{name}' in '{org}'")
            if policy is None:
                found.clear_autoscaling_policy(at, by)
            else:
                found.set_autoscaling_policy(policy, at, by)
            return found

        return self._update(app_id(org, name), App, change)

    def delete_app(self, org: str, name: str, at: datetime, by: str = "relay") -> App:
        def change(found: App | None) -> App:
            if found is None or found.deleted:
                raise NotFoundError(f"no application '{name}' in '{org}'")
            found.delete(at, by)
            return found

        return self._update(app_id(org, name), App, change)

    # -- executors --------------------------------------------------------------------------------
    def executor(self, org: str, app: str, executor: str) -> Executor | None:
        return self._get(executor_id(org, app, executor), Executor)

    def executor_connected(
        self, org: str, app: str, executor: str, info: ExecutorInfo, instance: str, at: datetime
    ) -> Executor:
        def change(found: Executor | None) -> Executor:
            if found is None:
                return Executor.connect(org, app, executor, info, instance, at)
            found.reconnect(info, instance, at)
            return found

        return self._update(executor_id(org, app, executor), Executor, change)

    def update_executor(
        self, org: str, app: str, executor: str, command: Callable[[Executor], None]
    ) -> Executor:
        """Apply one Executor command (e.g. `lambda e: e.disconnect(reason, at)`) and save it."""

        def change(found: Executor | None) -> Executor:
            if found is None:
                raise NotFoundError(f"no executor '{executor}' in '{org}/{app}'")
            command(found)
            return found

        return self._update(executor_id(org, app, executor), Executor, change)

    # -- relay instances --------------------------------------------------------------------------
    def instance(self, instance: str) -> RelayInstance | None:
        return self._get(instance_id(instance), RelayInstance)

    def instance_started(self, instance: str, address: str, port: int, version: str, at: datetime) -> RelayInstance:
        def change(found: RelayInstance | None) -> RelayInstance:
            if found is None:
                return RelayInstance(instance=instance, address=address, port=port, version=version, at=at)
            found.restart(address, port, version, at)
            return found

        return self._update(instance_id(instance), RelayInstance, change)

    def update_instance(self, instance: str, command: Callable[[RelayInstance], None]) -> RelayInstance:
        def change(found: RelayInstance | None) -> RelayInstance:
            if found is None:
                raise NotFoundError(f"no relay instance '{instance}'")
            command(found)
            return found

        return self._update(instance_id(instance), RelayInstance, change)

    def adopt_instance(
        self, peer: str, by: str, leases: list[str], at: datetime, still_silent: Callable[[], bool]
    ) -> bool:
        """`by` declares `peer` gone and adopts `leases` from it: RelayInstance.Expired on the peer and one
        LeaseAdopted per lease on `by`, appended in ONE transaction (both or neither). The peer's aggregate
        version makes it exclusive: of several survivors, one appends, the others conflict, reload, and the
        domain refuses them (already EXPIRED). `still_silent` is asked after each load: a peer that beat
        again (it restarted: it beats before recording Restarted) is not expired. Returns whether we did."""
        for attempt in range(_SAVE_ATTEMPTS):
            gone = self._get(instance_id(peer), RelayInstance)
            adopter = self._get(instance_id(by), RelayInstance)
            if gone is None or adopter is None:
                raise NotFoundError(f"no relay instance '{peer if gone is None else by}'")
            if not still_silent():
                return False
            gone.expire(by, at)
            for lease in leases:
                adopter.adopt_lease(lease, peer, at)
            try:
                recordings = self.save(gone, adopter)
            except IntegrityError:
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise
                continue
            self._appended([r.notification.id for r in recordings])
            return True
        raise AssertionError("unreachable")  # pragma: no cover

    # -- alerting rules, alerts and retention runs (events/alerting.py, events/retention.py) --------
    def alerting_rule(self, org: str, app: str, rule_id: str) -> AlertingRule | None:
        return self._get(rule_aggregate_id(org, app, rule_id), AlertingRule)

    def create_alerting_rule(
        self,
        org: str,
        app: str,
        rule_id: str,
        rule_type: str,
        metadata: Any,
        receiving_app: str | None,
        min_interval_secs: Any,
        at: datetime,
        by: str = "relay",
    ) -> AlertingRule:
        def change(found: AlertingRule | None) -> AlertingRule:
            if found is not None:
                raise AlreadyExistsError(f"an alerting rule '{rule_id}' exists in '{org}/{app}'")
            return AlertingRule.create(org, app, rule_id, rule_type, metadata, receiving_app, min_interval_secs,
                                       at, by)

        return self._update(rule_aggregate_id(org, app, rule_id), AlertingRule, change)

    def delete_alerting_rule(self, org: str, app: str, rule_id: str, at: datetime, by: str = "relay") -> AlertingRule:
        def change(found: AlertingRule | None) -> AlertingRule:
            if found is None or found.deleted:
                raise NotFoundError(f"no alerting rule '{rule_id}' in '{org}/{app}'")
            found.delete(at, by)
            return found

        return self._update(rule_aggregate_id(org, app, rule_id), AlertingRule, change)

    def latest_alert(self, org: str, app: str, rule_id: str, known: int = 0) -> Alert | None:
        """The rule's latest alert. ``known``: how many the caller has seen (the view's count), where the
        walk along the numbered alerts starts."""
        sequence, previous = max(known, 0), None
        if sequence:
            previous = self._get(alert_aggregate_id(org, app, rule_id, sequence), Alert)
            if previous is None:
                sequence = 0  # a hint ahead of the log: walk from the first
        while (following := self._get(alert_aggregate_id(org, app, rule_id, sequence + 1), Alert)) is not None:
            previous, sequence = following, sequence + 1
        return previous

    def fire_alert(
        self,
        org: str,
        app: str,
        rule_id: str,
        slot: int,
        message: str,
        metadata: dict[str, str],
        instance: str,
        at: datetime,
        known: int = 0,
    ) -> Alert:
        """Record the rule's next alert, or raise a domain error (deleted rule, fired in this interval or too
        soon). Another instance recording the same alert first makes our save conflict: we then read its
        alert and the domain refuses ours, so exactly one of them fires."""
        for attempt in range(_SAVE_ATTEMPTS):
            rule = self.alerting_rule(org, app, rule_id)
            if rule is None:
                raise NotFoundError(f"no alerting rule '{rule_id}' in '{org}/{app}'")
            previous = self.latest_alert(org, app, rule_id, known)
            alert = Alert.fire(rule, previous, slot, message, metadata, instance, at)
            try:
                recordings = self.save(alert)
            except IntegrityError:
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise
                continue
            self._appended([r.notification.id for r in recordings])
            return alert
        raise AssertionError("unreachable")  # pragma: no cover

    def record_alert_delivery(
        self,
        org: str,
        app: str,
        rule_id: str,
        sequence: int,
        delivered_to: list[str],
        failed: list[dict[str, str]],
        webhook: dict[str, Any] | None,
        at: datetime,
        sinks: dict[str, dict[str, Any]] | None = None,
    ) -> Alert:
        def change(found: Alert | None) -> Alert:
            if found is None:
                raise NotFoundError(f"no alert {sequence} of rule '{rule_id}' in '{org}/{app}'")
            found.deliver(delivered_to, failed, webhook, at, sinks)
            return found

        return self._update(alert_aggregate_id(org, app, rule_id, sequence), Alert, change)

    def start_retention_run(
        self,
        org: str,
        app: str,
        slot: int,
        executor: str,
        policy: dict[str, int | None],
        settings: dict[str, int | None],
        instance: str,
        at: datetime,
    ) -> RetentionRun:
        """AlreadyExistsError when this interval's run is recorded already (by another instance)."""

        def change(found: RetentionRun | None) -> RetentionRun:
            if found is not None:
                raise AlreadyExistsError(f"the retention run of interval {slot} of '{org}/{app}' exists")
            return RetentionRun.start(org, app, slot, executor, policy, settings, instance, at)

        return self._update(retention_run_id(org, app, slot), RetentionRun, change)

    def finish_retention_run(
        self, org: str, app: str, slot: int, outcome: str, reason: str | None, at: datetime
    ) -> RetentionRun:
        def change(found: RetentionRun | None) -> RetentionRun:
            if found is None:
                raise NotFoundError(f"no retention run of interval {slot} of '{org}/{app}'")
            found.finish(outcome, reason, at)
            return found

        return self._update(retention_run_id(org, app, slot), RetentionRun, change)

    # -- declarative configuration (events/config*.py) --------------------------------------------
    def apply_config(self, org: str, changes: tuple[Change, ...], key_hashes: dict[str, str],
                     new_rule_id: Callable[[], str], at: datetime, by: str = "relay") -> list[Aggregate]:
        """Every change of a configuration plan, on the organization, its applications and their rules, in ONE
        save (one store transaction): all of them or none. A change whose aggregate no longer holds what the plan
        expected raises ConcurrentChangeError, as does a concurrent append that keeps conflicting."""
        for attempt in range(_SAVE_ATTEMPTS):
            ids = iter(new_rule_id, None)
            changed = apply_changes(org, changes, self._get, key_hashes, ids, at, by)
            try:
                recordings = self.save(*changed)
            except IntegrityError:
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise ConcurrentChangeError("the organization kept changing while the plan was applied: "
                                                "nothing was applied; plan again") from None
                continue  # reloaded next time round: the plan's expectations are checked again
            self._appended([r.notification.id for r in recordings])
            return changed
        raise AssertionError("unreachable")  # pragma: no cover

    # -- operations (the audit trail of control-plane actions) ------------------------------------
    def record_operation(self, operation_id: UUID, at: datetime, **fields: Any) -> Operation:
        """A new aggregate per action (ids are drawn per request): nothing to load, nothing to contend on."""
        recorded = Operation.perform(operation_id, at=at, **fields)
        recordings = self.save(recorded)
        self._appended([r.notification.id for r in recordings])
        return recorded
