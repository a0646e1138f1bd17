"""Releases, and what each one can read: the gate that lets instances of two releases share one store.

During a rolling upgrade instances of release N and N+1 run on one store. An instance of release N cannot read an
event class (or an event class's version) that only N+1 knows: decoding it fails, and with it that instance's views.
So a release records here every event class or version it adds, with the release that first reads it
(`INTRODUCED_IN`), and an instance appends such an event only once every live instance runs that release or a
newer one (`unreadable`, called on every save by RelayLog with the cluster's oldest live release). Until then the
write is refused with `ClusterUpgradingError`, and the features that would write it wait (alerting keeps to the
behaviour of the older release: see actors/alerting.py). Nothing is ever rewritten: once the last old instance
is gone, the new events start.

Keys: ``"Aggregate.Event"`` for a new event class, ``"Aggregate.Event v3"`` for a new version of an existing one.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from relay.events.errors import ConflictError

# This build's release: the version in pyproject.toml and the newest entry of CHANGELOG.md (a unit test checks).
RELEASE = "0.2.0"
# The first release: what an instance that records no release (or one that cannot be parsed) is taken to read.
FIRST_RELEASE = "0.1.0"

# Every event class and version the first release reads (tests/unit/test_releases.py: every class of today is here
# or in INTRODUCED_IN).
FIRST_RELEASE_READS = frozenset({
    "Alert.Delivered v2", "Alert.Fired v1", "AlertingRule.Created v1", "AlertingRule.Deleted v1",
    "App.AutoscalingPolicyCleared v1", "App.AutoscalingPolicySet v1", "App.DataPlaneConfigured v1",
    "App.DataPlaneRemoved v1", "App.Deleted v1", "App.Registered v1", "App.Reregistered v1", "App.SettingsChanged v1",
    "Executor.Connected v1", "Executor.DeclaredDead v1", "Executor.Deleted v1", "Executor.Disconnected v1",
    "Executor.Reconnected v1", "Executor.RecoveryAcknowledged v1", "Executor.RecoveryDispatched v1",
    "Executor.RecoveryFailed v1", "Operation.Performed v1", "Organization.ApiKeyIssued v1",
    "Organization.ApiKeyRevoked v1", "Organization.Created v1", "Organization.RetentionChanged v1",
    "OrganizationAccess.Created v1", "OrganizationAccess.DomainClaimed v1", "OrganizationAccess.DomainReleased v1",
    "OrganizationAccess.MemberJoined v1", "OrganizationAccess.MemberRemoved v1", "OrganizationAccess.RoleCreated v1",
    "OrganizationAccess.RoleDeleted v1", "OrganizationAccess.RoleGranted v1", "OrganizationAccess.SecretGenerated v1",
    "OrganizationAccess.SecretUsed v1", "RelayInstance.Expired v1", "RelayInstance.LeaseAdopted v1",
    "RelayInstance.LeaseReleased v1", "RelayInstance.LeaseTaken v1", "RelayInstance.Restarted v1",
    "RelayInstance.Started v1", "RelayInstance.Stopped v1", "RetentionRun.Finished v1", "RetentionRun.Started v1",
    "User.Registered v1",
})

# Every event class, or event class version, added after the first release, with the release that reads it first.
INTRODUCED_IN: dict[str, str] = {
    # Issue 32, alerts as incidents (events/incidents.py, docs/adr/0049): until every instance reads these, alerting
    # fires `Alert`s as release 0.1.0 did.
    "AlertingRule.RenotifySet": "0.2.0",
    "Incident.Opened": "0.2.0",
    "Incident.Renotified": "0.2.0",
    "Incident.Notified": "0.2.0",
    "Incident.Acknowledged": "0.2.0",
    "Incident.Silenced": "0.2.0",
    "Incident.Unsilenced": "0.2.0",
    "Incident.Resolved": "0.2.0",
}

_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def release_key(release: str | None) -> tuple[int, int, int]:
    """A release as a comparable tuple; anything unparsable counts as the first release (the cautious guess)."""
    match = _RELEASE.match(release or "")
    if match is None:
        return release_key(FIRST_RELEASE)
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def oldest(releases: Iterable[str | None]) -> str:
    """The oldest of the releases given (None or unparsable: the first release)."""
    known = [release if release is not None and _RELEASE.match(release) else FIRST_RELEASE for release in releases]
    return min(known, key=release_key) if known else RELEASE


def event_key(aggregate: str, event: str, version: int) -> tuple[str, str]:
    """The two keys an event may be listed under: its class, and its class at this version."""
    return f"{aggregate}.{event}", f"{aggregate}.{event} v{version}"


@cache
def needs(aggregate: str, event: str, version: int) -> str | None:
    """The release that first reads this event (None: every release does). An event class neither the first
    release reads nor `INTRODUCED_IN` lists counts as this release's: the cautious answer (and a failing test)."""
    by_class, by_version = event_key(aggregate, event, version)
    found = [INTRODUCED_IN[key] for key in (by_class, by_version) if key in INTRODUCED_IN]
    if found:
        return max(found, key=release_key)
    return None if by_version in FIRST_RELEASE_READS else RELEASE


def unreadable(events: Iterable[tuple[str, str, int]], floor: str) -> list[tuple[str, str]]:
    """Of (aggregate, event, version) triples, those the release ``floor`` cannot read: (name, release needed)."""
    out = []
    for aggregate, event, version in events:
        needed = needs(aggregate, event, version)
        if needed is not None and release_key(needed) > release_key(floor):
            out.append((f"{aggregate}.{event} v{version}", needed))
    return out


class ClusterUpgradingError(ConflictError):
    """A write the oldest live instance could not read: the cluster is part way through a rolling upgrade."""

    def __init__(self, floor: str, blocked: list[tuple[str, str]]) -> None:
        needed = max((release for _, release in blocked), key=release_key)
        names = ", ".join(sorted({name for name, _ in blocked}))
        super().__init__(
            f"an instance of release {floor} is still running and could not read {names}: this needs every live "
            f"instance at release {needed} or newer (finish the rolling upgrade, then try again)"
        )
        self.floor = floor
        self.needed = needed
