"""GET /v2/orgs/{org} and PATCH /v2/orgs/{org}/apps/{app} over a started (not served) Relay runtime:
the Organization has every field the reference requires, with a self-hosted Relay's values; a JSON null
clears a retention setting (recorded as App.SettingsChanged with the setting null) and GET shows it cleared,
while the settings the reference's Application never shows as null still refuse it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from relay.actors.configuration.settings import Settings
from relay.actors.runtime import Runtime
from relay.events.application import MAX_EXECUTOR_TIMEOUT_SECS
from relay.web.wsgi import create_app
from tests.support.openapi_ref import check, reference, response_schema

ADMIN = "org-settings-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
APP = "/v2/orgs/local/apps/retained"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[FlaskClient]:
    rt = Runtime(Settings(data_dir=tmp_path, admin_token=ADMIN, instance_id="relay-unit", port=18091))
    rt.start()
    try:
        app = create_app(rt)
        assert rt.wait_for_views(), "the views never caught up with the log"
        yield app.test_client()
    finally:
        rt.stop()


def call(client: FlaskClient, method: str, path: str, body: Any = None) -> Any:
    return client.open(path, method=method, json=body, headers=AUTH)


def settings_events(client: FlaskClient) -> list[dict[str, Any]]:
    answer = call(client, "GET", "/relay/v1/events?app=retained&type=App.SettingsChanged&limit=100")
    assert answer.status_code == 200
    return [e["details"] for e in answer.get_json()["events"]]


def test_the_organization_has_every_field_of_the_reference(client: FlaskClient) -> None:
    response = call(client, "GET", "/v2/orgs/local")
    assert response.status_code == 200
    org = response.get_json()
    ref = reference()
    schema = response_schema(ref, "/v2/orgs/{orgName}", "get")
    assert check(ref, schema, org) == []
    required = ref["components"]["schemas"]["Organization"]["required"]
    assert set(org) == set(required)
    assert org["id"] == org["name"] == "local"
    assert datetime.fromisoformat(org["createdAt"]).tzinfo is not None
    assert org["subscriptionPlan"] == "free"
    no_limit = 2**31 - 1  # int32's largest: Relay limits neither apps nor keeps its audit log for less
    assert org["maxApps"] == org["maxConductorApps"] == org["auditLogRetentionDays"] == no_limit
    assert org["maxDatabaseInstances"] == org["maxVms"] == org["maxTeamMembers"] == 0
    assert org["defaultRdsInstanceClassType"] == ""
    assert call(client, "GET", "/v2/orgs/nosuchorg").status_code == 404


def test_null_clears_a_retention_setting(client: FlaskClient) -> None:
    assert call(client, "PUT", APP).status_code == 204
    limits = {"gcRowsThreshold": 500, "gcTimeThresholdMs": 86_400_000, "globalTimeoutMs": 3_600_000}
    assert call(client, "PATCH", APP, limits).status_code == 204
    assert {k: call(client, "GET", APP).get_json()[k] for k in limits} == limits

    response = call(client, "PATCH", APP, {"gcRowsThreshold": None, "globalTimeoutMs": None})
    assert response.status_code == 204, response.get_data(as_text=True)
    doc = call(client, "GET", APP).get_json()
    assert doc["gcRowsThreshold"] is None and doc["globalTimeoutMs"] is None
    assert doc["gcTimeThresholdMs"] == 86_400_000  # not named: unchanged
    assert check(reference(), response_schema(reference(), "/v2/orgs/{orgName}/apps/{appName}", "get"), doc) == []

    events = settings_events(client)
    assert events[-1]["changes"] == {"gcRowsThreshold": None, "globalTimeoutMs": None}
    # Clearing what is clear already records nothing.
    assert call(client, "PATCH", APP, {"gcRowsThreshold": None}).status_code == 204
    assert len(settings_events(client)) == len(events)


@pytest.mark.parametrize("key", ["executorTimeoutSecs", "privateMode"])
def test_null_is_refused_for_settings_that_cannot_be_unset(client: FlaskClient, key: str) -> None:
    assert call(client, "PUT", APP).status_code == 204
    before = call(client, "GET", APP).get_json()
    response = call(client, "PATCH", APP, {key: None})
    assert response.status_code == 422
    assert response.get_json()["errors"][0]["location"] == f"body.{key}"
    assert call(client, "GET", APP).get_json() == before


def test_the_grace_period_is_at_most_a_day(client: FlaskClient) -> None:
    assert call(client, "PUT", APP).status_code == 204
    before = call(client, "GET", APP).get_json()
    for too_long in (2**63 - 1, MAX_EXECUTOR_TIMEOUT_SECS + 1):
        response = call(client, "PATCH", APP, {"executorTimeoutSecs": too_long})
        assert response.status_code == 422 and "at most 86400" in str(response.get_json())
    assert call(client, "GET", APP).get_json() == before
    assert call(client, "PATCH", APP, {"executorTimeoutSecs": MAX_EXECUTOR_TIMEOUT_SECS}).status_code == 204
    assert call(client, "GET", APP).get_json()["executorTimeoutSecs"] == MAX_EXECUTOR_TIMEOUT_SECS


@pytest.mark.parametrize("key", ["gcRowsThreshold", "gcTimeThresholdMs", "globalTimeoutMs"])
def test_settings_beyond_int64_are_refused_and_int64_max_is_kept(client: FlaskClient, key: str) -> None:
    assert call(client, "PUT", APP).status_code == 204
    before = call(client, "GET", APP).get_json()
    response = call(client, "PATCH", APP, {key: 2**63})
    assert response.status_code == 422 and "int64" in response.get_json()["detail"] + str(response.get_json())
    assert call(client, "GET", APP).get_json() == before
    assert call(client, "PATCH", APP, {key: 2**63 - 1}).status_code == 204
    assert call(client, "GET", APP).get_json()[key] == 2**63 - 1
