"""The provider's keys (actors/adapters/oidc/keys.py, discovery.py) against a real local provider: cached by kid,
refetched on an unknown kid (rate-limited), rotation picked up, one fetch for many waiting callers; a provider that
is down, slow, or answers garbage changes nothing cached, and an unknown kid then fails closed (401)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import TracebackType

import pytest

from relay.actors.adapters.http_client import HttpClient
from relay.actors.adapters.oidc.discovery import MAX_DOCUMENT_BYTES, Discovery
from relay.actors.adapters.oidc.keys import JwksCache, parse_key_set
from relay.actors.adapters.oidc.verifier import TokenVerifier
from relay.actors.errors import IdentityProviderUnavailableError, TokenRefusedError
from tests.support.oidc_provider import AUDIENCE, FakeProvider, ec_key, ed_key, rsa_key, running_provider
from tests.support.ports import wait_until

OLD, NEW, OTHER = rsa_key("old"), rsa_key("new"), ec_key("other")
UNREACHABLE = "unknown signing key (kid) and the identity provider is unreachable"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def build(provider: FakeProvider, *, min_refetch_s: float = 30, timeout_s: float = 2,
          clock: Clock | None = None) -> TokenVerifier:
    http = HttpClient()
    discovery = Discovery(provider.issuer, http, timeout_s)
    keys = JwksCache(discovery, http, timeout_s=timeout_s, min_refetch_s=min_refetch_s, clock=clock or Clock())
    return TokenVerifier(provider.issuer, (AUDIENCE,), keys, discovery, leeway_s=5)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with running_provider() as running:
        running.publish(OLD)
        yield running


def refused(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(TokenRefusedError) as caught:
        verifier.verify(token)
    return caught.value.reason


def test_keys_are_fetched_once_and_cached(provider: FakeProvider) -> None:
    verifier = build(provider)
    for _ in range(3):
        assert verifier.verify(provider.mint(OLD)).subject == "person-1"
    assert (provider.hits["/.well-known/openid-configuration"], provider.hits["/jwks"]) == (1, 1)


def test_a_rotated_key_is_picked_up_without_restart(provider: FakeProvider) -> None:
    clock = Clock()
    verifier = build(provider, clock=clock)
    verifier.verify(provider.mint(OLD))
    provider.publish(NEW)
    clock.now += 30  # the rate limit's interval has passed since the first fetch
    assert verifier.verify(provider.mint(NEW)).subject == "person-1"
    assert refused(verifier, provider.mint(OLD)) == "unknown signing key (kid)"  # withdrawn by the provider
    assert provider.hits["/jwks"] == 2  # the old kid was looked up in the new set, not refetched (rate limit)


def test_an_unknown_kid_refetches_at_most_once_per_interval(provider: FakeProvider) -> None:
    clock = Clock()
    verifier = build(provider, min_refetch_s=30, clock=clock)
    verifier.verify(provider.mint(OLD))
    stranger = provider.mint(rsa_key("made-up"))
    for _ in range(5):
        assert refused(verifier, stranger) == "unknown signing key (kid)"
    assert provider.hits["/jwks"] == 1  # the first fetch was just now: none of the five refetched
    clock.now += 29.9
    refused(verifier, stranger)
    assert provider.hits["/jwks"] == 1
    clock.now += 0.1
    for _ in range(5):
        refused(verifier, stranger)
    assert provider.hits["/jwks"] == 2
    provider.publish(OLD, NEW)
    assert refused(verifier, provider.mint(NEW)) == "unknown signing key (kid)"  # too soon: not fetched yet
    clock.now += 30
    assert verifier.verify(provider.mint(NEW)).subject == "person-1"
    assert provider.hits["/jwks"] == 3


def test_an_old_key_set_is_refreshed_so_a_withdrawn_key_stops_working(provider: FakeProvider) -> None:
    clock = Clock()
    verifier = build(provider, clock=clock)
    verifier.verify(provider.mint(OLD))
    provider.publish(NEW)
    clock.now += 599
    assert verifier.verify(provider.mint(OLD)).subject == "person-1"
    clock.now += 1  # the set is 10 minutes old: the next token refreshes it
    assert refused(verifier, provider.mint(OLD)) == "unknown signing key (kid)"
    assert provider.hits["/jwks"] == 2


def test_provider_down_cached_keys_work_and_an_unknown_kid_fails_closed(provider: FakeProvider) -> None:
    clock = Clock()
    verifier = build(provider, clock=clock)
    verifier.verify(provider.mint(OLD))
    provider.stop()
    clock.now += 30
    assert refused(verifier, provider.mint(NEW)) == UNREACHABLE
    assert verifier.verify(provider.mint(OLD)).subject == "person-1"
    assert refused(verifier, provider.mint(NEW)) == UNREACHABLE  # rate-limited: no new attempt, same answer
    provider.publish(OLD, NEW)
    provider.start()
    clock.now += 30
    assert verifier.verify(provider.mint(NEW)).subject == "person-1"


def test_provider_down_from_the_start_refuses_every_token(provider: FakeProvider) -> None:
    provider.stop()
    verifier = build(provider)
    assert refused(verifier, provider.mint(OLD)) == UNREACHABLE
    with pytest.raises(IdentityProviderUnavailableError, match="unreachable"):
        verifier.discovery.metadata()


class CountingLock:
    """A lock that counts who asked for it (the test waits until every caller is queued on it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked = 0

    def acquire(self, blocking: bool = True) -> bool:
        self.asked += 1
        return self.lock.acquire(blocking)

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()


def test_callers_waiting_for_one_fetch_use_its_result(provider: FakeProvider) -> None:
    verifier = build(provider, min_refetch_s=0)  # no rate limit: only the lock keeps the fetches to one
    verifier.verify(provider.mint(OLD))
    provider.publish(OLD, NEW)
    lock = CountingLock()
    verifier.keys._lock = lock  # type: ignore[assignment]
    provider.gate.clear()  # the provider holds its answer until every caller is queued
    token, results, callers = provider.mint(NEW), [], 8

    def call() -> None:
        results.append(verifier.verify(token).subject)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    wait_until(lambda: lock.asked == callers and provider.hits["/jwks"] == 2, 10, message="callers queued")
    provider.gate.set()
    for thread in threads:
        thread.join(10)
    assert results == ["person-1"] * callers
    assert provider.hits["/jwks"] == 2  # the first fetch, then one for all eight


def test_a_slow_provider_times_out_and_changes_nothing(provider: FakeProvider) -> None:
    clock = Clock()
    verifier = build(provider, timeout_s=0.3, clock=clock)
    verifier.verify(provider.mint(OLD))
    cached = verifier.keys.keys
    provider.gate.clear()
    clock.now += 30
    assert refused(verifier, provider.mint(NEW)) == UNREACHABLE
    assert verifier.keys.keys is cached
    assert verifier.verify(provider.mint(OLD)).subject == "person-1"
    provider.gate.set()
    slow = build(provider, timeout_s=0.3)
    slow.discovery.metadata()
    provider.gate.clear()
    with pytest.raises(IdentityProviderUnavailableError, match=r"did not send its key set within 0.3 s"):
        slow.keys.refresh()


@pytest.mark.parametrize(("document", "why"), [
    (b"<html>not json</html>", "key set is not JSON"),
    (b"[1, 2]", "key set is not a JSON object"),
    (b"{\"keys\": {}}", "has no `keys` list"),
    (b"{\"keys\": []}", "has no key Relay can use"),
    (b"[" * 150_000 + b"]" * 150_000, "larger than 256 KiB"),
    (b"{\"keys\": [" + b"{}," * 200 + b"{}]}", "more than 100 keys"),
    (b"{\"pad\": \"" + b"x" * MAX_DOCUMENT_BYTES + b"\"}", "larger than 256 KiB"),
    (b"[" * 50_000 + b"]" * 50_000, "not JSON"),
])
def test_a_garbage_key_set_is_refused_and_the_cached_one_stays(
        provider: FakeProvider, document: bytes, why: str) -> None:
    clock = Clock()
    verifier = build(provider, clock=clock)
    verifier.verify(provider.mint(OLD))
    cached = verifier.keys.keys
    provider.jwks = document
    clock.now += 30
    assert refused(verifier, provider.mint(NEW)) == UNREACHABLE
    assert verifier.keys.keys is cached
    assert verifier.verify(provider.mint(OLD)).subject == "person-1"
    with pytest.raises(IdentityProviderUnavailableError, match=why):
        verifier.keys.refresh()


def test_odd_keys_are_skipped_and_the_usable_ones_kept() -> None:
    weak = rsa_key("weak", bits=1024)
    private_rsa = OLD.jwk()
    private_rsa["d"] = private_rsa["n"]  # a private member published: not a verification key
    keys = parse_key_set({"keys": [
        "not an object", 7, None, {}, {"kid": "no-kty"}, {"kty": "XYZ", "kid": "unknown-kty"},
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}, {"kty": "RSA", "kid": "no-modulus", "e": "AQAB"},
        {"kty": "RSA", "kid": "bad-base64", "n": "!!!", "e": "AQAB"},
        {"kty": "EC", "kid": "wrong-curve", "crv": "P-999", "x": "AA", "y": "AA"},
        {"kty": "RSA", "kid": ["not", "a", "string"], "n": "AQAB", "e": "AQAB"},
        weak.jwk(), private_rsa, NEW.jwk(use="enc"), NEW.jwk(alg="HS256"), NEW.jwk(alg="none"),
        NEW.jwk(alg="RS384"), OTHER.jwk(alg="RS256"),
        OLD.jwk(), OTHER.jwk(), ed_key("ed").jwk(alg=None), NEW.jwk(alg=None),
    ]})
    assert set(keys.by_kid) == {"old", "other", "ed", "new"}
    assert set(keys.by_kid["new"]) == {"RS256", "PS256"}  # an RSA key without alg serves either
    assert set(keys.by_kid["ed"]) == {"EdDSA"}
    assert keys.skipped == 18


def test_the_discovery_document_must_name_the_configured_issuer(provider: FakeProvider) -> None:
    provider.discovery = {**provider.discovery_document(), "issuer": "https://evil.example.com"}
    verifier = build(provider)
    assert refused(verifier, provider.mint(OLD)) == UNREACHABLE
    with pytest.raises(IdentityProviderUnavailableError, match="another issuer"):
        verifier.discovery.metadata()
    provider.discovery = None  # fixed at the provider: the next call fetches it again
    metadata = verifier.discovery.metadata()
    assert (metadata.jwks_uri, metadata.end_session_endpoint, metadata.device_authorization_endpoint) == (
        f"{provider.issuer}/jwks", f"{provider.issuer}/session/end", None)
    assert provider.hits["/.well-known/openid-configuration"] == 3  # one per failed try, then kept
    verifier.discovery.metadata()
    assert provider.hits["/.well-known/openid-configuration"] == 3


@pytest.mark.parametrize(("document", "why"), [
    (b"garbage", "discovery document is not JSON"),
    ({"issuer": None}, "another issuer"),
    ({"jwks_uri": 5}, "no valid jwks_uri"),
    ({"jwks_uri": "ftp://127.0.0.1/jwks"}, "jwks_uri is not an https:// URL"),
    ({"jwks_uri": "http://example.com/jwks"}, "jwks_uri is not an https:// URL"),
    ({"authorization_endpoint": None}, "no valid authorization_endpoint"),
    ({"end_session_endpoint": ["x"]}, "no valid end_session_endpoint"),
])
def test_a_garbage_discovery_document_is_refused_with_a_clear_reason(
        provider: FakeProvider, document: dict[str, object] | bytes, why: str) -> None:
    provider.discovery = document if isinstance(document, bytes) else {**provider.discovery_document(), **document}
    with pytest.raises(IdentityProviderUnavailableError, match=why):
        build(provider).discovery.metadata()


def test_a_provider_answering_an_error_status_is_unavailable(provider: FakeProvider) -> None:
    discovery = Discovery(provider.issuer + "/tenant", HttpClient(), 2)  # a path the provider does not serve
    with pytest.raises(IdentityProviderUnavailableError, match="answered HTTP 404 for its discovery document"):
        discovery.metadata()
