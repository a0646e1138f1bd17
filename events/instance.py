"""The RelayInstance aggregate: one running Relay process and the executor leases it holds."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from relay.events.errors import IllegalTransitionError, NotFoundError
from relay.events.ids import instance_id
from relay.events.versions import versioned

RUNNING = "RUNNING"
STOPPED = "STOPPED"
# Declared gone by a peer after it stopped heartbeating; its leases went to that peer.
EXPIRED = "EXPIRED"


def lease_key(org: str, app: str, executor: str) -> str:
    return f"{org}/{app}/{executor}"


@versioned({
    "Started": 1, "Restarted": 1, "Stopped": 1, "Expired": 1, "LeaseTaken": 1, "LeaseAdopted": 1, "LeaseReleased": 1,
})
class RelayInstance(Aggregate):
    """A Relay instance. A lease says which instance owns an executor's connection and timers."""

    @staticmethod
    def create_id(instance: str, **_: object) -> UUID:
        return instance_id(instance)

    @event("Started")
    def __init__(self, instance: str, address: str, port: int, version: str, at: datetime) -> None:
        self.instance = instance
        self._start(address, port, version, at)

    def _start(self, address: str, port: int, version: str, at: datetime) -> None:
        self.address = address
        self.port = port
        # Not `self.version`: that is the aggregate's own version number (eventsourcing).
        self.relay_version = version
        self.status = RUNNING
        self.started_at = at
        self.stopped_at: datetime | None = None
        self.leases: dict[str, datetime] = {}

    @classmethod
    def start_again(
        cls, found: RelayInstance | None, instance: str, address: str, port: int, version: str, at: datetime
    ) -> RelayInstance:
        """This instance id started: for the first time, or ``found`` restarted."""
        if found is None:
            return cls(instance=instance, address=address, port=port, version=version, at=at)
        found.restart(address, port, version, at)
        return found

    def restart(self, address: str, port: int, version: str, at: datetime) -> None:
        """The same instance id started again. Leases of the previous run are released first."""
        self._restarted(previous_leases=sorted(self.leases), address=address, port=port, version=version, at=at)

    @event("Restarted")
    def _restarted(
        self, previous_leases: list[str], address: str, port: int, version: str, at: datetime
    ) -> None:
        self._start(address, port, version, at)

    def stop(self, at: datetime) -> None:
        self._require_running("stop it")
        self._stopped(released=sorted(self.leases), at=at)

    @event("Stopped")
    def _stopped(self, released: list[str], at: datetime) -> None:
        self.status = STOPPED
        self.stopped_at = at
        self.leases = {}

    def expire(self, by: str, at: datetime) -> None:
        """A surviving peer declares this instance gone (it stopped heartbeating, or stopped) and
        takes its leases. Recorded on this aggregate, so two peers racing conflict on its version:
        exactly one of them wins."""
        if self.status == EXPIRED:
            raise IllegalTransitionError(f"instance '{self.instance}'", self.status, "declare it expired")
        if by == self.instance:
            raise IllegalTransitionError(f"instance '{self.instance}'", "itself", "expire itself")
        self._expired(by=by, leases=sorted(self.leases), at=at)

    @event("Expired")
    def _expired(self, by: str, leases: list[str], at: datetime) -> None:
        self.status = EXPIRED
        self.stopped_at = at
        self.leases = {}

    def take_lease(self, lease: str, at: datetime) -> None:
        self._require_running("take a lease")
        if lease not in self.leases:
            self._lease_taken(lease=lease, at=at)

    @event("LeaseTaken")
    def _lease_taken(self, lease: str, at: datetime) -> None:
        self.leases[lease] = at

    def adopt_lease(self, lease: str, from_instance: str, at: datetime) -> None:
        """Take over a lease of an instance that stopped heartbeating."""
        self._require_running("adopt a lease")
        if from_instance == self.instance:
            raise IllegalTransitionError(f"instance '{self.instance}'", "the holder", "adopt its own lease")
        self._lease_adopted(lease=lease, from_instance=from_instance, to_instance=self.instance, at=at)

    @event("LeaseAdopted")
    def _lease_adopted(self, lease: str, from_instance: str, to_instance: str, at: datetime) -> None:
        self.leases[lease] = at

    def release_lease(self, lease: str, at: datetime) -> None:
        if lease not in self.leases:
            raise NotFoundError(f"instance '{self.instance}' holds no lease on '{lease}'")
        self._lease_released(lease=lease, at=at)

    @event("LeaseReleased")
    def _lease_released(self, lease: str, at: datetime) -> None:
        del self.leases[lease]

    def _require_running(self, command: str) -> None:
        if self.status != RUNNING:
            raise IllegalTransitionError(f"instance '{self.instance}'", self.status, command)
