"""Domain errors raised by aggregates when a command is not allowed in the current state."""


class DomainError(Exception):
    """Base of every domain error: a command that the aggregate refuses."""


class IllegalTransitionError(DomainError):
    """A state change that the lifecycle does not allow (e.g. declaring a HEALTHY executor dead)."""

    def __init__(self, what: str, state: str, command: str) -> None:
        super().__init__(f"{what} is {state}: cannot {command}")
        self.what = what
        self.state = state
        self.command = command


class NotFoundError(DomainError):
    """A referenced thing (API key, application, lease) does not exist."""


class AlreadyExistsError(DomainError):
    """A thing with that name exists already."""


class InvalidValueError(DomainError):
    """A value outside what the domain accepts (a bad name, a negative timeout)."""


class ConcurrentChangeError(DomainError):
    """What a command expected to find changed meanwhile (another request, an HA peer): nothing was recorded."""


class ConflictError(DomainError):
    """A command the current state forbids, though its input is well formed: deleting a role that is in use,
    removing the last Organization Admin, joining an organization one already belongs to."""
