"""The console's Members & roles page (issue 31): an organization's members with their roles, granting a role,
removing a member, inviting with a join secret (shown once), and custom roles made and deleted. Served only in
OAuth mode (RELAY_OIDC_ISSUER). Every action goes to the People service (actors/services/people.py), which
records it with the acting person; its domain errors are shown as the API would answer them (web/problems.py).
Reading takes organization.read, every change organization.write (the built-in Organization Member has no
organization.write): the page offers only what the person may do, and each action checks again."""

from __future__ import annotations

from typing import Any

from flask import abort, flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from relay.actors.services.people import People
from relay.events.organization import PERMISSIONS
from relay.projections.identity import Principal
from relay.web import audit_trail
from relay.web.console import bp
from relay.web.console.auth import confirm_page, confirmed, require
from relay.web.console.helpers import check_org
from relay.web.context import runtime
from relay.web.problems import DomainFailure, api_error


def oauth_only() -> None:
    if not runtime().settings.oidc_issuer:
        abort(404, "members and roles exist in OAuth mode only (RELAY_OIDC_ISSUER)")


@bp.app_template_global()
def person_name(who: Principal) -> str:
    """How the user menu names a person: their name as the provider gave it at registration, else their user
    name, else their e-mail."""
    row = runtime().views.people.user(who.user_id) if who.user_id else None
    if row is None:
        return who.person or ""
    full = " ".join(part for part in (row["given_name"], row["family_name"]) if part)
    return full or row["username"]


def _page(org: str, who: Principal, secret: str | None = None, status: int = 200) -> tuple[str, int]:
    people = People(runtime())
    roles = {role["name"]: role for role in people.roles(org)}
    return render_template(
        "console/members.html", org=org, members=people.members(org), roles=roles, role_names=list(roles),
        permissions=PERMISSIONS, secret=secret, me=who.user_id, claims=people.claims(org),
        retention_days=people.retention_days(org),
    ), status


@bp.get("/orgs/<org>/members")
def members(org: str) -> tuple[str, int]:
    oauth_only()
    check_org(org)
    return _page(org, require("organization.read", org))


def done(operation: str, target: str, what: str, error: Exception | None, org: str, anchor: str = "") -> Response:
    """Record the action in the audit trail, say how it went, and go back to the Members page (at `anchor`)."""
    if error is None:
        audit_trail.note(operation, [target])
        flash(what, "ok")
    else:
        problem = api_error(error)
        audit_trail.note(operation, [target], failed=problem.detail, status=problem.status)
        flash(f"Not done: {problem.detail}", "error")
    return redirect(url_for("console.members", org=org) + anchor)


@bp.post("/orgs/<org>/members/<username>/role")
def grant_role(org: str, username: str) -> Response:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    role = (request.form.get("role") or "").strip()
    try:
        People(runtime()).grant(org, username, role, who.display)
    except DomainFailure as error:
        return done("grantRole", username, "", error, org)
    return done("grantRole", username, f"{username} is now {role}.", None, org)


@bp.post("/orgs/<org>/members/<username>/remove")
def remove_member(org: str, username: str) -> Any:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    if not confirmed():
        return confirm_page(
            f"Remove {username} from {org}?",
            "They are signed out of the console at their next request, and the API keys they created are revoked.",
            "Remove member", danger=True, back=url_for("console.members", org=org), keep="Keep them",
        )
    try:
        People(runtime()).remove_member(org, username, who.display)
    except DomainFailure as error:
        return done("removeMember", username, "", error, org)
    return done("removeMember", username, f"{username} removed from {org}.", None, org)


@bp.post("/orgs/<org>/join-secrets")
def generate_secret(org: str) -> Any:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    try:
        secret = People(runtime()).generate_secret(org, who.display)
    except DomainFailure as error:
        return done("generateSecret", org, "", error, org)
    audit_trail.note("generateSecret", [org])
    # Rendered in this answer only (no redirect, no flash, no-store): the secret is shown exactly once.
    return _page(org, who, secret=secret)


@bp.post("/orgs/<org>/roles")
def create_role(org: str) -> Response:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    name = (request.form.get("name") or "").strip()
    permissions = sorted(set(request.form.getlist("permissions")))
    try:
        People(runtime()).create_role(org, name, permissions, who.display)
    except DomainFailure as error:
        return done("createRole", name, "", error, org)
    return done("createRole", name, f"Role {name} created.", None, org)


@bp.post("/orgs/<org>/roles/<role_name>/delete")
def delete_role(org: str, role_name: str) -> Any:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    if not confirmed():
        return confirm_page(f"Delete the role {role_name}?", "A role still granted to a member cannot be deleted.",
                            "Delete role", danger=True, back=url_for("console.members", org=org),
                            keep="Keep the role")
    try:
        People(runtime()).delete_role(org, role_name, who.display)
    except DomainFailure as error:
        return done("deleteRole", role_name, "", error, org)
    return done("deleteRole", role_name, f"Role {role_name} deleted.", None, org)

