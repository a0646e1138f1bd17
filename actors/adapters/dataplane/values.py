"""Values in an application's system database, read without running its code (issue 15).

The Python SDK stores workflow inputs, outputs, errors and step outputs as pickles (``py_pickle``), and its
client unpickles every such value it loads, whichever serializer it is given. An unpickle runs whatever the
pickle names: a system database is the application's, and Relay's process holds every application's keys, so
Relay loads only plain data: builtin containers and scalars, dates, decimals, UUIDs and builtin exceptions.
Anything else stays the stored text. `install()` puts this loader in place of the SDK's pickle loader (the
Relay process runs no DBOS application, so nothing else there needs the SDK's own)."""

from __future__ import annotations

import base64
import builtins
import datetime
import io
import json
import pickle
from typing import Any

from relay.actors.adapters.dataplane.pickle_shape import PLAIN_TYPES, python3_name, safe_to_load

PICKLE_FORMAT = "py_pickle"  # the name the Python SDK stores beside a pickled value



class RefusedGlobalError(pickle.UnpicklingError):
    """The pickle names code Relay does not load."""


def _bytearray_of_data(source: object = b"", *encoding: str) -> bytearray:
    """How protocols 2 to 4 store a bytearray (its bytes, or its text and 'latin-1'); never `bytearray(n)`, which
    would allocate n bytes, whatever n the pickle gives."""
    if not isinstance(source, bytes | str):
        raise RefusedGlobalError("a bytearray is loaded from its bytes only")
    return bytearray(source, *encoding) if isinstance(source, str) else bytearray(source)


_PLAIN = {**PLAIN_TYPES, ("builtins", "bytearray"): _bytearray_of_data}


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        module, name = python3_name(module, name)
        allowed = _PLAIN.get((module, name))
        if allowed is not None:
            return allowed
        found = getattr(builtins, name, None) if module == "builtins" else None
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
        raise RefusedGlobalError(f"{module}.{name} is not plain data; Relay does not load it")


class UnsafeShapeError(pickle.UnpicklingError):
    """The pickle's shape would crash or exhaust the unpickler (actors/adapters/dataplane/pickle_shape.py)."""


def load_plain_pickle(encoded: str) -> Any:
    """A base64 pickle of plain data; RefusedGlobalError when it names anything else, UnsafeShapeError when its
    shape is one the C unpickler cannot load safely (tuples nested deep as dict keys: a segfault), another
    UnpicklingError when it is not a whole pickle."""
    raw = base64.b64decode(encoded)
    try:
        shaped = safe_to_load(raw)
    except ValueError:  # pickletools' own refusal of what is not a pickle
        shaped = False
    if not shaped:
        raise UnsafeShapeError("the stored pickle's shape is not one Relay loads (too deeply nested, or truncated)")
    return _PlainDataUnpickler(io.BytesIO(raw)).load()


def dump_pickle(value: object) -> str:
    """What the SDK stores for a value it pickles (the client writes some: a triggered schedule's inputs)."""
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


def make_serializer() -> Any:
    """The SDK's Serializer interface over `load_plain_pickle` (built here so dbos is imported only when a data
    plane is configured)."""
    from dbos._serialization import Serializer  # noqa: PLC0415 (the optional extra)

    class PlainDataPickle(Serializer):
        def serialize(self, data: object) -> str:
            return dump_pickle(data)

        def deserialize(self, serialized_data: str) -> Any:
            return load_plain_pickle(serialized_data)

        def name(self) -> str:
            return PICKLE_FORMAT

    return PlainDataPickle()


_installed: Any = None


def install() -> Any:
    """Replace the SDK's pickle loader with the plain-data one, once per process; returns the serializer."""
    global _installed  # noqa: PLW0603 (one per process, like the SDK's own)
    if _installed is None:
        import dbos._serialization as sdk_serialization  # noqa: PLC0415

        _installed = make_serializer()
        sdk_serialization.DBOSDefaultSerializer = _installed
    return _installed


def as_text(value: object) -> str | None:
    """A loaded value as the API shows it: JSON when it is JSON-like, else its repr; a value the SDK could not
    load arrives as the stored text and stays so."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    try:
        return json.dumps(value, default=_jsonable, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)


def _jsonable(value: object) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return str(value)
