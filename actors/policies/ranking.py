"""The one rule for choosing an executor, pure (no I/O, no clock): who may take a message type, and in what
order candidates are tried. Routing of API calls (actors/routing.py), alerting and retention requests
(actors/executor_requests.py) and recovery dispatch (actors/recovery_dispatch.py) all rank with it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from relay.wire.support import supported_types


class Rankable(Protocol):
    executor_id: str
    application_version: str
    connected_at: float


R = TypeVar("R", bound=Rankable)


def supports(executor: Any, message_type: str) -> bool:
    """Whether the executor may answer ``message_type``: it was not marked unsupported (it answered "Unknown
    message type" before) and, when Relay knows its SDK release, that release has the type."""
    if message_type in executor.unsupported:
        return False
    known = supported_types(executor.language, executor.dbos_version)
    return known is None or message_type in known


def order(
    executors: Iterable[R], *, latest: str | None, version: str | None = None, local_first: bool = False,
    longest_connected: bool = False,
) -> list[R]:
    """Best first: executors of `version` first (when given: a recovery's dead executor's own version), then
    those running the application's `latest` version, then (with `local_first`) those connected to this
    instance before those on others, then the most recently connected (or, with `longest_connected`, the
    longest connected); executor_id breaks ties, so the order is stable."""

    def key(e: R) -> tuple[bool, bool, bool, float, str]:
        return (
            version is not None and e.application_version != version,
            latest is None or e.application_version != latest,
            local_first and bool(getattr(e, "remote", False)),
            e.connected_at if longest_connected else -e.connected_at,
            e.executor_id,
        )

    return sorted(executors, key=key)
