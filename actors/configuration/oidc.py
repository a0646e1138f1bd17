"""Sign-in through an OpenID Connect provider (issue 31): the RELAY_OIDC_* and RELAY_CONSOLE_TOKEN_LOGIN settings,
parsed and checked at startup. OAuth mode is on when RELAY_OIDC_ISSUER is set. The table entries (names, defaults,
meanings) are in actors/configuration/settings.py's ENV_SETTINGS, which passes its defaults here.
A message names the variable, never a value beyond the scheme (an issuer URL may carry a tenant id)."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

MAX_LEEWAY_S = 300.0  # a wider window would accept long-expired tokens
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_CLAIM_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,200}$")


def _error(message: str) -> ValueError:
    # settings.py's ConfigError is a ValueError; it wraps this one (no import circle).
    return ValueError(message)


def _words(value: str) -> tuple[str, ...]:
    return tuple(part for part in re.split(r"[,\s]+", value) if part)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_issuer(issuer: str) -> str:
    """The issuer as written (a trailing slash is kept: `iss` is compared as a string): https, or http to a
    loopback address (a provider on this machine, e.g. in tests); no query or fragment (OIDC Discovery 1.0)."""
    parsed = urlparse(issuer)
    if not parsed.hostname or parsed.query or parsed.fragment or parsed.username or parsed.password:
        raise _error("RELAY_OIDC_ISSUER must be an https:// URL without query, fragment or credentials")
    if parsed.scheme != "https" and not (parsed.scheme == "http" and _is_loopback(parsed.hostname)):
        raise _error("RELAY_OIDC_ISSUER must be an https:// URL (http:// only to a loopback address)")
    return issuer


def _seconds(env: dict[str, str], defaults: Mapping[str, str], name: str, *, most: float) -> float:
    raw = env.get(name) or defaults[name]
    try:
        value = float(raw)
    except ValueError:
        raise _error(f"{name} must be a number") from None
    if not math.isfinite(value) or not 0 <= value <= most:
        raise _error(f"{name} must be from 0 to {most:g} seconds")
    return value


def _flag(env: dict[str, str], defaults: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or defaults[name]).strip().lower()
    if raw not in _TRUE + _FALSE:
        raise _error(f"{name} must be true or false")
    return raw in _TRUE


def _role_map(raw: str) -> dict[str, str]:
    """RELAY_OIDC_ROLE_MAP: `group=Role Name;group2=Role`; the role names are checked against the organization's
    roles at registration (custom roles are made at run time)."""
    mapping: dict[str, str] = {}
    for position, entry in enumerate((e.strip() for e in raw.split(";")), 1):
        if not entry:
            continue
        group, sep, role = (part.strip() for part in entry.partition("="))
        if not sep or not group or not role:
            raise _error(f"RELAY_OIDC_ROLE_MAP: entry {position} must be `group=role`")
        if group in mapping:
            raise _error(f"RELAY_OIDC_ROLE_MAP: entry {position} maps a group already mapped")
        mapping[group] = role
    return mapping


def parse_oidc(env: dict[str, str], defaults: Mapping[str, str]) -> dict[str, Any]:
    """The OIDC fields of Settings, checked together: an issuer needs an audience; the console's client id,
    resource, admin e-mails and roles mapping need an issuer; turning the token login off needs SSO."""
    issuer = env.get("RELAY_OIDC_ISSUER") or None
    audiences = _words(env.get("RELAY_OIDC_AUDIENCE") or "")
    client_id = (env.get("RELAY_OIDC_CLIENT_ID") or "").strip() or None
    resource = (env.get("RELAY_OIDC_RESOURCE") or "").strip() or None
    emails = frozenset(e.lower() for e in _words(env.get("RELAY_OIDC_ADMIN_EMAILS") or ""))
    roles_claim = (env.get("RELAY_OIDC_ROLES_CLAIM") or "").strip() or None
    role_map = _role_map(env.get("RELAY_OIDC_ROLE_MAP") or "")
    if issuer is None:
        given = [name for name, value in (("RELAY_OIDC_AUDIENCE", audiences), ("RELAY_OIDC_CLIENT_ID", client_id),
                                          ("RELAY_OIDC_RESOURCE", resource), ("RELAY_OIDC_ADMIN_EMAILS", emails),
                                          ("RELAY_OIDC_ROLES_CLAIM", roles_claim), ("RELAY_OIDC_ROLE_MAP", role_map))
                 if value]
        if given:
            raise _error(f"{', '.join(given)} set without RELAY_OIDC_ISSUER (sign-in is off without an issuer)")
    else:
        check_issuer(issuer)
        if not audiences:
            raise _error("RELAY_OIDC_AUDIENCE must be set when RELAY_OIDC_ISSUER is (the audience Relay's access "
                         "tokens are issued for; a token for another audience is refused)")
    if resource is not None and not urlparse(resource).scheme:
        raise _error("RELAY_OIDC_RESOURCE must be an absolute URI (RFC 8707)")
    if any("@" not in email.strip("@") for email in emails):
        raise _error("RELAY_OIDC_ADMIN_EMAILS must be e-mail addresses, separated by commas or spaces")
    if roles_claim is not None and not _CLAIM_NAME.match(roles_claim):
        raise _error("RELAY_OIDC_ROLES_CLAIM must be a claim name")
    if role_map and roles_claim is None:
        raise _error("RELAY_OIDC_ROLE_MAP needs RELAY_OIDC_ROLES_CLAIM (the claim the groups are read from)")
    scopes = " ".join(_words(env.get("RELAY_OIDC_SCOPES") or defaults["RELAY_OIDC_SCOPES"]))
    if "openid" not in scopes.split():
        raise _error("RELAY_OIDC_SCOPES must include `openid`")
    token_login = _flag(env, defaults, "RELAY_CONSOLE_TOKEN_LOGIN")
    if not token_login and client_id is None:
        raise _error("RELAY_CONSOLE_TOKEN_LOGIN=false needs RELAY_OIDC_CLIENT_ID (SSO): else nobody could sign in "
                     "to the console")
    timeout = _seconds(env, defaults, "RELAY_OIDC_TIMEOUT_S", most=120)
    if timeout == 0:
        raise _error("RELAY_OIDC_TIMEOUT_S must be positive")
    return {
        "oidc_issuer": issuer,
        "oidc_audiences": audiences,
        "oidc_client_id": client_id,
        "oidc_scopes": scopes,
        "oidc_resource": resource,
        "oidc_admin_emails": emails,
        "oidc_roles_claim": roles_claim,
        "oidc_role_map": role_map,
        "oidc_leeway_s": _seconds(env, defaults, "RELAY_OIDC_LEEWAY_S", most=MAX_LEEWAY_S),
        "oidc_jwks_min_refetch_s": _seconds(env, defaults, "RELAY_OIDC_JWKS_MIN_REFETCH_S", most=3600),
        "oidc_timeout_s": timeout,
        "console_token_login": token_login,
    }
