"""How deeply a JSON text nests, measured before it is parsed (pure).

Python's json parser recurses once per array or object: a body of 100,000 ``[`` makes it raise RecursionError
deep in the interpreter, and anything that walks the result recurses again. So a text is measured first, on its
characters, without recursion and in C-speed passes: strings (where brackets are data) are blanked out, every
other character but the brackets is dropped, and the running depth is folded with ``itertools.accumulate``.
Invalid JSON may be measured a little deeper than it is (an unterminated string's brackets count), never
shallower than the parser would go before it stops.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

# A JSON string, escapes included (the unrolled form: linear, no backtracking).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_CHUNK = 64 * 1024


def nesting_depth(text: str | bytes) -> int:
    """The deepest level of arrays/objects in ``text`` (a scalar is 0, ``[]`` is 1, ``[{}]`` is 2)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode(json.detect_encoding(text), "replace")
    if "[" not in text and "{" not in text:
        return 0
    return _deepest(_brackets(text))


def _brackets(text: str) -> bytes:
    return _NOT_BRACKET.sub("", _STRING.sub("", text)).encode("ascii")


def _deepest(brackets: bytes, stop_above: int | None = None) -> int:
    """The running depth's maximum, folded a chunk at a time so a hostile text stops at its first chunk."""
    deepest = depth = 0
    for start in range(0, len(brackets), _CHUNK):
        steps = accumulate(map(_STEP.__getitem__, brackets[start:start + _CHUNK]), initial=depth)
        levels = list(steps)
        deepest, depth = max(deepest, *levels), levels[-1]
        if stop_above is not None and deepest > stop_above:
            break
    return deepest


def nests_deeper(text: str | bytes, limit: int) -> bool:
    """Whether ``text`` nests arrays/objects more than ``limit`` levels deep (cheap when it cannot: fewer
    openers than the limit)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode(json.detect_encoding(text), "replace")
    return text.count("[") + text.count("{") > limit and _deepest(_brackets(text), stop_above=limit) > limit
