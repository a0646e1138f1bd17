"""The console's "Sign in with SSO" (issue 31): OpenID Connect's authorization code flow with PKCE (S256) for the
public client RELAY_OIDC_CLIENT_ID, by Authlib's OAuth 2 client; never a token of our own making or checking.

`/oauth/login` makes a state, a nonce and a code verifier, keeps them in the signed session cookie and sends the
browser to the provider's authorization endpoint. `/oauth/callback` takes them out of the session (used once: a
replayed callback finds none), checks the state, exchanges the code with the verifier at the token endpoint and
has the ID token checked (TokenVerifier: signature, issuer, audience = the client id, expiry, nonce). The session
then holds the person's user id (`u`), never a token; every request rebuilds the person's principal from the
people view (web/console/auth.py). Anything wrong ends on an error page that says what, with no session.

A person the view does not know yet gets the registration page: a user name and, optionally, a join secret
(People.register). Until then the session holds the verified claims registration needs (`reg`), for
REGISTRATION_MAX_AGE_S, and nothing else of the console is open to it. A registered person who belongs to no
organization (removed from theirs) gets the join page instead (a join secret: People.join), likewise.
"""

from __future__ import annotations

import hmac
import re
import secrets
import ssl
import time
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.requests_client import OAuth2Session
from flask import abort, flash, g, redirect, render_template, request, session, url_for
from requests.adapters import HTTPAdapter
from werkzeug.wrappers import Response

from relay.actors.adapters.oidc.discovery import ProviderMetadata
from relay.actors.adapters.oidc.verifier import VerifiedClaims
from relay.actors.configuration.settings import Settings
from relay.actors.errors import IdentityProviderUnavailableError, TokenRefusedError
from relay.actors.services.people import People
from relay.events.errors import InvalidValueError
from relay.projections.identity import hash_key
from relay.web import audit_trail
from relay.web.console import bp
from relay.web.console.auth import (
    JOINING,
    PERSON,
    REGISTERING,
    REGISTRATION_MAX_AGE_S,
    csrf_token,
    new_session,
    safe_path,
)
from relay.web.context import runtime
from relay.web.problems import DomainFailure, api_error

PENDING = "sso"  # session key of a sign-in under way: state, nonce, code verifier, next page, start time
FLOW_MAX_AGE_S = 600.0  # a sign-in left at the provider's login page longer than this starts again
# A public client has no secret: Authlib's "none" method sends client_id in the token request's body.
PUBLIC_CLIENT = "none"
_ERROR_TEXT_CHARS = 200  # of the provider's error_description, shown on the error page
_NOT_NAME = re.compile(r"[^a-z0-9_]+")


def sso_enabled(settings: Settings) -> bool:
    return bool(settings.oidc_issuer and settings.oidc_client_id)


def _provider() -> ProviderMetadata:
    """The identity provider's metadata (fetched once, cached by the token verifier's discovery)."""
    tokens = runtime().tokens
    if tokens is None:
        abort(404)
    return tokens.discovery.metadata()


def _client(settings: Settings) -> OAuth2Session:
    return token_client(settings, url_for("console.oauth_callback", _external=True))


def token_client(settings: Settings, redirect_uri: str) -> OAuth2Session:
    """Authlib's client of the console's sign-in. Its TLS trust is the token checks' (TokenVerifier): the
    system's CAs, and RELAY_CA_FILE's too when set (a provider under a private CA)."""
    client = OAuth2Session(
        client_id=settings.oidc_client_id, token_endpoint_auth_method=PUBLIC_CLIENT, scope=settings.oidc_scopes,
        redirect_uri=redirect_uri, code_challenge_method="S256",
    )
    client.trust_env = False  # no proxy or CA bundle from the environment: Relay's settings say how to connect
    if settings.ca_file is not None:
        context = ssl.create_default_context()
        context.load_verify_locations(cafile=str(settings.ca_file))
        client.mount("https://", _TrustAdapter(context))
    return client


class _TrustAdapter(HTTPAdapter):
    """requests' adapter, its connections made with `context` (which the default CA bundle only adds to)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)


def _refused(status: int, detail: str) -> tuple[str, int]:
    """The sign-in did not happen: say why, and leave no session (nor a half-made one) behind."""
    session.clear()
    return render_template("console/error.html", status=status, title="Sign-in failed", detail=detail,
                           sign_in_again=True), status


@bp.get("/oauth/login")
def sso_login() -> Any:
    settings = runtime().settings
    if not sso_enabled(settings):
        abort(404, "sign-in with SSO is not configured on this Relay (RELAY_OIDC_CLIENT_ID)")
    try:
        provider = _provider()
    except IdentityProviderUnavailableError as down:
        return _refused(503, f"The identity provider cannot be reached now: {down}")
    state, nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48)
    extra = {"nonce": nonce}
    if settings.oidc_resource:
        extra["resource"] = settings.oidc_resource  # RFC 8707: JWT access tokens for Relay's API
    with _client(settings) as client:
        url, _ = client.create_authorization_url(provider.authorization_endpoint, state=state,
                                                 code_verifier=verifier, **extra)
    session[PENDING] = {"state": state, "nonce": nonce, "verifier": verifier, "at": time.time(),
                        "next": safe_path(request.args.get("next"))}
    return redirect(url)


class _SignInFailed(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@bp.get("/oauth/callback")
def oauth_callback() -> Any:
    settings = runtime().settings
    if not sso_enabled(settings):
        abort(404)
    pending = session.pop(PENDING, None)  # used once, whatever comes of it
    try:
        code = _code_of_answer(pending)
        claims = _exchange(settings, code, str(pending["verifier"]), str(pending["nonce"]))
    except _SignInFailed as failed:
        return _refused(failed.status, failed.detail)
    except TokenRefusedError as refused:
        return _refused(401, f"The identity provider's ID token was refused: {refused}.")
    except IdentityProviderUnavailableError as down:
        return _refused(503, f"The identity provider cannot be reached now: {down}")
    except AuthlibBaseError as error:  # the token endpoint said no (a used or expired code, a wrong verifier)
        return _refused(401, f"The identity provider did not exchange the code: {error.error}.")
    except (requests.RequestException, ValueError) as error:
        return _refused(502, f"The identity provider's token endpoint did not answer usably ({type(error).__name__}).")
    return _signed_in(claims, str(pending.get("next") or ""))


def _code_of_answer(pending: object) -> str:
    """The authorization code of the provider's answer, once it is known to answer this browser's sign-in."""
    if not isinstance(pending, dict) or time.time() - float(pending.get("at", 0)) > FLOW_MAX_AGE_S:
        raise _SignInFailed(400, "No sign-in is under way in this browser: it expired, or this answer of the "
                                 "identity provider was used already. Sign in again.")
    if not hmac.compare_digest(str(request.args.get("state", "")), str(pending["state"])):
        raise _SignInFailed(400, "The sign-in's state does not match the one this browser started with (a forged "
                                 "or crossed answer). Sign in again.")
    if "error" in request.args:
        said = str(request.args.get("error_description") or "")[:_ERROR_TEXT_CHARS]
        raise _SignInFailed(401, f"The identity provider refused the sign-in ({request.args['error'][:64]})"
                                 + (f": {said}" if said else "."))
    code = request.args.get("code")
    if not code:
        raise _SignInFailed(400, "The identity provider's answer carries no authorization code. Sign in again.")
    return code


def _exchange(settings: Settings, code: str, verifier: str, nonce: str) -> VerifiedClaims:
    """The code for tokens at the token endpoint (PKCE: the verifier); the ID token checked. Only the claims
    leave: the tokens are dropped here."""
    tokens = runtime().tokens
    assert tokens is not None  # sso_enabled: OAuth mode is on
    extra = {"resource": settings.oidc_resource} if settings.oidc_resource else {}
    with _client(settings) as client:
        answer = client.fetch_token(_provider().token_endpoint, code=code, code_verifier=verifier,
                                    timeout=settings.oidc_timeout_s, **extra)
    id_token = answer.get("id_token")
    if not isinstance(id_token, str):
        raise TokenRefusedError("the token endpoint returned no ID token (is 'openid' in RELAY_OIDC_SCOPES?)")
    return tokens.verify(id_token, audience=[str(settings.oidc_client_id)], nonce=nonce)


def _signed_in(claims: VerifiedClaims, next_url: str) -> Response:
    known = runtime().views.people.user_by_subject(claims.issuer, claims.subject)
    new_session()
    if known is None:
        session[REGISTERING] = _claims_kept(claims)
        session["next"] = next_url
        return redirect(url_for("console.register"))
    who = People(runtime()).principal_of(known["user_id"])
    if who is None or who.org is None:  # registered, but removed from their organization since
        session[JOINING] = known["user_id"]
        return redirect(url_for("console.join"))
    session[PERSON] = known["user_id"]
    return redirect(safe_path(next_url))


# -- registration -----------------------------------------------------------------------------------------------
def _claims_kept(claims: VerifiedClaims) -> dict[str, Any]:
    """What registration needs of the ID token (not the token itself), signed into the session cookie. Of the
    groups only those RELAY_OIDC_ROLE_MAP names (the only ones registration reads): a person in hundreds of
    groups must not make the cookie larger than browsers keep."""
    mapped = runtime().settings.oidc_role_map
    return {"iss": claims.issuer, "sub": claims.subject, "email": claims.email,
            "email_verified": claims.email_verified, "name": claims.name, "given_name": claims.given_name,
            "family_name": claims.family_name, "groups": [g for g in claims.groups if g in mapped],
            "exp": claims.expires_at}


def registering() -> VerifiedClaims | None:
    """The verified claims of the person this session is registering, while they are fresh enough."""
    kept = session.get(REGISTERING)
    if not isinstance(kept, dict) or time.time() - float(session.get("t", 0)) > REGISTRATION_MAX_AGE_S:
        return None
    return VerifiedClaims(
        issuer=str(kept["iss"]), subject=str(kept["sub"]), email=kept.get("email"),
        email_verified=kept.get("email_verified"), name=kept.get("name"), given_name=kept.get("given_name"),
        family_name=kept.get("family_name"), groups=tuple(kept.get("groups") or ()),
        expires_at=float(kept.get("exp") or 0), raw={},
    )


def _suggested_name(claims: VerifiedClaims) -> str:
    """A user name to start from: the e-mail's local part, in the characters a user name may have."""
    base = _NOT_NAME.sub("_", (claims.email or claims.subject).split("@")[0].lower()).strip("_")
    return (base or "user")[:30].ljust(3, "_")


@bp.route("/register", methods=["GET", "POST"])
def register() -> Any:
    claims = registering()
    if claims is None:
        return redirect(url_for("console.login"))
    if request.method == "GET":
        return render_template("console/register.html", claims=claims, username=_suggested_name(claims),
                               company="")
    username = (request.form.get("username") or "").strip()
    secret = (request.form.get("secret") or "").strip() or None
    company = (request.form.get("company") or "").strip() or None
    try:
        user = People(runtime()).register(claims, username, secret, claims.given_name, claims.family_name, company)
    except DomainFailure as error:
        flash(f"Not registered: {api_error(error).detail}", "error")
        return render_template("console/register.html", claims=claims, username=username,
                               company=company or ""), api_error(error).status
    _now_signed_in(user, "registerUser", username)
    flash(f"Welcome, {username}.", "ok")
    return redirect(safe_path(str(session.pop("next", "") or "")))


def _now_signed_in(user: str, operation: str, target: str) -> None:
    """Registered (or joined): the session is the person's from now on; the audit trail names them."""
    session.pop(REGISTERING, None)
    session.pop(JOINING, None)
    session[PERSON] = user
    csrf_token()
    who = People(runtime()).principal_of(user)
    if who is not None and who.org is not None:
        g.console_principal = who
        g.audit_org = who.org  # the path names no organization: the one they landed in
        audit_trail.note(operation, [target])


# -- a registered person in no organization (removed from theirs): joins one with a join secret -----------------
@bp.route("/join", methods=["GET", "POST"])
def join() -> Any:
    user = session.get(JOINING)
    who = People(runtime()).principal_of(user) if isinstance(user, str) else None
    if who is None:
        return redirect(url_for("console.login"))
    if request.method == "GET":
        return render_template("console/join.html", person=who.person)
    secret = (request.form.get("secret") or "").strip()
    found = runtime().views.people.secret_org(hash_key(secret)) if secret else None
    try:
        if found is None:
            raise InvalidValueError("the join secret is not valid (unknown or expired)")
        People(runtime()).join(who, found.org, secret)
    except DomainFailure as error:
        flash(f"Not joined: {api_error(error).detail}", "error")
        return render_template("console/join.html", person=who.person), api_error(error).status
    _now_signed_in(str(user), "joinOrg", found.org)
    flash(f"You joined {found.org}.", "ok")
    return redirect(url_for("console.home"))
