"""wire/json_depth.py: a JSON text's nesting, measured before parsing, as the parser would find it."""

from __future__ import annotations

import json

import pytest

from relay.wire.json_depth import nesting_depth, nests_deeper


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ('"[[["', 0), ("[]", 1), ("[{}]", 2), ('{"a": [[1]]}', 3), ('["\\"[[", [1]]', 2),
    ('["\\\\", [[]]]', 3), ('{"k": "}}}]]]", "v": [{"w": "[["}]}', 3), ("[[", 2), ("]]]", 0),
])  # fmt: skip
def test_depth_counts_structure_not_brackets_in_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth
    try:
        parsed = json.loads(text)
    except ValueError:
        return  # not JSON ("[[", "]]]"): measured anyway, never shallower than the parser would go
    assert _depth_of(parsed) == depth


def _depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth_of, value), default=0)
    return 0


def test_bytes_in_any_json_encoding_are_measured_alike() -> None:
    text = '{"a": ["é\\"[", [[1]]]}'
    for encoding in ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le"):
        assert nesting_depth(text.encode(encoding)) == 4, encoding


def test_the_limit_is_exact_and_holds_across_chunks() -> None:
    deep = "[" * 65 + "]" * 65
    assert not nests_deeper("[" * 64 + "]" * 64, 64) and nests_deeper(deep, 64)
    # Wide before deep: the depth carries over the 64 KiB chunks of brackets.
    wide = "[" + "[]," * 100_000 + "[" * 70 + "]" * 70 + "]"
    assert nesting_depth(wide) == 71 and nests_deeper(wide, 70) and not nests_deeper(wide, 71)
    # 100,000 levels: refused without recursion (the parser would raise RecursionError).
    assert nests_deeper("[" * 100_000 + "]" * 100_000, 100)
    assert nests_deeper(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, 100)
