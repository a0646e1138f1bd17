"""The Executor aggregate: one DBOS executor's lifecycle, HEALTHY -> DISCONNECTED -> DEAD -> deleted.

Recovery of a dead executor's workflows is part of the same lifecycle: dispatches to peers, their
failures, and the acknowledgement after which the dead record is deleted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TypedDict
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from relay.events.errors import IllegalTransitionError, InvalidValueError
from relay.events.ids import executor_id
from relay.events.versions import versioned
from relay.wire.json_types import JSONObject

HEALTHY = "HEALTHY"
DISCONNECTED = "DISCONNECTED"
DEAD = "DEAD"
DELETED = "DELETED"



class RecoveryInFlight(TypedDict):
    """The recovery dispatched last, while it is pending."""

    peer: str
    attempt: int
    dispatched_at: datetime

@dataclass(frozen=True)
class ExecutorInfo:
    """What an executor says about itself in its `executor_info` answer."""

    application_version: str
    hostname: str | None
    language: str | None  # optional in the answer (older SDKs leave them out)
    dbos_version: str | None
    metadata: JSONObject | None

    def as_dict(self) -> JSONObject:
        return asdict(self)


def check_info(info: JSONObject) -> JSONObject:
    if not isinstance(info.get("application_version"), str):
        raise InvalidValueError("executor info needs an application_version string")
    if not isinstance(info.get("language"), str) or not info["language"]:
        raise InvalidValueError("executor info needs a language string")
    if not isinstance(info.get("dbos_version"), str):
        raise InvalidValueError("executor info needs a dbos_version string")
    return info


@versioned({
    "Connected": 1, "Reconnected": 1, "Disconnected": 1, "DeclaredDead": 1, "RecoveryDispatched": 1,
    "RecoveryFailed": 1, "RecoveryAcknowledged": 1, "Deleted": 1,
})
class Executor(Aggregate):
    """A DBOS executor of one application, known by the executor_id it reports."""

    @staticmethod
    def create_id(org: str, app: str, executor: str, **_: object) -> UUID:
        return executor_id(org, app, executor)

    @event("Connected")
    def __init__(
        self, org: str, app: str, executor: str, info: JSONObject, instance: str, at: datetime
    ) -> None:
        self.org = org
        self.app = app
        self.executor = executor
        self.created_at = at
        self._connect(info, instance, at)

    @classmethod
    def connect(
        cls, org: str, app: str, executor: str, info: ExecutorInfo, instance: str, at: datetime
    ) -> Executor:
        if not executor:
            raise InvalidValueError("executor_id must not be empty")
        return cls(
            org=org, app=app, executor=executor, info=check_info(info.as_dict()), instance=instance, at=at
        )

    @classmethod
    def connect_again(
        cls, found: Executor | None, org: str, app: str, executor: str, info: ExecutorInfo, instance: str, at: datetime
    ) -> Executor:
        """A connection with this executor_id: the first one, or ``found`` reconnected."""
        if found is None:
            return cls.connect(org, app, executor, info, instance, at)
        found.reconnect(info, instance, at)
        return found

    def _connect(self, info: JSONObject, instance: str, at: datetime) -> None:
        self.info = dict(info)
        self.instance = instance
        self.status = HEALTHY
        self.connected_at = at
        self.updated_at = at
        self.disconnected_at: datetime | None = None
        self.dead_at: datetime | None = None
        self.recovery: RecoveryInFlight | None = None
        self.recovered = False
        self.attempts = 0

    def reconnect(self, info: ExecutorInfo, instance: str, at: datetime) -> None:
        """A connection with this executor_id again: from any state (a HEALTHY record is replaced,
        a DEAD or deleted one comes back: a restarted DBOS process recovers its own workflows)."""
        self._reconnected(previous=self.status, info=check_info(info.as_dict()), instance=instance, at=at)

    @event("Reconnected")
    def _reconnected(self, previous: str, info: JSONObject, instance: str, at: datetime) -> None:
        self._connect(info, instance, at)

    def disconnect(self, reason: str, at: datetime) -> None:
        self._require((HEALTHY,), "disconnect it")
        self._disconnected(reason=reason, at=at)

    @event("Disconnected")
    def _disconnected(self, reason: str, at: datetime) -> None:
        self.status = DISCONNECTED
        self.disconnected_at = at
        self.updated_at = at

    def declare_dead(self, grace_secs: float, at: datetime) -> None:
        self._require((DISCONNECTED,), "declare it dead")
        self._declared_dead(grace_secs=grace_secs, at=at)

    @event("DeclaredDead")
    def _declared_dead(self, grace_secs: float, at: datetime) -> None:
        self.status = DEAD
        self.dead_at = at
        self.updated_at = at

    def dispatch_recovery(self, peer: str, instance: str, at: datetime) -> None:
        """Send recovery to a peer. Allowed again while one is pending: dispatch is at-least-once."""
        self._require((DEAD,), "dispatch its recovery")
        if self.recovered:
            raise IllegalTransitionError(f"executor '{self.executor}'", "recovered", "dispatch again")
        if peer == self.executor:
            raise InvalidValueError("an executor cannot recover itself")
        self._recovery_dispatched(peer=peer, attempt=self.attempts + 1, instance=instance, at=at)

    @event("RecoveryDispatched")
    def _recovery_dispatched(self, peer: str, attempt: int, instance: str, at: datetime) -> None:
        self.attempts = attempt
        self.recovery = {"peer": peer, "attempt": attempt, "dispatched_at": at}
        self.updated_at = at

    def fail_recovery(self, peer: str, reason: str, at: datetime) -> None:
        self._require_pending(peer, "record a failed recovery")
        self._recovery_failed(peer=peer, attempt=self.attempts, reason=reason, at=at)

    @event("RecoveryFailed")
    def _recovery_failed(self, peer: str, attempt: int, reason: str, at: datetime) -> None:
        self.recovery = None
        self.updated_at = at

    def acknowledge_recovery(self, peer: str, at: datetime) -> None:
        self._require_pending(peer, "acknowledge a recovery")
        self._recovery_acknowledged(peer=peer, attempt=self.attempts, at=at)

    @event("RecoveryAcknowledged")
    def _recovery_acknowledged(self, peer: str, attempt: int, at: datetime) -> None:
        self.recovery = None
        self.recovered = True
        self.updated_at = at

    def delete(self, reason: str, at: datetime) -> None:
        self._require((DEAD,), "delete it")
        self._deleted(reason=reason, at=at)

    @event("Deleted")
    def _deleted(self, reason: str, at: datetime) -> None:
        self.status = DELETED
        self.recovery = None
        self.updated_at = at

    def _require(self, states: tuple[str, ...], command: str) -> None:
        if self.status not in states:
            raise IllegalTransitionError(f"executor '{self.executor}'", self.status, command)

    def _require_pending(self, peer: str, command: str) -> None:
        self._require((DEAD,), command)
        if self.recovery is None or self.recovery["peer"] != peer:
            raise IllegalTransitionError(
                f"executor '{self.executor}'", f"{self.status} without a pending recovery on '{peer}'", command
            )
