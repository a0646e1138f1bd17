"""A pickle's shape checked before anything loads it (issue 36): read with pickletools, no object made.

Two shapes crash or exhaust the C unpickler whatever it is allowed to load: tuples nested deep as dict keys or set
members (hashing a tuple recurses in C with no depth check: 500,000 levels in a 500 KB pickle segfault Python
3.11), and lengths a pickle declares but does not contain (allocated before they are read). Both loaders of stored
values check this first: the data plane's plain-data loader (values.py) and the console's decoder
(web/console/stored_values.py). Both also make the same few stdlib value types real (`PLAIN_TYPES`), and nothing
else of what a pickle names."""

from __future__ import annotations

import _compat_pickle
import datetime
import decimal
import pickletools
import uuid
from collections import OrderedDict
from typing import Any

# The stdlib value types, already loaded, that both loaders of stored values make real: each builds data from data
# and runs nothing of the pickle's (protocols 2 and 3 spell a set as a call). Not bytearray itself: `bytearray(n)`
# allocates n bytes, whatever n a pickle gives (values.py loads one from its bytes only).
PLAIN_TYPES: dict[tuple[str, str], Any] = {
    ("datetime", "datetime"): datetime.datetime, ("datetime", "date"): datetime.date,
    ("datetime", "time"): datetime.time, ("datetime", "timedelta"): datetime.timedelta,
    ("datetime", "timezone"): datetime.timezone, ("decimal", "Decimal"): decimal.Decimal,
    ("uuid", "UUID"): uuid.UUID, ("collections", "OrderedDict"): OrderedDict,
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
}  # fmt: skip



def python3_name(module: str, name: str) -> tuple[str, str]:
    """A global as Python 3 names it: protocol 2 writes Python 2's names (__builtin__.set, exceptions.ValueError),
    which the unpickler's own find_class maps, and a find_class of one's own must map too (a dict lookup)."""
    module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


# A pickle shorter than this nests tuples at most this many levels deep (each level takes an opcode, a byte at
# least): far from the ~100,000 at which hashing them crashes a thread (measured on CPython 3.11 here), so the
# bulk loader (values.py) walks only longer ones; a declared length a short pickle lacks costs nothing (CPython
# fails it as truncated, or as a MemoryError for an impossible size, at once).
WALKED_FROM_BYTES = 16 * 1024

MAX_TUPLE_NESTING = 100  # tuples inside tuples: hashing one recurses in C, unguarded (a deep one crashes Python)

_MARK = -1
_TUPLE_OPS = {"TUPLE", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"}
_MEMO_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}
_MEMO_GET = {"GET", "BINGET", "LONG_BINGET"}


def _pop(stack: list[int], marks: list[int], before: list[Any]) -> list[int] | None:
    """What an opcode takes off the stack (to its mark, and the items below the mark); None when it is not there."""
    popped: list[int] = []
    below = len(before)
    if pickletools.markobject in before:
        if not marks:
            return None
        at = marks.pop()
        popped = stack[at + 1:]
        del stack[at:]
        below = before.index(pickletools.markobject)
    if below:
        if len(stack) < below or (marks and marks[-1] >= len(stack) - below):
            return None
        popped = stack[-below:] + popped
        del stack[-below:]
    return popped


def safe_shape(raw: bytes) -> bool:
    """Whether the pickle's tuples nest at most `MAX_TUPLE_NESTING` deep (dict keys and set members are hashed as
    they are loaded, and a tuple's hash recurses into its items with no depth check), and every length it declares
    is there (the C unpickler allocates a declared length before reading it). Read with pickletools, no object
    made: a stack of tuple depths (0 for anything else), the memo's as well."""
    stack: list[int] = []
    marks: list[int] = []  # where the marks are in `stack`
    memo: dict[Any, int] = {}
    for op, arg, pos in pickletools.genops(raw):
        if op.name in _MEMO_PUT or op.name == "MEMOIZE":
            memo[arg if op.name in _MEMO_PUT else len(memo)] = stack[-1]
            continue
        popped = _pop(stack, marks, op.stack_before)
        if popped is None:
            return False
        if op.name in _TUPLE_OPS:
            stack.append(1 + max(popped, default=0))
            if stack[-1] > MAX_TUPLE_NESTING:
                return False
        elif op.name in _MEMO_GET:
            stack.append(memo.get(arg, 0))
        elif op.name == "DUP":
            stack += popped * 2
        else:
            for item in op.stack_after:
                if item is pickletools.markobject:
                    marks.append(len(stack))
                stack.append(_MARK if item is pickletools.markobject else 0)
        if op.name == "STOP":
            return pos == len(raw) - 1
    return False


def safe_to_load(raw: bytes) -> bool:
    """`safe_shape`, for a loader of many values (a page of 10,000 workflows): a short pickle cannot be shaped
    to crash the unpickler, and walking every value's opcodes in Python would cost more than loading them."""
    return len(raw) < WALKED_FROM_BYTES or safe_shape(raw)
