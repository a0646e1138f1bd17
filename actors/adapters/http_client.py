"""One HTTP client for Relay's outgoing calls: the CLI to a server, an instance forwarding to a peer, alert
webhooks. urllib3 pools the connections per host, so calls to the same peer reuse one (cooperative under
gevent's monkey-patching). No retries or redirects here: each caller has its own policy."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes  # at most the `max_bytes` + 1 asked for


class UnreachableError(Exception):
    """No HTTP answer came back. `reason`: the innermost cause (an ssl.SSLError, a ConnectionError, ...)."""

    def __init__(self, reason: BaseException) -> None:
        super().__init__(type(reason).__name__)
        self.reason = reason


def root_cause(error: BaseException) -> BaseException:
    """The error urllib3 wraps (a failed TLS handshake, a refused or reset connection)."""
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__ or next(
            (a for a in error.args if isinstance(a, BaseException)), None)
        if inner is None:
            break
        error = inner
    return error


class HttpClient:
    def __init__(self, ssl_context: ssl.SSLContext | None = None, *, pool_size: int = 4) -> None:
        self._pool = urllib3.PoolManager(num_pools=32, maxsize=pool_size, ssl_context=ssl_context, retries=False)

    def request(self, method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float,
                max_bytes: int | None = None) -> HttpAnswer:
        """The answer, whatever its status; TimeoutError when none came within `timeout`, UnreachableError
        when the server could not be reached or broke the connection."""
        try:
            response = self._pool.request(method, url, body=body, headers=headers, redirect=False,
                                          timeout=urllib3.Timeout(total=timeout), preload_content=False)
            try:
                data = response.read(max_bytes + 1) if max_bytes is not None else response.read()
            finally:
                response.release_conn()
        except NewConnectionError as error:  # a subclass of urllib3's timeout error, but refused or unroutable
            raise UnreachableError(root_cause(error)) from None
        except Urllib3Timeout:
            raise TimeoutError(f"no answer within {timeout:g} s") from None
        except (HTTPError, OSError) as error:
            cause = root_cause(error)
            if isinstance(cause, TimeoutError | Urllib3Timeout):
                raise TimeoutError(f"no answer within {timeout:g} s") from None
            raise UnreachableError(cause) from None
        return HttpAnswer(status=int(response.status), body=data)

    def connections_made(self, url: str) -> int:
        """How many connections were opened to `url`'s host so far (tests check they are reused)."""
        return int(self._pool.connection_from_url(url).num_connections)

    def close(self) -> None:
        self._pool.clear()
