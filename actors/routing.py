"""Which executor answers a request: a pure ranking of an application's live executors.

Who may take a type and in what order is the one rule of actors/policies/ranking.py; this module splits an application's
live executors into the candidates and those known to lack the type, and names the latter. No I/O, no clock:
the caller passes what it read from the ApplicationActor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from relay.actors.executor import LiveExecutor
from relay.actors.policies.ranking import order, supports


@dataclass(frozen=True)
class Route:
    """The result of ranking: who to try, in order, and who is known to lack the type."""

    candidates: list[LiveExecutor]
    lacking: list[LiveExecutor]


@dataclass(frozen=True)
class Publication:
    """What routing reads of an application at one moment: its live executors, the latest version, and the
    routes ranked from them so far (rank_cached), by message type."""

    executors: tuple[LiveExecutor, ...]
    latest_version: str | None
    routes: dict[str, Route] = field(default_factory=dict)


def rank(
    executors: Iterable[LiveExecutor],
    message_type: str,
    latest_version: str | None,
    *,
    healthy: Callable[[LiveExecutor], bool] = lambda _: True,
) -> Route:
    """Order the healthy executors that may take ``message_type``: the latest application version first,
    then the most recently connected (ties broken by executor id, so the order is stable)."""
    alive = [e for e in executors if healthy(e)]
    candidates = [e for e in alive if supports(e, message_type)]
    lacking = [e for e in alive if not supports(e, message_type)]
    lacking.sort(key=lambda e: e.executor_id)
    return Route(candidates=order(candidates, latest=latest_version), lacking=lacking)


def rank_cached(publication: Publication, message_type: str) -> Route:
    """`rank` of a published snapshot (actors/application.py RoutingBoard), computed once per message type for
    as long as that publication is current. The Route is shared: read it, never change it."""
    route = publication.routes.get(message_type)
    if route is None:
        route = publication.routes[message_type] = rank(publication.executors, message_type,
                                                        publication.latest_version)
    return route


def describe_lacking(executors: Sequence[LiveExecutor]) -> str:
    """Name the SDK releases that lack a type, e.g. "python 2.12.0 (2 executors), typescript 4.8.1"."""
    counts: dict[tuple[str, str], int] = {}
    for executor in executors:
        release = (executor.language or "unknown language", executor.dbos_version or "unknown version")
        counts[release] = counts.get(release, 0) + 1
    parts = []
    for (language, version), count in sorted(counts.items()):
        parts.append(f"{language} {version}" + (f" ({count} executors)" if count > 1 else ""))
    return ", ".join(parts)
