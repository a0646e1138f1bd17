"""The Flask application factory: blueprints, problem+json error handlers, redacted logging."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, g, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from relay.web import audit_trail, console
from relay.web.api import alerting as alerting_api
from relay.web.api import applications as api_applications
from relay.web.api import audit as api_audit
from relay.web.api import autoscaling as api_autoscaling
from relay.web.api import catalog as api_catalog
from relay.web.api import config as api_config
from relay.web.api import dataplane as api_dataplane
from relay.web.api import incidents as api_incidents
from relay.web.api import metrics as metrics_api
from relay.web.api import openapi
from relay.web.api import org_access as api_org_access
from relay.web.api import people as api_people
from relay.web.api import raw as api_raw
from relay.web.api import relay as api_relay
from relay.web.api import workflows as api_workflows
from relay.web.api.cluster import bp as cluster_bp
from relay.web.problems import ApiError, answer_problems, problem_response
from relay.web.transport import websocket

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

log = logging.getLogger("relay.web")


class RelayJSONProvider(DefaultJSONProvider):
    """Flask's JSON, keys in the order given, with one encoder per set of options instead of one per call
    (`json.dumps` builds a new encoder whenever an option differs from its defaults, as Flask's always do)."""

    sort_keys = False

    def __init__(self, app: Flask) -> None:
        super().__init__(app)
        self._encoders: dict[tuple[tuple[str, Any], ...], json.JSONEncoder] = {}

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("default", self.default)
        kwargs.setdefault("ensure_ascii", self.ensure_ascii)
        kwargs.setdefault("sort_keys", self.sort_keys)
        if "cls" in kwargs:
            return json.dumps(obj, **kwargs)
        options = tuple(sorted(kwargs.items()))
        try:
            encoder = self._encoders.get(options)
        except TypeError:  # an unhashable option: as json.dumps would, without keeping the encoder
            return json.JSONEncoder(**kwargs).encode(obj)
        if encoder is None:
            encoder = self._encoders[options] = json.JSONEncoder(**kwargs)
        return encoder.encode(obj)


class RelayFlask(Flask):
    json_provider_class = RelayJSONProvider

    def log_exception(self, exc_info: Any) -> None:
        # Flask's default names request.path, which for /websocket/... carries the key.
        log.error("unhandled error on %s %s", request.method, websocket.redact_path(request.path),
                  exc_info=exc_info)


def _no_type_without_content(response: Response) -> Response:
    """A 204, or a 201 without a body, carries no Content-Type: Flask's default (text/html) would announce an
    HTML document that is not there."""
    if response.status_code == 204 or (response.status_code == 201 and not response.is_streamed
                                       and not response.get_data()):
        response.headers.pop("Content-Type", None)
        response.set_data(b"")
    return response


def _served_from(response: Response) -> Response:
    """Which path answered a workflow, queue, schedule or version request: `executor` or `database` (issue 15)."""
    calls = g.get("relay_calls")  # this request's executor calls (web/context.py executor_calls)
    served = calls.served_from if calls is not None else None
    if served is not None:
        response.headers["X-Relay-Served-From"] = served
    return response


def create_app(rt: Runtime) -> Flask:
    # Paths given, not searched: Flask's search fails on the `relay` namespace package, and Relay keeps no
    # instance folder (its state is the event log).
    here = str(Path(__file__).resolve().parent)
    app = RelayFlask("relay.web", root_path=here, instance_path=here)
    app.extensions["relay"] = rt
    for blueprint in (api_relay.bp, api_applications.bp, api_audit.bp, websocket.bp):
        app.register_blueprint(blueprint)
    # Executor-served operations (issue 3) and the generated OpenAPI document.
    for blueprint in (api_workflows.bp, api_catalog.bp, api_raw.bp, openapi.bp):
        app.register_blueprint(blueprint)
    # Alerting rules and alerts, retention runs, the Prometheus scrape (issue 7); they configure the actors.
    for blueprint in (alerting_api.bp, api_incidents.bp, metrics_api.bp):  # incidents: issue 32
        app.register_blueprint(blueprint)
    app.register_blueprint(api_dataplane.bp)  # an application's data plane settings (issue 15)
    app.register_blueprint(api_config.bp)  # declarative configuration: relay diff|apply (issue 17)
    app.register_blueprint(api_autoscaling.bp)  # queue-based autoscaling: policy and recommendation (issue 17)
    app.register_blueprint(cluster_bp)  # HA: /relay/v1/instances, /internal/v1/forward (issue 5)
    if rt.settings.oidc_enabled:
        # People, members, roles, join secrets, domain claims (issue 31): the reference's x-dbos-requires-oauth
        # operations exist only with OAuth on; off, they answer 404 as Conductor's do.
        for blueprint in (api_people.bp, api_org_access.bp):
            app.register_blueprint(blueprint)
    app.register_blueprint(console.bp)  # the web console, at /
    audit_trail.install(app)  # every action, API or console, recorded as an Operation event

    app.before_request(openapi.ignore_undeclared_query)
    app.after_request(_no_type_without_content)
    app.after_request(_served_from)

    answer_problems(app)  # ApiError, and the domain's errors through web/problems.py's one table

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
        detail = error.description if status != 404 else "no such resource"
        return problem_response(ApiError(status, str(detail)))

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> Response:
        # Flask logs nothing for an exception a handler takes: every 500 is logged here with its cause (the
        # traceback; SecretFilter masks keys, tokens and URL credentials in it).
        app.log_exception((type(error), error, error.__traceback__))
        return problem_response(ApiError(500, "internal error; see the Relay log"))

    return app
