"""NaN, Infinity, -Infinity and out-of-range numbers (1e999, which Python's json reads as inf) are not JSON
(RFC 8259). A frame holding one is refused at decode, like every other malformed frame (ProtocolError, whose
reason never quotes the frame): decoded, it would reach API clients as NaN/Infinity, which they cannot parse."""

from __future__ import annotations

import json

import pytest

from relay.wire.codec import decode_response
from relay.wire.errors import ProtocolError
from relay.wire.responses import RawResponse

REASON = "frame holds a non-finite number (NaN, Infinity or out of range), which is not JSON"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1.5e400"])
@pytest.mark.parametrize(
    "template",
    [
        '{{"type": "get_metrics", "request_id": "r", "metrics": [{{"metric_type": "x", "value": {n}}}]}}',
        '{{"type": "some_future_type", "request_id": "r", "score": {n}}}',  # an unmodelled type: RawResponse
        '{{"type": "list_workflows", "request_id": "r", "output": [{{"workflow_uuid": "w", "x": [[{n}]]}}]}}',
        '{{"type": "cancel", "request_id": "r", "success": true, "ignored": {n}}}',  # even in an unknown field
        '{{"type": "cancel", "request_id": "r", "success": true, "secret-marker": {n}}}',
    ],
)
def test_non_finite_numbers_are_refused(template: str, number: str) -> None:
    frame = template.format(n=number)
    with pytest.raises(ProtocolError) as info:
        decode_response(frame)
    assert info.value.reason == REASON
    assert "marker" not in str(info.value)
    with pytest.raises(ProtocolError):
        decode_response(frame.encode())


@pytest.mark.parametrize("number", ["0.5", "-2.25e10", "1e308", "-0.0", "5e-324", "123456789012345678901234567890"])
def test_finite_numbers_still_decode_and_re_encode_as_json(number: str) -> None:
    frame = '{"type": "some_future_type", "request_id": "r", "value": ' + number + "}"
    decoded = decode_response(frame)
    assert isinstance(decoded, RawResponse)
    value = decoded.fields["value"]
    assert json.loads(json.dumps(value, allow_nan=False)) == value


def test_a_string_that_says_nan_is_only_a_string() -> None:
    decoded = decode_response('{"type": "some_future_type", "request_id": "r", "v": "NaN", "w": "Infinity"}')
    assert decoded.fields == {"v": "NaN", "w": "Infinity"}
