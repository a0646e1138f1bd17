"""What an evaluation does with a rule's incident (events/incidents.py), given whether its condition holds now.

- holds, no open incident: open one and notify once;
- holds, open: notify again only when the rule opted in and a repeat is due (not acknowledged, not silenced);
- does not hold, open: resolve it, and send the resolution;
- otherwise nothing.

Pure: actors/incidents.py reads the incident and the rule, and records and sends what this decides.
"""

from __future__ import annotations

from datetime import datetime

from relay.events.incidents import OPEN, RENOTIFY, RESOLVE, Incident


def next_step(holds: bool, latest: Incident | None, renotify_secs: int | None, now: datetime) -> str | None:
    """OPEN, RENOTIFY, RESOLVE or None, for a rule whose latest incident is ``latest``."""
    is_open = latest is not None and not latest.resolved
    if holds and not is_open:
        return OPEN
    if holds and latest is not None and latest.renotify_due(renotify_secs, now):
        return RENOTIFY
    if not holds and is_open:
        return RESOLVE
    return None


def sent_to(kind: str, quiet: bool) -> tuple[bool, frozenset[str] | None]:
    """Who gets a notification of ``kind``: (the receiving application's alert handlers?, which sinks: None for
    every one). The handlers get the open notification and its repeats, never the resolution (the SDK's `alert`
    frame has no state to say "resolved" in); a resolution while silenced (``quiet``) goes to PagerDuty alone, so
    that the page it opened closes, and pages nobody."""
    if kind == RESOLVE:
        return False, frozenset({"pagerduty"}) if quiet else None
    return True, None
