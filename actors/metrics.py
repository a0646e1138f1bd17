"""Relay's own Prometheus collectors (prometheus-client), fed at the edges where things happen.

One registry per process (`REGISTRY`, not the library's global one): `GET /metrics` (web/api/metrics.py) renders
it together with what it reads from the views at scrape time (executors by state, recoveries by outcome,
projection lag, instances). Everything here is a counter or a histogram that code increments as it acts:

- executor connections and disconnections (actors/executor.py), and handshakes refused, by status and reason
  (web/transport/websocket.py);
- requests sent to executors, by type and outcome, with their latency (actors/services/executor_calls.py, and the
  alerting and retention actors);
- alerts fired and their deliveries, retention runs (actors/alerting.py, actors/retention.py);
- event-store appends and how long each took (a RelayLog save observer);
- per-application workflow and step counts, as the executors report them (get_metrics, each evaluation
  interval);
- API query parameters ignored because their operation does not declare them, by operation id (web/api/openapi.py).

Label values are organization, application, message-type and rule-type names, and fixed outcome words:
never a key, a workflow input, or an executor's error text.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.process_collector import ProcessCollector

from relay.wire.codec import is_unknown_type_error
from relay.wire.responses import Response

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# Request outcomes.
OK = "ok"  # answered without error_message
ERROR = "error"  # answered with an error_message
UNSUPPORTED = "unsupported"  # "Unknown message type": the executor's SDK lacks the type
GONE = "gone"  # the socket closed before the answer
TIMEOUT = "timeout"  # no answer in time

EXECUTOR_CONNECTS = Counter(
    "relay_executor_connects", "Executor connections accepted (executor_info answered and recorded).",
    ["org", "app"], registry=REGISTRY,
)
EXECUTOR_DISCONNECTS = Counter(
    "relay_executor_disconnects", "Executor disconnections recorded.", ["org", "app"], registry=REGISTRY,
)
# Refused executor handshakes, by HTTP status and reason (fixed words: never the application named in the path,
# which anyone may write, nor an address).
HANDSHAKES_REFUSED = Counter(
    "relay_executor_handshakes_refused",
    "Executor WebSocket handshakes refused: 503 busy (RELAY_MAX_HANDSHAKES_IN_FLIGHT), at_capacity "
    "(RELAY_MAX_CONNECTIONS), store_unavailable; 429 too_many_failures; 401/403 refused (key or application).",
    ["status", "reason"], registry=REGISTRY,
)
EXECUTOR_REQUESTS = Counter(
    "relay_executor_requests", "Requests sent to executors, by message type and outcome.",
    ["org", "app", "type", "outcome"], registry=REGISTRY,
)
EXECUTOR_REQUEST_SECONDS = Histogram(
    "relay_executor_request_seconds", "Time from sending a request to an executor to its answer (or giving up).",
    ["org", "app", "type"], buckets=_LATENCY_BUCKETS, registry=REGISTRY,
)
ALERTS_FIRED = Counter(
    "relay_alerts_fired", "Alerts fired (recorded) by alerting rules.", ["org", "app", "rule_type"],
    registry=REGISTRY,
)
ALERT_DELIVERIES = Counter(
    "relay_alert_deliveries", "Alert deliveries: to executors of the receiving application, the webhook, Slack and "
    "PagerDuty (channel).",
    ["org", "app", "channel", "outcome"], registry=REGISTRY,
)
RETENTION_RUNS = Counter(
    "relay_retention_runs", "Managed retention runs started by this instance, by outcome.",
    ["org", "app", "outcome"], registry=REGISTRY,
)
EVENT_STORE_APPEND_SECONDS = Histogram(
    "relay_event_store_append_seconds", "How long one append (save) to the event store took.",
    buckets=_APPEND_BUCKETS, registry=REGISTRY,
)
APP_WORKFLOWS = Counter(
    "relay_app_workflows", "Workflows created, as the application's executors report them (get_metrics).",
    ["org", "app", "workflow_name"], registry=REGISTRY,
)
# API calls' query parameters their operation does not declare (web/api/openapi.py ignores them), by operation id:
# never the parameter's name or value, which any caller may write.
IGNORED_QUERY_PARAMS = Counter(
    "relay_api_ignored_query_params", "Query parameters the API ignored because their operation does not "
    "declare them, by operation id.", ["operation"], registry=REGISTRY,
)
APP_STEPS = Counter(
    "relay_app_steps", "Steps completed, as the application's executors report them (get_metrics).",
    ["org", "app", "step_name"], registry=REGISTRY,
)


# The labelled children of the request series, by label values: `labels()` validates and locks on every call,
# and every request to an executor is counted (nothing here ever removes a child).
_REQUEST_COUNTERS: dict[tuple[str, str, str, str], Any] = {}
_REQUEST_TIMERS: dict[tuple[str, str, str], Any] = {}


def observe_request(org: str, app: str, message_type: str, outcome: str, seconds: float) -> None:
    counted = (org, app, message_type, outcome)
    counter = _REQUEST_COUNTERS.get(counted)
    if counter is None:
        counter = _REQUEST_COUNTERS[counted] = EXECUTOR_REQUESTS.labels(*counted)
    timed = (org, app, message_type)
    timer = _REQUEST_TIMERS.get(timed)
    if timer is None:
        timer = _REQUEST_TIMERS[timed] = EXECUTOR_REQUEST_SECONDS.labels(*timed)
    counter.inc()
    timer.observe(max(0.0, seconds))


_REFUSAL_COUNTERS: dict[tuple[int, str], Any] = {}


def count_refused_handshake(status: int, reason: str) -> None:
    # A connect storm refuses thousands a second (503 busy): the child is looked up once, not labelled each time.
    counter = _REFUSAL_COUNTERS.get((status, reason))
    if counter is None:
        counter = _REFUSAL_COUNTERS[status, reason] = HANDSHAKES_REFUSED.labels(str(status), reason)
    counter.inc()


def count_ignored_query(operation_id: str, count: int) -> None:
    IGNORED_QUERY_PARAMS.labels(operation_id).inc(count)


def outcome_of(response: Response) -> str:
    """OK, UNSUPPORTED or ERROR for a decoded response."""
    if response.error_message is None:
        return OK
    return UNSUPPORTED if is_unknown_type_error(response) else ERROR


def observe_append(seconds: float) -> None:
    EVENT_STORE_APPEND_SECONDS.observe(max(0.0, seconds))


def count_app_metrics(org: str, app: str, rows: list[dict[str, object]]) -> None:
    """Add one window of get_metrics rows ({metric_type, metric_name, value}) to the per-app counters."""
    for row in rows:
        try:
            value = int(float(str(row.get("value") or 0)))
        except ValueError:
            continue
        if value <= 0:
            continue
        name = str(row.get("metric_name") or "")
        kind = row.get("metric_type")
        if kind == "workflow_count":
            APP_WORKFLOWS.labels(org, app, name).inc(value)
        elif kind == "step_count":
            APP_STEPS.labels(org, app, name).inc(value)
