"""Failed logins, throttled per source address: the console's login form and the API's bearer tokens.

An address (the caller behind RELAY_TRUSTED_PROXIES: web/transport/forwarded.py puts it in REMOTE_ADDR) that failed
RELAY_LOGIN_FAILURES_PER_MIN times in the last minute gets 429 with Retry-After for every login it tries, valid
token or not, until its oldest failure leaves the minute: answering a valid token would let a guesser tell a
hit from a miss, so the throttle would slow nothing. Other addresses are not affected, nor console sessions
already open (their cookie is no login). The counter is web/transport/limits.py's `HandshakeFailures` (the same sliding
window), kept in memory per instance; a lockout is logged once per episode, naming the address, never a token.
"""

from __future__ import annotations

import logging

from flask import current_app, request

from relay.web.problems import ApiError
from relay.web.transport.limits import HandshakeFailures, retry_after_header

log = logging.getLogger("relay.web.logins")

_EXTENSION = "relay_login_failures"


def _failures() -> HandshakeFailures:
    found = current_app.extensions.get(_EXTENSION)
    if found is None:
        found = current_app.extensions.setdefault(
            _EXTENSION, HandshakeFailures(current_app.extensions["relay"].settings.login_failures_per_min))
    return found


def caller() -> str:
    return request.remote_addr or ""


def retry_after() -> str | None:
    """None when the caller may try to log in; else the Retry-After value it must wait."""
    seconds = _failures().retry_after(caller())
    return None if seconds is None else retry_after_header(seconds)


def refuse_if_throttled() -> None:
    """Raise the API's 429 when the caller is throttled."""
    wait = retry_after()
    if wait is not None:
        raise ApiError(429, f"too many failed logins from {caller()}; try again in {wait} s",
                       headers={"Retry-After": wait})


def failed() -> None:
    """Count one failed login of the caller (announced once when it reaches the limit)."""
    if _failures().failed(caller()):
        log.warning("failed logins from %s reached %d in a minute: logins from there are refused (429) until "
                    "the minute has passed", caller(), _failures().limit)
