"""HMAC-SHA256 signatures: webhooks sign a Unix timestamp and the payload (`sign`); instance-to-instance
forwards sign a timestamp, a nonce, the target instance and the payload (`sign_forward`).

A forward arrives with X-Relay-Timestamp, X-Relay-Nonce, X-Relay-Target, X-Relay-Signature (hex) and
X-Relay-Forward-Hop. Relay refuses hop >= 1 (409: no loops), a timestamp more than 30 s off (401), a target
that is another instance (401: a forward meant for a peer, replayed here), a missing or malformed nonce and a
bad signature (401); nothing is executed then. Comparison is constant-time. A nonce seen already is refused
by the endpoint (web/api/cluster.py), which keeps the nonces in the shared store for the window
(actors/edge_state.py, docs/adr/0008-forward-nonces-shared-in-the-store.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

MAX_SKEW_S = 30
HOP_HEADER = "X-Relay-Forward-Hop"
TIMESTAMP_HEADER = "X-Relay-Timestamp"
SIGNATURE_HEADER = "X-Relay-Signature"
NONCE_HEADER = "X-Relay-Nonce"
TARGET_HEADER = "X-Relay-Target"
# How long a used nonce must be remembered: a timestamp is accepted up to MAX_SKEW_S either side of now.
NONCE_WINDOW_S = 2 * MAX_SKEW_S + 1
_NONCE = re.compile(r"[0-9a-f]{32}")


def sign(secret: str, timestamp: int, payload: bytes) -> str:
    message = str(timestamp).encode() + b"." + payload
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_forward(secret: str, timestamp: int, nonce: str, target: str, payload: bytes) -> str:
    message = f"{timestamp}.{nonce}.{target}.".encode() + payload
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(secret: str, payload: bytes, now: float | None = None, *, target: str,
                   nonce: str | None = None) -> dict[str, str]:
    """The headers of a forward to instance `target` (a fresh nonce unless one is given)."""
    timestamp = int(time.time() if now is None else now)
    nonce = secrets.token_hex(16) if nonce is None else nonce
    return {
        TIMESTAMP_HEADER: str(timestamp),
        NONCE_HEADER: nonce,
        TARGET_HEADER: target,
        SIGNATURE_HEADER: sign_forward(secret, timestamp, nonce, target, payload),
        HOP_HEADER: "0",
        "Content-Type": "application/json",
    }


@dataclass(frozen=True)
class Refusal:
    status: int
    detail: str


def check(secret: str | None, headers: dict[str, str], payload: bytes, now: float | None = None, *,
          target: str) -> Refusal | None:
    """None when the request may run on instance `target` (this one); otherwise why not. The hop header counts
    the forwards made before this one: a first forward carries 0; anything that arrives with hop >= 1 has
    already been forwarded once and is refused, so a request can never loop between instances. Whether the
    nonce was used already is the caller's to check, once the signature holds."""
    if not secret:
        return Refusal(401, "forwarding is not configured on this instance")
    return _hop_refusal(headers) or _signature_refusal(secret, headers, payload, now, target)


def _hop_refusal(headers: dict[str, str]) -> Refusal | None:
    try:
        hop = int(headers.get(HOP_HEADER, ""))
    except ValueError:
        return Refusal(400, f"{HOP_HEADER} must be an integer")
    if hop >= 1:
        return Refusal(409, "request was forwarded already: refusing to forward it again (loop)")
    if hop < 0:
        return Refusal(400, f"{HOP_HEADER} must not be negative")
    return None


def _signature_refusal(secret: str, headers: dict[str, str], payload: bytes, now: float | None,
                       target: str) -> Refusal | None:
    try:
        timestamp = int(headers.get(TIMESTAMP_HEADER, ""))
    except ValueError:
        return Refusal(401, "bad or missing signature timestamp")
    current = time.time() if now is None else now
    if abs(current - timestamp) > MAX_SKEW_S:
        return Refusal(401, "signature timestamp outside the allowed window")
    nonce = headers.get(NONCE_HEADER, "")
    if not _NONCE.fullmatch(nonce):
        return Refusal(401, "bad or missing nonce")
    if headers.get(TARGET_HEADER) != target:
        return Refusal(401, "signed for another instance")
    expected = sign_forward(secret, timestamp, nonce, target, payload)
    if not hmac.compare_digest(expected, headers.get(SIGNATURE_HEADER, "")):
        return Refusal(401, "bad signature")
    return None
