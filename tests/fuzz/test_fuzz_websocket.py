"""Hypothesis against Relay's WebSocket frame unmasking (web/sockets.py ``unmask``), which replaces
gevent-websocket's per-byte Python loop: for any payload and mask it gives exactly what that loop gives."""

from __future__ import annotations

from geventwebsocket.websocket import Header
from hypothesis import given
from hypothesis import strategies as st

from relay.web.sockets import unmask
from tests.fuzz.hypothesis_settings import fuzz


@fuzz(300)
@given(mask=st.binary(min_size=4, max_size=4), payload=st.binary(max_size=5000))
def test_unmask_is_gevent_websockets_unmask(mask: bytes, payload: bytes) -> None:
    header = Header()
    header.mask = mask
    header.length = len(payload)
    assert unmask(mask, payload) == bytes(header.unmask_payload(payload))
    assert unmask(mask, unmask(mask, payload)) == payload  # masking is its own inverse
