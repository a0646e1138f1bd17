"""What can go wrong talking to an executor, as exceptions every layer can import (pure: no I/O).

Matched by class everywhere (never by name), so actors, the web layer and the forwarder agree on them."""

from __future__ import annotations


class ExecutorGoneError(Exception):
    """The executor's socket closed before it answered."""


class MalformedAnswerError(Exception):
    """The executor answered a request (its request_id is in the frame) with a frame that breaks the protocol.
    The message is the decoder's reason, which never quotes the frame."""


class InFlightLimitError(Exception):
    """The executor already has RELAY_MAX_INFLIGHT_PER_EXECUTOR requests unanswered: this one was not sent."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"{limit} requests already in flight")
        self.limit = limit


class CannotAskError(Exception):
    """No local executor answered the request; ``unsupported`` when every one lacks its type."""

    def __init__(self, reason: str, *, unsupported: bool = False) -> None:
        super().__init__(reason)
        self.unsupported = unsupported


class PeerUnreachableError(Exception):
    """A dispatch to an executor on another instance that did not reach it (or whose answer did not come
    back): the message says why, for the failed attempt's reason."""


class ProtocolError(Exception):
    """A frame from an executor that does not follow the protocol.

    ``reason`` describes what is wrong without quoting the frame: frames can carry secrets.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
