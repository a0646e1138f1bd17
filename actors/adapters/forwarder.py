"""Calling an executor connected to another Relay instance: `POST /internal/v1/forward/{appID}` there.

The payload is ``{"org", "app", "executor_id", "frame": {"type", "request_id", ...fields}}`` (the frame
as wire/requests.py encodes it; the peer sends the executor a request id of its own), signed as wire/signing.py
says. The peer runs it on that executor and answers the executor's raw response (200, decoded here with
wire/codec.py like a frame), or a problem (web/api/cluster.py says which status means what). Only `_exchange`
speaks HTTP: it reads the peer's status into what happened (`Outcome`: the executor is gone from there, timed
out, busy, failed, or the forward was refused), and the caller gets that as a domain error, the same a local
executor's call raises (wire/errors.py, actors/errors.py). The HTTP client
(actors/adapters/http_client.py) is cooperative under gevent and reuses its connection to a peer; every call is
bounded by the caller's timeout plus a small margin, so the peer's own timeout answer arrives before ours.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from relay.actors.adapters.http_client import HttpAnswer, HttpClient, UnreachableError
from relay.actors.cluster import Cluster, RemoteExecutor
from relay.actors.errors import ExecutorFailedError, ForwardRefusedError, TimedOutError
from relay.projections.applications import ApplicationsQueries
from relay.wire import signing as forwarding
from relay.wire.codec import decode_response
from relay.wire.errors import ExecutorGoneError, InFlightLimitError, PeerUnreachableError, ProtocolError
from relay.wire.json_types import JSONObject
from relay.wire.requests import RawRequest, Request, encode_request
from relay.wire.responses import Response

FORWARD_PATH = "/internal/v1/forward/"
# The peer waits up to the request timeout for its executor, then answers 504: wait a little longer for it.
MARGIN_S = 2.0
POOL_SIZE = 64  # idle connections kept per peer
_DETAIL_CHARS = 500


Outcome = Literal["gone", "timed out", "busy", "failed", "refused"]
"""Why a forward brought no executor answer back: the executor is not (or no longer) connected there or its
instance cannot be reached; no answer in time; the executor is busy; it answered a malformed frame; the
forward was refused (secrets differ, a replay, an application the peer does not know)."""

# The peer's problem statuses (web/api/cluster.py), read as what happened; any other status: refused.
_PEER_STATUSES: dict[int, Outcome] = {503: "gone", 504: "timed out", 429: "busy", 502: "failed"}


class _NoAnswer(Exception):
    """A forward without an executor answer, as `_exchange` read it; `call` and `send` hand it on as domain
    errors. The detail never carries the secret or signature."""

    def __init__(self, instance: str, outcome: Outcome, detail: str) -> None:
        super().__init__(f"instance {instance}: {detail}")
        self.instance = instance
        self.outcome = outcome
        self.detail = detail

    def as_domain_error(self, executor: RemoteExecutor, request: Request | RawRequest, timeout: float,
                        inflight_limit: int) -> Exception:
        """What a local executor's call raises in the same case: gone and busy move on to the next candidate."""
        if self.outcome == "gone":
            return ExecutorGoneError(str(self))
        if self.outcome == "timed out":
            return TimedOutError(f"executor '{executor.executor_id}' (on instance {executor.instance}) did not "
                                 f"answer '{request.type}' within {timeout:g} s")
        if self.outcome == "busy":
            return InFlightLimitError(inflight_limit)
        if self.outcome == "failed":
            return ExecutorFailedError(self.detail)
        return ForwardRefusedError(f"instance {self.instance} refused the forwarded request: {self.detail}")


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
        inflight_limit: int = 0,
    ) -> None:
        """`cafiles`: PEM CAs (or self-signed certificates) trusted for https besides the system's: peers of a
        private CA. Peers are reached at their advertised address, which their certificate must name.
        `inflight_limit`: RELAY_MAX_INFLIGHT_PER_EXECUTOR, named when a peer's executor is busy."""
        self.cluster = cluster
        self.inflight_limit = inflight_limit
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
        included). When no executor answer came back, the domain error a local executor's call would raise:
        ExecutorGoneError, TimedOutError, InFlightLimitError, ExecutorFailedError, or ForwardRefusedError."""
        try:
            return self._exchange(executor, org, app, request, timeout)
        except _NoAnswer as failure:
            raise failure.as_domain_error(executor, request, timeout, self.inflight_limit) from None

    def _exchange(
        self, executor: RemoteExecutor, org: str, app: str, request: Request | RawRequest,
        timeout: float,
    ) -> Response:
        """The signed POST to the executor's instance and its answer; _NoAnswer when it brought none back."""
        row = self.applications.app(org, app)
        if row is None:
            raise _NoAnswer(executor.instance, "refused", f"application '{app}' not found")
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
            raise _NoAnswer(executor.instance, "timed out", f"no answer within {timeout + MARGIN_S:g} s") from None
        except UnreachableError as error:
            raise _NoAnswer(executor.instance, "gone", f"unreachable ({type(error.reason).__name__})") from None
        if answer.status >= 400:
            outcome = _PEER_STATUSES.get(answer.status, "refused")
            raise _NoAnswer(executor.instance, outcome, _problem_detail(answer)) from None
        body = answer.body
        try:
            return decode_response(body, max_bytes=self.max_bytes)
        except ProtocolError as error:
            raise _NoAnswer(executor.instance, "failed", f"answered something that is not a frame ({error})") \
                from None

    def send(
        self, executor: RemoteExecutor, org: str, app: str, request: Request, timeout: float
    ) -> Response:
        """`call` for the recovery lifecycle (actors/application.py): failures as PeerUnreachableError."""
        try:
            return self._exchange(executor, org, app, request, timeout)
        except _NoAnswer as failure:
            raise PeerUnreachableError(f"peer on instance {failure.instance} did not answer: {failure.detail}") \
                from None


def _problem_detail(answer: HttpAnswer) -> str:
    try:
        detail = json.loads(answer.body[: 64 * 1024].decode()).get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = str(detail) if detail else f"HTTP {answer.status}"
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"
