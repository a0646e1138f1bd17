"""Instance-to-instance forwarding: HMAC-SHA256 signatures over a Unix timestamp and the payload.

A request arrives with X-Relay-Timestamp, X-Relay-Signature (hex) and X-Relay-Forward-Hop. Relay
refuses hop >= 1 (409: no loops), a timestamp more than 30 s off (401: replay), and a bad signature
(401); nothing is executed then. Comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

MAX_SKEW_S = 30
HOP_HEADER = "X-Relay-Forward-Hop"
TIMESTAMP_HEADER = "X-Relay-Timestamp"
SIGNATURE_HEADER = "X-Relay-Signature"


def sign(secret: str, timestamp: int, payload: bytes) -> str:
    message = str(timestamp).encode() + b"." + payload
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(secret: str, payload: bytes, now: float | None = None) -> dict[str, str]:
    timestamp = int(time.time() if now is None else now)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, payload),
        HOP_HEADER: "0",
        "Content-Type": "application/json",
    }


@dataclass(frozen=True)
class Refusal:
    status: int
    detail: str


def check(secret: str | None, headers: dict[str, str], payload: bytes, now: float | None = None) -> Refusal | None:
    """None when the request may run; otherwise why not. The hop header counts the forwards made
    before this one: a first forward carries 0; anything that arrives with hop >= 1 has already been
    forwarded once and is refused, so a request can never loop between instances."""
    if not secret:
        return Refusal(401, "forwarding is not configured on this instance")
    return _hop_refusal(headers) or _signature_refusal(secret, headers, payload, now)


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


def _signature_refusal(secret: str, headers: dict[str, str], payload: bytes, now: float | None) -> Refusal | None:
    try:
        timestamp = int(headers.get(TIMESTAMP_HEADER, ""))
    except ValueError:
        return Refusal(401, "bad or missing signature timestamp")
    current = time.time() if now is None else now
    if abs(current - timestamp) > MAX_SKEW_S:
        return Refusal(401, "signature timestamp outside the allowed window")
    if not hmac.compare_digest(sign(secret, timestamp, payload), headers.get(SIGNATURE_HEADER, "")):
        return Refusal(401, "bad signature")
    return None
