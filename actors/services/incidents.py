"""An application's incidents (issue 32, events/incidents.py): listed with their state and duration, acknowledged,
silenced for a while, unsilenced. The one way the HTTP API (web/api/incidents.py), the console's Alerts tab and the
CLI (through the API) read and change them; each change is a command to the application's actor, recorded as an
Incident event (a resolved incident refuses them: 409)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from relay.actors.services.commands import run_command
from relay.events.errors import NotFoundError
from relay.events.incidents import MAX_SILENCE_SECS

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

STATES = ("open", "resolved", "all")


def _time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def incident_view(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A view row with what a reader wants at ``now``: ``state`` (open, acknowledged, silenced or resolved), its
    ``duration_secs`` (to its resolution, or to now while open) and whether it is ``silenced`` now."""
    opened, resolved, until = _time(row["opened_at"]), _time(row["resolved_at"]), _time(row["silenced_until"])
    silenced = resolved is None and until is not None and now < until
    if resolved is not None:
        state = "resolved"
    elif silenced:
        state = "silenced"
    else:
        state = "acknowledged" if row["acknowledged_at"] else "open"
    end = resolved or now
    duration = max(0, int((end - opened).total_seconds())) if opened else 0
    return {**row, "state": state, "silenced": silenced, "acknowledged": bool(row["acknowledged_at"]),
            "duration_secs": duration, "silenced_until": row["silenced_until"] if silenced else None}


class Incidents:
    """An application's incidents, read from the alerting view and changed through its actor."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def now(self) -> datetime:
        return self.rt.ctx.clock()

    def list(self, org: str, app: str, state: str = "all", limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        now = self.now()
        return [incident_view(r, now) for r in self.rt.views.alerting.incidents(org, app, state, limit, offset)]

    def get(self, org: str, app: str, incident_id: str) -> dict[str, Any]:
        row = self.rt.views.alerting.incident(org, app, incident_id)
        if row is None:
            raise NotFoundError(f"no incident '{incident_id}' in '{org}/{app}'")
        return incident_view(row, self.now())

    def acknowledge(self, org: str, app: str, incident_id: str, by: str) -> dict[str, Any]:
        row = self.get(org, app, incident_id)
        actor = self.rt.directory.application_proxy(org, app)
        run_command(self.rt, lambda: actor.acknowledge_incident(row["rule_id"], row["number"], by))
        return self.get(org, app, incident_id)

    def silence(self, org: str, app: str, incident_id: str, seconds: int, by: str) -> dict[str, Any]:
        """Silence it for ``seconds`` (1 to MAX_SILENCE_SECS; the caller checked them)."""
        assert 0 < seconds <= MAX_SILENCE_SECS
        row = self.get(org, app, incident_id)
        actor = self.rt.directory.application_proxy(org, app)
        run_command(self.rt, lambda: actor.silence_incident(row["rule_id"], row["number"], seconds, by))
        return self.get(org, app, incident_id)

    def unsilence(self, org: str, app: str, incident_id: str, by: str) -> dict[str, Any]:
        row = self.get(org, app, incident_id)
        actor = self.rt.directory.application_proxy(org, app)
        run_command(self.rt, lambda: actor.unsilence_incident(row["rule_id"], row["number"], by))
        return self.get(org, app, incident_id)


def seconds_until(until: datetime, now: datetime) -> int:
    """A silence given as an end time, in whole seconds from ``now`` (rounded up)."""
    delta = until - now
    return int(delta.total_seconds()) + (1 if delta % timedelta(seconds=1) else 0)
