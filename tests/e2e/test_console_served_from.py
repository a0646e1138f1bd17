"""Every console page says which path answered it (README, data plane: "every console page says so too"):
a connected executor, the application's system database, neither (the page says why), or Relay's own records.

Walks the console as a logged-in admin from its first page, following every console link (the `shop`
application's tabs and workflows, the organization's pages), and checks each page carries one marker.
Runs against the same `relay serve` and `shop` executor as test_console.py (tests/e2e/conftest.py).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest

from tests.e2e.console_support import APP
from tests.support.console_http import console_session
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration

MAX_PAGES = 300
_LINK = re.compile(r'href="([^"#]+)"')
_MARKER = re.compile(r'data-served-from="(\w+)"')
# Links that are not console pages: files, the API, logging in and out.
NOT_PAGES = re.compile(r"^/(static|console/static|logout|login|docs|openapi|v2|relay/v1|metrics|healthz|readyz)\b"
                       r"|\.json$")
# Every kind of console page, as a path pattern: the walk must have reached each one.
KINDS = {
    "applications": r"/orgs/local/apps",
    "overview": rf"/orgs/local/apps/{APP}",
    "workflows": rf"/orgs/local/apps/{APP}/workflows",
    "workflow": rf"/orgs/local/apps/{APP}/workflows/[^/]+",
    "queues": rf"/orgs/local/apps/{APP}/queues",
    "schedules": rf"/orgs/local/apps/{APP}/schedules",
    "versions": rf"/orgs/local/apps/{APP}/versions",
    "recoveries": rf"/orgs/local/apps/{APP}/recoveries",
    "alerts": rf"/orgs/local/apps/{APP}/alerts",
    "settings": rf"/orgs/local/apps/{APP}/settings",
    "keys": r"/orgs/local/keys",
    "audit": r"/orgs/local/audit",
    "cluster": r"/orgs/local/cluster",
}


def test_every_console_page_says_which_path_answered(relay: RelayProcess, shop: dict[str, Any]) -> None:
    del shop
    session, _csrf = console_session(relay)
    queue, seen, markers = ["/"], set(), {}
    while queue and len(seen) < MAX_PAGES:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        answer = session.get(relay.base_url + path, timeout=30)
        assert answer.status_code == 200, f"{path}: {answer.status_code}"
        page = urlsplit(answer.url).path
        found = _MARKER.findall(answer.text)
        assert len(found) == 1, f"{page} says which path answered {len(found)} times"
        markers[page] = found[0]
        for href in _LINK.findall(answer.text):
            link = urlsplit(urljoin(answer.url, href.replace("&amp;", "&")))
            if link.netloc == urlsplit(relay.base_url).netloc and not NOT_PAGES.search(link.path):
                queue.append(link.path)
    missing = [kind for kind, pattern in KINDS.items() if not any(re.fullmatch(pattern, p) for p in markers)]
    assert missing == [], f"the walk never reached: {missing}"
    # The pages the README's claim missed say that Relay's own records answered them; the executor's pages say so.
    for tab in ("/alerts", "/settings", "/recoveries"):
        assert markers[f"/orgs/local/apps/{APP}{tab}"] == "relay", tab
    assert markers[f"/orgs/local/apps/{APP}"] == "executor"  # its charts: the executors table is Relay's own
    assert markers[f"/orgs/local/apps/{APP}/workflows"] == "executor"
