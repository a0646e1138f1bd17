"""A console session outside the browser: logged in through the login form with a token, as a browser is.

For tests that need a logged-in session to read console pages or post their forms. The tests of the login itself
(tests/e2e/test_console.py, tests/integration/test_auth_matrix.py) walk the form step by step instead.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import requests

if TYPE_CHECKING:
    from tests.support.procs import RelayProcess

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(page: str) -> str:
    """The CSRF token a console page carries in its forms."""
    found = _CSRF.search(page)
    assert found, "the page carries no CSRF token"
    return found.group(1)


def console_session(relay: RelayProcess, token: str | None = None) -> tuple[requests.Session, str]:
    """A session logged in with `token` (the admin token unless given), and its CSRF token.

    A refused token gets 401 from the login form, so a 200 here is a session the console accepted. The session
    is `relay.http_session()`: no keep-alive reuse at Relay's idle deadline."""
    session = relay.http_session()
    form = csrf_token(session.get(f"{relay.base_url}/login", timeout=10).text)
    answer = session.post(f"{relay.base_url}/login", timeout=10,
                          data={"token": relay.admin_token if token is None else token, "csrf_token": form})
    assert answer.status_code == 200, f"console login: {answer.status_code} {answer.text[:300]}"
    return session, csrf_token(answer.text)  # login makes a new session, with a new token: the landing page's
