"""The data plane (issue 15): an application's workflows, queues, schedules and versions read and managed
through its DBOS system database with the SDK's own public client (``dbos.DBOSClient``), for when no executor of
the application is connected, or its SDK release has no open conductor client.

One `DataPlane` per configured application and instance, built on first use: the system database URL is read
then from where the configuration points (an environment variable or a file of this server), never stored;
the schema version is checked before the client is made (actors/adapters/dataplane/schema.py) and a database Relay does
not support is refused before anything touches it. Errors name the application and what went wrong, never the
URL (`scrub`); they are the services' domain errors (actors/errors.py: DataPlaneError's kinds
unavailable, refused, timed out, failed), raised here, never an HTTP status. Answers are the executors' own
response types (actors/adapters/dataplane/answers.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.actors.adapters.dataplane import schema as dataplane_schema
from relay.actors.adapters.dataplane.reference import UNUSABLE, UnusableReference, resolve_url
from relay.actors.errors import (
    DataPlaneError,
    DataPlaneFailedError,
    DataPlaneRefusedError,
    DataPlaneTimedOutError,
    DataPlaneUnavailableError,
)
from relay.events.data_plane import READ_WRITE, AllowedReferences, check_reference_allowed
from relay.events.errors import InvalidValueError
from relay.wire.json_types import JSONObject

log = logging.getLogger("relay.dataplane")

RETRY_AFTER_FAILURE_S = 5.0  # a database that could not be opened is tried again after this long
_CREDENTIALS = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^@/\s]*@")
_PASSWORD_PARAM = re.compile(r"(?i)(password=)[^&\s]*")
_ANY_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://\S+")


class _SdkLogFilter(logging.Filter):
    """The DBOS SDK logs its system database URL when a client opens it (password masked, host and database
    not): in Relay's log only its warnings and errors, with any URL cut out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        record.msg, record.args = _ANY_URL.sub("<url>", record.getMessage()), None
        return True


def quiet_sdk_logger() -> None:
    sdk = logging.getLogger("dbos")
    if not any(isinstance(f, _SdkLogFilter) for f in sdk.filters):
        sdk.addFilter(_SdkLogFilter())


@dataclass(frozen=True)
class State:
    """What GET .../data-plane reports: ready, refused (schema), unreachable, unresolved (reference)."""

    status: str
    detail: str
    schema_version: int | None = None

    def to_json(self) -> JSONObject:
        return {"status": self.status, "detail": self.detail, "schemaVersion": self.schema_version}


def scrub(text: str, url: str | None) -> str:
    """An error text without the URL, its password or any credentials of a URL in it."""
    if url:
        text = text.replace(url, "<system database>")
        password = _password_of(url)
        if password:
            text = text.replace(password, "***")
    return _PASSWORD_PARAM.sub(r"\1***", _CREDENTIALS.sub(r"\1***@", text))


def _password_of(url: str) -> str | None:
    head, at, _ = url.partition("@")
    if not at or "://" not in head:
        return None
    _, _, userinfo = head.partition("://")
    _, colon, password = userinfo.partition(":")
    return password if colon and password else None


def _engine(url: str, config: Mapping[str, Any]) -> Any:
    """A SQLAlchemy engine on the SDK's own driver (psycopg 3), with the configured pool and statement timeout."""
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    parsed = sa.engine.make_url(url)
    timeout_ms = int(config["statementTimeoutMs"])
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:") or not Path(database).is_file():
            raise DataPlaneUnavailableError("no SQLite system database at the configured path (Relay creates none)")
        return sa.create_engine(parsed, connect_args={"timeout": timeout_ms / 1000})
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise DataPlaneRefusedError(f"the URL's scheme is {parsed.get_backend_name()}: a system database is "
                                    "PostgreSQL or SQLite")
    parsed = parsed.set(drivername="postgresql+psycopg")
    return sa.create_engine(
        parsed,
        pool_size=int(config["poolSize"]),
        max_overflow=0,
        pool_timeout=max(1.0, timeout_ms / 1000),
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": 5,
            "application_name": "relay-data-plane",
            "options": f"-c statement_timeout={timeout_ms}",
        },
    )


class DataPlane:
    """One application's client on its system database, made when first needed."""

    def __init__(self, org: str, app: str, config: Mapping[str, Any],
                 environ: Mapping[str, str] | None = None, clock: Callable[[], float] | None = None,
                 private: tuple[Path, ...] = (), allowed: AllowedReferences | None = None) -> None:
        self.org = org
        self.app = app
        self.config = dict(config)
        self._environ = environ if environ is not None else os.environ
        self._private = private
        self._allowed = allowed or {}  # nothing the operator did not bind to this application
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._client: Any = None
        self._engine: Any = None
        self._state = State("unchecked", "not opened yet")
        self._failed_at: float | None = None
        self._failure: DataPlaneError | None = None

    @property
    def writable(self) -> bool:
        return self.config["mode"] == READ_WRITE

    @property
    def engine(self) -> Any:
        """The open system database's engine (the client's own), for Relay's own read-only queries; opens the
        database if not yet done."""
        self.client()
        return self._engine

    def state(self) -> State:
        """Open the database if not yet done (or if the last try failed long enough ago) and say how it went."""
        with contextlib.suppress(DataPlaneError):
            self.client()
        return self._state

    def client(self) -> Any:
        with self._lock:
            if self._client is not None:
                return self._client
            if self._failure is not None and self._failed_at is not None \
                    and self._clock() - self._failed_at < RETRY_AFTER_FAILURE_S:
                raise self._failure
            try:
                self._client = self._open()
            except DataPlaneError as error:
                self._failure, self._failed_at = error, self._clock()
                raise
            self._failure = None
            return self._client

    def _unusable(self, status: str, cause: str) -> DataPlaneError:
        """The cause in Relay's log, for the operator; the caller gets the generic reason (point 10 of issue 34:
        whether a file exists, or a URL's scheme, is not the caller's to learn)."""
        log.warning("data plane of %s/%s: %s", self.org, self.app, cause)
        self._state = State(status, UNUSABLE)
        return DataPlaneUnavailableError(f"the data plane of application '{self.app}' cannot be used: {UNUSABLE}")

    def _open(self) -> Any:
        reference = self.config["systemDatabaseUrlFrom"]
        try:
            check_reference_allowed(reference, self.org, self.app, self._allowed)
            url = resolve_url(reference, self._environ, self._private)
        except InvalidValueError:
            raise self._unusable("unresolved", f"{reference} is not bound to this application by "
                                               "RELAY_DATA_PLANE_REFERENCES") from None
        except UnusableReference as error:
            raise self._unusable("unresolved", error.cause) from None
        try:
            from dbos import DBOSClient  # noqa: PLC0415 (the optional extra)

            from relay.actors.adapters.dataplane import values as dataplane_values  # noqa: PLC0415 (imports dbos)
        except ImportError:
            self._state = State("unavailable", "the DBOS client is not installed: pip install 'relay[dataplane]'")
            raise DataPlaneUnavailableError(self._state.detail) from None
        quiet_sdk_logger()
        engine = None
        try:
            engine = _engine(url, self.config)
            checked = dataplane_schema.check(engine, self.config["schema"])
            if not checked.ok:
                self._state = State("refused", checked.detail, checked.version)
                raise DataPlaneRefusedError(f"the system database of application '{self.app}' is not one Relay "
                                            f"reads: {checked.detail}")
            self._refuse_another_application(engine, checked.version)
            client = DBOSClient(
                system_database_engine=engine,
                dbos_system_schema=self.config["schema"],
                serializer=dataplane_values.install(),
                retry_connection_errors=False,
                observability_query_timeout_sec=int(self.config["statementTimeoutMs"]) / 1000,
            )
        except DataPlaneError as error:
            if engine is not None:
                engine.dispose()
            if self._state.status != "refused":  # the URL is not one Relay opens: said as of the reference
                raise self._unusable("unresolved", error.detail) from None
            raise
        except Exception as error:
            if engine is not None:
                engine.dispose()
            detail = scrub(f"{type(error).__name__}: {_first_line(error)}", url)
            log.warning("data plane of %s/%s: cannot open the system database: %s", self.org, self.app, detail)
            self._state = State("unreachable", "the system database cannot be reached (Relay's log says why)")
            raise DataPlaneUnavailableError(f"the system database of application '{self.app}' cannot be reached "
                                            "(Relay's log says why)") from None
        self._engine = engine
        self._state = State("ready", checked.detail, checked.version)
        log.info("data plane of %s/%s: system database opened (%s, %s)", self.org, self.app,
                 self.config["mode"], checked.detail)
        return client

    def _refuse_another_application(self, engine: object, version: int) -> None:
        """A system database whose workflows name another application is that application's: refused, so a
        reference that reaches it (an operator's slip) cannot read or change its workflows from this one."""
        other = dataplane_schema.foreign_application(engine, self.config["schema"], self.app)
        if other is not None:
            log.warning("data plane of %s/%s refused: its system database holds workflows of application %r",
                        self.org, self.app, other)
            self._state = State("refused", "the system database holds workflows of another application", version)
            raise DataPlaneRefusedError(f"the system database of application '{self.app}' is not one Relay reads "
                                        "for it: it holds workflows of another application")

    def failure(self, error: Exception) -> DataPlaneError:
        """A client call's exception as a domain error: timed out, unavailable (the database went away), or
        failed (it answered with an error)."""
        detail = scrub(f"{type(error).__name__}: {_first_line(error)}", None)
        names = {cls.__name__ for cls in type(error).__mro__}
        if names & {"QueryCanceled", "DBOSQueryTimeoutError"}:
            return DataPlaneTimedOutError(f"the system database of application '{self.app}' did not answer "
                                          f"within {self.config['statementTimeoutMs']} ms (statementTimeoutMs)")
        if _is_connection_error(error):
            with self._lock:  # the next call opens a fresh client
                self._discard()
            return DataPlaneUnavailableError(f"the system database of application '{self.app}' cannot be "
                                             f"reached: {detail}")
        return DataPlaneFailedError(f"the system database of application '{self.app}' answered with an error: "
                                    f"{detail}")

    def close(self) -> None:
        with self._lock:
            self._discard()

    def _discard(self) -> None:
        client, self._client = self._client, None
        engine, self._engine = self._engine, None
        try:
            if client is not None:
                client.destroy()
            if engine is not None:
                engine.dispose()
        except Exception:
            log.debug("data plane of %s/%s: closing the client failed", self.org, self.app, exc_info=True)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:500] if text else ""


def _is_connection_error(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"OperationalError", "InterfaceError", "DisconnectionError", "TimeoutError"})


class DataPlanes:
    """This instance's data planes, one per configured application, remade when its configuration changes."""

    def __init__(self, environ: Mapping[str, str] | None = None, private: tuple[Path, ...] = (),
                 allowed: AllowedReferences | None = None) -> None:
        self._environ = environ
        self._private = private
        self._allowed = allowed or {}
        self._lock = threading.Lock()
        self._planes: dict[tuple[str, str], DataPlane] = {}

    def get(self, org: str, app: str, config: Mapping[str, object] | None) -> DataPlane | None:
        key = (org, app)
        with self._lock:
            plane = self._planes.get(key)
            if plane is not None and (config is None or plane.config != dict(config)):
                self._planes.pop(key)
                plane.close()
                plane = None
            if plane is None and config is not None:
                plane = DataPlane(org, app, config, self._environ, private=self._private, allowed=self._allowed)
                self._planes[key] = plane
            return plane

    def close(self) -> None:
        with self._lock:
            planes, self._planes = list(self._planes.values()), {}
        for plane in planes:
            plane.close()
