"""Deterministic aggregate ids from natural keys, so any instance finds the same aggregate by name."""

from uuid import NAMESPACE_URL, UUID, uuid5


def organization_id(org: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:org:{org}")


def app_id(org: str, app: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:app:{org}/{app}")


def executor_id(org: str, app: str, executor: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:executor:{org}/{app}/{executor}")


def instance_id(instance: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"relay:instance:{instance}")


def user_id(issuer: str, subject: str) -> UUID:
    """A person's id: their identity provider (issuer) and its stable id for them (the token's `sub`)."""
    return uuid5(NAMESPACE_URL, f"relay:user:{issuer}#{subject}")


def organization_access_id(org: str) -> UUID:
    """The organization's members, roles, join secrets and domain claims (events/access.py)."""
    return uuid5(NAMESPACE_URL, f"relay:access:{org}")
