"""The periodic jobs' own configuration: how often each job of an application runs (alerting evaluation, managed
retention, the autoscaling refresh) and how long their requests to executors wait. Built once from the settings
(RELAY_ALERT_INTERVAL_S, RELAY_RETENTION_INTERVAL_S, RELAY_AUTOSCALE_INTERVAL_S, RELAY_REQUEST_TIMEOUT_S)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.actors.configuration.settings import Settings

MAX_PROBE_TIMEOUT_S = 10.0  # an UnresponsiveApplication probe waits at most this long, however long requests may


@dataclass(frozen=True)
class JobsConfig:
    """Built by ``from_settings`` alone: the defaults are the settings' (no second copy here)."""

    alert_interval_s: float
    retention_interval_s: float
    autoscale_interval_s: float
    request_timeout_s: float
    probe_timeout_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> JobsConfig:
        timeout = settings.limits.request_timeout_s
        return cls(alert_interval_s=settings.alert_interval_s, retention_interval_s=settings.retention_interval_s,
                   autoscale_interval_s=settings.autoscale_interval_s, request_timeout_s=timeout,
                   probe_timeout_s=min(timeout, MAX_PROBE_TIMEOUT_S))
