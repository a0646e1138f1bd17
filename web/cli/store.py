"""`relay store copy|export|import`: move the whole event log to another store, or to a backup file and back.

The store is the one `relay serve` is configured with (RELAY_DATA_DIR, or RELAY_DATABASE_URL and
RELAY_DATABASE_SCHEMA). A copy's source and an import's target must have no `relay serve` on them (a fresh
heartbeat in the instances table); a target must hold no event. The views are rebuilt on the target, so
`relay replay --verify` passes there. No password of a database URL is ever printed: stores are named by
`StoreConfig.describe()`, and error texts go through the log's secret filter first. docs/adr/0048."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import psycopg
import psycopg.sql
from eventsourcing.persistence import PersistenceError

from relay.actors.configuration.settings import Settings
from relay.actors.runtime import OfflineStore
from relay.projections.backend import SQLITE_LOG_FILE
from relay.projections.replay import rebuild
from relay.projections.store.backup import BackupError
from relay.projections.store.transfer import (
    SourceChangedError,
    TargetNotEmptyError,
    copy_log,
    export_lines,
    import_lines,
    snapshot,
    verify_backup,
)
from relay.web.transport.log_secrets import SecretFilter, install_secret_filter

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,40}")  # as projections/backend.py accepts


class StoreCommandError(Exception):
    """A refusal: said on one line, exit 2."""


def run(settings: Settings, args: argparse.Namespace) -> int:
    target = getattr(args, "to", None)
    install_secret_filter(settings, *(p for p in (_password(settings.database_url), _password(target)) if p))
    try:
        if args.action == "copy":
            return _copy(settings, args.to, args.to_schema)
        if args.action == "export":
            return _export(settings, args.out)
        return _import(settings, Path(args.file))
    except StoreCommandError as error:
        raise StoreCommandError(_clean(str(error), settings, target)) from None


# -- the three commands -------------------------------------------------------------------------------------------
def _copy(settings: Settings, url: str, schema: str) -> int:
    if not _SCHEMA_NAME.fullmatch(schema):
        raise StoreCommandError(f"--to-schema must be a schema name (lower-case letters, digits, _), not {schema!r}")
    if not url.startswith(("postgresql://", "postgres://")):
        raise StoreCommandError("--to must be a postgresql:// URL")
    target = dataclasses.replace(settings, database_url=url, database_schema=schema)
    if _same_store(settings, target):
        raise StoreCommandError(f"--to names this very store ({settings.store.describe()})")
    _require_log(settings, "copy")
    _refuse_live(settings, "the source")
    _refuse_live(target, "the target")
    _refuse_events(target)
    print(f"relay store copy: from {_where(settings)} to {target.store.describe()}", file=sys.stderr)
    _ensure_schema(target)
    with _opened(settings) as source, _opened(target) as destination:
        try:
            taken = copy_log(source.log, destination.log, _progress("copying", source))
        except TargetNotEmptyError:
            raise StoreCommandError(f"the target {target.store.describe()} already holds events: copy only into an "
                                    "empty store (nothing was written)") from None
        except SourceChangedError:
            raise StoreCommandError("the source store received events during the copy (a relay serve started on "
                                    "it?): nothing was written; stop it and copy again") from None
    _rebuild(target)
    print(f"copied {taken.events} events (last position {taken.last_position}) to {target.store.describe()}; "
          "views rebuilt")
    return 0


def _export(settings: Settings, out: str) -> int:
    _require_log(settings, "export")
    print(f"relay store export: from {_where(settings)} (safe beside a running relay serve)", file=sys.stderr)
    with _opened(settings) as source:
        taken, lines = export_lines(source.log, _relay_version())
        if out == "-":
            for line in lines:
                sys.stdout.buffer.write(line.encode())
            sys.stdout.buffer.flush()
        else:
            path = Path(out)
            partial = path.with_name(path.name + ".partial")
            try:
                with partial.open("w", encoding="utf-8", newline="\n") as file:
                    file.writelines(lines)
                partial.replace(path)
            except OSError as error:
                partial.unlink(missing_ok=True)
                raise StoreCommandError(f"cannot write {out}: {error.strerror or error}") from None
    print(f"exported {taken.events} events (last position {taken.last_position})"
          + ("" if out == "-" else f" to {out}"), file=sys.stderr)
    return 0


def _import(settings: Settings, path: Path) -> int:
    try:
        with path.open(encoding="utf-8", newline="\n") as file:
            events = verify_backup(file)
    except OSError as error:
        raise StoreCommandError(f"cannot read {path}: {error.strerror or error}") from None
    except (BackupError, UnicodeDecodeError) as error:
        raise StoreCommandError(f"{path} refused, nothing imported: {error}") from None
    _refuse_live(settings, "this store")
    _refuse_events(settings)
    print(f"relay store import: {events} events of {path} into {_where(settings)}", file=sys.stderr)
    _ensure_schema(settings)
    with _opened(settings) as target:
        try:
            with path.open(encoding="utf-8", newline="\n") as file:
                written = import_lines(file, target.log)
        except TargetNotEmptyError:
            raise StoreCommandError(f"{settings.store.describe()} already holds events: import only into an empty "
                                    "store (nothing was written)") from None
        except (OSError, BackupError, UnicodeDecodeError) as error:  # the file changed since it was checked
            raise StoreCommandError(f"{path} refused, nothing imported: {error}") from None
    _rebuild(settings)
    print(f"imported {written} events into {settings.store.describe()}; views rebuilt")
    return 0


# -- checks -------------------------------------------------------------------------------------------------------
def _require_log(settings: Settings, command: str) -> None:
    """Refuse a source with no event log (opening it would create an empty one)."""
    if not _reach(settings, lambda: OfflineStore.has_event_log(settings)):
        where = "RELAY_DATABASE_URL/RELAY_DATABASE_SCHEMA" if settings.store.is_postgres else "RELAY_DATA_DIR"
        raise StoreCommandError(f"no Relay event log in {settings.store.describe()}: nothing to {command}; set "
                                f"{where} to the store of your relay serve")


def _refuse_live(settings: Settings, which: str) -> None:
    """Refuse a store that a `relay serve` writes to: a row of its instances table beaten within
    RELAY_INSTANCE_TIMEOUT_S (a stopped server zeroes its beat)."""
    if not _reach(settings, lambda: OfflineStore.has_event_log(settings)):
        return  # no store yet: no server on it
    live = _reach(settings, lambda: OfflineStore.live_instances(settings))
    if live:
        raise StoreCommandError(
            f"relay serve is running on {which}, {settings.store.describe()} ({', '.join(live)}): stop it first; a "
            f"server killed less than RELAY_INSTANCE_TIMEOUT_S ({settings.instance_timeout_s:g} s) ago counts as "
            "running")


def _refuse_events(settings: Settings) -> None:
    if not _reach(settings, lambda: OfflineStore.has_event_log(settings)):
        return
    with _opened(settings) as store:
        events = snapshot(store.log).events
    if events:
        raise StoreCommandError(f"the target {settings.store.describe()} already holds {events} events: copy or "
                                "import only into an empty store (a new database, or another schema)")


def _ensure_schema(settings: Settings) -> None:
    """Make a PostgreSQL target's schema when it is missing (eventsourcing creates tables, not schemas)."""
    if not settings.store.is_postgres or settings.database_schema == "public":
        return
    p = settings.store.postgres_params()

    def create() -> None:
        with psycopg.connect(dbname=p["dbname"], host=p["host"], port=p["port"], user=p["user"],
                             password=p["password"], connect_timeout=5, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                psycopg.sql.Identifier(settings.database_schema)))

    _reach(settings, create)


def _reach(settings: Settings, ask: Callable[[], T]) -> T:
    try:
        return ask()
    except psycopg.Error as error:
        raise StoreCommandError(f"cannot reach {settings.store.describe()} ({error.__class__.__name__})") from None


def _same_store(a: Settings, b: Settings) -> bool:
    if not (a.store.is_postgres and b.store.is_postgres):
        return False
    pa, pb = a.store.postgres_params(), b.store.postgres_params()
    return all(pa[k] == pb[k] for k in ("host", "port", "dbname")) and a.database_schema == b.database_schema


# -- helpers ------------------------------------------------------------------------------------------------------
@contextmanager
def _opened(settings: Settings) -> Iterator[OfflineStore]:
    try:
        with OfflineStore(settings) as store:
            yield store
    except (psycopg.Error, PersistenceError) as error:
        raise StoreCommandError(f"{settings.store.describe()}: {error.__class__.__name__}: "
                                f"{_clean(str(error), settings, settings.database_url)}") from None


def _rebuild(settings: Settings) -> None:
    print("relay store: rebuilding the views on the target", file=sys.stderr)
    with _opened(settings) as store:
        store.create_tables()  # the instances table too, as relay serve makes it
        rebuild(settings.store, store.log, lambda _: None)


def _progress(label: str, store: OfflineStore) -> Callable[[int], None]:
    last = store.log.recorder.max_notification_id() or 0

    def report(position: int) -> None:
        sys.stderr.write(f"\r{label}: position {position} of {last}")
        if position >= last:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return report


def _where(settings: Settings) -> str:
    store = settings.store
    return store.describe() if store.is_postgres else f"sqlite:{(store.data_dir / SQLITE_LOG_FILE).resolve()}"


def _password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


def _clean(text: str, settings: Settings, url: str | None) -> str:
    """`text` without any password of the URLs in play, nor a URL's credentials (web/transport/log_secrets.py)."""
    secrets = [p for u in (settings.database_url, url) if (p := _password(u))]
    for secret in secrets:  # SecretFilter leaves literals under 8 characters alone
        if len(secret) >= 4:  # shorter ones would mask ordinary words, and tell nothing
            text = text.replace(secret, "***")
    return SecretFilter([]).clean(text)


def _relay_version() -> str:
    try:
        return version("relay")
    except PackageNotFoundError:
        return "unknown"
