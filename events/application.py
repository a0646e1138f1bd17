"""The App aggregate: a DBOS application registered with Relay, and its settings."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from relay.events.autoscaling import AutoscalingPolicy, check_policy
from relay.events.data_plane import check_data_plane
from relay.events.errors import AlreadyExistsError, IllegalTransitionError, InvalidValueError
from relay.events.ids import app_id
from relay.events.names import check_app_name, check_org_name
from relay.events.versions import versioned
from relay.wire.json_types import JSONObject

DEFAULT_EXECUTOR_TIMEOUT_SECS = 60  # the grace period of an application that sets none
DEFAULT_SETTINGS: JSONObject = {
    "executorTimeoutSecs": DEFAULT_EXECUTOR_TIMEOUT_SECS,
    "gcRowsThreshold": None,
    "gcTimeThresholdMs": None,
    "globalTimeoutMs": None,
    "privateMode": False,
}

# The longest grace period an application may set: a day (issue 34, docs/adr/0013). A longer one would leave a dead
# executor's workflows unrecovered for longer than anyone waits for them.
MAX_EXECUTOR_TIMEOUT_SECS = 86_400


def check_settings(changes: JSONObject) -> JSONObject:
    """Validate a settings change; raise InvalidValueError naming the offending field."""
    for key, value in changes.items():
        if key not in DEFAULT_SETTINGS:
            raise InvalidValueError(f"unknown setting '{key}'")
        if key == "privateMode":
            if not isinstance(value, bool):
                raise InvalidValueError("setting 'privateMode' must be a boolean")
        elif key == "executorTimeoutSecs" and value is None:
            raise InvalidValueError("setting 'executorTimeoutSecs' cannot be cleared")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidValueError(f"setting '{key}' must be a positive integer")
        elif key == "executorTimeoutSecs" and isinstance(value, int) and value > MAX_EXECUTOR_TIMEOUT_SECS:
            raise InvalidValueError(f"setting 'executorTimeoutSecs' must be at most {MAX_EXECUTOR_TIMEOUT_SECS}")
    return changes


@versioned({
    "Registered": 1, "Reregistered": 1, "SettingsChanged": 1, "Deleted": 1, "DataPlaneConfigured": 1,
    "DataPlaneRemoved": 1, "AutoscalingPolicySet": 1, "AutoscalingPolicyCleared": 1,
})
class App(Aggregate):
    """A registered application. Deleted apps keep their history and can be registered again."""

    @staticmethod
    def create_id(org: str, name: str, **_: object) -> UUID:
        return app_id(org, name)

    @event("Registered")
    def __init__(self, org: str, name: str, at: datetime, by: str = "relay") -> None:
        self.org = org
        self.name = name
        self.created_at = at
        self.updated_at = at
        self.deleted = False
        self.settings: JSONObject = dict(DEFAULT_SETTINGS)
        self.data_plane: JSONObject | None = None
        self.autoscaling_policy: AutoscalingPolicy | None = None

    @classmethod
    def register(cls, org: str, name: str, at: datetime, by: str = "relay") -> App:
        """`by` names who asked (admin, api_key:NAME, cli): the audit log shows it."""
        return cls(org=check_org_name(org), name=check_app_name(name), at=at, by=by)

    @classmethod
    def register_on(cls, found: App | None, org: str, name: str, at: datetime, by: str = "relay") -> App:
        """Register the application, or register again the deleted one ``found``; AlreadyExistsError if it lives."""
        if found is None:
            return cls.register(org, name, at, by)
        if not found.deleted:
            raise AlreadyExistsError(f"application '{name}' exists in '{org}'")
        found.register_again(at, by)
        return found

    def register_again(self, at: datetime, by: str = "relay") -> None:
        if not self.deleted:
            raise IllegalTransitionError(f"application '{self.name}'", "registered", "register it again")
        self._reregistered(at=at, by=by)

    @event("Reregistered")
    def _reregistered(self, at: datetime, by: str) -> None:
        self.deleted = False
        self.settings = dict(DEFAULT_SETTINGS)
        self.data_plane = None
        self.autoscaling_policy = None
        self.updated_at = at

    def change_settings(self, changes: JSONObject, at: datetime, by: str = "relay") -> None:
        self._check_live("change its settings")
        check_settings(changes)
        effective = {k: v for k, v in changes.items() if self.settings.get(k) != v}
        if effective:
            self._settings_changed(changes=effective, at=at, by=by)

    @event("SettingsChanged")
    def _settings_changed(self, changes: JSONObject, at: datetime, by: str) -> None:
        self.settings.update(changes)
        self.updated_at = at

    def configure_data_plane(self, config: JSONObject, at: datetime, by: str = "relay") -> None:
        """Where the app's system database is (by reference, never the URL) and what Relay may do there."""
        self._check_live("configure its data plane")
        checked = check_data_plane(config)
        if checked != self.data_plane:
            self._data_plane_configured(config=checked, at=at, by=by)

    @event("DataPlaneConfigured")
    def _data_plane_configured(self, config: JSONObject, at: datetime, by: str) -> None:
        self.data_plane = dict(config)
        self.updated_at = at

    def remove_data_plane(self, at: datetime, by: str = "relay") -> None:
        self._check_live("remove its data plane")
        if self.data_plane is not None:
            self._data_plane_removed(at=at, by=by)

    @event("DataPlaneRemoved")
    def _data_plane_removed(self, at: datetime, by: str) -> None:
        self.data_plane = None
        self.updated_at = at

    def set_autoscaling_policy(self, policy: object, at: datetime, by: str = "relay") -> None:
        """Store the queue-based autoscaling policy (events/autoscaling.py); the queue itself is checked against an
        executor by the caller, which the domain cannot ask."""
        self._check_live("set its autoscaling policy")
        checked = check_policy(policy)
        if checked != self.autoscaling_policy:
            self._autoscaling_policy_set(policy=checked, at=at, by=by)

    @event("AutoscalingPolicySet")
    def _autoscaling_policy_set(self, policy: AutoscalingPolicy, at: datetime, by: str) -> None:
        self.autoscaling_policy = policy.copy()
        self.updated_at = at

    def clear_autoscaling_policy(self, at: datetime, by: str = "relay") -> None:
        """Clearing an absent policy records nothing (and succeeds: the reference's DELETE does)."""
        self._check_live("clear its autoscaling policy")
        if self.autoscaling_policy is not None:
            self._autoscaling_policy_cleared(at=at, by=by)

    @event("AutoscalingPolicyCleared")
    def _autoscaling_policy_cleared(self, at: datetime, by: str) -> None:
        self.autoscaling_policy = None
        self.updated_at = at

    def delete(self, at: datetime, by: str = "relay") -> None:
        self._check_live("delete it")
        self._deleted(at=at, by=by)

    @event("Deleted")
    def _deleted(self, at: datetime, by: str) -> None:
        self.deleted = True
        self.updated_at = at

    def _check_live(self, command: str) -> None:
        if self.deleted:
            raise IllegalTransitionError(f"application '{self.name}'", "deleted", command)
