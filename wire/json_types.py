"""JSON as Python holds it once parsed (json.loads) or before it is dumped: the type of frames' fields, the
records executors send, stored settings and API bodies (pure). Containers inside are read-only (Sequence,
Mapping), so a list[str] or a dict[str, int] is JSON too; a reader narrows a value with isinstance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias, Union

# Union, not |: a forward reference to itself is a string, which | cannot join at run time (modules that evaluate
# their annotations, such as web/cli/main.py, use these).
JSON: TypeAlias = Union[bool, int, float, str, Sequence["JSON"], Mapping[str, "JSON"], None]  # noqa: UP007
JSONObject: TypeAlias = dict[str, JSON]  # one object, built or parsed here (a frame, a record, a body)
