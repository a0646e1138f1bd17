"""Name rules of the Conductor API v2 (orgName, appName, token names)."""

import re

from relay.events.errors import InvalidValueError

ORG_NAME = re.compile(r"^[a-z0-9_]{3,30}$")
APP_NAME = re.compile(r"^[a-z0-9_-]{3,30}$")
TOKEN_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
USER_NAME = re.compile(r"^[a-z0-9_]{3,30}$")  # RegisterUserInputBody.name
ROLE_NAME = re.compile(r"^[a-zA-Z0-9_]{3,30}$")  # CreateRoleInputBody.name (custom roles)
# An e-mail domain as requestDomainClaim takes it: 4-253 characters, labels of letters, digits and '-', a dot.
DOMAIN_NAME = re.compile(r"^(?=.{4,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def check_org_name(name: str) -> str:
    if not isinstance(name, str) or not ORG_NAME.fullmatch(name):
        raise InvalidValueError("organization name must be 3-30 characters of [a-z0-9_]")
    return name


def check_app_name(name: str) -> str:
    if not isinstance(name, str) or not APP_NAME.fullmatch(name):
        raise InvalidValueError("application name must be 3-30 characters of [a-z0-9-_]")
    return name


def check_user_name(name: str) -> str:
    if not isinstance(name, str) or not USER_NAME.fullmatch(name):
        raise InvalidValueError("user name must be 3-30 characters of [a-z0-9_]")
    return name


def check_role_name(name: str) -> str:
    if not isinstance(name, str) or not ROLE_NAME.fullmatch(name):
        raise InvalidValueError("role name must be 3-30 characters of [a-zA-Z0-9_]")
    return name


def check_domain(domain: str) -> str:
    """An e-mail domain, lower-cased (``Example.COM`` is ``example.com``)."""
    lowered = domain.lower() if isinstance(domain, str) else ""
    if not DOMAIN_NAME.fullmatch(lowered):
        raise InvalidValueError("domain must be an e-mail domain such as example.com (4-253 characters)")
    return lowered


def check_token_name(name: str) -> str:
    if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name):
        raise InvalidValueError("token name must be 1-64 characters of [A-Za-z0-9_.-]")
    return name
