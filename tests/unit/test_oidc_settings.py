"""The RELAY_OIDC_* settings (actors/configuration/oidc.py): off by default, parsed, and refused at startup with a
message naming the variable when they cannot work together."""

from __future__ import annotations

import pytest

from relay.actors.configuration.settings import ENV_SETTINGS, ConfigError, Settings

ISSUER = {"RELAY_OIDC_ISSUER": "https://login.example.com/realms/acme", "RELAY_OIDC_AUDIENCE": "relay"}


def test_oauth_is_off_by_default_and_the_defaults_are_the_tables() -> None:
    settings = Settings.from_env({})
    assert settings.oidc_issuer is None and not settings.oidc_enabled
    assert (settings.oidc_audiences, settings.oidc_client_id, settings.oidc_admin_emails) == ((), None, frozenset())
    assert (settings.oidc_scopes, settings.oidc_leeway_s, settings.oidc_jwks_min_refetch_s,
            settings.oidc_timeout_s, settings.console_token_login) == ("openid email profile", 30, 30, 5, True)
    assert Settings().oidc_scopes == settings.oidc_scopes and Settings().console_token_login
    names = {setting.name for setting in ENV_SETTINGS}
    assert {"RELAY_OIDC_ISSUER", "RELAY_OIDC_AUDIENCE", "RELAY_OIDC_CLIENT_ID", "RELAY_OIDC_SCOPES",
            "RELAY_OIDC_RESOURCE", "RELAY_OIDC_ADMIN_EMAILS", "RELAY_OIDC_ROLES_CLAIM", "RELAY_OIDC_ROLE_MAP",
            "RELAY_OIDC_LEEWAY_S", "RELAY_OIDC_JWKS_MIN_REFETCH_S", "RELAY_OIDC_TIMEOUT_S",
            "RELAY_CONSOLE_TOKEN_LOGIN"} <= names


def test_every_setting_is_parsed() -> None:
    settings = Settings.from_env({
        **ISSUER, "RELAY_OIDC_AUDIENCE": "relay, https://relay.example.com  api",
        "RELAY_OIDC_CLIENT_ID": "relay-console", "RELAY_OIDC_SCOPES": "openid  email groups",
        "RELAY_OIDC_RESOURCE": "https://relay.example.com", "RELAY_OIDC_ADMIN_EMAILS": "Ada@Example.com bob@x.org",
        "RELAY_OIDC_ROLES_CLAIM": "realm_access.roles",
        "RELAY_OIDC_ROLE_MAP": "relay-admins=Organization Admin; viewers=viewer;",
        "RELAY_OIDC_LEEWAY_S": "10", "RELAY_OIDC_JWKS_MIN_REFETCH_S": "0.5", "RELAY_OIDC_TIMEOUT_S": "2",
        "RELAY_CONSOLE_TOKEN_LOGIN": "false",
    })
    assert settings.oidc_enabled
    assert settings.oidc_audiences == ("relay", "https://relay.example.com", "api")
    assert (settings.oidc_client_id, settings.oidc_scopes, settings.oidc_resource) == (
        "relay-console", "openid email groups", "https://relay.example.com")
    assert settings.oidc_admin_emails == frozenset({"ada@example.com", "bob@x.org"})
    assert settings.oidc_roles_claim == "realm_access.roles"
    assert settings.oidc_role_map == {"relay-admins": "Organization Admin", "viewers": "viewer"}
    assert (settings.oidc_leeway_s, settings.oidc_jwks_min_refetch_s, settings.oidc_timeout_s) == (10, 0.5, 2)
    assert settings.console_token_login is False


@pytest.mark.parametrize("issuer", ["http://127.0.0.1:8080", "http://localhost:9000/oidc", "http://[::1]:1/",
                                    "https://login.microsoftonline.com/tenant/v2.0"])
def test_an_https_issuer_or_a_loopback_http_one_is_accepted(issuer: str) -> None:
    assert Settings.from_env({**ISSUER, "RELAY_OIDC_ISSUER": issuer}).oidc_issuer == issuer


@pytest.mark.parametrize(("env", "message"), [
    ({"RELAY_OIDC_ISSUER": "https://idp.example.com"}, "RELAY_OIDC_AUDIENCE must be set when RELAY_OIDC_ISSUER"),
    ({**ISSUER, "RELAY_OIDC_ISSUER": "http://idp.example.com"}, "RELAY_OIDC_ISSUER must be an https:// URL"),
    ({**ISSUER, "RELAY_OIDC_ISSUER": "idp.example.com"}, "RELAY_OIDC_ISSUER must be an https:// URL"),
    ({**ISSUER, "RELAY_OIDC_ISSUER": "https://idp.example.com/?tenant=1"}, "without query"),
    ({**ISSUER, "RELAY_OIDC_ISSUER": "https://user:pw@idp.example.com"}, "credentials"),
    ({"RELAY_OIDC_AUDIENCE": "relay"}, "RELAY_OIDC_AUDIENCE set without RELAY_OIDC_ISSUER"),
    ({"RELAY_OIDC_CLIENT_ID": "c", "RELAY_OIDC_ADMIN_EMAILS": "a@b.c"},
     "RELAY_OIDC_CLIENT_ID, RELAY_OIDC_ADMIN_EMAILS set without RELAY_OIDC_ISSUER"),
    ({**ISSUER, "RELAY_OIDC_ADMIN_EMAILS": "ada"}, "RELAY_OIDC_ADMIN_EMAILS must be e-mail addresses"),
    ({**ISSUER, "RELAY_OIDC_ROLE_MAP": "a=b"}, "RELAY_OIDC_ROLE_MAP needs RELAY_OIDC_ROLES_CLAIM"),
    ({**ISSUER, "RELAY_OIDC_ROLES_CLAIM": "g", "RELAY_OIDC_ROLE_MAP": "a=b;oops"}, "entry 2 must be `group=role`"),
    ({**ISSUER, "RELAY_OIDC_ROLES_CLAIM": "g", "RELAY_OIDC_ROLE_MAP": "a=b;a=c"}, "a group already mapped"),
    ({**ISSUER, "RELAY_OIDC_ROLES_CLAIM": "groups here"}, "RELAY_OIDC_ROLES_CLAIM must be a claim name"),
    ({**ISSUER, "RELAY_OIDC_SCOPES": "email profile"}, "RELAY_OIDC_SCOPES must include `openid`"),
    ({**ISSUER, "RELAY_OIDC_RESOURCE": "relay"}, "RELAY_OIDC_RESOURCE must be an absolute URI"),
    ({**ISSUER, "RELAY_OIDC_LEEWAY_S": "3600"}, "RELAY_OIDC_LEEWAY_S must be from 0 to 300 seconds"),
    ({**ISSUER, "RELAY_OIDC_LEEWAY_S": "nan"}, "RELAY_OIDC_LEEWAY_S must be from 0"),
    ({**ISSUER, "RELAY_OIDC_JWKS_MIN_REFETCH_S": "soon"}, "RELAY_OIDC_JWKS_MIN_REFETCH_S must be a number"),
    ({**ISSUER, "RELAY_OIDC_TIMEOUT_S": "0"}, "RELAY_OIDC_TIMEOUT_S must be positive"),
    ({"RELAY_CONSOLE_TOKEN_LOGIN": "nope"}, "RELAY_CONSOLE_TOKEN_LOGIN must be true or false"),
    ({**ISSUER, "RELAY_CONSOLE_TOKEN_LOGIN": "off"}, "RELAY_CONSOLE_TOKEN_LOGIN=false needs RELAY_OIDC_CLIENT_ID"),
])
def test_settings_that_cannot_work_stop_the_start_with_a_clear_message(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(env)
    assert message in str(caught.value)
    assert "pw" not in str(caught.value) and "tenant=1" not in str(caught.value)  # never the value
