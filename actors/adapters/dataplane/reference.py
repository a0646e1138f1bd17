"""Where a data plane's system database URL comes from (issue 15, bound and bounded by issue 34): the reference
the operator bound to the application (RELAY_DATA_PLANE_REFERENCES), an environment variable of this server or a
small regular file it can read.

A `file:` is read off the gevent hub (in its threadpool), opened without blocking (a FIFO does not wait for a
writer) and only when it is a regular file, and never more than MAX_REFERENCE_FILE_BYTES: `/dev/zero` or a
FIFO named by a reference cannot freeze Relay. Why a reference cannot be used is logged for the operator; the
caller only hears that it cannot (whether a file exists, or what a variable holds, is not the caller's to learn)."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from relay.actors.adapters.off_hub import off_hub
from relay.events.data_plane import AllowedReferences, check_reference_allowed, reference_kind
from relay.events.errors import InvalidValueError

log = logging.getLogger("relay.dataplane")

MAX_REFERENCE_FILE_BYTES = 4096  # a URL is far shorter; anything longer is not one
UNUSABLE = "the system database reference cannot be used (Relay's log says why)"
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)

class UnusableReference(Exception):
    """A reference that gives no URL: `cause` for Relay's log only (no secret in it); the caller hears only that
    the data plane cannot be used (actors/adapters/dataplane/client.py)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class UnsafeReference(UnusableReference):
    """A `file:` that must not even be recorded: not a regular file, too large, or in Relay's own data directory."""


def read_reference_file(target: str, private: tuple[Path, ...] = ()) -> str:
    """The first line's worth of a small regular file, never following into a device or a FIFO."""
    resolved = Path(target).resolve()
    if any(resolved.is_relative_to(folder.resolve()) for folder in private):
        raise UnsafeReference(f"{target} is in Relay's own data directory")
    try:
        if not stat.S_ISREG(os.stat(resolved).st_mode):  # refused before it is even opened
            raise UnsafeReference(f"{target} is not a regular file")
        fd = os.open(resolved, _OPEN_FLAGS)
    except OSError as error:
        raise UnusableReference(f"cannot read {target}: {error.strerror or type(error).__name__}") from None
    try:
        info = os.fstat(fd)  # what was opened, which may have been swapped since the stat above
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeReference(f"{target} is not a regular file")
        if info.st_size > MAX_REFERENCE_FILE_BYTES:
            raise UnsafeReference(f"{target} is larger than {MAX_REFERENCE_FILE_BYTES} bytes")
        data = os.read(fd, MAX_REFERENCE_FILE_BYTES + 1)
    except OSError as error:
        raise UnusableReference(f"cannot read {target}: {error.strerror or type(error).__name__}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_REFERENCE_FILE_BYTES:
        raise UnsafeReference(f"{target} is larger than {MAX_REFERENCE_FILE_BYTES} bytes")
    return data.decode("utf-8", errors="replace").strip()


def resolve_url(reference: str, environ: Mapping[str, str], private: tuple[Path, ...] = ()) -> str:
    """The URL a reference points at (a `file:` read off the hub); UnusableReference when it gives none."""
    kind, target = reference_kind(reference)
    if kind == "env":
        value = environ.get(target, "").strip()
        if not value:
            raise UnusableReference(f"environment variable {target} of the Relay server is not set")
        return value
    value = off_hub(lambda: read_reference_file(target, private))
    if not value:
        raise UnusableReference(f"{target} is empty")
    return value


def check_reference(reference: str, org: str, app: str, allowed: AllowedReferences,
                    private: tuple[Path, ...] = ()) -> None:
    """Before a data plane is recorded (PUT, config apply): InvalidValueError when the operator did not bind the
    reference to this application, or when it is a `file:` Relay must never read. A reference that merely gives
    no URL yet (an unset variable, a missing file) is recorded: the operator may provide it later."""
    check_reference_allowed(reference, org, app, allowed)
    kind, target = reference_kind(reference)
    if kind != "file":
        return
    try:
        off_hub(lambda: read_reference_file(target, private))
    except UnsafeReference as error:
        log.warning("data plane of %s/%s refused: %s", org, app, error.cause)
        raise InvalidValueError("systemDatabaseUrlFrom names a file Relay does not read (not a small regular "
                                "file of the server)") from None
    except UnusableReference as error:
        log.warning("data plane of %s/%s: %s", org, app, error.cause)
