"""Console login: session cookie, CSRF tokens, and the principal of the logged-in user.

The session holds the SHA-256 hash of the token the user logged in with (the same hash the applications
view keeps), never the token itself; each request looks the hash up again, so a revoked key ends its
console sessions at once. The session secret is derived from the admin token, so every instance of a
cluster (which share it) accepts the same cookies, and rotating the admin token logs everyone out.

Each login starts a session with an id of its own (`sid`); logout records that id as ended in the shared
store (actors/edge_state.py) until the session would have expired anyway, so a cookie saved before logout,
and the CSRF token in it, no longer work on any instance, nor after a restart
(docs/adr/0007-console-sessions-end-in-the-store.md). Failed logins are throttled per address
(web/login_throttle.py). Under TLS (RELAY_TLS_CERT) the cookie is `Secure` and every answer carries HSTS.

A person signed in with SSO (web/console/sso.py, issue 31) has a session holding their user id (`u`), never a
token; each request rebuilds their principal from the people view, so a member removed (or given another role)
is refused (or sees the new role) at their next request. The token login form can be turned off
(RELAY_CONSOLE_TOKEN_LOGIN=false): then sessions of a token are refused too.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode, urlsplit

import flask
from flask import (
    Flask,
    Request,
    abort,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from werkzeug.wrappers import Response

from relay.actors.errors import IdentityProviderUnavailableError
from relay.actors.services.people import People
from relay.projections.identity import Principal, hash_key
from relay.web import login_throttle
from relay.web.console import bp
from relay.web.context import runtime

if TYPE_CHECKING:
    from flask.blueprints import BlueprintSetupState
    from itsdangerous import URLSafeTimedSerializer

SESSION_COOKIE = "relay_console"
SESSION_MAX_AGE_S = 12 * 3600
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
# Under TLS: browsers keep to https for a year (the console and API are served on one port, https only).
HSTS = "max-age=31536000"
# Endpoints reachable without a session (the login form itself, the stylesheet it uses, and the SSO flow).
_OPEN_ENDPOINTS = frozenset({"console.login", "console.static", "console.sso_login", "console.oauth_callback"})
# A person's session (issue 31): their user id; or, between sign-in and registration, the verified claims
# registration needs (web/console/sso.py), with only these endpoints open to it.
PERSON = "u"
REGISTERING = "reg"
JOINING = "join"  # the user id of a registered person in no organization, who may join one with a secret
REGISTRATION_MAX_AGE_S = 900.0
_REGISTRATION_ENDPOINTS = frozenset({"console.register", "console.join", "console.logout"})


class SessionCookies(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the signing serializer built once per secret rather than on every
    request, and not at all for a request without a session cookie (API calls carry a bearer token)."""

    def __init__(self) -> None:
        self._serializer: tuple[tuple[object, ...], URLSafeTimedSerializer | None] | None = None

    def get_signing_serializer(self, app: Flask) -> URLSafeTimedSerializer | None:
        # Rebuilt when the secret or a fallback is another object than the one it was built with.
        current = (app.secret_key, *(app.config["SECRET_KEY_FALLBACKS"] or ()))
        cached = self._serializer
        if cached is None or len(cached[0]) != len(current) or any(
                a is not b for a, b in zip(cached[0], current, strict=True)):
            cached = self._serializer = (current, super().get_signing_serializer(app))
        return cached[1]

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        # No Cookie header at all (werkzeug reads cookies from it only): no need to parse any. Either way, no
        # session cookie gets what Flask answers for none, without building its serializer.
        if app.secret_key and (not request.environ.get("HTTP_COOKIE")
                               or not request.cookies.get(self.get_cookie_name(app))):
            return self.session_class()
        return super().open_session(app, request)

    def save_session(self, app: Flask, session: Any, response: flask.Response) -> None:
        if not session and not session.modified and not session.accessed:
            return  # nothing for Flask to do (no Vary, no cookie to set or delete): skip its cookie settings
        super().save_session(app, session, response)


@bp.record_once
def _configure(state: BlueprintSetupState) -> None:
    app = cast(Flask, state.app)  # the console is registered on a Flask app (web/wsgi.py), not a bare sansio App
    rt = app.extensions["relay"]
    token = rt.settings.admin_token or secrets.token_urlsafe(32)
    app.secret_key = hmac.new(token.encode(), b"relay console session v1", hashlib.sha256).hexdigest()
    app.session_interface = SessionCookies()
    tls = rt.settings.tls_cert is not None
    app.config.update(
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=tls,
        PERMANENT_SESSION_LIFETIME=SESSION_MAX_AGE_S,
    )
    if tls:
        app.after_request(_strict_transport_security)
    # A person's logout continues at the identity provider (its end_session_endpoint) from the logout form's
    # redirect, which browsers check against form-action: the provider's origin is allowed there too.
    app.config["RELAY_CONSOLE_CSP"] = _csp(rt.settings.oidc_issuer)


def _csp(issuer: str | None) -> str:
    if not issuer:
        return CSP
    parts = urlsplit(issuer)
    return CSP.replace("form-action 'self'", f"form-action 'self' {parts.scheme}://{parts.netloc}")


def _strict_transport_security(response: Response) -> Response:
    response.headers.setdefault("Strict-Transport-Security", HSTS)
    return response


# -- the principal --------------------------------------------------------------------------------
def current() -> Principal:
    """The logged-in principal (every console view but login runs after `_guard` set it)."""
    who = g.get("console_principal")
    if who is None:
        abort(401)
    return who


@bp.app_template_global()
def can(permission: str, org: str, app: str | None = None) -> bool:
    who = g.get("console_principal")
    return who is not None and who.allows(permission, org, app)


def require(permission: str, org: str, app: str | None = None) -> Principal:
    who = current()
    if not who.allows(permission, org, app):
        lacking = f"your role ({who.role}) lacks" if who.person else "your key lacks"
        abort(403, f"{lacking} '{permission}' here")
    return who


# -- CSRF -----------------------------------------------------------------------------------------
@bp.app_template_global()
def csrf_token() -> str:
    token = session.get("csrf")
    if not token:
        token = session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


def _csrf_ok() -> bool:
    expected = session.get("csrf")
    sent = request.form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
    return bool(expected) and hmac.compare_digest(str(expected), sent)


@bp.app_template_global()
def people_enabled() -> bool:
    """Whether people sign in (OAuth mode): the layout then links to Members & roles."""
    return bool(runtime().settings.oidc_issuer)


@bp.app_context_processor
def _template_helpers() -> dict[str, Principal | None]:
    return {"who": g.get("console_principal")}


# -- the guard: runs before every console view ----------------------------------------------------
@bp.before_request
def _guard() -> Response | None:
    if request.method not in ("GET", "HEAD", "OPTIONS") and not _csrf_ok():
        abort(403, "missing or wrong CSRF token; reload the page and try again")
    if request.endpoint in _OPEN_ENDPOINTS:
        return None
    if (REGISTERING in session or JOINING in session) and PERSON not in session:
        return _registration_only()
    token_hash, person = session.get("h"), session.get(PERSON)
    logged_in_at = session.get("t", 0)
    who = _principal_of(token_hash, person)
    if who is not None and _ended(session.get("sid")):
        who = None
    if who is None or time.time() - float(logged_in_at) > SESSION_MAX_AGE_S:
        if person:
            session.clear()
            flash("Your session ended (expired, logged out, or you are no longer a member of an organization). "
                  "Sign in again.", "error")
        elif token_hash:
            session.clear()
            flash("Your session ended (expired, or the key was revoked). Log in again.", "error")
        return redirect(url_for("console.login", next=request.full_path.rstrip("?")))
    g.console_principal = who
    return None


def _principal_of(token_hash: object, person: object) -> Principal | None:
    """The session's principal, from the views as they are now: a person's from the people view (None once
    they are in no organization), a token's from the applications view (None once revoked, or when token
    logins are turned off)."""
    rt = runtime()
    if isinstance(person, str):
        who = People(rt).principal_of(person)
        return who if who is not None and who.org is not None else None  # removed: in no organization
    if isinstance(token_hash, str) and rt.settings.console_token_login:
        return rt.auth.principal_for_hash(token_hash)
    return None


def _registration_only() -> Response | None:
    """Between sign-in and registration only the registration page (and logout) is open; an old half-made
    session starts over at the login page."""
    fresh = time.time() - float(session.get("t", 0)) <= REGISTRATION_MAX_AGE_S and not _ended(session.get("sid"))
    if not fresh:
        session.clear()
        return redirect(url_for("console.login"))
    if request.endpoint in _REGISTRATION_ENDPOINTS:
        return None
    return redirect(url_for("console.register" if REGISTERING in session else "console.join"))


def _ended(session_id: object) -> bool:
    """Whether the session was logged out (on any instance, before or since a restart); a cookie without an
    id (from before ids) counts as ended."""
    return not isinstance(session_id, str) or runtime().edge_state.session_ended(session_id)


@bp.after_request
def _no_cache(response: Response) -> Response:
    # Pages show live state and sometimes a key shown once: never from a cache.
    if request.endpoint != "console.static":
        response.headers["Cache-Control"] = "no-store"
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        # Scripts only from the console's own file; no inline script, no framing, forms post here only.
        response.headers.setdefault("Content-Security-Policy", flask.current_app.config.get("RELAY_CONSOLE_CSP", CSP))
    return response


def safe_path(target: str | None) -> str:
    """Only a path on this site is a redirect target: no scheme, no host, not protocol-relative (browsers
    read a backslash as a slash), no control characters; anything else means the console's home."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return url_for("console.home")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or any(ord(c) < 32 for c in target):
        return url_for("console.home")
    return target


def new_session() -> None:
    """A new session (and CSRF token) at every login: no fixation."""
    session.clear()
    session.permanent = True
    session["t"] = time.time()
    session["sid"] = secrets.token_urlsafe(24)
    csrf_token()


def _login_page(status: int = 200, next_url: str = "") -> tuple[str, int]:
    settings = runtime().settings
    return render_template("console/login.html", next=next_url, token_login=settings.console_token_login,
                           sso=bool(settings.oidc_issuer and settings.oidc_client_id)), status


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    if request.method == "POST":
        if not runtime().settings.console_token_login:
            abort(403, "logging in with a token is turned off on this Relay (RELAY_CONSOLE_TOKEN_LOGIN); sign in "
                       "with SSO")
        wait = login_throttle.retry_after()
        if wait is not None:  # before the token is looked up: a valid one is refused too
            flash(f"Too many failed logins from your address; try again in {wait} s.", "error")
            page, _ = _login_page(next_url=request.form.get("next", ""))
            return page, 429, {"Retry-After": wait}
        token = (request.form.get("token") or "").strip()
        rt = runtime()
        who = rt.auth.principal_for(token) if token else None
        if who is None:
            login_throttle.failed()
            flash("Unknown or revoked token.", "error")
            return _login_page(401, request.form.get("next", ""))
        next_url = safe_path(request.form.get("next"))
        new_session()
        session["h"] = hash_key(token)
        return redirect(next_url)
    # The page names the token's file relative to the data directory, never its absolute path: the page is
    # shown to anyone who reaches it, before any authentication.
    return _login_page(next_url=request.args.get("next", ""))


@bp.post("/logout")
def logout() -> Response:
    # Ended in the store, not just in this browser: a copy of the cookie must not outlive the logout.
    session_id, logged_in_at = session.get("sid"), float(session.get("t", 0))
    person = PERSON in session or REGISTERING in session or JOINING in session
    if isinstance(session_id, str):
        now = time.time()
        runtime().edge_state.end_session(session_id, logged_in_at + SESSION_MAX_AGE_S, now)
    session.clear()
    flash("Logged out.", "info")
    at_provider = provider_logout_url() if person else None
    return redirect(at_provider or url_for("console.login"))


def provider_logout_url() -> str | None:
    """Where a person's logout continues: the identity provider's end_session_endpoint (RP-initiated logout),
    then back to the login page; None when the provider offers none or cannot be asked now."""
    settings = runtime().settings
    tokens = runtime().tokens
    if tokens is None or not settings.oidc_client_id:
        return None
    try:
        endpoint = tokens.discovery.metadata().end_session_endpoint
    except IdentityProviderUnavailableError:
        return None
    if not endpoint:
        return None
    query = urlencode({"client_id": settings.oidc_client_id,
                       "post_logout_redirect_uri": url_for("console.login", _external=True)})
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


def confirmed() -> bool:
    """Actions run only when the form says the user confirmed them (see templates/console/confirm.html)."""
    return request.form.get("confirmed") == "yes"


def confirm_page(title: str, message: str, button: str, *, back: str, danger: bool = False,
                 keep: str = "Keep it") -> str:
    """The confirmation step of an action: the same form again, with `confirmed=yes`. Both buttons say what
    they do (`button`: "Cancel workflow"; `keep`: "Keep it running"), never a bare OK/Cancel: "Cancel" would
    be ambiguous next to an action that cancels."""
    fields = [(k, v) for k, values in request.form.lists() for v in values if k not in (CSRF_FIELD, "confirmed")]
    return render_template(
        "console/confirm.html", title=title, message=message, button=button, keep=keep, danger=danger,
        fields=fields, action=request.path, back=safe_path(back),
        **{k: v for k, v in (request.view_args or {}).items() if k in ("org", "app")},  # for the navigation
    )
