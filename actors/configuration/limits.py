"""Bounds on what an executor may send and how long Relay waits for it: part of the settings
(actors/configuration/settings.py), read by the actors through their context (actors/context.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Bounds on what an executor may send and how long Relay waits for it."""

    max_frame_bytes: int = 64 * 1024 * 1024
    request_timeout_s: float = 30.0
    handshake_timeout_s: float = 10.0
    ping_interval_s: float = 10.0
    pong_timeout_s: float = 25.0
    # How long a peer may take to answer a recovery dispatch before the next candidate gets it.
    recovery_timeout_s: float = 30.0
    # API requests one executor may have unanswered at once; more are refused (429) until it answers.
    max_inflight_per_executor: int = 256
    # Recoveries one peer is asked to run at once; more dead executors wait in a queue for it.
    recovery_max_per_peer: int = 4
