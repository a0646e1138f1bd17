"""Blocking work moved off gevent's hub (issue 34): a client call that loads and converts 10,000 workflows, or a
file read that may block, would otherwise hold every other request of `relay serve` while it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import gevent
import gevent.monkey

T = TypeVar("T")


def off_hub(fn: Callable[[], T]) -> T:
    """Run `fn` in gevent's threadpool when the hub is in use (relay serve), else here (tests, the CLI)."""
    if not gevent.monkey.is_module_patched("threading"):
        return fn()
    outcome: list[tuple[bool, object]] = []

    def caught() -> None:
        try:
            outcome.append((True, fn()))
        except Exception as error:  # raised again in the caller (the threadpool would print it)
            outcome.append((False, error))

    gevent.get_hub().threadpool.apply(caught)
    ok, value = outcome[0]
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]
