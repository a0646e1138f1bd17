"""A pickle's shape checked before anything loads it (issue 36): read with pickletools, no object made.

Two shapes crash or exhaust the C unpickler whatever it is allowed to load: tuples nested deep as dict keys or set
members (hashing a tuple recurses in C with no depth check: 500,000 levels in a 500 KB pickle segfault Python
3.11), and lengths a pickle declares but does not contain (allocated before they are read). Both loaders of stored
values check this first: the data plane's plain-data loader (values.py) and the console's decoder
(web/console/stored_values.py)."""

from __future__ import annotations

import pickletools
from typing import Any

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
