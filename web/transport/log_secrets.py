"""The last line of defence against secrets in `relay serve`'s log: a filter on every log handler."""

from __future__ import annotations

import logging
import re

from relay.actors.configuration.settings import Settings


class SecretFilter(logging.Filter):
    """The last line of defence, on every log handler of `relay serve`: `dbos_` keys, and the process's own
    secrets (admin token, forward secret, the alert sinks' webhook secret, Slack URL and PagerDuty routing key),
    a URL's credentials, JSON Web Tokens (a person's bearer or ID token) and the authorization code and state of an
    OAuth callback's query (the access log prints request lines) are masked in any record, its traceback
    included."""

    API_KEY = re.compile(r"dbos_[A-Za-z0-9_-]{30,}")
    URL_CREDENTIALS = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^@/\s]*@")  # a database URL's user:password@
    JWT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
    OAUTH_QUERY = re.compile(r"([?&](?:code|state|session_state|id_token_hint)=)[^&\s\"']+")

    def __init__(self, literals: list[str | None]) -> None:
        super().__init__()
        self.literals = sorted({s for s in literals if s and len(s) >= 8}, key=len, reverse=True)

    def clean(self, text: str) -> str:
        for literal in self.literals:
            text = text.replace(literal, "<redacted>")
        if "@" in text:
            text = self.URL_CREDENTIALS.sub(r"\1<redacted>@", text)
        if "eyJ" in text:
            text = self.JWT.sub("<redacted JWT>", text)
        if "=" in text:
            text = self.OAUTH_QUERY.sub(r"\1<redacted>", text)
        return self.API_KEY.sub("dbos_<redacted>", text) if "dbos_" in text else text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = self.clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.clean(record.exc_text)
        return True


def install_secret_filter(settings: Settings, *more: str) -> None:
    secret_filter = SecretFilter([settings.admin_token, settings.forward_secret, settings.alert_webhook_secret,
                                  settings.alert_slack_webhook_url, settings.alert_pagerduty_routing_key, *more])
    for handler in logging.getLogger().handlers:
        handler.addFilter(secret_filter)
