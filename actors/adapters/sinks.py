"""Where alerts go over HTTP: the POST with retries every sink shares, and the two services besides the generic
webhook (actors/delivery.py): a Slack incoming webhook and PagerDuty's Events API v2.

Each sink gets the alert as actors/delivery.py `alert_payload` shapes it, and none depends on an executor, so an
alert reaches them when every executor of the application (and of the receiving one) is down. A sink's URL, and
PagerDuty's routing key, come from the environment only: a Slack hook URL is itself a secret, so neither is
logged, recorded (Alert.Delivered holds each sink's outcome: delivered or failed, attempts, status, error), or
put in an error.

- Slack (https://api.slack.com/messaging/webhooks): ``{"text", "blocks"}``; ``text`` is the notification's
  fallback. Block Kit's limits hold: a header's plain text up to 150 characters, a section's text up to 3000,
  at most 10 fields of up to 2000 each; ``&``, ``<`` and ``>`` are escaped as Slack's mrkdwn wants.
- PagerDuty (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/): ``{"routing_key",
  "event_action": "trigger", "dedup_key", "client", "payload": {"summary" (up to 1024 characters), "source",
  "severity" (critical, error, warning or info), "timestamp", "component", "group", "class",
  "custom_details"}}``. An incident's notifications (their payload has an ``incidentId``: events/incidents.py)
  use the dedup key ``relay/incident/{incidentId}``: its opening (and any repeat) is a ``trigger``, its
  resolution a ``resolve`` of the same key (https://developer.pagerduty.com/docs/events-api-v2/resolve-events/:
  ``{"routing_key", "event_action": "resolve", "dedup_key"}``), so each incident is one PagerDuty alert that
  closes by itself. Release 0.1.0's alerts (no incident) keep the rule's key, ``relay/{org}/{app}/{ruleId}``.
  Keys stay under PagerDuty's 255 characters. PagerDuty answers 202; it asks for retries on 429 and 5xx, not on
  400.

An incident's Slack message says whether it opened or resolved (the header starts "Resolved:").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from relay.actors.adapters.http_client import HttpClient, UnreachableError
from relay.actors.configuration.alerting import SinkConfig
from relay.events.alerting import (
    RECOVERY_FLAPPING,
    SLOW_QUEUE,
    STRANDED_VERSION,
    UNRESPONSIVE_APPLICATION,
    WORKFLOW_FAILURE,
)
from relay.wire.json_types import JSONObject

SLACK, PAGERDUTY = "slack", "pagerduty"
# How bad each rule's alert is, for PagerDuty (its four severities).
SEVERITY = {
    UNRESPONSIVE_APPLICATION: "critical",
    STRANDED_VERSION: "error",
    WORKFLOW_FAILURE: "error",
    RECOVERY_FLAPPING: "warning",
    SLOW_QUEUE: "warning",
}
_SLACK_HEADER_CHARS, _SLACK_TEXT_CHARS, _SLACK_FIELD_CHARS, _SLACK_FIELDS = 150, 3000, 2000, 10
_PD_SUMMARY_CHARS, _PD_DEDUP_CHARS = 1024, 255

Post = Callable[[str, bytes, dict[str, str], float], int]


class HttpError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


_CLIENT = HttpClient()  # one pool for every alert POST of this process


def http_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST and return the status; HttpError for 4xx/5xx, OSError for the network (never naming the URL)."""
    try:
        answer = _CLIENT.request("POST", url, body, headers, timeout, max_bytes=65536)
    except UnreachableError as error:
        raise ConnectionError(f"unreachable ({type(error.reason).__name__})") from None
    if answer.status >= 400:
        raise HttpError(answer.status)
    return answer.status


def post_with_retries(
    url: str,
    body: bytes,
    headers: Callable[[], dict[str, str]],
    *,
    timeout_s: float,
    attempts: int,
    backoff_s: float,
    post: Post = http_post,
    sleep: Callable[[float], None] = time.sleep,
) -> JSONObject:
    """POST ``body`` (``headers()`` per attempt) with exponential backoff: 5xx, 429 and network errors are
    retried, other 4xx are not. The outcome, as Alert.Delivered records it (never the URL)."""
    status: int | None = None
    error = ""
    tried = 0
    for attempt in range(1, max(1, attempts) + 1):
        tried = attempt
        try:
            status = post(url, body, headers(), timeout_s)
        except HttpError as failure:
            status, error = failure.status, f"HTTP {failure.status}"
            if failure.status < 500 and failure.status != 429:
                break
        except (OSError, ValueError) as failure:
            status, error = None, type(failure).__name__
        else:
            return {"outcome": "delivered", "attempts": attempt, "status": status, "error": None}
        if attempt < attempts:
            sleep(backoff_s * 2 ** (attempt - 1))
    return {"outcome": "failed", "attempts": tried, "status": status, "error": error}


def _mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_message(payload: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message for an alert (``payload``: actors/delivery.py alert_payload)."""
    where = f"{payload['org']}/{payload['app']}"
    resolved = payload.get("state") == "resolved"
    title = f"{'Resolved: ' if resolved else ''}{payload['ruleType']} on {where}"
    fields = [
        {"type": "mrkdwn", "text": _cut(f"*{_mrkdwn(key)}*\n{_mrkdwn(str(value))}", _SLACK_FIELD_CHARS)}
        for key, value in sorted(payload["metadata"].items())[:_SLACK_FIELDS]
    ]
    what = f"incident {payload['sequence']}" if "incidentId" in payload else f"alert {payload['sequence']}"
    when = f"resolved {payload['resolvedAt']}" if resolved else f"fired {payload['firedAt']}"
    context = (f"rule `{_mrkdwn(payload['ruleId'])}` · {what} · received by "
               f"{_mrkdwn(payload['receivingApp'])} · {when}")
    blocks: list[JSONObject] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, _SLACK_HEADER_CHARS)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(_mrkdwn(payload["message"]), _SLACK_TEXT_CHARS)}},
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(context, _SLACK_TEXT_CHARS)}]})
    text = _cut(_mrkdwn(f"[Relay] {title}: {payload['message']}"), _SLACK_TEXT_CHARS)
    return {"text": text, "blocks": blocks}


def pagerduty_dedup_key(payload: JSONObject) -> str:
    if "incidentId" in payload:
        return f"relay/incident/{payload['incidentId']}"
    return _cut(f"relay/{payload['org']}/{payload['app']}/{payload['ruleId']}", _PD_DEDUP_CHARS)


def pagerduty_event(payload: dict[str, Any], routing_key: str) -> dict[str, Any]:
    """A PagerDuty Events API v2 event for a notification (``payload``: actors/delivery.py alert_payload or
    incident_payload): ``trigger``, or ``resolve`` for a resolved incident."""
    if payload.get("state") == "resolved":
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": pagerduty_dedup_key(payload)}
    where = f"{payload['org']}/{payload['app']}"
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": pagerduty_dedup_key(payload),
        "client": "Relay",
        "payload": {
            "summary": _cut(f"{payload['ruleType']} on {where}: {payload['message']}", _PD_SUMMARY_CHARS),
            "source": where,
            "severity": SEVERITY.get(payload["ruleType"], "error"),
            "timestamp": payload["firedAt"],
            "component": payload["app"],
            "group": payload["org"],
            "class": payload["ruleType"],
            "custom_details": payload,
        },
    }


def send_sink(
    config: SinkConfig,
    payload: JSONObject,
    *,
    post: Post = http_post,
    sleep: Callable[[float], None] = time.sleep,
) -> JSONObject:
    """Send one alert to one sink, with retries; its outcome."""
    if config.name == SLACK:
        message = slack_message(payload)
    elif config.name == PAGERDUTY and config.routing_key:
        message = pagerduty_event(payload, config.routing_key)
    else:
        raise ValueError(f"unknown alert sink {config.name!r}")
    body = json.dumps(message, separators=(",", ":")).encode()
    return post_with_retries(
        config.url, body, lambda: {"Content-Type": "application/json", "User-Agent": "relay-alerting"},
        timeout_s=config.timeout_s, attempts=config.attempts, backoff_s=config.backoff_s, post=post, sleep=sleep,
    )
