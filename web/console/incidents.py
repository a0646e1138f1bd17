"""The incidents on the Alerts tab (issue 32): acknowledged, silenced and unsilenced here through the same service as
the API's /relay/v1/.../incidents (actors/services/incidents.py), each after a confirmation, each audited. The list
itself is rendered by web/console/alerts.py's page (`incident_rows`)."""

from __future__ import annotations

from collections.abc import Callable

from flask import flash, redirect, request, url_for
from werkzeug.wrappers import Response

from relay.actors.services.incidents import Incidents
from relay.web.console import bp
from relay.web.console.auth import confirm_page, confirmed, require
from relay.web.console.changes import change as console_change
from relay.web.console.helpers import check_app
from relay.web.context import runtime

# The silences the page offers (seconds, label); the API takes any length up to a year.
SILENCES = ((3600, "1 hour"), (4 * 3600, "4 hours"), (24 * 3600, "1 day"), (7 * 24 * 3600, "1 week"))


def _act(org: str, app: str, incident_id: str, operation: str, what: str,
         change: Callable[[Incidents, str], object]) -> Response:
    """Run a confirmed change of an incident and say how it went."""
    who = require("application.write", org, app)
    console_change(operation, [incident_id], lambda: change(Incidents(runtime()), who.display),
                   done=f"Incident {what}.", failed=f"Incident not {what}")
    return redirect(url_for("console.alerts", org=org, app=app))


@bp.post("/orgs/<org>/apps/<app>/incidents/<incident_id>/acknowledge")
def acknowledge_incident(org: str, app: str, incident_id: str) -> Response | str:
    check_app(org, app)
    require("application.write", org, app)
    if not confirmed():
        return confirm_page("Acknowledge this incident?", "Someone is on it: it is not notified again (its "
                            "resolution still is).", "Acknowledge", back=url_for("console.alerts", org=org, app=app),
                            keep="Leave it open")
    return _act(org, app, incident_id, "acknowledgeRelayIncident", "acknowledged",
                lambda incidents, by: incidents.acknowledge(org, app, incident_id, by))


@bp.post("/orgs/<org>/apps/<app>/incidents/<incident_id>/silence")
def silence_incident(org: str, app: str, incident_id: str) -> Response | str:
    check_app(org, app)
    require("application.write", org, app)
    seconds = {str(s): s for s, _ in SILENCES}.get(request.form.get("seconds") or "")
    if seconds is None:
        flash("Incident not silenced: choose how long.", "error")
        return redirect(url_for("console.alerts", org=org, app=app))
    label = dict(SILENCES)[seconds]
    if not confirmed():
        return confirm_page(f"Silence this incident for {label}?", "Nothing is sent about it until then; a "
                            "resolution meanwhile reaches PagerDuty only, to close its page.", f"Silence for {label}",
                            back=url_for("console.alerts", org=org, app=app), keep="Keep notifying")
    return _act(org, app, incident_id, "silenceRelayIncident", "silenced",
                lambda incidents, by: incidents.silence(org, app, incident_id, seconds, by))


@bp.post("/orgs/<org>/apps/<app>/incidents/<incident_id>/unsilence")
def unsilence_incident(org: str, app: str, incident_id: str) -> Response | str:
    check_app(org, app)
    require("application.write", org, app)
    if not confirmed():
        return confirm_page("End this incident's silence?", "It is notified again as its rule says.", "Unsilence",
                            back=url_for("console.alerts", org=org, app=app), keep="Keep it silenced")
    return _act(org, app, incident_id, "unsilenceRelayIncident", "unsilenced",
                lambda incidents, by: incidents.unsilence(org, app, incident_id, by))
