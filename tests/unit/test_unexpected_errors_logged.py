"""Every HTTP 500 is logged with its cause (issue 34, point 4): Flask logs nothing for an exception a handler
takes, and Relay's handler of last resort answers them all, so the handler logs the traceback itself; the log
handlers of `relay serve` (SecretFilter) mask keys, tokens and a URL's credentials in it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from relay.actors.configuration.settings import Settings
from relay.actors.runtime import Runtime
from relay.web.transport.log_secrets import SecretFilter
from relay.web.wsgi import create_app

ADMIN = "unexpected-errors-admin-token"
SECRET_URL = "postgresql://app:Pw-0f-the-db@db.internal:5432/app_sys"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[FlaskClient]:
    rt = Runtime(Settings(data_dir=tmp_path, admin_token=ADMIN, instance_id="relay-unit", port=18092))
    rt.start()
    try:
        app = create_app(rt)

        @app.get("/boom")
        def boom() -> str:
            raise MemoryError(f"while reading {SECRET_URL}")

        yield app.test_client()
    finally:
        rt.stop()


def test_a_500_is_logged_with_its_traceback_and_no_secret(client: FlaskClient,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="relay"):
        answer = client.get("/boom")
    assert answer.status_code == 500 and SECRET_URL not in answer.get_data(as_text=True)
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR and "/boom" in r.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is MemoryError
    masked = SecretFilter([ADMIN])
    assert masked.filter(record)
    text = f"{record.getMessage()}\n{record.exc_text}"
    assert "MemoryError" in text and "Traceback" in text and "Pw-0f-the-db" not in text, text


def test_the_alert_sinks_secrets_are_masked_in_every_handler() -> None:
    """The alert sinks' webhook secret, Slack webhook URL and PagerDuty routing key are the process's secrets too."""
    import logging
    import secrets

    from relay.actors.configuration.settings import Settings
    from relay.web.transport.log_secrets import install_secret_filter

    webhook, routing = secrets.token_hex(16), secrets.token_hex(16)
    slack = f"https://hooks.slack.example/services/{secrets.token_hex(12)}"
    settings = Settings(alert_webhook_secret=webhook, alert_slack_webhook_url=slack,
                        alert_pagerduty_routing_key=routing)
    handler = logging.Handler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        install_secret_filter(settings)
        record = logging.LogRecord("relay", logging.WARNING, __file__, 1, "sent %s %s %s", (webhook, slack, routing),
                                   None)
        for check in handler.filters:
            check.filter(record)  # type: ignore[union-attr]
        text = record.getMessage()
    finally:
        root.removeHandler(handler)
    assert webhook not in text and slack not in text and routing not in text, text
    assert text.count("<redacted>") == 3, text


def test_person_tokens_and_oauth_callback_queries_are_masked() -> None:
    """Issue 31: a JWT (a person's bearer or ID token) anywhere in a record, and the code and state of an OAuth
    callback in an access-log request line, never reach the log; other query values stay readable."""
    import secrets

    from relay.web.transport.log_secrets import SecretFilter

    jwt = ".".join(["eyJhbGciOiJSUzI1NiJ9", "eyJzdWIiOiJhbGljZSJ9", secrets.token_urlsafe(40)])
    code, state = secrets.token_urlsafe(30), secrets.token_urlsafe(20)
    line = f'"GET /oauth/callback?code={code}&state={state}&iss=x HTTP/1.1" 302 -; token {jwt}; /apps?limit=5'
    cleaned = SecretFilter([]).clean(line)
    assert code not in cleaned and state not in cleaned and jwt.split(".")[2] not in cleaned, cleaned
    assert "code=<redacted>&state=<redacted>&iss=x" in cleaned and "<redacted JWT>" in cleaned, cleaned
    assert "/apps?limit=5" in cleaned
