"""The `relay` command line: its parser, apart from web/cli/main.py so that it imports without gevent's monkey-patching
(tests/unit/test_cli_help.py walks it in the test process)."""

from __future__ import annotations

import argparse
from typing import Any

from relay.actors.configuration.settings import MAX_WORKERS, settings_help
from relay.events.organization import DEFAULT_KEY_PERMISSIONS, PERMISSIONS
from relay.events.releases import RELEASE
from relay.web.cli.incidents import add_parser as add_incidents_parser


def _worker_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_WORKERS}, not {text!r}") from None
    if not 1 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_WORKERS}, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay", description="Self-hosted control plane for DBOS apps",
        epilog="Exit codes: 0 done, 1 replay --verify found a mismatch or diff found changes, 2 refused (bad "
               "arguments or settings, missing store, server unreachable or answering an error), 130 interrupted "
               "(Ctrl-C).")
    parser.add_argument("--version", action="version", version=f"relay {RELEASE}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do")
    serve = sub.add_parser("serve", help="run one Relay instance (HTTP API, console, /websocket)",
                           description="Run one Relay instance: HTTP API, console and executor WebSockets on one "
                                       "port. It is configured by environment variables (and --workers).",
                           epilog=settings_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--workers", type=_worker_count, metavar="N",
                       help="run N worker processes on the one port, each an instance of one cluster on "
                            "RELAY_DATABASE_URL (PostgreSQL only; overrides RELAY_WORKERS; default 1)")
    serve.add_argument("--worker", type=int, metavar="SLOT",
                       help="internal: what the supervisor of --workers passes to the worker processes it starts")

    output_help = "text: tab-separated columns under a header line (default); json: machine-readable"
    apps = sub.add_parser("apps", help="register, list and delete applications (via the running server)")
    apps.add_argument("action", choices=["create", "list", "delete"], help="what to do with applications")
    apps.add_argument("name", nargs="?", help="the application's name (create, delete)")

    keys = sub.add_parser("keys", help="create, list and revoke API keys (via the running server)")
    keys.add_argument("action", choices=["create", "list", "revoke"],
                      help="create prints the new key once on stdout; list never shows keys")
    keys.add_argument("name", nargs="?", help="the key's name (create, revoke)")
    keys.add_argument("--app", action="append",
                      help="create: limit the key to this application (repeatable; default: every application "
                           "of the organization)")
    keys.add_argument("--permission", action="append", choices=PERMISSIONS, metavar="PERMISSION",
                      help="create: grant this permission (repeatable); one of " + ", ".join(PERMISSIONS)
                           + "; default: " + ", ".join(DEFAULT_KEY_PERMISSIONS))
    plane = sub.add_parser(
        "data-plane", help="an application's data plane: answer from its DBOS system database (via the running "
                           "server)",
        description="Set, show or remove an application's data plane: when no executor of it is connected, Relay "
                    "reads and manages its workflows through its system database with the DBOS client. The "
                    "database URL is never given to Relay: name where the server reads it.")
    plane.add_argument("action", choices=["set", "show", "remove"], help="what to do with the data plane")
    plane.add_argument("name", help="the application's name")
    plane.add_argument("--url-from", metavar="REF",
                       help="set: where the server reads the system database URL: env:NAME (its environment) or "
                            "file:/absolute/path")
    plane.add_argument("--mode", choices=["read", "read-write"],
                       help="set: read (default) or read-write (cancel, resume, fork, schedules, versions)")
    plane.add_argument("--statement-timeout-ms", type=int, metavar="MS",
                       help="set: each query's statement timeout (default 10000)")
    plane.add_argument("--pool-size", type=int, metavar="N", help="set: connections to the database (default 2)")
    plane.add_argument("--schema", help="set: the DBOS system schema on PostgreSQL (default dbos)")
    _add_config_commands(sub)
    _add_store_command(sub)
    scale = sub.add_parser(
        "autoscale", help="an application's autoscaling policy and recommendation (via the running server)",
        description="Show the recommendation (executors each application version needs for the policy queue's "
                    "backlog), set the policy (a queue with worker_concurrency, validated by an executor), or delete "
                    "it.")
    scale.add_argument("action", choices=["show", "set", "delete"], help="what to do with the autoscaling policy")
    scale.add_argument("name", help="the application's name")
    scale.add_argument("--queue", help="set: the queue whose backlog drives the recommendation")
    scale.add_argument("--max-old-versions", type=int, metavar="N",
                       help="set: old versions reported besides the latest, newest first (default 0)")
    scale.add_argument("--max-old-executors", type=int, metavar="N",
                       help="set: cap every old version's recommendation at N executors (default: no cap)")
    incidents = add_incidents_parser(sub)  # issue 32
    for command in (apps, keys, plane, scale, incidents):
        command.add_argument("--org", help="the organization (default RELAY_DEFAULT_ORG, else local)")
        command.add_argument("--output", choices=["text", "json"], default="text", help="list: " + output_help)
        command.add_argument("--url", help="the server's base URL (default RELAY_URL, else http(s)://RELAY_HOST:"
                             "RELAY_PORT, https when RELAY_TLS_CERT is set)")
        command.add_argument("--cacert", help="a PEM CA file to trust for https (default RELAY_CA_FILE)")

    replay = sub.add_parser(
        "replay", help="rebuild every view from the event log (refused while relay serve runs on the store)",
        description="Rebuild every view from the event log, on the store of RELAY_DATA_DIR or RELAY_DATABASE_URL. "
                    "A rebuild empties the views a running server answers from, so it is refused while one "
                    "runs on the store; --verify only reads the live views and is safe beside a server.")
    replay.add_argument("--verify", action="store_true",
                        help="rebuild aside and compare with the live views (exit 1 on a mismatch)")

    events = sub.add_parser(
        "events", help="print the event log for audits (it only reads the log: safe beside a running server)",
        description="Print the event log of the store of RELAY_DATA_DIR or RELAY_DATABASE_URL (read-only).")
    events.add_argument("--app", help="only this application's events")
    events.add_argument("--org", help="only this organization's events")
    events.add_argument("--type", help="an event (Executor.Connected) or an aggregate (Executor)")
    events.add_argument("--since", help="only events after this one (exclusive): a position, or an RFC 3339 time")
    events.add_argument("--follow", action="store_true",
                        help="keep printing new events until Ctrl-C (which exits 130, quietly)")
    events.add_argument("--output", choices=["text", "json"], default="text",
                        help="text: tab-separated columns under a header line (default); json: JSON Lines, "
                             "one object per event")
    return parser


def _add_config_commands(sub: Any) -> None:
    """`relay diff` and `relay apply`: the declarative configuration."""
    config_help = ("a configuration file (apiVersion: relay/v1, kind: Config): applications, their settings, data "
                   "planes and alerting rules, and API keys by name and scope; - reads stdin")
    diff = sub.add_parser(
        "diff", help="show what `apply` would change (exit 0: nothing, 1: something, 2: refused)",
        description="Compare a configuration file with the organization (via the running server) and print the "
                    "plan: + creates, ~ changes, - removes. Exit 0 when nothing would change, 1 when something "
                    "would, 2 when refused (a bad file, the server unreachable or answering an error).")
    apply = sub.add_parser(
        "apply", help="bring the organization to a configuration file: every change or none (via the running "
                      "server)",
        description="Print the plan of a configuration file, then apply it in one transaction: every change is "
                    "recorded, each as an event, or none is (a bad item, or a change made meanwhile, refuses the "
                    "whole file). Applying the same file again changes and records nothing. Keys it issues are "
                    "printed once on stdout.")
    for command in (diff, apply):
        command.add_argument("-f", "--filename", required=True, metavar="FILE", help=config_help)
        command.add_argument("--prune", action="store_true",
                             help="also remove what the file leaves out: applications, keys, alerting rules and "
                                  "data planes, and reset settings it does not give (as `prune: true` in the file)")
    apply.add_argument("--replace-keys", action="store_true",
                       help="replace keys whose scope differs from the file (keys cannot change: revoked, then issued "
                            "again with new secrets; executors using them are disconnected). Without it such a file "
                            "is refused")
    diff.add_argument("--output", choices=["text", "json"], default="text",
                      help="text: the plan's lines (default); json: the server's plan")
    for command in (diff, apply):
        command.add_argument("--org", help="the organization (default: the file's org, else RELAY_DEFAULT_ORG, else "
                                           "local)")
        command.add_argument("--url", help="the server's base URL (default RELAY_URL, else http(s)://RELAY_HOST:"
                                           "RELAY_PORT, https when RELAY_TLS_CERT is set)")
        command.add_argument("--cacert", help="a PEM CA file to trust for https (default RELAY_CA_FILE)")


def _add_store_command(sub: Any) -> None:
    """`relay store copy|export|import` (web/cli/store.py)."""
    store = sub.add_parser(
        "store", help="copy the event log to another store, or export/import it as a backup file",
        description="Move the whole event log of the store of RELAY_DATA_DIR or RELAY_DATABASE_URL (and "
                    "RELAY_DATABASE_SCHEMA): every event, in order, keeping its position; the views are rebuilt on "
                    "the target. A copy's source and an import's target must have no relay serve running on them; "
                    "a target must hold no event.")
    actions = store.add_subparsers(dest="action", required=True, metavar="ACTION",
                                   help="copy, export or import the event log")
    copy = actions.add_parser("copy", help="copy every event to an empty PostgreSQL store, then rebuild its views",
                              description="Copy every event of this store to an empty PostgreSQL store (a database, "
                                          "or another schema), then rebuild the views there. Refused while relay "
                                          "serve runs on this store: stop it first.")
    copy.add_argument("--to", required=True, metavar="URL",
                      help="the target: postgresql://user:password@host:port/database (the password is never "
                           "printed)")
    copy.add_argument("--to-schema", default="public", metavar="SCHEMA",
                      help="the target's schema, as its RELAY_DATABASE_SCHEMA will be (default public)")
    export = actions.add_parser(
        "export", help="write every event to a backup file (safe beside a running server)",
        description="Write the event log as JSON Lines: a header, one line per event, a SHA-256 checksum line "
                    "(format in docs/adr/0048). Events appended meanwhile are left out: safe beside relay serve.")
    export.add_argument("--out", default="-", metavar="FILE",
                        help="where to write it (default -: standard output); a file is written aside and renamed "
                             "into place once complete")
    restore = actions.add_parser(
        "import", help="load a backup file into an empty store, then rebuild its views",
        description="Check a backup file of `relay store export` (its checksum, order and count), write its "
                    "events into this store, which must hold none, in one transaction, and rebuild the views. "
                    "Refused while relay serve runs on this store.")
    restore.add_argument("file", metavar="FILE", help="a file written by `relay store export`")
