"""Forwarding signatures: what is accepted, and every way a forward is refused."""

import pytest

from relay.wire import signing as forwarding

SECRET = "s3cret-forwarding-key"
NOW = 1_800_000_000.0
PAYLOAD = b'{"type":"get_workflow","workflow_id":"w1"}'
HERE = "relay-b"


def headers(**overrides):
    h = forwarding.signed_headers(SECRET, PAYLOAD, now=NOW, target=HERE)
    h.update(overrides)
    return h


def test_a_fresh_signed_forward_is_accepted():
    assert forwarding.check(SECRET, headers(), PAYLOAD, now=NOW, target=HERE) is None
    assert forwarding.check(SECRET, headers(), PAYLOAD, now=NOW + 30, target=HERE) is None


@pytest.mark.parametrize("hop", ["1", "2", "17"])
def test_a_request_that_was_forwarded_already_is_refused_with_409(hop):
    refusal = forwarding.check(SECRET, headers(**{forwarding.HOP_HEADER: hop}), PAYLOAD, now=NOW, target=HERE)
    assert refusal is not None and refusal.status == 409


@pytest.mark.parametrize("hop", ["", "x", "-1"])
def test_a_bad_hop_header_is_refused(hop):
    refusal = forwarding.check(SECRET, headers(**{forwarding.HOP_HEADER: hop}), PAYLOAD, now=NOW, target=HERE)
    assert refusal is not None and refusal.status == 400


@pytest.mark.parametrize("skew", [31, -31, 3600])
def test_an_old_or_future_timestamp_is_refused(skew):
    refusal = forwarding.check(SECRET, headers(), PAYLOAD, now=NOW + skew, target=HERE)
    assert refusal is not None and refusal.status == 401
    assert "window" in refusal.detail


def test_a_replayed_request_with_a_refreshed_timestamp_but_old_signature_is_refused():
    replay = headers(**{forwarding.TIMESTAMP_HEADER: str(int(NOW) + 100)})
    refusal = forwarding.check(SECRET, replay, PAYLOAD, now=NOW + 100, target=HERE)
    assert refusal is not None and refusal.status == 401 and refusal.detail == "bad signature"


def test_a_changed_payload_or_wrong_secret_is_refused():
    assert forwarding.check(SECRET, headers(), PAYLOAD + b" ", now=NOW, target=HERE).status == 401
    forged = forwarding.signed_headers("another-secret", PAYLOAD, now=NOW, target=HERE)
    assert forwarding.check(SECRET, forged, PAYLOAD, now=NOW, target=HERE).status == 401


def test_without_a_configured_secret_nothing_is_accepted():
    assert forwarding.check(None, headers(), PAYLOAD, now=NOW, target=HERE).status == 401
    assert forwarding.check("", headers(), PAYLOAD, now=NOW, target=HERE).status == 401


def test_refusals_never_echo_the_secret_or_signature():
    h = headers()
    for refusal in (
        forwarding.check(SECRET, h, PAYLOAD + b"x", now=NOW, target=HERE),
        forwarding.check(SECRET, h, PAYLOAD, now=NOW + 99, target=HERE),
    ):
        assert SECRET not in refusal.detail and h[forwarding.SIGNATURE_HEADER] not in refusal.detail


def test_a_forward_is_bound_to_its_nonce_and_its_target_instance():
    # Signed for relay-a, replayed to relay-b: refused before its signature is even compared.
    for_a = forwarding.signed_headers(SECRET, PAYLOAD, now=NOW, target="relay-a")
    refusal = forwarding.check(SECRET, for_a, PAYLOAD, now=NOW, target=HERE)
    assert refusal is not None and refusal.status == 401 and refusal.detail == "signed for another instance"
    # The target header rewritten to this instance: the signature no longer holds.
    retargeted = {**for_a, forwarding.TARGET_HEADER: HERE}
    assert forwarding.check(SECRET, retargeted, PAYLOAD, now=NOW, target=HERE).detail == "bad signature"
    # Another nonce (to pass a replay check): the signature no longer holds.
    renonced = headers(**{forwarding.NONCE_HEADER: "0" * 32})
    assert forwarding.check(SECRET, renonced, PAYLOAD, now=NOW, target=HERE).detail == "bad signature"
    for bad in ("", "x" * 32, "0" * 31, "0" * 33):
        refusal = forwarding.check(SECRET, headers(**{forwarding.NONCE_HEADER: bad}), PAYLOAD, now=NOW, target=HERE)
        assert refusal is not None and refusal.detail == "bad or missing nonce"
    # Two forwards of the same payload at the same second differ by their nonce.
    assert headers()[forwarding.NONCE_HEADER] != headers()[forwarding.NONCE_HEADER]
