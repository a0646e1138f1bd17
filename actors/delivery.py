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
from datetime import UTC
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
        # The API's one time format (web/api_values.format_time): RFC 3339, UTC, milliseconds.
        "firedAt": alert.fired_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
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
    """Sends a fired alert to the receiving application's executors, here and on other instances, to the
    webhook and to the other sinks (Slack, PagerDuty)."""

    transport: Transport
    peers: Callable[[str, str], list[Any]]
    timeout_s: float
    webhook: WebhookConfig | None
    send_hook: Callable[[WebhookConfig, JSONObject], JSONObject] = send_webhook
    remote: RemoteExecutors | None = None
    sinks: tuple[SinkConfig, ...] = ()
    send_to_sink: Callable[[SinkConfig, JSONObject], JSONObject] = send_sink

    def __call__(self, alert: Any) -> Delivery:
        org, receiver = alert.org, alert.receiving_app
        frame = AlertRequest(name=alert.rule_type, message=alert.message, metadata=dict(alert.metadata))
        executors = list(self.peers(org, receiver))
        delivered: list[str] = []
        failed: list[dict[str, str]] = []
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
                metrics.ALERT_DELIVERIES.labels(alert.org, alert.app, "executor", outcome).inc(count)
        payload = alert_payload(alert)
        hook = None
        if self.webhook is not None:
            hook = self.send_hook(self.webhook, payload)
            metrics.ALERT_DELIVERIES.labels(alert.org, alert.app, "webhook", hook["outcome"]).inc()
        sinks = {sink.name: self._send_to_sink(sink, payload) for sink in self.sinks}
        for name, sent in sinks.items():
            metrics.ALERT_DELIVERIES.labels(alert.org, alert.app, name, sent["outcome"]).inc()
        return Delivery(delivered, failed, hook, sinks)

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
