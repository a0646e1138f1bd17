"""Where a fired alert goes: every executor of the receiving application (an `alert` frame each), those
connected here directly and, with several instances (HA), those connected to another instance through it
(the signed forward of actors/adapters/forwarder.py); the webhook of RELAY_ALERT_WEBHOOK_URL (JSON, retried with
backoff, signed when a secret is set); and Slack and PagerDuty when configured (actors/adapters/sinks.py). The sinks
do not depend on executors: they get the alert when no executor is connected at all.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from relay.actors import metrics
from relay.actors.adapters.sinks import http_post, post_with_retries, send_sink
from relay.actors.configuration.alerting import RemoteExecutors, SinkConfig, WebhookConfig
from relay.actors.executor_requests import Transport, request_all
from relay.wire import signing
from relay.wire.catalog_requests import AlertRequest
from relay.wire.json_types import JSONObject
from relay.wire.messages import new_request_id

log = logging.getLogger("relay.actors.delivery")


@dataclass(frozen=True)
class Delivery:
    """Where an alert went (recorded as Alert.Delivered)."""

    delivered_to: list[str]
    failed: list[dict[str, str]]
    webhook: JSONObject | None
    sinks: dict[str, JSONObject] = field(default_factory=dict)  # Slack's and PagerDuty's outcomes


@dataclass(frozen=True)
class Notice:
    """One notification: the `alert` frame's fields for the receiving application's executors (when
    ``to_executors``), and the JSON the webhook, Slack and PagerDuty get (``payload``), to the sinks named in
    ``sinks`` ("webhook", "slack", "pagerduty"; None: every one configured)."""

    org: str
    app: str
    receiving_app: str
    rule_type: str
    message: str
    metadata: dict[str, str]
    payload: JSONObject
    to_executors: bool = True
    sinks: frozenset[str] | None = None

    def goes_to(self, sink: str) -> bool:
        return self.sinks is None or sink in self.sinks


def api_time(at: datetime) -> str:
    """The API's one time format (web/api_values.format_time): RFC 3339, UTC, milliseconds."""
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def incident_payload(incident: Any, kind: str, at: datetime) -> JSONObject:
    """The webhook's JSON for a notification of an incident (events/incidents.py): which incident, its state
    ("open" or "resolved") and this notification's kind ("open", "renotify", "resolve"). ``sequence`` (the
    incident's number) and ``firedAt`` (this notification's time) keep the names of release 0.1.0's alerts."""
    return {
        "incidentId": str(incident.id),
        "state": "resolved" if incident.resolved else "open",
        "notification": kind,
        "org": incident.org,
        "app": incident.app,
        "ruleId": incident.rule_id,
        "ruleType": incident.rule_type,
        "sequence": incident.number,
        "receivingApp": incident.receiving_app,
        "message": incident.message,
        "metadata": dict(incident.metadata),
        "openedAt": api_time(incident.opened_at),
        "resolvedAt": api_time(incident.resolved_at) if incident.resolved_at else None,
        "acknowledged": incident.acknowledged_at is not None,
        "firedAt": api_time(at),
        "instance": incident.instance,
    }


def alert_payload(alert: Any) -> JSONObject:
    """The webhook's JSON: what fired, never a key or the webhook's own URL or secret."""
    return {
        "alertId": str(alert.id),
        "org": alert.org,
        "app": alert.app,
        "ruleId": alert.rule_id,
        "ruleType": alert.rule_type,
        "sequence": alert.sequence,
        "receivingApp": alert.receiving_app,
        "message": alert.message,
        "metadata": dict(alert.metadata),
        "firedAt": api_time(alert.fired_at),
        "instance": alert.instance,
    }


def send_webhook(
    config: WebhookConfig,
    payload: JSONObject,
    *,
    post: Callable[[str, bytes, dict[str, str], float], int] = http_post,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
) -> JSONObject:
    """POST ``payload`` with retries and exponential backoff (5xx, 429 and network errors are retried,
    other 4xx are not). With a secret, ``X-Relay-Signature: sha256=HMAC(secret, "<timestamp>.<body>")``
    and ``X-Relay-Timestamp`` let the receiver check it came from Relay; the secret is never sent."""
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()

    def headers() -> dict[str, str]:
        sent = {"Content-Type": "application/json", "User-Agent": "relay-alerting"}
        if config.secret:
            stamp = int(now())
            sent |= {signing.TIMESTAMP_HEADER: str(stamp),
                     signing.SIGNATURE_HEADER: f"sha256={signing.sign(config.secret, stamp, body)}"}
        return sent

    return post_with_retries(config.url, body, headers, timeout_s=config.timeout_s, attempts=config.attempts,
                             backoff_s=config.backoff_s, post=post, sleep=sleep)


@dataclass(kw_only=True, eq=False)
class Deliverer:
    """Sends a notification to the receiving application's executors, here and on other instances, to the
    webhook and to the other sinks (Slack, PagerDuty): `send` a `Notice` (an incident's), or call it with a
    release 0.1.0 `Alert`."""

    transport: Transport
    peers: Callable[[str, str], list[Any]]
    timeout_s: float
    webhook: WebhookConfig | None
    send_hook: Callable[[WebhookConfig, JSONObject], JSONObject] = send_webhook
    remote: RemoteExecutors | None = None
    sinks: tuple[SinkConfig, ...] = ()
    send_to_sink: Callable[[SinkConfig, JSONObject], JSONObject] = send_sink

    def __call__(self, alert: Any) -> Delivery:
        """Send an `Alert` (release 0.1.0's one notification per firing) everywhere."""
        return self.send(Notice(alert.org, alert.app, alert.receiving_app, alert.rule_type, alert.message,
                                dict(alert.metadata), alert_payload(alert)))

    def send(self, notice: Notice) -> Delivery:
        org = notice.org
        delivered: list[str] = []
        failed: list[dict[str, str]] = []
        if notice.to_executors:
            self._send_frames(notice, delivered, failed)
        hook = None
        if self.webhook is not None and notice.goes_to("webhook"):
            hook = self.send_hook(self.webhook, notice.payload)
            metrics.ALERT_DELIVERIES.labels(org, notice.app, "webhook", hook["outcome"]).inc()
        sinks = {sink.name: self._send_to_sink(sink, notice.payload) for sink in self.sinks
                 if notice.goes_to(sink.name)}
        for name, sent in sinks.items():
            metrics.ALERT_DELIVERIES.labels(org, notice.app, name, sent["outcome"]).inc()
        return Delivery(delivered, failed, hook, sinks)

    def _send_frames(self, notice: Notice, delivered: list[str], failed: list[dict[str, str]]) -> None:
        """The SDK's `alert` frame to every executor of the receiving application, here and on peers."""
        org, receiver = notice.org, notice.receiving_app
        frame = AlertRequest(name=notice.rule_type, message=notice.message, metadata=dict(notice.metadata))
        executors = list(self.peers(org, receiver))
        for answer in request_all(org, receiver, self.transport, [(e, frame) for e in executors], self.timeout_s):
            if answer.outcome == metrics.OK and getattr(answer.response, "success", True) is not False:
                delivered.append(answer.executor.executor_id)
            else:
                reason = answer.reason or "executor answered success: false"
                failed.append({"executorId": answer.executor.executor_id, "reason": reason})
        remote = self._remote_executors(org, receiver, {e.executor_id for e in executors})
        for executor in remote:
            self._send_remote(executor, org, receiver, frame, delivered, failed)
        if not executors and not remote:
            failed.append({"executorId": "*", "reason": f"no executor of '{receiver}' is connected"})
        for outcome, count in (("delivered", len(delivered)), ("failed", len(failed))):
            if count:
                metrics.ALERT_DELIVERIES.labels(org, notice.app, "executor", outcome).inc(count)

    def _send_to_sink(self, sink: SinkConfig, payload: JSONObject) -> JSONObject:
        try:
            return self.send_to_sink(sink, payload)
        except Exception as error:  # one sink's fault must not keep the alert from the others
            log.warning("sending an alert to %s failed inside Relay: %s", sink.name, type(error).__name__)
            return {"outcome": "failed", "attempts": 0, "status": None, "error": type(error).__name__}

    def _remote_executors(self, org: str, receiver: str, here: set[str]) -> list[object]:
        if self.remote is None:
            return []
        try:
            return [e for e in self.remote.executors(org, receiver) if e.executor_id not in here]
        except Exception as error:  # the cluster table unreadable: the local delivery still counts
            log.warning("could not list %s/%s's executors on other instances: %s", org, receiver,
                        type(error).__name__)
            return []

    def _send_remote(self, executor: Any, org: str, receiver: str, frame: AlertRequest,
                     delivered: list[str], failed: list[dict[str, str]]) -> None:
        assert self.remote is not None
        # A fresh request id per target: the forward's signature covers it, and the peer refuses a repeat.
        attempt = dataclasses.replace(frame, request_id=new_request_id())
        try:
            response = self.remote.send(executor, org, receiver, attempt, self.timeout_s)
        except Exception as error:
            failed.append({"executorId": executor.executor_id, "reason": str(error)[:300] or type(error).__name__})
            return
        if getattr(response, "success", True) is False or getattr(response, "error_message", None):
            detail = getattr(response, "error_message", None) or "success: false"
            failed.append({"executorId": executor.executor_id, "reason": f"executor answered an error: {detail}"})
        else:
            delivered.append(executor.executor_id)
