"""Issue 14: the console's actions are audited like the API's: one Operation event each, naming the console
user, the address, the targets and the outcome; a confirmation page alone records nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.console_http import console_session
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

ORG = "local"


def test_console_actions_are_audited(relay: RelayProcess, tmp_path: Path) -> None:
    browser, csrf = console_session(relay, relay.admin_token)
    url = relay.base_url
    assert browser.post(f"{url}/orgs/{ORG}/apps", data={"name": "audited-app", "csrf_token": csrf},
                        timeout=10).status_code == 200
    # A key with a bad name: refused, and recorded as a failure.
    assert browser.post(f"{url}/orgs/{ORG}/keys", data={"name": "bad name!", "csrf_token": csrf},
                        timeout=10).status_code == 200
    # Revoking asks first: the confirmation page records nothing; confirming does.
    relay.api("POST", f"/v2/orgs/{ORG}/tokens/doomed", json={"appNames": ["audited-app"]})
    asked = browser.post(f"{url}/orgs/{ORG}/keys/doomed/revoke", data={"csrf_token": csrf}, timeout=10)
    assert asked.status_code == 200 and "confirmed" in asked.text
    ops = lambda: [(e["operation"], e["status"], e["details"].get("via"))  # noqa: E731
                   for e in relay.api("GET", f"/v2/orgs/{ORG}/audit-logs").json()]
    assert ("deleteToken", "success", "console") not in ops()
    assert browser.post(f"{url}/orgs/{ORG}/keys/doomed/revoke", data={"csrf_token": csrf, "confirmed": "yes"},
                        timeout=10).status_code == 200

    entries = relay.api("GET", f"/v2/orgs/{ORG}/audit-logs").json()
    console = [e for e in entries if e["details"].get("via") == "console"]
    assert [(e["operation"], e["status"], e["target"]["id"]) for e in reversed(console)] == [
        ("registerApp", "success", "audited-app"),
        ("createToken", "failure", "bad name!"),
        ("deleteToken", "success", "doomed"),
    ]
    assert {(e["subject"]["id"], e["sourceIp"]) for e in console} == {("admin", "127.0.0.1")}
    # The API's own call (createToken "doomed") is there too, once: operations are listed, not the key events.
    api = [e for e in entries if e["details"].get("via") == "api"]
    assert [(e["operation"], e["target"]["id"]) for e in api] == [("createToken", "doomed")]
    assert relay.admin_token not in str(entries)
    # The console's audit page shows them.
    page = browser.get(f"{url}/orgs/{ORG}/audit", timeout=10).text
    assert 'data-kind="Operation"' in page and "registerApp" in page and "127.0.0.1" in page
