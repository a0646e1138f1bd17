"""Ports and polling: the two things every test that talks to a real process needs."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago (the OS picks it: bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    message: str = "condition not met",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and return that.

    The predicate is always called at least once, and once more at the deadline. Exceptions of the types in
    ``ignore`` count as "not yet" (the last one is named in the failure). At the deadline this raises
    ``AssertionError(message)``, so a test fails with the message rather than errors.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        final = time.monotonic() >= deadline
        try:
            result = predicate()
        except ignore as exc:
            last_error = exc
        else:
            if result:
                return result
        if final:
            detail = f"; last error: {last_error!r}" if last_error is not None else ""
            raise AssertionError(f"{message} (waited {timeout:g} s){detail}")
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
