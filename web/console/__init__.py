"""The web console: server-rendered pages over the same views and actor commands as the HTTP API.

Served by Relay's Flask app at `/`. Login with an API key or the admin token, or (OAuth mode) "Sign in with SSO"
at the identity provider (sso.py); a signed session cookie carries the token's hash or the person's user id (never
a token); every POST carries a CSRF token. Pages read Relay's views
and, for what executors serve (workflows, queues, schedules, versions), the services of actors/services.
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint

_WEB = Path(__file__).resolve().parent.parent

bp = Blueprint(
    "console",
    __name__,
    template_folder=str(_WEB / "templates"),
    static_folder=str(_WEB / "static"),
    static_url_path="/console/static",
)

# The route modules register on `bp` when imported.
from relay.web.console import (  # noqa: E402
    alerts,
    attention,
    auth,
    autoscaling,
    incidents,
    live,
    members,
    organization,
    sso,
    views,
    workflow_import,
    workflows,
)

__all__ = ["alerts", "attention", "auth", "autoscaling", "bp", "incidents", "live", "members", "organization", "sso",
           "views", "workflow_import", "workflows"]
