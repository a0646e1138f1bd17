"""The organization's own settings on the Members & roles page (OAuth mode, issue 31): the audit log retention
(updateOrg) and the claimed e-mail domains (requestDomainClaim, releaseDomainClaim), through the People service as
the API's operations go (actors/services/people.py), each confirmed and recorded under the API's operation name.
Renaming an organization (updateOrg's newName) is refused by Relay, so the page does not offer it."""

from __future__ import annotations

from flask import flash, redirect, request, url_for
from werkzeug.wrappers import Response

from relay.actors.services.people import People
from relay.events.names import DOMAIN_NAME
from relay.web.console import bp
from relay.web.console.auth import confirm_page, confirmed, require
from relay.web.console.helpers import check_org
from relay.web.console.members import done, oauth_only
from relay.web.context import runtime
from relay.web.problems import DomainFailure

MIN_RETENTION_DAYS, MAX_RETENTION_DAYS = 7, 3650  # as PATCH /v2/orgs/{orgName} takes them


@bp.post("/orgs/<org>/retention")
def change_retention(org: str) -> Response | str:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    raw = (request.form.get("auditLogRetentionDays") or "").strip()
    if not raw.isdigit() or not MIN_RETENTION_DAYS <= int(raw) <= MAX_RETENTION_DAYS:
        flash(f"The audit log retention is a whole number of days from {MIN_RETENTION_DAYS} to "
              f"{MAX_RETENTION_DAYS}.", "error")
        return redirect(url_for("console.members", org=org) + "#organization")
    days = int(raw)
    if not confirmed():
        return confirm_page(f"Keep {org}'s audit log for {days} days?", "Entries older than that may be removed.",
                            "Save retention", back=url_for("console.members", org=org), keep="Don't change")
    error: Exception | None = None
    try:
        People(runtime()).update_org(org, days, None, who.display)
    except DomainFailure as failure:
        error = failure
    return done("updateOrg", org, f"Audit log retention set to {days} days.", error, org, "#organization")


@bp.post("/orgs/<org>/domain-claims")
def claim_domain(org: str) -> Response | str:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    domain = (request.form.get("domain") or "").strip().lower()
    if not DOMAIN_NAME.fullmatch(domain):
        flash("A domain is an e-mail domain such as example.com.", "error")
        return redirect(url_for("console.members", org=org) + "#organization")
    if not confirmed():
        return confirm_page(f"Claim {domain} for {org}?", f"People who register with a verified e-mail of {domain} "
                            f"join {org} as Organization Member, from now on.", "Claim domain",
                            back=url_for("console.members", org=org), keep="Don't claim")
    error: Exception | None = None
    try:
        People(runtime()).claim_domain(org, domain, who.display)
    except DomainFailure as failure:
        error = failure
    return done("requestDomainClaim", domain, f"Domain {domain} claimed.", error, org, "#organization")


@bp.post("/orgs/<org>/domain-claims/<domain>/release")
def release_domain(org: str, domain: str) -> Response | str:
    oauth_only()
    check_org(org)
    who = require("organization.write", org)
    if not confirmed():
        return confirm_page(f"Release the claim on {domain}?", f"People registering with an e-mail of {domain} no "
                            f"longer join {org} by it.", "Release domain", danger=True,
                            back=url_for("console.members", org=org), keep="Keep the claim")
    error: Exception | None = None
    try:
        People(runtime()).release_domain(org, domain, who.display)
    except DomainFailure as failure:
        error = failure
    return done("releaseDomainClaim", domain, f"Claim on {domain} released.", error, org, "#organization")
