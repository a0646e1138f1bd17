"""Name rules of the Conductor API v2 (orgName, appName, token names)."""

import re

from relay.events.errors import InvalidValueError

ORG_NAME = re.compile(r"^[a-z0-9_]{3,30}$")
APP_NAME = re.compile(r"^[a-z0-9_-]{3,30}$")
TOKEN_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def check_org_name(name: str) -> str:
    if not isinstance(name, str) or not ORG_NAME.fullmatch(name):
        raise InvalidValueError("organization name must be 3-30 characters of [a-z0-9_]")
    return name


def check_app_name(name: str) -> str:
    if not isinstance(name, str) or not APP_NAME.fullmatch(name):
        raise InvalidValueError("application name must be 3-30 characters of [a-z0-9-_]")
    return name


def check_token_name(name: str) -> str:
    if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name):
        raise InvalidValueError("token name must be 1-64 characters of [A-Za-z0-9_.-]")
    return name
