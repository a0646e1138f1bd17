"""The `relay` command: serve, apps, keys, data-plane, diff, apply, replay, events, store."""

from gevent import monkey

monkey.patch_all()  # before anything else imports socket, ssl or threading

import argparse
import http.client
import json
import logging
import os
import signal
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, cast

from relay.actors.adapters.http_client import HttpClient, UnreachableError
from relay.actors.configuration.settings import ConfigError, Settings, check_workers
from relay.web.cli import incidents as incidents_cli
from relay.web.cli.parser import build_parser
from relay.wire.json_types import JSONObject

log = logging.getLogger("relay.cli")


class CliError(Exception):
    pass


class _Formatter(logging.Formatter):
    """logging's formatter, with asctime's date and time made once a second rather than per line (every HTTP
    request logs one)."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        known = self._second
        if known[0] != second:
            known = self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return cast(str, self.default_msec_format) % (known[1], record.msecs)  # set: logging.Formatter's own


def _setup_logging() -> None:
    # What the format below never shows, not gathered for every record (the logging HOWTO's "Optimization"):
    # the calling frame's file and function, thread, process and multiprocessing names.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


# -- talking to a running server ------------------------------------------------------------------
class Target:
    """Where `relay apps|keys` reach the running server: its base URL and, for https, the TLS context.

    The URL is ``--url``, else ``RELAY_URL``, else the server's own settings: ``https://`` when
    ``RELAY_TLS_CERT``/``RELAY_TLS_KEY`` are set (as `relay serve` then speaks TLS), ``http://`` otherwise, to
    ``RELAY_HOST`` (127.0.0.1 when it listens on every address) and ``RELAY_PORT``. Certificates are always
    checked, host name included: against the system's CAs, plus ``--cacert``/``RELAY_CA_FILE`` (a PEM CA
    bundle, or a self-signed certificate), plus, when the URL comes from the server's settings,
    ``RELAY_TLS_CERT`` itself (the server's own certificate, as found on this machine)."""

    def __init__(self, settings: Settings, url: str | None = None, cacert: str | None = None) -> None:
        url = url or os.environ.get("RELAY_URL") or None
        cacert = cacert or os.environ.get("RELAY_CA_FILE") or None
        pinned = None
        if url is None:
            host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host  # noqa: S104
            host = f"[{host}]" if ":" in host else host
            scheme = "https" if settings.tls_cert is not None else "http"
            url = f"{scheme}://{host}:{settings.port}"
            pinned = settings.tls_cert
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise CliError(f"--url/RELAY_URL must be an http:// or https:// base URL, not {url!r}")
        if parts.username or parts.password:
            raise CliError("--url/RELAY_URL must not carry credentials (the admin token is sent as a header)")
        self.base_url = url.rstrip("/")
        self.context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self.context = ssl.create_default_context()
            for name, path in (("--cacert/RELAY_CA_FILE", cacert), ("RELAY_TLS_CERT", pinned)):
                if path is None:
                    continue
                try:
                    self.context.load_verify_locations(cafile=str(path))
                except (OSError, ssl.SSLError) as error:
                    raise CliError(f"{name} cannot be used as a CA file: {path} "
                                   f"({getattr(error, 'strerror', None) or error.__class__.__name__})") from None
            if pinned is not None:
                # The server's own (leaf) certificate may be trusted by itself, without its issuer.
                self.context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN


def _why(target: Target, error: Exception) -> str:
    """One line on why the server could not be reached (never the request, never the token)."""
    reason = error.reason if isinstance(error, UnreachableError) else error
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (f"its TLS certificate is not trusted ({reason.verify_message}); name its CA (or the self-signed "
                "certificate) with --cacert or RELAY_CA_FILE, and reach it by a host name the certificate "
                "names with --url or RELAY_URL")
    if isinstance(reason, ssl.SSLError):
        return f"the TLS handshake failed ({reason.reason or reason.__class__.__name__}); does it serve https?"
    if target.context is None and isinstance(reason, http.client.HTTPException | ConnectionResetError):
        return ("the connection was closed; if it serves TLS, set RELAY_TLS_CERT/RELAY_TLS_KEY as it has them, "
                "or an https:// --url or RELAY_URL")
    if isinstance(reason, str):
        return reason
    return (reason or error).__class__.__name__


def _api(target: Target, settings: Settings, method: str, path: str, body: JSONObject | None = None) -> Any:
    token = settings.read_admin_token()
    if not token:
        raise CliError("no admin token: set RELAY_ADMIN_TOKEN or run this where the server's data dir is")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        answer = HttpClient(target.context).request(method, target.base_url + path, data, headers, timeout=30)
    except (TimeoutError, UnreachableError) as error:
        raise CliError(f"cannot reach relay at {target.base_url}: {_why(target, error)}") from None
    if answer.status >= 400:
        try:
            detail = json.loads(answer.body.decode()).get("detail", "")
        except (ValueError, AttributeError):
            detail = ""
        raise CliError(f"{method} {path}: HTTP {answer.status} {detail}".rstrip()) from None
    text = answer.body.decode()
    return json.loads(text) if text else None


def _table(args: argparse.Namespace, header: tuple[str, ...], rows: list[tuple[Any, ...]], items: object) -> None:
    """A list command's answer: tab-separated under a header line, or (--output json) ``items`` as JSON."""
    if args.output == "json":
        print(json.dumps(items, indent=2, sort_keys=True, default=str))
        return
    for row in [header, *rows]:
        print("\t".join(str(value) for value in row))


def cmd_apps(settings: Settings, args: argparse.Namespace) -> int:
    org, target = _org_and_target(settings, args)
    if args.action == "create":
        _api(target, settings, "PUT", f"/v2/orgs/{org}/apps/{args.name}", {})
        print(f"application {org}/{args.name} registered")
    elif args.action == "delete":
        _delete(target, settings, f"/v2/orgs/{org}/apps/{args.name}", f"application {org}/{args.name} deleted")
    else:
        apps = _api(target, settings, "GET", f"/v2/orgs/{org}/apps")
        rows = [(a["name"], a["status"], a["executorTimeoutSecs"]) for a in apps]
        _table(args, ("NAME", "STATUS", "EXECUTOR_TIMEOUT_SECS"), rows, apps)
    return 0


def _org_and_target(settings: Settings, args: argparse.Namespace) -> tuple[str, Target]:
    """The organisation a command is about (--org, else the default) and the Relay it talks to."""
    return args.org or settings.default_org, Target(settings, args.url, args.cacert)


def _delete(target: Target, settings: Settings, path: str, done: str) -> int:
    """DELETE ``path``, then say ``done``."""
    _api(target, settings, "DELETE", path)
    print(done)
    return 0


def cmd_data_plane(settings: Settings, args: argparse.Namespace) -> int:
    org, target = _org_and_target(settings, args)
    path = f"/relay/v1/orgs/{org}/apps/{args.name}/data-plane"
    if args.action == "remove":
        return _delete(target, settings, path, f"data plane of {org}/{args.name} removed")
    if args.action == "set":
        if not args.url_from:
            print("relay: data-plane set needs --url-from env:NAME or file:/absolute/path", file=sys.stderr)
            return 2
        body = {"systemDatabaseUrlFrom": args.url_from, "mode": args.mode,
                "statementTimeoutMs": args.statement_timeout_ms, "poolSize": args.pool_size, "schema": args.schema}
        plane = _api(target, settings, "PUT", path, {k: v for k, v in body.items() if v is not None})
    else:
        plane = _api(target, settings, "GET", path)
    if args.output == "json":
        print(json.dumps(plane, indent=2))
    else:
        state = plane["state"]
        for key in ("systemDatabaseUrlFrom", "mode", "statementTimeoutMs", "poolSize", "schema"):
            print(f"{key}\t{plane[key]}")
        print(f"state\t{state['status']}: {state['detail']}")
    return 0


def cmd_autoscale(settings: Settings, args: argparse.Namespace) -> int:
    """An application's autoscaling policy (Conductor's .../autoscaling-policy) and its recommendation."""
    org, target = _org_and_target(settings, args)
    base = f"/v2/orgs/{org}/apps/{args.name}"
    if args.action == "delete":
        done = f"autoscaling policy of {org}/{args.name} deleted"
        return _delete(target, settings, f"{base}/autoscaling-policy", done)
    if args.action == "set":
        if not args.queue:
            print("relay: autoscale set needs --queue NAME", file=sys.stderr)
            return 2
        rollout = {"maxOldApplicationVersions": args.max_old_versions,
                   "maxExecutorsForOldApplicationVersions": args.max_old_executors}
        body: JSONObject = {"queue": args.queue}
        if any(v is not None for v in rollout.values()):
            body["rollout"] = {k: v for k, v in rollout.items() if v is not None}
        policy = _api(target, settings, "PUT", base + "/autoscaling-policy", body)["policy"]
        print(json.dumps(policy, indent=2) if args.output == "json" else f"policy\t{json.dumps(policy)}")
        return 0
    entries = _api(target, settings, "GET", base + "/autoscale") or []
    rows = [(e["applicationVersion"], "yes" if e["isLatest"] else "no", e.get("queueName", "-"), e["queueDepth"],
             e["desiredExecutors"]) for e in entries]
    _table(args, ("VERSION", "LATEST", "QUEUE", "QUEUE_DEPTH", "DESIRED_EXECUTORS"), rows, entries)
    return 0


def cmd_incidents(settings: Settings, args: argparse.Namespace) -> int:
    """An application's incidents (issue 32): web/cli/incidents.py, through this server connection."""
    org, target = _org_and_target(settings, args)
    try:
        return incidents_cli.run(args, org, lambda method, path, body=None: _api(target, settings, method, path, body),
                                 lambda header, rows, items: _table(args, header, rows, items))
    except incidents_cli.UsageError as error:
        raise CliError(str(error)) from None


def cmd_keys(settings: Settings, args: argparse.Namespace) -> int:
    org, target = _org_and_target(settings, args)
    if args.action == "create":
        body: JSONObject = {"appNames": args.app or []}
        if args.permission:
            body["permissions"] = args.permission
        created = _api(target, settings, "POST", f"/v2/orgs/{org}/tokens/{args.name}", body)
        print("API key created; it is shown once, store it now:", file=sys.stderr)
        print(created["token"])
    elif args.action == "revoke":
        _delete(target, settings, f"/v2/orgs/{org}/tokens/{args.name}", f"API key {args.name} revoked")
    else:
        keys = _api(target, settings, "GET", f"/v2/orgs/{org}/tokens")
        rows = [(k["tokenName"], ",".join(k["appIds"]) or "*", ",".join(k["permissions"]), k["createdAt"])
                for k in keys]
        _table(args, ("NAME", "APPS", "PERMISSIONS", "CREATED_AT"), rows, keys)
    return 0


def cmd_config(settings: Settings, args: argparse.Namespace) -> int:
    """`relay diff|apply -f FILE` (web/cli/config.py)."""
    from relay.web.cli.config import ConfigFileError, run

    target = Target(settings, args.url, args.cacert)
    try:
        return run(args, settings.default_org, lambda method, path, body: _api(target, settings, method, path, body))
    except ConfigFileError as error:
        raise CliError(str(error)) from None


# -- working on the store directly ----------------------------------------------------------------
# Why these refuse a missing store: opening the log creates an empty one, and then `events` printed nothing and
# `replay` reported success: an operator in the wrong folder (or with the wrong RELAY_DATABASE_URL) was told
# all is well about a store that is not theirs.
def _open_store(settings: Settings, command: str, beside_server: str,
                ready: Callable[[], None] | None = None) -> None:
    """Refuse a store that is not there (creating nothing), and what ``ready`` refuses; then say on stderr which
    store is opened (never a password) and whether running beside a live `relay serve` is safe."""
    import psycopg

    from relay.actors.runtime import OfflineStore
    from relay.projections.backend import SQLITE_LOG_FILE

    store = settings.store
    try:
        exists = OfflineStore.has_event_log(settings)
    except psycopg.Error as error:
        raise CliError(f"cannot open the store {store.describe()} ({error.__class__.__name__}); "
                       "is RELAY_DATABASE_URL that of your relay serve?") from None
    if not exists:
        where = "RELAY_DATABASE_URL/RELAY_DATABASE_SCHEMA" if store.is_postgres else "RELAY_DATA_DIR"
        raise CliError(f"no Relay event log in {store.describe()}: nothing was opened or created; set {where} "
                       "to the store of your relay serve (or run this where its relay-data is)")
    if ready is not None:
        ready()
    where = store.describe() if store.is_postgres else f"sqlite:{(store.data_dir / SQLITE_LOG_FILE).resolve()}"
    print(f"relay {command}: store {where}; {beside_server}", file=sys.stderr)


def _refuse_live_server(settings: Settings) -> None:
    from relay.actors.runtime import OfflineStore

    live = OfflineStore.live_instances(settings)
    if live:
        # A rebuild empties the views the server answers from (apps, keys, executors) until it is done.
        raise CliError(f"relay serve is running on this store ({', '.join(live)}): stop it first (a rebuild "
                       "empties the views it serves from), or use `relay replay --verify`, which is safe "
                       "beside it; a server killed less than RELAY_INSTANCE_TIMEOUT_S "
                       f"({settings.instance_timeout_s:g} s) ago counts as running")


class _Progress:
    """A progress bar on stderr: the log position every view has reached, out of the log's last position."""

    def __init__(self, total: int, label: str) -> None:
        self.total = max(total, 1)
        self.label = label
        self._last = 0.0

    def __call__(self, position: int) -> None:
        now = time.monotonic()
        if now - self._last > 0.1 or position >= self.total:
            self._last = now
            fraction = min(position / self.total, 1.0)
            bar = "#" * int(fraction * 30)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {min(position, self.total)}/{self.total} events")
            sys.stderr.flush()

    def finish(self) -> None:
        sys.stderr.write("\n")


def cmd_replay(settings: Settings, args: argparse.Namespace) -> int:
    from relay.actors.runtime import OfflineStore
    from relay.projections.replay import rebuild, verify

    if args.verify:
        _open_store(settings, "replay --verify",
                    "safe beside a running relay serve (its views are only read; the rebuild goes aside)")
    else:
        _open_store(settings, "replay", "rebuilding the views in place (no relay serve runs on it)",
                    lambda: _refuse_live_server(settings))
    with OfflineStore(settings) as offline:
        total = offline.log.recorder.max_notification_id() or 0
        progress = _Progress(total, "verifying" if args.verify else "replaying")
        report = verify(settings.store, offline.log, progress) if args.verify else rebuild(
            settings.store, offline.log, progress
        )
        progress.finish()
    if args.verify:
        if report.verified:
            print(f"verified: views rebuilt from {report.position} events equal the live views")
            return 0
        print("MISMATCH between rebuilt and live views:")
        for line in report.differences:
            print(f"  {line}")
        return 1
    print(f"replayed: every view rebuilt from the log ({report.position} events)")
    return 0


EVENT_COLUMNS = ("POSITION", "AT", "EVENT", "ORG/APP", "SUBJECT", "DETAILS")


def _print_event(row: dict[str, Any], output: str) -> None:
    if output == "json":  # JSON Lines: one object per event, so --follow streams too
        print(json.dumps(row, sort_keys=True, default=str))
        return
    where = "/".join(p for p in (row["org"], row["app"]) if p) or "-"
    details = json.dumps(row["details"], sort_keys=True, default=str)
    print(f"{row['position']}\t{row['at']}\t{row['event']}\t{where}\t{row['subject'] or '-'}\t{details}")


def cmd_events(settings: Settings, args: argparse.Namespace) -> int:
    from relay.actors.runtime import OfflineStore

    _open_store(settings, "events", "reads the event log (bringing its audit view up to date, as a server does, "
                "each event once): safe beside a running relay serve")
    offline = OfflineStore(settings)
    views = offline.views()
    # Only the audit view is read: only it is caught up (a server beside us keeps the others).
    audit = next(p for p in views.projectors if p.name == "audit")
    since, start_time = 0, None
    if args.since:
        if args.since.isdigit():
            since = int(args.since)
        else:
            start_time = args.since
    if args.output == "text":
        print("\t".join(EVENT_COLUMNS))
    # Ctrl-C ends --follow: the handler only sets this flag (a KeyboardInterrupt raised inside gevent's hub would
    # be printed by it), the loop then closes the store and exits 130 (128 + SIGINT, as a shell reports it).
    interrupted = threading.Event()
    if args.follow:
        signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        while not interrupted.is_set():
            audit.catch_up()
            rows = views.audit.entries(
                app=args.app, org=args.org, event=args.type, since=since, start_time=start_time, limit=1000
            )
            for row in rows:
                _print_event(row, args.output)
                since = row["position"]
            sys.stdout.flush()
            if not args.follow:
                if len(rows) < 1000:
                    break
                continue
            if len(rows) < 1000:
                interrupted.wait(1.0)
    finally:
        offline.close()
    return 130 if interrupted.is_set() else 0


def _log_as(tag: str) -> None:
    """Prefix every log line with who wrote it: with --workers, the supervisor and each worker share stderr."""
    fmt = f"%(asctime)s %(levelname)s [{tag.replace('%', '%%')}] %(name)s: %(message)s"
    for handler in logging.getLogger().handlers:
        handler.setFormatter(logging.Formatter(fmt))


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from relay.web.cli.workers import Supervisor
    from relay.web.transport.log_secrets import install_secret_filter
    from relay.web.transport.server import serve
    from relay.web.wsgi import create_app

    if args.worker is not None:  # one worker of a supervisor: it checked the settings and made the token
        _log_as(settings.instance_id)
        return serve(settings, create_app, worker=args.worker)
    if args.workers is not None:
        settings.workers = args.workers
        check_workers(settings, "--workers")
    token, generated = settings.ensure_admin_token()
    del token
    if generated:
        print(f"admin token generated and stored in {settings.admin_token_path} (mode 0600)", file=sys.stderr)
    if settings.workers == 1:
        return serve(settings, create_app)
    supervisor = Supervisor(settings)
    install_secret_filter(settings, supervisor.secret)
    _log_as("supervisor")
    return supervisor.run()


def cmd_store(settings: Settings, args: argparse.Namespace) -> int:
    """`relay store copy|export|import` (web/cli/store.py)."""
    from relay.web.cli.store import StoreCommandError, run

    try:
        return run(settings, args)
    except StoreCommandError as error:
        raise CliError(str(error)) from None


COMMANDS = {"serve": cmd_serve, "apps": cmd_apps, "keys": cmd_keys, "data-plane": cmd_data_plane,
            "autoscale": cmd_autoscale, "replay": cmd_replay, "events": cmd_events, "diff": cmd_config,
            "apply": cmd_config, "store": cmd_store, "incidents": cmd_incidents}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging()
    os.umask(0o077)  # the store, its -wal/-shm files and the admin token: the owner's only (projections/backend.py)
    if args.command in ("apps", "keys") and args.action in ("create", "delete", "revoke") and not args.name:
        print(f"relay {args.command} {args.action}: a NAME is required", file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env()
        return COMMANDS[args.command](settings, args)
    except (ConfigError, CliError) as error:
        print(f"relay: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130  # Ctrl-C (e.g. ending `events --follow`): the shell's 128 + SIGINT, without a traceback


if __name__ == "__main__":
    sys.exit(main())
