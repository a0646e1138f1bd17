"""The domain errors of the use cases: why one could not be carried out. Raised by the services (actors/services/)
and the adapters they call (the data plane, the forwarder), so they sit below both.

Each says what went wrong in the domain's words (no executor, an executor that failed, the caller's mistake);
`detail` is the sentence shown to the caller. How each reaches HTTP (status, title) is web/problems.py's one
table. A thing that does not exist is events/errors.py's NotFoundError, as for the aggregates.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of the services' own errors; `detail` is the text the caller reads."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ExecutorUnavailableError(ServiceError):
    """No executor that could take the request is connected (here or, with forwarding, anywhere)."""


class NoExecutorError(ExecutorUnavailableError):
    """The application has no executor connected at all."""

    def __init__(self, app: str) -> None:
        super().__init__(f"no executor of application '{app}' is connected")


class NotSupportedError(ServiceError):
    """Every connected executor lacks the message type (an older SDK)."""


class ExecutorsBusyError(ServiceError):
    """Every candidate executor has as many requests in flight as Relay allows."""


class TimedOutError(ServiceError):
    """An executor (or the application's actor) did not answer in time; the request is forgotten."""


class ExecutorDisconnectedError(ServiceError):
    """The executors disconnected before answering."""


class ForwardRefusedError(ServiceError):
    """Another Relay instance refused a forwarded request (its forwarding secret differs, ...)."""


class ExecutorFailedError(ServiceError):
    """An executor answered with an error that is not the caller's, a malformed frame, or no result."""


class CallerMistakeError(ServiceError):
    """An executor's error that says the request itself was wrong (actors/services/executor_errors.py).
    `location` names the request field it blames (None: the request as a whole), `explanation` says how."""

    def __init__(self, detail: str, *, location: str | None = None, explanation: str = "") -> None:
        super().__init__(detail)
        self.location = location
        self.explanation = explanation


class TargetNotFoundError(CallerMistakeError):
    """The executor has no such workflow."""


class TargetConflictError(CallerMistakeError):
    """What the request would create exists already (an imported workflow, a fork's new id)."""


class TargetInvalidError(CallerMistakeError):
    """The request cannot be done as asked (a filter the database cannot do, an import that is not an export)."""


class DataPlaneError(ServiceError):
    """Why an application's system database could not answer (actors/adapters/dataplane/ raises these
    itself); the detail never names the URL."""


class DataPlaneUnavailableError(DataPlaneError):
    """The application's system database cannot be used now (unreachable, or the request needs an executor)."""


class DataPlaneRefusedError(DataPlaneError):
    """The system database cannot answer this request as asked (too many rows, an unreadable schema)."""


class DataPlaneTimedOutError(DataPlaneError):
    """The system database did not answer within its statement timeout."""


class DataPlaneFailedError(DataPlaneError):
    """The system database answered with an error."""


class InvalidFieldError(ServiceError):
    """A field of the caller's input the use case refuses: `location` names it (``body.ruleType``), `message`
    says why, `value` is what was given."""

    def __init__(self, location: str, message: str, value: object = None) -> None:
        super().__init__(f"{location}: {message}")
        self.location = location
        self.message = message
        self.value = value


class NotAllowedError(ServiceError):
    """The caller may not do this (beyond the permission checked at the door: e.g. a rule whose alerts go to an
    application the caller cannot write to)."""


class TokenRefusedError(ServiceError):
    """A bearer JWT (a person's access token, the console's ID token) that is not accepted (401): `reason` says
    why ("token expired", "wrong audience", ...; actors/adapters/oidc/verifier.py), never what the token was."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class IdentityProviderUnavailableError(ServiceError):
    """The identity provider could not be asked (unreachable, slow, or answering garbage) where Relay needs an
    answer it has not cached (503): the discovery document the console's sign-in starts from. A token whose key
    is unknown while the provider is down is refused (TokenRefusedError) instead: that fails closed."""


class InstanceStoppingError(ServiceError):
    """This instance is stopping (SIGTERM): it starts nothing new; a load balancer sends the caller elsewhere (503)."""
