"""How request fields are checked and written to the wire: filters, ids, counts (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, cast

from relay.wire.json_types import JSONObject

# --------------------------------------------------------------------------------------------------
# Filter values


def string_or_list(value: str | Iterable[str] | None, name: str = "filter") -> str | list[str] | None:
    """Normalise a filter that the wire takes as a string or a list of strings.

    ``None`` stays ``None`` (no filter). A string, or a list of one string, becomes that string: every SDK
    release takes a single string, while lists need Python >= 2.11 / TypeScript >= 4.8. Several strings
    become a list. An empty list is refused (ValueError): the Python SDK would match nothing and the
    TypeScript SDK would send ``IN ()`` to its database; leave the filter out instead.
    """
    values = string_list(value, name)
    if values is None:
        return None
    return values[0] if len(values) == 1 else values


def string_list(value: str | Iterable[str] | None, name: str = "filter") -> list[str] | None:
    """Normalise a filter that the wire takes only as a list of strings; a lone string is wrapped."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else _as_list(value, name)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} must hold strings")
        if not item:
            raise ValueError(f"{name} must not hold empty strings")
    if not items:
        raise ValueError(f"{name} must not be an empty list (leave it out for no filter)")
    return items


def _as_list(value: object, name: str) -> list[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a string or a list of strings")
    return list(value)


# --------------------------------------------------------------------------------------------------
# Requests (Relay -> executor)


def _check(name: str, value: object, kind: type, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TypeError(f"{name} must be {_TYPE_TEXT.get(kind, kind.__name__)}")


_TYPE_TEXT: dict[type, str] = {str: "a string", bool: "a boolean", int: "an integer", Mapping: "a mapping"}


def _check_id(name: str, value: object, optional: bool = False) -> None:
    _check(name, value, str, optional)
    if value == "":
        raise ValueError(f"{name} must not be empty")


def _check_count(name: str, value: int | None, minimum: int = 0) -> None:
    _check(name, value, int, optional=True)
    if value is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclasses normalise their fields in __post_init__


def _wire_value(value: object) -> Any:
    if isinstance(value, _Body):
        return value.wire()
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _wire_fields(obj: Any, always: frozenset[str], skip: frozenset[str] = frozenset()) -> JSONObject:
    """The dataclass's fields as wire keys: ``None`` is left out unless the key is in ``always``."""
    out: JSONObject = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in skip or (value is None and f.name not in always):
            continue
        out[f.name] = _wire_value(value)
    return out


# A body's field checks, declared as (check, field names) in the order they run; each check returns the value
# the field keeps (normalised).
FieldCheck = Callable[[str, Any], Any]


def listed(name: str, value: Any) -> list[str] | None:
    return string_list(value, name)


def one_or_listed(name: str, value: Any) -> str | list[str] | None:
    return string_or_list(value, name)


def _keeping(test: Callable[[str, Any], None]) -> FieldCheck:
    """A check that runs ``test`` (it raises for a bad value) and keeps the value as it is."""

    def check(name: str, value: object) -> object:
        test(name, value)
        return value

    return check


text = _keeping(partial(_check, kind=str))
optional_text = _keeping(partial(_check, kind=str, optional=True))
flag = _keeping(partial(_check, kind=bool))
optional_flag = _keeping(partial(_check, kind=bool, optional=True))
integer = _keeping(partial(_check, kind=int))
optional_integer = _keeping(partial(_check, kind=int, optional=True))
optional_mapping = _keeping(partial(_check, kind=Mapping, optional=True))
identifier = _keeping(_check_id)
optional_identifier = _keeping(partial(_check_id, optional=True))
count = _keeping(_check_count)
positive_count = _keeping(partial(_check_count, minimum=1))


def string_mapping(name: str, value: object) -> object:
    _check(name, value, Mapping)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in cast(Mapping[object, object], value).items()):
        raise TypeError(f"{name} must map strings to strings")
    return value


FieldChecks = tuple[tuple[FieldCheck, tuple[str, ...]], ...]


def run_checks(obj: object, checks: FieldChecks) -> None:
    """Run ``checks`` on ``obj``'s fields in their order; each field keeps the value its check returns."""
    for check, names in checks:
        for name in names:
            _set(obj, name, check(name, getattr(obj, name)))


@dataclass(frozen=True, kw_only=True)
class _Body:
    """A request's ``body`` object. ``CHECKS``: its fields' checks (see FieldCheck), run after construction."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset()
    CHECKS: ClassVar[FieldChecks] = ()

    def __post_init__(self) -> None:
        run_checks(self, self.CHECKS)

    def wire(self) -> JSONObject:
        return _wire_fields(self, self.ALWAYS)
