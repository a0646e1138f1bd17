"""GET /openapi.json (and /openapi.yaml, /openapi-3.0.json rendered by web/api/openapi_30.py, and /docs rendering
it): Relay's OpenAPI 3.1 document, generated from the routes it serves; and the check of undeclared query
parameters (ignored and counted, never refused).

Every route of the Flask app appears (its path and methods come from the URL map) but the web console's pages,
which are not API; what the URL map cannot say (operation id, query parameters, body, response) comes from
``@operation(...)`` on the view itself, so a renamed or moved view keeps its description. A route without one
still appears, marked undocumented, and tests/unit/test_openapi_conformance.py fails on it. Flask's variable
names are mapped to the API's (``<org>`` → ``{orgName}``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from functools import partial
from typing import Any

import yaml
from flask import Blueprint, Flask, Response, current_app, jsonify, request, url_for

from relay.actors.metrics import count_ignored_query
from relay.events.releases import RELEASE
from relay.web.api.openapi_30 import to_openapi_30
from relay.web.api.openapi_schemas import COMPONENTS, Schema, array_of, ref
from relay.web.operations import Operation, operation, operation_of
from relay.wire.json_types import JSONObject

bp = Blueprint("openapi", __name__)
log = logging.getLogger("relay.web.api.openapi")

# What the debug line shows of the ignored names (never their values): a few, cut short.
_LOGGED_NAMES = 5
_LOGGED_NAME_CHARS = 40

OPENAPI_VERSION = "3.1.0"

# Flask variable → API path parameter, unless an operation says otherwise.
PATH_NAMES = {
    "org": "orgName",
    "app": "appName",
    "workflow_id": "workflowId",
    "queue_name": "queueName",
    "schedule_name": "scheduleName",
    "executor_id": "executorId",
}
PATH_SCHEMAS: dict[str, Schema] = {
    "orgName": {"type": "string", "minLength": 3, "maxLength": 30, "pattern": "^[a-z0-9_]+$"},
    "appName": {"type": "string", "minLength": 3, "maxLength": 30, "pattern": "^[a-z0-9-_]+$"},
    # The people's operations (served with OAuth on: web/api/org_access.py)
    "username": {"type": "string", "minLength": 3, "maxLength": 30, "pattern": "^[a-z0-9_]+$"},
    "roleName": {"type": "string", "minLength": 3, "maxLength": 30, "pattern": "^[a-zA-Z0-9_]+$"},
    "domain": {"type": "string", "minLength": 4, "maxLength": 253},
}
_VARIABLE = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


def _path_variable(names: Mapping[str, str], match: re.Match[str]) -> str:
    """A Flask route variable (<name> or <converter:name>) as OpenAPI writes it: {publicName}."""
    return "{" + names.get(match.group(1), match.group(1)) + "}"
_ERROR = {
    "description": "Error",
    "content": {"application/problem+json": {"schema": ref("ErrorModel")}},
}


def ignore_undeclared_query() -> None:
    """Before every request: a query parameter the matched operation does not declare is ignored, counted
    (relay_api_ignored_query_params_total{operation}) and logged at debug. Clients written against Conductor
    (dbosctl, dbos-mcp, newer clients) send parameters Relay may not know (``?loadOutput=true`` on a get): what
    Conductor accepts must not be refused. Declared parameters are still checked by each view (a bad value is a
    4xx). Pages without an operation (the console) and the executor WebSocket (SDKs own its URL) are left alone."""
    if not request.environ.get("QUERY_STRING"):
        return  # most calls: no query at all
    view = current_app.view_functions.get(request.endpoint or "")
    op = operation_of(view) if view is not None else None
    if op is None or op.status == 101 or not request.args:
        return
    declared = {p.name for p in op.query}
    unknown = sorted(set(request.args) - declared)
    if unknown:
        # The operation id, never the name or value: the label set stays bounded whatever callers send.
        count_ignored_query(op.operation_id, len(unknown))
        if log.isEnabledFor(logging.DEBUG):
            names = ", ".join(name[:_LOGGED_NAME_CHARS] for name in unknown[:_LOGGED_NAMES])
            log.debug("%s: ignored %d undeclared query parameter(s): %s", op.operation_id, len(unknown), names)


def _response_schema(returns: str | Schema) -> Schema:
    if isinstance(returns, dict):
        return returns
    if returns.endswith("[]"):
        return array_of(returns[:-2])
    return ref(returns)


_STATUS_TEXT = {200: "OK", 201: "Created", 204: "No Content", 101: "Switching Protocols"}


def _operation_doc(op: Operation, path_params: list[JSONObject]) -> JSONObject:
    response: JSONObject = {"description": _STATUS_TEXT.get(op.status, "OK")}
    if op.returns is not None:
        response["content"] = {op.content_type: {"schema": _response_schema(op.returns)}}
    doc: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": [*path_params, *(p.doc() for p in op.query)],
        "responses": {str(op.status): response, "default": _ERROR},
    }
    if op.description:
        doc["description"] = op.description
    if op.body is not None:
        doc["requestBody"] = {"content": {"application/json": {"schema": ref(op.body)}},
                              "required": op.body_required}
    if op.public:
        doc["security"] = []
    if op.requires_oauth:
        doc["x-dbos-requires-oauth"] = True
    return doc


def _undocumented(endpoint: str, method: str, path_params: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "operationId": f"{endpoint.replace('.', '_')}_{method.lower()}",
        "summary": f"{endpoint} (undocumented)",
        "tags": ["Undocumented"],
        "parameters": path_params,
        "responses": {"default": _ERROR},
    }


# Blueprints whose routes are not API: the console's HTML pages and forms (a browser's, behind a session
# cookie and CSRF tokens) would otherwise fill Redoc with an "Undocumented" group. Plus the static files.
NOT_API_BLUEPRINTS = frozenset({"console"})


def is_api_endpoint(endpoint: str) -> bool:
    return endpoint != "static" and endpoint.partition(".")[0] not in NOT_API_BLUEPRINTS


def build_document(app: Flask, version: str) -> JSONObject:
    """The OpenAPI document of every API route ``app`` serves (see NOT_API_BLUEPRINTS)."""
    paths: dict[str, JSONObject] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if not is_api_endpoint(rule.endpoint):
            continue
        view = app.view_functions[rule.endpoint]
        op = operation_of(view)
        names = {**PATH_NAMES, **(op.path_names if op else {})}
        path = _VARIABLE.sub(partial(_path_variable, names), rule.rule)
        path_params = [
            {"name": names.get(v, v), "in": "path", "required": True,
             "schema": PATH_SCHEMAS.get(names.get(v, v), {"type": "string"})}
            for v in _VARIABLE.findall(rule.rule)
        ]
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            doc = _operation_doc(op, path_params) if op else _undocumented(rule.endpoint, method, path_params)
            paths.setdefault(path, {})[method.lower()] = doc
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Relay",
            "version": version,
            "description": "A self-hosted DBOS Conductor: the Conductor API v2, plus Relay's own /relay/v1.",
        },
        "servers": [{"url": "/"}],
        "security": [{"BearerAuth": []}],
        "paths": paths,
        "components": {
            "schemas": COMPONENTS,
            "securitySchemes": {
                "BearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key (prefixed dbos_, see POST /v2/orgs/{orgName}/tokens/{tokenName}), "
                    "Relay's admin token, or, when Relay runs with OAuth (RELAY_OIDC_ISSUER), a person's access "
                    "token (a JWT) from the identity provider.",
                }
            },
        },
    }


def _document() -> JSONObject:
    cached = current_app.extensions.get("relay.openapi")
    if cached is None:
        cached = current_app.extensions["relay.openapi"] = build_document(current_app, RELEASE)
    return cached


@bp.get("/openapi.json")
@operation("getOpenAPI", summary="This OpenAPI document", tag="Relay", returns="OpenAPIDocument", public=True)
def openapi_json() -> Response:
    return jsonify(_document())


@bp.get("/openapi-3.0.json")
@operation("getOpenAPI30", summary="This OpenAPI document, rendered as OpenAPI 3.0 (for generators without 3.1)",
           tag="Relay", returns="OpenAPIDocument", public=True)
def openapi_30_json() -> Response:
    cached = current_app.extensions.get("relay.openapi.3.0")
    if cached is None:
        cached = current_app.extensions["relay.openapi.3.0"] = to_openapi_30(_document())
    return jsonify(cached)


@bp.get("/openapi.yaml")
@operation("getOpenAPIYaml", summary="This OpenAPI document, as YAML", tag="Relay", returns="OpenAPIDocument",
           public=True, content_type="application/yaml")
def openapi_yaml() -> Response:
    cached = current_app.extensions.get("relay.openapi.yaml")
    if cached is None:
        # safe_dump quotes what YAML would read as another type ("200", "3.1.0"): it loads back as the JSON.
        cached = current_app.extensions["relay.openapi.yaml"] = yaml.safe_dump(
            _document(), sort_keys=False, allow_unicode=True)
    return Response(cached, content_type="application/yaml; charset=utf-8")


# Redoc, vendored in web/static (version, licence and the one change made: web/static/redoc.LICENSE.txt): no CDN,
# so the page works where Relay runs without Internet access. Redoc's default fonts fall back to the system's.
# web/static/docs.js starts it, in the console's light or dark theme.
_DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Relay API</title>
<link rel="icon" href="{icon}">
</head>
<body>
<div id="redoc" data-spec-url="{spec}"></div>
<script src="{redoc}"></script>
<script src="{start}"></script>
</body>
</html>
"""


# The page may load nothing but Relay's own files (the vendored Redoc's sidebar logo is Relay's favicon, not
# Redoc's CDN image). Redoc styles inline and runs its search in a blob: worker.
_DOCS_POLICY = ("default-src 'none'; script-src 'self'; worker-src blob:; connect-src 'self'; img-src 'self' data:; "
                "style-src 'self' 'unsafe-inline'; font-src 'self' data:; base-uri 'none'; form-action 'none'; "
                "frame-ancestors 'none'")


@bp.get("/docs")
@operation("getApiDocs", summary="This API's documentation (Redoc, served locally)", tag="Relay",
           returns={"type": "string"}, public=True, content_type="text/html")
def docs() -> Response:
    page = _DOCS_PAGE.format(spec=url_for("openapi.openapi_json"), icon=url_for("static", filename="favicon.svg"),
                             redoc=url_for("static", filename="redoc.standalone.js"),
                             start=url_for("static", filename="docs.js"))
    response = Response(page, content_type="text/html; charset=utf-8")
    response.headers["Content-Security-Policy"] = _DOCS_POLICY
    return response
