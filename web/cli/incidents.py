"""`relay incidents list|show|ack|silence|unsilence`: an application's incidents (issue 32), via the running server's
/relay/v1/orgs/{org}/apps/{app}/incidents (web/api/incidents.py). Its parser here, beside what it runs; main.py
gives it the way to the server (`api`) and the table printer (`table`)."""

from __future__ import annotations

import argparse
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

Api = Callable[..., Any]
Table = Callable[[tuple[str, ...], list[tuple[Any, ...]], object], None]


class UsageError(ValueError):
    """Arguments that do not go together (main.py answers exit 2, as for any refusal)."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    incidents = sub.add_parser(
        "incidents", help="list, acknowledge and silence an application's incidents (via the running server)",
        description="An incident is one stretch of time an alerting rule's condition holds: notified once when it "
                    "opens, again when it resolves. Acknowledge one to stop its repeats (rules with "
                    "renotifyIntervalSecs); silence one to send nothing about it for a while.")
    incidents.add_argument("action", choices=["list", "show", "ack", "silence", "unsilence"],
                           help="what to do (show, ack, silence and unsilence take an INCIDENT id)")
    incidents.add_argument("app", help="the application's name")
    incidents.add_argument("incident", nargs="?", help="the incident's id (as list shows it)")
    incidents.add_argument("--state", choices=["open", "resolved", "all"], default="open",
                           help="list: which incidents (default open)")
    incidents.add_argument("--seconds", type=int, metavar="N", help="silence: for N seconds")
    incidents.add_argument("--until", metavar="TIME", help="silence: until this RFC 3339 time (e.g. 2026-12-07T09:00Z)")
    return incidents


def _duration(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s"


def run(args: argparse.Namespace, org: str, api: Api, table: Table) -> int:
    base = f"/relay/v1/orgs/{org}/apps/{urllib.parse.quote(args.app, safe='')}/incidents"
    if args.action == "list":
        listed = api("GET", f"{base}?state={args.state}&limit=1000")["incidents"]
        rows = [(i["incidentId"], i["ruleType"], i["number"], i["state"], i["openedAt"], i["resolvedAt"] or "-",
                 _duration(i["durationSecs"]), i["message"]) for i in listed]
        table(("ID", "RULE_TYPE", "NUMBER", "STATE", "OPENED_AT", "RESOLVED_AT", "DURATION", "MESSAGE"), rows, listed)
        return 0
    if not args.incident:
        raise UsageError(f"incidents {args.action} needs an INCIDENT id")
    one = f"{base}/{urllib.parse.quote(args.incident, safe='')}"
    if args.action == "show":
        incident = api("GET", one)
    elif args.action == "ack":
        incident = api("POST", f"{one}/acknowledge")
    elif args.action == "unsilence":
        incident = api("POST", f"{one}/unsilence")
    else:
        if (args.seconds is None) == (args.until is None):
            raise UsageError("incidents silence needs --seconds N or --until TIME")
        body = {"seconds": args.seconds} if args.seconds is not None else {"until": args.until}
        incident = api("POST", f"{one}/silence", body)
    if args.output == "json":
        print(json.dumps(incident, indent=2, sort_keys=True))
    else:
        for key in ("incidentId", "ruleId", "ruleType", "number", "state", "openedAt", "resolvedAt", "durationSecs",
                    "acknowledgedBy", "silencedUntil", "message"):
            print(f"{key}\t{incident.get(key)}")
    return 0
