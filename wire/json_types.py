"""JSON as Python holds it once parsed (json.loads) or before it is dumped: the type of frames' fields, the
records executors send, stored settings and API bodies (pure). Containers inside are read-only (Sequence,
Mapping), so a list[str] or a dict[str, int] is JSON too; a reader narrows a value with isinstance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JSON: TypeAlias = "bool | int | float | str | Sequence[JSON] | Mapping[str, JSON] | None"
JSONObject: TypeAlias = "dict[str, JSON]"  # one object, built or parsed here (a frame, a record, a body)
