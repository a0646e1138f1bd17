"""The API's surface, on a real (not started) Relay app: undeclared query parameters are ignored and counted,
/docs is Redoc from local files only, /openapi.yaml is /openapi.json."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask import Flask
from flask.testing import FlaskClient

ADMIN = "surface-test-admin-token"


@pytest.fixture(scope="module")
def app() -> Iterator[Flask]:
    from relay.actors.configuration.settings import Settings
    from relay.actors.runtime import Runtime
    from relay.web.wsgi import create_app

    with tempfile.TemporaryDirectory(prefix="relay-surface-") as data_dir:
        rt = Runtime(Settings(data_dir=Path(data_dir), admin_token=ADMIN))
        try:
            yield create_app(rt)
        finally:
            rt.stop()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.data
    assert response.mimetype == "application/problem+json"
    return response.get_json()


def _ignored(client: FlaskClient, operation_id: str) -> float:
    """relay_api_ignored_query_params_total{operation=operation_id}, as GET /metrics shows it."""
    text = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).get_data(as_text=True)
    series = f'relay_api_ignored_query_params_total{{operation="{operation_id}"}} '
    return next((float(line.removeprefix(series)) for line in text.splitlines() if line.startswith(series)), 0.0)


@pytest.mark.parametrize(("path", "param", "operation_id"), [
    ("/relay/v1/instances", "limit", "listRelayInstances"),  # a list that declares none
    ("/relay/v1/events", "newerClientFilter", "listRelayEvents"),  # a list that declares others
    ("/healthz", "verbose", "getHealth"),
    ("/openapi.json", "x", "getOpenAPI"),
])
def test_an_undeclared_query_parameter_is_ignored_and_counted(client: FlaskClient, path: str, param: str,
                                                              operation_id: str) -> None:
    """Clients written against Conductor send parameters Relay does not know: answered as without them."""
    auth = {"Authorization": f"Bearer {ADMIN}"}
    before = _ignored(client, operation_id)
    plain = client.get(path, headers=auth)
    with_param = client.get(f"{path}?{param}=secret-value-1", headers=auth)
    assert with_param.status_code == plain.status_code == 200, with_param.data
    assert _ignored(client, operation_id) == before + 1
    metrics = client.get("/metrics", headers=auth).get_data(as_text=True)
    assert "secret-value-1" not in metrics and f'"{param}"' not in metrics  # the label is the operation id


def test_an_undeclared_parameter_changes_no_other_answer(client: FlaskClient) -> None:
    assert client.get("/v2/orgs/local/apps?nope=1").status_code == 401  # authentication still comes first
    auth = {"Authorization": f"Bearer {ADMIN}"}
    assert client.get("/v2/orgs/local/apps?nope=1", headers=auth).status_code == 404  # the org is not created


@pytest.mark.parametrize("query", ["limit=abc", "limit=-1", "since=yesterday"])
def test_a_declared_parameter_with_a_bad_value_is_still_a_4xx(client: FlaskClient, query: str) -> None:
    body = _problem(client.get(f"/relay/v1/events?{query}&unknownToo=1",
                               headers={"Authorization": f"Bearer {ADMIN}"}), 422)
    assert body["errors"][0]["location"] == f"query.{query.split('=')[0]}", body


def test_declared_parameters_pass(client: FlaskClient) -> None:
    response = client.get("/relay/v1/events?limit=5&since=0", headers={"Authorization": f"Bearer {ADMIN}"})
    assert response.status_code == 200, response.data
    # the console's pages declare nothing and are left alone
    assert client.get("/login?next=/").status_code == 200


def test_docs_is_redoc_served_from_local_files(client: FlaskClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    refs = re.findall(r'(?:src|href|spec-url)="([^"]*)"', html)
    assert refs, html
    assert all(ref.startswith("/") and not ref.startswith("//") for ref in refs), refs
    assert {"/openapi.json", "/static/redoc.standalone.js", "/static/docs.js", "/static/favicon.svg"} <= set(refs)
    for ref in refs:
        assert client.get(ref).status_code == 200, ref
    # and the browser may fetch nothing else (Redoc's sidebar logo is on its CDN)
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "img-src 'self' data:" in policy
    script = client.get("/static/redoc.standalone.js")
    assert b"ReDoc" in script.data[:100_000] or b"Redoc" in script.data[:100_000]
    # the one remote image of the bundle (its sidebar logo) is Relay's favicon, relative to /docs (issue 29)
    assert b"cdn.redoc.ly" not in script.data and b'src:"static/favicon.svg"' in script.data
    script.close()


def test_openapi_yaml_is_the_json_document(client: FlaskClient) -> None:
    as_json = client.get("/openapi.json").get_json()
    response = client.get("/openapi.yaml")
    assert response.status_code == 200
    assert response.mimetype == "application/yaml"
    assert yaml.safe_load(response.get_data(as_text=True)) == as_json
    assert {"/docs", "/openapi.yaml"} <= set(as_json["paths"])
