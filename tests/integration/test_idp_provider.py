"""The test identity provider itself (tests/support/idp.py, tests/idp/provider.mjs): what the identity tests
rely on, checked against the real oidc-provider over real sockets.

Discovery; JWT access tokens for Relay's audience with the person's e-mail, from the authorization code + PKCE
flow and from the device flow (Authlib's client polling); refresh; key rotation (new kid signs, the old kid is no
longer published); tokens minted with the provider's key verify against its published JWKS (and the bad ones do
not); the provider down and back; a Relay's console redirect URI registered at runtime.
"""

from __future__ import annotations

import time

import jwt
import pytest
import requests

from tests.support.idp import IdentityProvider, new_private_jwk

pytestmark = pytest.mark.integration


def verify(idp: IdentityProvider, token: str, audience: str | None = None) -> dict[str, object]:
    """Verify ``token`` as a resource server would: the key for its kid from the provider's published JWKS."""
    keys = jwt.PyJWKSet.from_dict(idp.published_jwks())
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(key for key in keys.keys if key.key_id == kid)
    return dict(jwt.decode(token, key, algorithms=["RS256"], audience=audience or idp.audience,
                           issuer=idp.issuer))


def test_discovery_names_the_endpoints_relay_uses(identity_provider: IdentityProvider) -> None:
    metadata = identity_provider.metadata()
    assert metadata["issuer"] == identity_provider.issuer
    for name in ("jwks_uri", "authorization_endpoint", "token_endpoint", "end_session_endpoint",
                 "device_authorization_endpoint", "revocation_endpoint"):
        assert metadata[name].startswith(identity_provider.issuer), name
    assert "S256" in metadata["code_challenge_methods_supported"]
    assert [key["kid"] for key in identity_provider.published_jwks()["keys"]] == [identity_provider.kid]
    assert "d" not in identity_provider.published_jwks()["keys"][0]  # public keys only


def test_authorization_code_flow_gives_a_jwt_for_relays_audience(identity_provider: IdentityProvider) -> None:
    tokens = identity_provider.authorization_code_tokens("alice")
    access = tokens["access_token"]
    assert jwt.get_unverified_header(access)["kid"] == identity_provider.kid
    assert jwt.get_unverified_header(access)["alg"] == "RS256"
    claims = verify(identity_provider, access)
    assert claims["iss"] == identity_provider.issuer
    assert claims["aud"] == identity_provider.audience
    assert claims["sub"] == "alice"
    assert claims["email"] == "alice@example.com"
    assert claims["email_verified"] is True
    assert claims["name"] == "alice"
    assert int(claims["exp"]) > time.time() and int(claims["iat"]) <= time.time() + 1  # type: ignore[call-overload]
    # The ID token is for the console's client and carries the same person.
    id_claims = verify(identity_provider, tokens["id_token"], audience=identity_provider.console_client_id)
    assert (id_claims["sub"], id_claims["email"], id_claims["name"]) == ("alice", "alice@example.com", "alice")
    assert id_claims["nonce"]


def test_a_login_with_an_at_sign_is_its_own_email_and_resource_can_be_explicit(
    identity_provider: IdentityProvider,
) -> None:
    claims = verify(identity_provider,
                    identity_provider.access_token("Bob@Corp.example", resource=identity_provider.resource))
    assert (claims["sub"], claims["email"]) == ("Bob@Corp.example", "Bob@Corp.example")


def test_device_flow_with_authlib_then_refresh(identity_provider: IdentityProvider) -> None:
    tokens = identity_provider.device_flow_tokens("carol")
    claims = verify(identity_provider, tokens["access_token"])
    assert (claims["sub"], claims["email"], claims["client_id"]) == (
        "carol", "carol@example.com", identity_provider.device_client_id)
    assert tokens["refresh_token"]  # offline_access
    refreshed = identity_provider.refresh(tokens["refresh_token"])
    assert verify(identity_provider, refreshed["access_token"])["email"] == "carol@example.com"


def test_device_flow_polling_before_approval_is_pending(identity_provider: IdentityProvider) -> None:
    started = identity_provider.start_device_flow()
    assert started["verification_uri"].startswith(identity_provider.issuer)
    with pytest.raises(Exception, match="authorization_pending"):
        identity_provider.poll_device_token(started["device_code"], timeout=0)
    identity_provider.approve_user_code("dave", started["user_code"])
    tokens = identity_provider.poll_device_token(started["device_code"], timeout=0)
    assert verify(identity_provider, tokens["access_token"])["sub"] == "dave"


def test_minted_tokens_verify_only_when_they_should(identity_provider: IdentityProvider) -> None:
    idp = identity_provider
    good = idp.mint(idp.claims("erin"))
    assert verify(idp, good)["email"] == "erin@example.com"
    expired = idp.mint(idp.claims("erin", iat=int(time.time()) - 600, exp=int(time.time()) - 300))
    with pytest.raises(jwt.ExpiredSignatureError):
        verify(idp, expired)
    with pytest.raises(jwt.ImmatureSignatureError):
        verify(idp, idp.mint(idp.claims("erin", nbf=int(time.time()) + 300)))
    with pytest.raises(jwt.InvalidIssuerError):
        verify(idp, idp.mint(idp.claims("erin", iss="http://127.0.0.1:1")))
    with pytest.raises(jwt.InvalidAudienceError):
        verify(idp, idp.mint(idp.claims("erin", aud="someone-else")))
    forged = idp.mint(idp.claims("erin"), key=new_private_jwk(kid=idp.kid))
    assert jwt.get_unverified_header(forged)["kid"] == idp.kid
    with pytest.raises(jwt.InvalidSignatureError):
        verify(idp, forged)
    unsigned = idp.mint(idp.claims("erin"), alg="none")
    assert unsigned.endswith(".") and jwt.get_unverified_header(unsigned)["alg"] == "none"
    with pytest.raises(jwt.InvalidAlgorithmError):
        verify(idp, unsigned)
    confused = idp.mint(idp.claims("erin"), alg="HS256")
    assert jwt.get_unverified_header(confused) == {"alg": "HS256", "typ": "JWT", "kid": idp.kid}
    with pytest.raises(jwt.InvalidAlgorithmError):
        verify(idp, confused)
    # It is a genuine HS256 token keyed with the public key's PEM: what a naive verifier would accept.
    signing_input, _, signature = confused.rpartition(".")
    hs256 = jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA256)
    assert hs256.verify(signing_input.encode(), idp.public_pem(), jwt.utils.base64url_decode(signature))
    unknown_kid = idp.mint(idp.claims("erin"), kid="nobody-knows-me")
    with pytest.raises(StopIteration):
        verify(idp, unknown_kid)


def test_console_redirect_uri_registered_at_runtime(identity_provider: IdentityProvider) -> None:
    relay_base = "http://127.0.0.1:59999"
    authorize = identity_provider.metadata()["authorization_endpoint"]
    params = {"client_id": identity_provider.console_client_id, "response_type": "code", "scope": "openid",
              "redirect_uri": f"{relay_base}/oauth/callback", "code_challenge": "x" * 43,
              "code_challenge_method": "S256", "state": "s"}
    before = requests.get(authorize, params=params, allow_redirects=False, timeout=10)
    assert before.status_code == 400 and "redirect_uri" in before.text
    identity_provider.allow_relay(relay_base)
    after = requests.get(authorize, params=params, allow_redirects=False, timeout=10)
    assert after.status_code in (302, 303) and "/interaction/" in after.headers["Location"]
    assert identity_provider.relay_env()["RELAY_OIDC_ISSUER"] == identity_provider.issuer
    # Logout at the provider sends the person back to the console's registered page (with the state).
    back = identity_provider.end_session(f"{relay_base}/console/login", state="bye")
    assert back == f"{relay_base}/console/login?state=bye"
    with pytest.raises(AssertionError, match="post_logout_redirect_uri"):
        identity_provider.end_session(f"{relay_base}/elsewhere")


def test_rotation_signs_with_the_new_kid_and_unpublishes_the_old(identity_provider: IdentityProvider) -> None:
    idp = identity_provider
    old_kid = idp.kid
    before = idp.device_flow_tokens("frank")
    new_kid = idp.rotate()
    assert new_kid != old_kid and idp.kid == new_kid
    assert [key["kid"] for key in idp.published_jwks()["keys"]] == [new_kid]
    access = idp.access_token("frank")
    assert jwt.get_unverified_header(access)["kid"] == new_kid
    assert verify(idp, access)["sub"] == "frank"
    assert jwt.get_unverified_header(idp.mint(idp.claims("frank")))["kid"] == new_kid
    # Grants made before the rotation survive it: the refresh token now yields a token under the new kid.
    refreshed = idp.refresh(before["refresh_token"])["access_token"]
    assert jwt.get_unverified_header(refreshed)["kid"] == new_kid
    kept = idp.rotate(keep_old=True)
    assert [key["kid"] for key in idp.published_jwks()["keys"]] == [kept, new_kid]


def test_stopped_provider_refuses_connections_then_comes_back(identity_provider: IdentityProvider) -> None:
    idp = identity_provider
    kid = idp.kid
    idp.stop()
    assert not idp.running
    with pytest.raises(requests.ConnectionError):
        requests.get(idp.discovery_url, timeout=5)
    idp.start()
    assert idp.metadata()["issuer"] == idp.issuer
    assert idp.published_jwks()["keys"][0]["kid"] == kid
    assert jwt.get_unverified_header(idp.access_token("grace"))["kid"] == kid
