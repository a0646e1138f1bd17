"""Where alerts go, as configured: the webhook of RELAY_ALERT_WEBHOOK_URL, the Slack and PagerDuty sinks, and what
alerting needs from the process (AlertingConfig, which the runtime, actors/runtime.py, builds). The senders are
actors/delivery.py and actors/adapters/sinks.py; the evaluation is actors/alerting.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class WebhookConfig:
    """Where alerts are POSTed as JSON. The URL and the secret come from the environment only: they may be
    secrets themselves (a Slack hook), so neither reaches the event log, the API or the logs."""

    url: str
    secret: str | None = None
    timeout_s: float = 5.0
    attempts: int = 3
    backoff_s: float = 0.5


@dataclass(frozen=True)
class SinkConfig:
    """A Slack or PagerDuty sink (``name``), from the environment only. ``url`` is the Slack hook (a secret) or
    PagerDuty's endpoint; ``routing_key`` PagerDuty's integration key (a secret)."""

    name: str
    url: str
    routing_key: str | None = None
    timeout_s: float = 5.0
    attempts: int = 3
    backoff_s: float = 0.5

    def __repr__(self) -> str:  # never the URL or the key, wherever a config is printed
        return f"SinkConfig(name={self.name!r})"


class RemoteExecutors(Protocol):
    """Executors of an application connected to other instances, and a way to send one a request (Runtime
    passes actors/adapters/forwarder.py's Forwarder; `send` raises when no answer comes back)."""

    def executors(self, org: str, app: str) -> list[Any]: ...

    def send(self, executor: Any, org: str, app: str, request: Any, timeout: float) -> object: ...


@dataclass(frozen=True)
class AlertingConfig:
    """What alerting needs from the process beside the jobs' intervals (actors/configuration/jobs.py); the runtime,
    actors/runtime.py, builds it.

    ``peers(org, app)``: the live executors of an application connected to this instance (the receiving
    application of an alert); ``remote``: those connected to other instances, and how to reach them (HA);
    ``sinks``: Slack and PagerDuty, when configured; ``data_plane(org, app)``: the application's data plane
    (actors/adapters/dataplane/client.py), None when it has none."""

    webhook: WebhookConfig | None = None
    peers: Callable[[str, str], list[object]] = field(default=lambda org, app: [])
    remote: RemoteExecutors | None = None
    sinks: tuple[SinkConfig, ...] = ()
    data_plane: Callable[[str, str], Any] = field(default=lambda org, app: None)
