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
