"""A list answered as JSON without stalling the gevent hub (issue 34): a page of up to MAX_LIMIT workflows with
their inputs and outputs is megabytes of JSON, and shaping and encoding it in one go on the hub held every other
request (/healthz waited over 5 s for 181,346 workflows). Past one chunk the answer streams: each chunk of
records is shaped and encoded, then the hub runs whatever else is ready before the next."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from flask import Response, current_app, jsonify, stream_with_context

CHUNK = 50  # records shaped and encoded between two yields to the hub


def _same(record: object) -> object:
    return record


def listed_json(records: Sequence[object], shape: Callable[[Any], Any] = _same) -> Response:
    """``[shape(r) for r in records]`` as the JSON answer, streamed in chunks when it is more than one."""
    if len(records) <= CHUNK:
        return jsonify([shape(r) for r in records])
    dumps = current_app.json.dumps

    def chunks() -> Iterator[str]:
        yield "["
        for start in range(0, len(records), CHUNK):
            encoded = dumps([shape(r) for r in records[start : start + CHUNK]])
            yield ("," if start else "") + encoded[1:-1]
            time.sleep(0)  # gevent's under relay serve (monkey-patched): let the hub serve others
        yield "]\n"

    return Response(stream_with_context(chunks()), mimetype="application/json")
