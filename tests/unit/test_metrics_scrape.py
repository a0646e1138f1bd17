"""GET /metrics and /v1/metrics over a real (not served) Relay app and store: what the views say (executors by
state and version, recoveries by outcome, instances, projection lag), who may read which series, OpenMetrics
negotiation; Relay's recovery_count rows of GET .../metrics; and the collectors fed at the edges."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from relay.actors import metrics
from relay.actors.application import register_app
from relay.actors.configuration.limits import Limits
from relay.actors.configuration.settings import Settings
from relay.actors.errors import ExecutorFailedError, TimedOutError
from relay.actors.runtime import Runtime
from relay.actors.services.executor_calls import timed_send
from relay.events.organization import Organization
from relay.events.refs import org_ref
from relay.projections.identity import hash_key
from relay.web.transport.websocket import HandshakeGate, check_handshake
from relay.web.wsgi import create_app
from relay.wire.catalog_requests import ListQueuesRequest
from relay.wire.errors import ExecutorGoneError
from relay.wire.responses import ListQueuesResponse
from tests.unit.store_cases import at, history

ADMIN = "metrics-test-admin-token"
SHOP_KEY = "dbos_shop_metrics_key_0123456789abcdef"
PLAIN_KEY = "dbos_plain_key_0123456789abcdef0123"
OTHER_KEY = "dbos_other_org_key_0123456789abcdef"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Runtime, FlaskClient]]:
    # No executor can connect to a Runtime that is not served: a request waits for the registry's executors to
    # reconnect up to the request timeout (5 s at most), here 0.5 s.
    rt = Runtime(Settings(data_dir=tmp_path, admin_token=ADMIN, limits=Limits(request_timeout_s=0.5)))
    try:
        history(rt.log)  # acme: shop (3 executors, one recovered) and billing (deleted); instance relay-a
        rt.log.change(org_ref("acme"),
                      lambda organization: organization.issue_key(
                          "shop-metrics", hash_key(SHOP_KEY), ["shop"], ["metric.read"], at(40)),
                      create=lambda: Organization.create("acme", at(40)))
        rt.log.change(org_ref("acme"),
                      lambda organization: organization.issue_key(
                          "plain", hash_key(PLAIN_KEY), [], ["application.read"], at(41)),
                      create=lambda: Organization.create("acme", at(41)))
        rt.log.change(org_ref("other"),
                      lambda organization: organization.issue_key(
                          "theirs", hash_key(OTHER_KEY), [], ["metric.read"], at(42)),
                      create=lambda: Organization.create("other", at(42)))
        app = create_app(rt)
        register_app(rt.log, "acme", "after", at(50))  # an append after the metrics were installed
        rt.views.catch_up()
        yield rt, app.test_client()
    finally:
        rt.stop()


def scrape(client: FlaskClient, token: str = ADMIN, path: str = "/metrics") -> dict[tuple[str, tuple], float]:
    response = client.get(path, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.data
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True)) for s in family.samples}


def value(scraped: dict[tuple[str, tuple], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in scraped.items() if n == name and set(labels.items()) <= set(ls))


def test_the_scrape_reads_the_views(served: tuple[Runtime, FlaskClient]) -> None:
    _, client = served
    scraped = scrape(client)
    assert value(scraped, "relay_executors", org="acme", app="shop", status="HEALTHY") == 2
    assert value(scraped, "relay_executors", org="acme", app="shop", status="HEALTHY", app_version="1.1.0") == 1
    assert value(scraped, "relay_executors", app="billing") == 0  # deleted
    assert value(scraped, "relay_recoveries_total", app="shop", outcome="failed") == 1
    assert value(scraped, "relay_recoveries_total", app="shop", outcome="acknowledged") == 1
    assert value(scraped, "relay_instances", status="RUNNING") == 1
    assert {dict(ls)["view"]: v for (n, ls), v in scraped.items() if n == "relay_projection_lag_events"} == {
        "registry": 0, "applications": 0, "audit": 0, "alerting": 0, "operations": 0, "instances": 0, "people": 0}
    assert value(scraped, "relay_event_store_position") > 20
    assert value(scraped, "relay_event_store_append_seconds_count") >= 1
    assert value(scraped, "process_cpu_seconds_total") > 0


def test_who_may_read_which_series(served: tuple[Runtime, FlaskClient]) -> None:
    _, client = served
    assert client.get("/metrics").status_code == 401
    assert client.get("/v1/metrics", headers={"Authorization": f"Bearer {PLAIN_KEY}"}).status_code == 403
    mine = scrape(client, SHOP_KEY, "/v1/metrics")
    # A key limited to an application reads that application's series only: not Relay's own (instances,
    # projections), which are everyone's infrastructure (issue 34, ADR 0012).
    assert mine and {dict(ls).get("app") for (_, ls) in mine} == {"shop"}
    assert value(mine, "relay_recoveries_total", app="shop") == 2
    assert not [n for (n, _) in mine if n in ("relay_projection_lag_events", "relay_instances")]
    theirs = scrape(client, OTHER_KEY)
    assert {dict(ls).get("org") for (_, ls) in theirs} - {None} == set()


def test_openmetrics_is_served_to_those_who_ask_for_it(served: tuple[Runtime, FlaskClient]) -> None:
    _, client = served
    response = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}",
                                               "Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.content_type.startswith("application/openmetrics-text")
    assert response.get_data(as_text=True).rstrip().endswith("# EOF")
    plain = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
    assert plain.content_type.startswith("text/plain")


def test_app_metrics_include_relays_recovery_counts(served: tuple[Runtime, FlaskClient]) -> None:
    rt, client = served
    auth = {"Authorization": f"Bearer {SHOP_KEY}"}
    window = {"startTime": at(0).isoformat(), "endTime": at(60).isoformat()}
    response = client.get("/v2/orgs/acme/apps/shop/metrics", query_string=window, headers=auth)
    assert response.status_code == 200, response.data  # no executor is connected: Relay's own rows only
    app_id = rt.views.applications.app("acme", "shop")["id"]  # type: ignore[index]
    assert response.get_json() == [
        {"appId": app_id, "metricType": "recovery_count", "metricName": name, "granularity": 60,
         "timeBucket": "2025-03-01T12:00:00.000Z", "value": 1}
        for name in ("acknowledged", "failed")
    ]
    later = {"startTime": at(100).isoformat(), "endTime": at(200).isoformat()}
    assert client.get("/v2/orgs/acme/apps/shop/metrics", query_string=later, headers=auth).status_code == 503


# -- the collectors -------------------------------------------------------------------------------------


def counted(**labels: str) -> float:
    return value({(s.name, tuple(sorted(s.labels.items()))): s.value
                  for family in metrics.REGISTRY.collect() for s in family.samples}, "relay_executor_requests_total",
                 **labels)


def test_requests_are_counted_by_type_and_outcome() -> None:
    labels = {"org": "unit", "app": "timed", "type": "list_queues"}
    before = {o: counted(**labels, outcome=o) for o in ("ok", "error", "gone", "timeout", "unsupported")}

    def answer(kind: Any) -> Any:
        def send() -> Any:
            if isinstance(kind, BaseException):
                raise kind
            return kind
        return timed_send(send, "unit", "timed", str(ListQueuesRequest().type))

    answer(ListQueuesResponse(type="list_queues", request_id="r"))
    answer(ListQueuesResponse(type="list_queues", request_id="r", error_message="Unknown message type"))
    answer(ListQueuesResponse(type="list_queues", request_id="r", error_message="boom"))
    for error in (ExecutorGoneError("x"), TimedOutError("slow"), ExecutorFailedError("bad")):
        with pytest.raises(type(error)):
            answer(error)
    after = {o: counted(**labels, outcome=o) for o in before}
    assert {o: after[o] - before[o] for o in before} == {"ok": 1, "error": 2, "gone": 1, "timeout": 1,
                                                         "unsupported": 1}


def test_app_metrics_rows_feed_the_per_app_counters() -> None:
    def current(name: str, **labels: str) -> float:
        return value({(s.name, tuple(sorted(s.labels.items()))): s.value
                      for family in metrics.REGISTRY.collect() for s in family.samples}, name, **labels)

    before = current("relay_app_workflows_total", app="counted", workflow_name="greet")
    metrics.count_app_metrics("unit", "counted", [
        {"metric_type": "workflow_count", "metric_name": "greet", "value": "3"},
        {"metric_type": "step_count", "metric_name": "shout", "value": 2},
        {"metric_type": "something_new", "metric_name": "x", "value": 9},
        {"metric_type": "workflow_count", "metric_name": "greet", "value": "not a number"},
    ])
    assert current("relay_app_workflows_total", app="counted", workflow_name="greet") == before + 3
    assert current("relay_app_steps_total", app="counted", step_name="shout") >= 2


def test_refused_handshakes_are_counted_by_status_and_reason_never_by_application() -> None:
    def refused(**labels: str) -> float:
        return metrics.REGISTRY.get_sample_value("relay_executor_handshakes_refused_total", labels) or 0.0

    gate = HandshakeGate(1, wait_s=0)
    assert gate.enter() is not None  # the one place is taken: the next handshake is refused busy
    before = refused(status="503", reason="busy")
    environ = {"PATH_INFO": "/websocket/any-name-at-all/dbos_not_a_key_0123456789", "REMOTE_ADDR": "127.0.0.1"}
    handshake = check_handshake(None, environ,
                                gate=gate)  # type: ignore[arg-type] - refused before the runtime is asked
    assert handshake is not None and handshake.refusal is not None and handshake.refusal.status == 503
    assert refused(status="503", reason="busy") == before + 1
    labelled = {s.labels.get("app") for family in metrics.REGISTRY.collect() for s in family.samples
                if s.name == "relay_executor_handshakes_refused_total"}
    assert labelled == {None}  # the path's application name is anyone's to write: never a label
