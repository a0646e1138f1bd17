"""Calling an executor connected to another Relay instance: `POST /internal/v1/forward/{appID}` there.

The payload is ``{"org", "app", "executor_id", "frame": {"type", "request_id", ...fields}}`` (the frame
as wire/requests.py encodes it; the peer sends the executor a request id of its own), signed as wire/signing.py
says. The peer runs it on that executor and answers the executor's raw response (200, decoded here with
wire/codec.py like a frame), or a problem: 503 the executor is not connected there (any more) or disconnected
before answering, 504 it did not answer in time, 429 it is busy, 502 it answered a malformed frame,
401/409 the forward was refused. The HTTP client (actors/adapters/http_client.py) is cooperative under gevent and
reuses its connection to a peer; every call is bounded by the caller's timeout plus a small margin, so the
peer's own 504 arrives before ours.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Sequence
from pathlib import Path

from relay.actors.adapters.http_client import HttpAnswer, HttpClient, UnreachableError
from relay.actors.cluster import Cluster, RemoteExecutor
from relay.projections.applications import ApplicationsQueries
from relay.wire import signing as forwarding
from relay.wire.codec import decode_response
from relay.wire.errors import PeerUnreachableError, ProtocolError
from relay.wire.json_types import JSONObject
from relay.wire.requests import RawRequest, Request, encode_request
from relay.wire.responses import Response

FORWARD_PATH = "/internal/v1/forward/"
# The peer waits up to the request timeout for its executor, then answers 504: wait a little longer for it.
MARGIN_S = 2.0
POOL_SIZE = 64  # idle connections kept per peer
_DETAIL_CHARS = 500


class ForwardError(Exception):
    """The forwarded request got no executor answer. `status`: the peer's HTTP status, 504 when it did not
    answer in time, None when it could not be reached. The message never carries the secret or signature."""

    def __init__(self, instance: str, status: int | None, detail: str) -> None:
        super().__init__(f"instance {instance}: {detail}")
        self.instance = instance
        self.status = status
        self.detail = detail


class Forwarder:
    """Remote executors of an application (from the cluster) and signed calls to their instances."""

    def __init__(
        self,
        cluster: Cluster,
        applications: ApplicationsQueries,
        secret: str,
        *,
        poll_s: float,
        max_bytes: int,
        scheme: str = "http",
        cafiles: Sequence[Path] = (),
    ) -> None:
        """`cafiles`: PEM CAs (or self-signed certificates) trusted for https besides the system's: peers of a
        private CA. Peers are reached at their advertised address, which their certificate must name."""
        self.cluster = cluster
        self.applications = applications
        self._secret = secret
        self.poll_s = poll_s
        self.max_bytes = max_bytes
        self.scheme = scheme
        context = ssl.create_default_context() if scheme == "https" else None
        if context is not None:
            for cafile in cafiles:
                context.load_verify_locations(cafile=str(cafile))
        # One pool per peer: a forward reuses the connection of one before. Forwards run concurrently (one per
        # API request in flight for the peer's executors), so keep as many: with 4, every forward past the fourth
        # opened a connection and dropped it afterwards ("Connection pool is full", bench/FINDINGS.md).
        self.http = HttpClient(context, pool_size=POOL_SIZE)

    def __repr__(self) -> str:  # never the secret
        return f"Forwarder(instance={self.cluster.me!r})"

    def executors(self, org: str, app: str) -> list[RemoteExecutor]:
        return self.cluster.remote_executors(org, app)

    @staticmethod
    def payload(org: str, app: str, executor_id: str | None, request: Request | RawRequest) -> bytes:
        # The frame keeps its request id (the peer sends its own to the executor); a forward's uniqueness is
        # its nonce (wire/signing.py).
        frame = json.loads(encode_request(request))
        body: JSONObject = {"org": org, "app": app, "frame": frame}
        if executor_id is not None:
            body["executor_id"] = executor_id
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()

    def call(
        self, executor: RemoteExecutor, org: str, app: str, request: Request | RawRequest,
        timeout: float,
    ) -> Response:
        """Run `request` on `executor` through its instance; its response, whatever it says (error_message
        included). ForwardError when no executor answer came back."""
        row = self.applications.app(org, app)
        if row is None:
            raise ForwardError(executor.instance, 404, f"application '{app}' not found")
        payload = self.payload(org, app, executor.executor_id, request)
        host = f"[{executor.address}]" if ":" in executor.address else executor.address
        url = f"{self.scheme}://{host}:{executor.port}{FORWARD_PATH}{row['id']}"
        # Bound to a fresh nonce and to the instance it is meant for: the peer refuses it anywhere else, and
        # twice anywhere (the nonces are in the shared store).
        headers = {"Content-Type": "application/json",
                   **forwarding.signed_headers(self._secret, payload, target=executor.instance)}
        try:
            answer = self.http.request("POST", url, payload, headers, timeout + MARGIN_S, max_bytes=self.max_bytes)
        except TimeoutError:
            raise ForwardError(executor.instance, 504, f"no answer within {timeout + MARGIN_S:g} s") from None
        except UnreachableError as error:
            raise ForwardError(executor.instance, None, f"unreachable ({type(error.reason).__name__})") from None
        if answer.status >= 400:
            raise ForwardError(executor.instance, answer.status, _problem_detail(answer)) from None
        body = answer.body
        try:
            return decode_response(body, max_bytes=self.max_bytes)
        except ProtocolError as error:
            raise ForwardError(executor.instance, 502, f"answered something that is not a frame ({error})") from None

    def send(
        self, executor: RemoteExecutor, org: str, app: str, request: Request, timeout: float
    ) -> Response:
        """`call` for the recovery lifecycle (actors/application.py): failures as PeerUnreachableError."""
        try:
            return self.call(executor, org, app, request, timeout)
        except ForwardError as error:
            raise PeerUnreachableError(f"peer on instance {error.instance} did not answer: {error.detail}") from None


def _problem_detail(answer: HttpAnswer) -> str:
    try:
        detail = json.loads(answer.body[: 64 * 1024].decode()).get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = str(detail) if detail else f"HTTP {answer.status}"
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"
