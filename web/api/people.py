"""Conductor API v2 users (served only with OAuth on, web/wsgi.py): a person registers with their access token
(registerUser) and reads who they are (getCurrentUser). Both need a person's token: an API key or the admin
token stands for no person (403)."""

from __future__ import annotations

from collections.abc import Mapping

from flask import Blueprint, Response, g, jsonify

from relay.actors.services.people import People
from relay.web.api.views_to_api import SUBSCRIPTION_PLAN
from relay.web.context import person_claims, principal, runtime
from relay.web.http_inputs import json_body
from relay.web.operations import operation
from relay.web.problems import invalid, not_found
from relay.web.shapes.values import view_time

bp = Blueprint("v2_users", __name__)

_PROFILE_FIELDS = ("givenName", "familyName", "company")
_MAX_FIELD_CHARS = 200  # a given or family name, a company: free text, but not a novel


def _text(body: Mapping[str, object], key: str, limit: int = _MAX_FIELD_CHARS) -> str:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise invalid(f"body.{key}", "must be a string", value)
    if len(value) > limit:
        raise invalid(f"body.{key}", f"must be at most {limit} characters", None)
    return value


@bp.post("/v2/users")
@operation("registerUser", summary="Register user", tag="Users", status=201, returns="RegisterUserOutputBody",
           body="RegisterUserInputBody", body_required=True, requires_oauth=True)
def register_user() -> Response:
    """Register the person of the access token: into the organization of `secret`, of a claimed e-mail domain, the
    default one for RELAY_OIDC_ADMIN_EMAILS, else a new organization of theirs (actors/services/people.py)."""
    claims = person_claims()
    body = json_body(required=True, allowed={"name", "secret", *_PROFILE_FIELDS})
    if "name" not in body:
        raise invalid("body.name", "is required", None)
    name = _text(body, "name", 30)
    secret = _text(body, "secret", 1000) or None
    given, family, company = (_text(body, key) for key in _PROFILE_FIELDS)
    user_id = People(runtime()).register(claims, name, secret, given or None, family or None, company or None)
    membership = runtime().views.people.membership(user_id)
    if membership is not None:
        g.audit_org = membership.org  # the audit entry belongs to the organization the person landed in
    g.audit_targets = [name]
    response = jsonify({"id": user_id})
    response.status_code = 201
    return response


@bp.get("/v2/users/me")
@operation("getCurrentUser", summary="Get current user", tag="Users", returns="UserProfile", requires_oauth=True)
def get_current_user() -> Response:
    """The calling person: their user name, e-mail, organization and role. 404 until they registered, and while
    they belong to no organization (the reference's UserProfile always names one)."""
    person_claims()
    who = principal()
    profile = People(runtime()).profile(who.user_id) if who.user_id is not None else None
    if profile is None:
        raise not_found("not registered: POST /v2/users")
    user = profile.user
    if profile.org is None or profile.role is None:
        raise not_found(f"'{user['username']}' is a member of no organization: join one with a join secret "
                        "(POST /v2/orgs/{orgName}/join)")
    role = profile.role
    return jsonify({
        "name": user["username"],
        "email": user["email"],
        "orgName": profile.org,
        "orgId": profile.org,
        "subscriptionPlan": SUBSCRIPTION_PLAN,
        "createdAt": view_time(user["registered_at"]),
        "role": {"name": role["name"], "isGlobal": role["is_global"], "permissions": sorted(role["permissions"])},
    })
