"""Relay-only: an application's data plane (issue 15), where its system database is and what Relay may do
there. The URL is given by reference (`env:NAME`, `file:/path` of the Relay server) and never stored, recorded
or shown; every change is an event (App.DataPlaneConfigured / App.DataPlaneRemoved)."""

from __future__ import annotations

import gevent
from flask import Blueprint, Response, jsonify

from relay.actors.adapters.dataplane.client import State
from relay.actors.services.configuration_changes import ConfigurationChanges
from relay.events.data_plane import check_data_plane
from relay.events.errors import InvalidValueError
from relay.projections.identity import Principal
from relay.web.context import authorize, require_app, runtime
from relay.web.http_inputs import json_body
from relay.web.operations import operation
from relay.web.problems import ApiError, invalid, not_found

bp = Blueprint("relay_data_plane", __name__)

PATH = "/relay/v1/orgs/<org>/apps/<app>/data-plane"
STATE_TIMEOUT_S = 10.0  # how long a GET waits to open the database before saying so


def authorize_configuring(org: str, app: str) -> Principal:
    """Setting or removing where an application's system database is takes the admin token or a key of the
    organization not limited to some applications: an application's own key cannot point its data plane at a
    database (issue 34)."""
    who = authorize("application.write", org, app)
    if not who.admin and who.apps:
        raise ApiError(403, "a key limited to some applications cannot configure a data plane: use the admin token "
                            "or a key of the organization not limited to applications")
    return who


def _view(org: str, app: str) -> dict:
    config = require_app(org, app)["settings"].get("dataPlane")
    if config is None:
        raise not_found(f"application '{app}' has no data plane")
    plane = runtime().data_planes.get(org, app, config)
    try:
        with gevent.Timeout(STATE_TIMEOUT_S):
            state = plane.state() if plane is not None else State("unchecked", "")
    except gevent.Timeout:
        state = State("unreachable", f"the system database did not answer within {STATE_TIMEOUT_S:g} s")
    return {**config, "state": state.to_json()}


@bp.get(PATH)
@operation("getDataPlane", summary="An application's data plane and whether its system database is readable",
           tag="Relay", returns="DataPlane")
def get_data_plane(org: str, app: str) -> Response:
    authorize("application.read", org, app)
    return jsonify(_view(org, app))


@bp.put(PATH)
@operation("putDataPlane", summary="Configure an application's data plane", tag="Relay", body="DataPlaneInput",
           returns="DataPlane")
def put_data_plane(org: str, app: str) -> Response:
    who = authorize_configuring(org, app)
    require_app(org, app)
    body = json_body(required=True)
    try:
        config = check_data_plane(body)
        ConfigurationChanges(runtime()).check_data_plane_reference(org, app, str(config["systemDatabaseUrlFrom"]))
    except InvalidValueError as error:
        field = next((f for f in body if f in str(error)), "body")
        raise invalid(f"body.{field}" if field != "body" else "body", str(error)) from None
    ConfigurationChanges(runtime()).configure_data_plane(org, app, config, who.display)
    return jsonify(_view(org, app))


@bp.delete(PATH)
@operation("deleteDataPlane", summary="Remove an application's data plane", tag="Relay", status=204)
def delete_data_plane(org: str, app: str) -> Response:
    who = authorize_configuring(org, app)
    require_app(org, app)
    ConfigurationChanges(runtime()).configure_data_plane(org, app, None, who.display)
    return Response(status=204)
