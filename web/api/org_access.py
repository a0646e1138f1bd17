"""Conductor API v2: who may use an organization (served only with OAuth on, web/wsgi.py): its settings
(updateOrg), members, roles, join secrets and claimed e-mail domains. Each operation checks one permission
(organization.read or organization.write) through authorize(); joinOrg needs a person's token and a valid secret.
The use cases are actors/services/people.py's; web/problems.py maps their refusals to HTTP."""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify

from relay.actors.services.people import People
from relay.events.access import ORG_ADMIN, ORG_MEMBER
from relay.events.names import DOMAIN_NAME, ORG_NAME, ROLE_NAME, USER_NAME
from relay.events.organization import PERMISSIONS
from relay.projections.people import ClaimRow, RoleRow
from relay.web.context import authorize, person_claims, principal, runtime
from relay.web.http_inputs import check_path_names, json_body
from relay.web.operations import operation
from relay.web.problems import invalid
from relay.web.shapes.values import view_time

bp = Blueprint("v2_org_access", __name__)

MAX_SECRET_CHARS = 1000
BUILT_IN_ROLES = (ORG_ADMIN, ORG_MEMBER)


def _no_content() -> Response:
    return Response(status=204)


def _created(body: object) -> Response:
    response = jsonify(body)
    response.status_code = 201
    return response


def _user_name(name: str) -> str:
    if not USER_NAME.fullmatch(name):
        raise invalid("path.username", "must be 3-30 characters of [a-z0-9_]", name)
    return name


def _role_name(name: str, location: str = "path.roleName") -> str:
    """A custom role's name, or a built-in role's: their names hold a space the reference's pattern has not, and a
    path must still be able to name them (grantRole to Organization Admin)."""
    if not ROLE_NAME.fullmatch(name) and (location != "path.roleName" or name not in BUILT_IN_ROLES):
        raise invalid(location, "must be 3-30 characters of [a-zA-Z0-9_] (or a built-in role's name)", name)
    return name


def _domain(value: object, location: str) -> str:
    if not isinstance(value, str):
        raise invalid(location, "must be a string", value)
    domain = value.strip().lower()
    if not DOMAIN_NAME.fullmatch(domain):
        raise invalid(location, "must be an e-mail domain such as example.com", value)
    return domain


def _role_output(role: RoleRow) -> dict[str, object]:
    return {"name": role["name"], "isGlobal": role["is_global"], "permissions": sorted(role["permissions"])}


# -- the organization -----------------------------------------------------------------------------
@bp.patch("/v2/orgs/<org>")
@operation("updateOrg", summary="Update org", tag="Orgs", status=204, body="UpdateOrgInputBody", body_required=True,
           requires_oauth=True)
def update_org(org: str) -> Response:
    """Change the audit log's retention. A new name is refused (409): Relay names the organization in every
    application's id and key."""
    who = authorize("organization.write", org)
    body = json_body(required=True, allowed={"auditLogRetentionDays", "newName"})
    days = body.get("auditLogRetentionDays")
    if days is not None and (isinstance(days, bool) or not isinstance(days, int) or not 7 <= days <= 3650):
        raise invalid("body.auditLogRetentionDays", "must be an integer from 7 to 3650", days)
    new_name = body.get("newName")
    if new_name is not None and (not isinstance(new_name, str) or not ORG_NAME.fullmatch(new_name)):
        raise invalid("body.newName", "must be 3-30 characters of [a-z0-9_]", new_name)
    People(runtime()).update_org(org, days, new_name, who.display)
    return _no_content()


# -- join secrets and joining ---------------------------------------------------------------------
@bp.post("/v2/orgs/<org>/secrets")
@operation("generateSecret", summary="Generate join secret", tag="Orgs", status=201,
           returns="GenerateSecretOutputBody", requires_oauth=True)
def generate_secret(org: str) -> Response:
    """A secret a person joins the organization with (as Organization Member), shown once, stored hashed."""
    who = authorize("organization.write", org)
    return _created({"secret": People(runtime()).generate_secret(org, who.display)})


@bp.post("/v2/orgs/<org>/join")
@operation("joinOrg", summary="Join org", tag="Orgs", status=204, body="JoinOrgInputBody", body_required=True,
           requires_oauth=True)
def join_org(org: str) -> Response:
    """The calling person joins the organization with a secret one of its administrators generated (leaving the
    organization they were in, if any)."""
    person_claims()  # a person's token: an API key or the admin token joins nobody
    check_path_names(org)
    body = json_body(required=True, allowed={"secret"})
    secret = body.get("secret")
    if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_CHARS:
        raise invalid("body.secret", "must be the join secret (a non-empty string)", None)
    People(runtime()).join(principal(), org, secret)
    return _no_content()


# -- members --------------------------------------------------------------------------------------
@bp.get("/v2/orgs/<org>/members")
@operation("listMembers", summary="List members", tag="Orgs", returns="OrgMembers", requires_oauth=True)
def list_members(org: str) -> Response:
    authorize("organization.read", org)
    roles = {role["name"]: role for role in People(runtime()).roles(org)}
    users = {m["username"]: _role_output(roles[m["role"]]) for m in People(runtime()).members(org)
             if m["role"] in roles}
    return jsonify({"orgName": org, "users": users})


@bp.delete("/v2/orgs/<org>/members/<username>")
@operation("removeMember", summary="Remove member", tag="Orgs", returns="Member", requires_oauth=True)
def remove_member(org: str, username: str) -> Response:
    """Remove a member: their keys are revoked with it, their tokens and sessions refused from the next request."""
    who = authorize("organization.write", org)
    member = People(runtime()).remove_member(org, _user_name(username), who.display)
    return jsonify({
        "id": member["user_id"], "orgId": org, "email": member["email"], "name": member["username"],
        "givenName": member["given_name"], "familyName": member["family_name"], "company": member["company"],
    })


@bp.put("/v2/orgs/<org>/members/<username>/roles/<role_name>")
@operation("grantRole", summary="Grant role", tag="Roles", status=204, path_names={"role_name": "roleName"},
           requires_oauth=True)
def grant_role(org: str, username: str, role_name: str) -> Response:
    who = authorize("organization.write", org)
    People(runtime()).grant(org, _user_name(username), _role_name(role_name), who.display)
    return _no_content()


# -- roles ----------------------------------------------------------------------------------------
@bp.get("/v2/orgs/<org>/roles")
@operation("listRoles", summary="List roles", tag="Roles", returns="RoleOutput[]", requires_oauth=True)
def list_roles(org: str) -> Response:
    """The built-in roles (isGlobal) and the organization's own."""
    authorize("organization.read", org)
    return jsonify([_role_output(role) for role in People(runtime()).roles(org)])


@bp.post("/v2/orgs/<org>/roles")
@operation("createRole", summary="Create role", tag="Roles", status=201, returns="CreateRoleOutputBody",
           body="CreateRoleInputBody", body_required=True, requires_oauth=True)
def create_role(org: str) -> Response:
    who = authorize("organization.write", org)
    body = json_body(required=True, allowed={"name", "permissions"})
    name = body.get("name")
    if not isinstance(name, str):
        raise invalid("body.name", "is required: 3-30 characters of [a-zA-Z0-9_]", name)
    _role_name(name, "body.name")
    permissions = body.get("permissions") or []
    if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
        raise invalid("body.permissions", "must be a list of permission names", permissions)
    for index, permission in enumerate(permissions):
        if permission not in PERMISSIONS:
            raise invalid(f"body.permissions[{index}]", "unknown permission", permission)
    role = People(runtime()).create_role(org, name, sorted(set(permissions)), who.display)
    g.audit_targets = [name]
    response = _created({"name": role["name"], "permissions": sorted(role["permissions"])})
    response.headers["Location"] = f"/v2/orgs/{org}/roles/{name}"
    return response


@bp.delete("/v2/orgs/<org>/roles/<role_name>")
@operation("deleteRole", summary="Delete role", tag="Roles", status=204, path_names={"role_name": "roleName"},
           requires_oauth=True)
def delete_role(org: str, role_name: str) -> Response:
    """Delete an organization's own role: not a built-in one, nor one a member holds (409)."""
    who = authorize("organization.write", org)
    People(runtime()).delete_role(org, _role_name(role_name), who.display)
    return _no_content()


# -- claimed e-mail domains -----------------------------------------------------------------------
def _claim(claim: ClaimRow) -> dict[str, object]:
    """A claim as the reference's DomainClaim: Relay, self-hosted, approves a claim when it is made."""
    return {"id": claim["domain"], "domain": claim["domain"], "status": claim["status"], "orgName": claim["org"],
            "requestedBy": claim["requested_by"], "requestedAt": view_time(claim["requested_at"])}


@bp.get("/v2/orgs/<org>/domain-claims")
@operation("listDomainClaims", summary="List domain claims", tag="Orgs", returns="ListDomainClaimsOutputBody",
           requires_oauth=True)
def list_domain_claims(org: str) -> Response:
    authorize("organization.read", org)
    return jsonify({"claims": [_claim(c) for c in People(runtime()).claims(org)]})


@bp.post("/v2/orgs/<org>/domain-claims")
@operation("requestDomainClaim", summary="Claim a domain", tag="Orgs", status=201, returns="DomainClaim",
           body="RequestDomainClaimInputBody", body_required=True, requires_oauth=True)
def request_domain_claim(org: str) -> Response:
    """Claim an e-mail domain: a person with a verified e-mail of it who registers lands in this organization
    (as Organization Member). It takes effect at once (self-hosted: nobody reviews it); subdomains are not matched."""
    who = authorize("organization.write", org)
    body = json_body(required=True, allowed={"domain"})
    if "domain" not in body:
        raise invalid("body.domain", "is required", None)
    domain = _domain(body["domain"], "body.domain")
    claim = People(runtime()).claim_domain(org, domain, who.display)
    g.audit_targets = [domain]
    return _created(_claim(claim))


@bp.delete("/v2/orgs/<org>/domain-claims/<domain>")
@operation("releaseDomainClaim", summary="Release a domain claim", tag="Orgs", status=204, requires_oauth=True)
def release_domain_claim(org: str, domain: str) -> Response:
    who = authorize("organization.write", org)
    People(runtime()).release_domain(org, _domain(domain, "path.domain"), who.display)
    return _no_content()
