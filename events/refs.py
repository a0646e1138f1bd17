"""References to aggregates by natural key: which class, which id, and how a command names it when it is not there.

The event log (projections/store/log.py) loads, changes and saves any aggregate through one of these, so a command
is written once, where it is given: ``log.change(app_ref(org, name), lambda app: app.delete(at, by))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from relay.events.access import OrganizationAccess
from relay.events.alerting import Alert, AlertingRule, alert_aggregate_id, rule_aggregate_id
from relay.events.application import App
from relay.events.executor import Executor
from relay.events.ids import app_id, executor_id, instance_id, organization_access_id, organization_id, user_id
from relay.events.incidents import Incident, incident_aggregate_id
from relay.events.instance import RelayInstance
from relay.events.organization import Organization
from relay.events.retention import RetentionRun, retention_run_id
from relay.events.user import User

A = TypeVar("A", bound=Aggregate)


@dataclass(frozen=True)
class Ref(Generic[A]):
    """``kind``'s aggregate ``id``. ``missing``: the NotFoundError's text when it is not there (or is deleted, when
    ``deletable``: a deleted application or rule takes no command but registering it again); ``exists``: the
    AlreadyExistsError's text when a command that creates it finds it."""

    kind: type[A]
    id: UUID
    missing: str
    exists: str = ""
    deletable: bool = False

    def absent(self, found: A | None) -> bool:
        return found is None or (self.deletable and bool(getattr(found, "deleted", False)))


def org_ref(org: str) -> Ref[Organization]:
    return Ref(Organization, organization_id(org), f"no organization '{org}'")


def access_ref(org: str) -> Ref[OrganizationAccess]:
    return Ref(OrganizationAccess, organization_access_id(org), f"no organization '{org}'")


def user_ref(issuer: str, subject: str) -> Ref[User]:
    return Ref(User, user_id(issuer, subject), "not registered: register first (POST /v2/users)",
               "already registered")


def app_ref(org: str, name: str) -> Ref[App]:
    return Ref(App, app_id(org, name), f"no application '{name}' in '{org}'", f"application '{name}' exists in '{org}'",
               deletable=True)


def executor_ref(org: str, app: str, executor: str) -> Ref[Executor]:
    return Ref(Executor, executor_id(org, app, executor), f"no executor '{executor}' in '{org}/{app}'")


def instance_ref(instance: str) -> Ref[RelayInstance]:
    return Ref(RelayInstance, instance_id(instance), f"no relay instance '{instance}'")


def rule_ref(org: str, app: str, rule_id: str) -> Ref[AlertingRule]:
    return Ref(AlertingRule, rule_aggregate_id(org, app, rule_id), f"no alerting rule '{rule_id}' in '{org}/{app}'",
               f"an alerting rule '{rule_id}' exists in '{org}/{app}'", deletable=True)


def alert_ref(org: str, app: str, rule_id: str, sequence: int) -> Ref[Alert]:
    return Ref(Alert, alert_aggregate_id(org, app, rule_id, sequence),
               f"no alert {sequence} of rule '{rule_id}' in '{org}/{app}'")


def incident_ref(org: str, app: str, rule_id: str, number: int) -> Ref[Incident]:
    return Ref(Incident, incident_aggregate_id(org, app, rule_id, number),
               f"no incident {number} of rule '{rule_id}' in '{org}/{app}'")


def retention_ref(org: str, app: str, slot: int) -> Ref[RetentionRun]:
    return Ref(RetentionRun, retention_run_id(org, app, slot), f"no retention run of interval {slot} of '{org}/{app}'",
               f"the retention run of interval {slot} of '{org}/{app}' exists")
