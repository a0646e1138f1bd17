"""Token checks (actors/adapters/oidc/verifier.py) against a real local provider (tests/support/oidc_provider.py):
each refusal is a TokenRefusedError whose reason says why and never contains the token or a part of it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from relay.actors.adapters.oidc.verifier import MAX_TOKEN_CHARS, TokenVerifier, VerifiedClaims, groups_of
from relay.actors.configuration.settings import Settings
from relay.actors.errors import TokenRefusedError
from relay.web.problems import api_error
from tests.support.oidc_provider import AUDIENCE, FakeProvider, SigningKey, ec_key, ed_key, rsa_key, running_provider

RSA = rsa_key("rsa-1")
PS = rsa_key("ps-1", algorithm="PS256")
EC = ec_key("ec-1")
ED = ed_key("ed-1")


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with running_provider() as running:
        running.publish(RSA, PS, EC, ED)
        yield running


def verifier_for(provider: FakeProvider, **overrides: object) -> TokenVerifier:
    settings = Settings(oidc_issuer=provider.issuer, oidc_audiences=(AUDIENCE, "other-api"), oidc_leeway_s=5,
                        oidc_jwks_min_refetch_s=0, oidc_timeout_s=2, **overrides)  # type: ignore[arg-type]
    verifier = TokenVerifier.from_settings(settings)
    assert verifier is not None
    return verifier


@pytest.fixture(scope="module")
def verifier(provider: FakeProvider) -> TokenVerifier:
    return verifier_for(provider, oidc_roles_claim="groups")


def refusal(verifier: TokenVerifier, token: str, **kwargs: object) -> str:
    with pytest.raises(TokenRefusedError) as caught:
        verifier.verify(token, **kwargs)  # type: ignore[arg-type]
    reason = caught.value.reason
    for part in token.split("."):
        assert len(part) < 8 or part not in reason, "the reason repeats part of the token"
    if len(token) >= 8:
        assert token not in str(caught.value) and token not in api_error(caught.value).detail
    return reason


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, object], payload: dict[str, object], signature: bytes = b"") -> str:
    return ".".join((b64(json.dumps(header).encode()), b64(json.dumps(payload).encode()), b64(signature)))


def good_claims(provider: FakeProvider) -> dict[str, object]:
    now = int(time.time())
    return {"iss": provider.issuer, "aud": AUDIENCE, "sub": "person-1", "iat": now, "exp": now + 300}


@pytest.mark.parametrize("key", [RSA, PS, EC, ED], ids=lambda k: k.algorithm)
def test_a_valid_token_of_each_accepted_algorithm_gives_its_claims(
        provider: FakeProvider, verifier: TokenVerifier, key: SigningKey) -> None:
    token = provider.mint(key, name="Ada Lovelace", given_name="Ada", family_name="Lovelace",
                          groups=["ops", "dev", 7])
    claims = verifier.verify(token)
    assert isinstance(claims, VerifiedClaims)
    assert (claims.issuer, claims.subject, claims.email, claims.email_verified) == (
        provider.issuer, "person-1", "ada@example.com", True)
    assert (claims.name, claims.given_name, claims.family_name) == ("Ada Lovelace", "Ada", "Lovelace")
    assert claims.groups == ("ops", "dev")
    assert claims.expires_at == claims.raw["exp"]
    with pytest.raises(TypeError):
        claims.raw["sub"] = "someone else"  # type: ignore[index]


def test_any_configured_audience_is_accepted_and_a_list_of_audiences_too(
        provider: FakeProvider, verifier: TokenVerifier) -> None:
    assert verifier.verify(provider.mint(RSA, aud="other-api")).subject == "person-1"
    assert verifier.verify(provider.mint(RSA, aud=["somebody", AUDIENCE])).subject == "person-1"


def test_expired_not_yet_valid_wrong_issuer_and_wrong_audience_are_refused(
        provider: FakeProvider, verifier: TokenVerifier) -> None:
    now = int(time.time())
    assert refusal(verifier, provider.mint(RSA, iat=now - 600, exp=now - 60)) == "token expired"
    assert refusal(verifier, provider.mint(RSA, nbf=now + 60)) == "token not yet valid"
    assert refusal(verifier, provider.mint(RSA, iat=now + 60)) == "token not yet valid"
    assert refusal(verifier, provider.mint(RSA, iss=provider.issuer + "/")) == "wrong issuer"
    assert refusal(verifier, provider.mint(RSA, aud="somebody-else")) == "wrong audience"


def test_the_leeway_forgives_small_clock_skew(provider: FakeProvider, verifier: TokenVerifier) -> None:
    now = int(time.time())
    assert verifier.verify(provider.mint(RSA, exp=now - 2, iat=now - 60)).subject == "person-1"
    assert verifier.verify(provider.mint(RSA, nbf=now + 2)).subject == "person-1"


@pytest.mark.parametrize("claim", ["exp", "iss", "aud", "sub"])
def test_a_token_without_a_required_claim_is_refused(
        provider: FakeProvider, verifier: TokenVerifier, claim: str) -> None:
    assert refusal(verifier, provider.mint(RSA, **{claim: None})) == f"the token has no `{claim}` claim"


def test_a_bad_signature_is_refused(provider: FakeProvider, verifier: TokenVerifier) -> None:
    impostor = SigningKey(RSA.kid, "RS256", rsa_key("x").private)  # the kid of a published key, another key
    assert refusal(verifier, provider.mint(impostor)) == "bad signature"
    header, _, signature = provider.mint(RSA).split(".")
    tampered = b64(json.dumps({**good_claims(provider), "sub": "admin"}).encode())
    assert refusal(verifier, f"{header}.{tampered}.{signature}") == "bad signature"


def test_alg_none_and_hmac_signed_with_the_public_key_are_refused(
        provider: FakeProvider, verifier: TokenVerifier) -> None:
    assert refusal(verifier, unsigned({"alg": "none", "kid": RSA.kid}, good_claims(provider))) == (
        "algorithm 'none' is not accepted")
    pem = RSA.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    header = b64(json.dumps({"alg": "HS256", "kid": RSA.kid, "typ": "JWT"}).encode())
    payload = b64(json.dumps(good_claims(provider)).encode())
    signature = hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert refusal(verifier, f"{header}.{payload}.{b64(signature)}") == "algorithm HS256 is not accepted"
    assert refusal(verifier, unsigned({"alg": "HS512"}, good_claims(provider))) == "algorithm HS512 is not accepted"
    assert refusal(verifier, unsigned({"alg": "made-up-alg"}, good_claims(provider))) == (
        "the token's algorithm is not accepted")
    assert refusal(verifier, unsigned({"kid": RSA.kid}, good_claims(provider))) == (
        "the token's algorithm is not accepted")


def test_a_token_whose_algorithm_is_not_its_keys_is_refused(provider: FakeProvider, verifier: TokenVerifier) -> None:
    borrowed = SigningKey(RSA.kid, "ES256", EC.private)  # an EC signature under the RSA key's kid
    assert refusal(verifier, provider.mint(borrowed)) == "algorithm ES256 does not match the signing key"


@pytest.mark.parametrize("token", [
    "", "abc", "a.b", "a.b.c.d", "!!!.@@@.###", "e30.e30.", "bm90IGpzb24.e30.c2ln", "W10.e30.c2ln",
    b64(json.dumps({"alg": "RS256", "kid": 5}).encode()) + ".e30.c2ln",
    "é.é.é",
])
def test_malformed_tokens_are_refused(verifier: TokenVerifier, token: str) -> None:
    reason = refusal(verifier, token)
    assert reason in {"malformed token", "the token's algorithm is not accepted"}


def test_a_payload_that_is_not_json_is_malformed(provider: FakeProvider, verifier: TokenVerifier) -> None:
    header, _, signature = provider.mint(RSA).split(".")
    assert refusal(verifier, f"{header}.{b64(b'not json at all')}.{signature}") in {"malformed token",
                                                                                   "bad signature"}


def test_a_huge_token_is_refused_before_it_is_decoded(provider: FakeProvider, verifier: TokenVerifier) -> None:
    token = provider.mint(RSA, padding="x" * MAX_TOKEN_CHARS)
    assert refusal(verifier, token) == "token too large"
    assert refusal(verifier, "a" * (MAX_TOKEN_CHARS + 1)) == "token too large"


def test_id_tokens_are_checked_for_the_client_audience_and_the_nonce(
        provider: FakeProvider, verifier: TokenVerifier) -> None:
    id_token = provider.mint(RSA, aud="console-client", nonce="n-123")
    assert verifier.verify(id_token, audience=["console-client"], nonce="n-123").subject == "person-1"
    assert refusal(verifier, id_token) == "wrong audience"  # not an access token for the API
    assert refusal(verifier, id_token, audience=["console-client"], nonce="n-456") == "wrong nonce"
    without = provider.mint(RSA, aud="console-client")
    assert refusal(verifier, without, audience=["console-client"], nonce="n-123") == "wrong nonce"


def test_a_token_without_kid_uses_the_one_key_of_its_algorithm(provider: FakeProvider,
                                                                verifier: TokenVerifier) -> None:
    assert verifier.verify(provider.mint(EC, kid=None)).subject == "person-1"
    # RS256: only the RSA key declares it (the PS256 key declares its own alg), so it is found too.
    assert verifier.verify(provider.mint(RSA, kid=None)).subject == "person-1"


def test_groups_come_from_a_list_a_string_or_a_dotted_claim() -> None:
    assert groups_of({"groups": "a b  c"}, "groups") == ("a", "b", "c")
    assert groups_of({"groups": ["a", 1, None, "", "b"]}, "groups") == ("a", "b")
    assert groups_of({"realm_access": {"roles": ["admin"]}}, "realm_access.roles") == ("admin",)
    assert groups_of({"groups": {"not": "a list"}}, "groups") == ()
    assert groups_of({"groups": ["a"]}, None) == ()


def test_a_refusal_is_a_401_problem_saying_why() -> None:
    error = api_error(TokenRefusedError("token expired"))
    assert (error.status, error.detail) == (401, "token expired")


def test_the_verifier_is_off_without_an_issuer() -> None:
    assert TokenVerifier.from_settings(Settings()) is None


def test_an_hs256_token_signed_with_a_shared_secret_is_refused(provider: FakeProvider,
                                                              verifier: TokenVerifier) -> None:
    token = jwt.encode(good_claims(provider), "a-shared-secret-of-32-bytes-long!", algorithm="HS256",
                       headers={"kid": RSA.kid})
    assert refusal(verifier, token) == "algorithm HS256 is not accepted"
