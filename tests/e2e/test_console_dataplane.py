"""Issue 36: the console of an application Relay sees only through its system database. A real app on the
current DBOS release (dbos 3.4.0, tests/integration/executor_apps/console_dataplane_app.py, run from
.venv-dbos-current) writes its PostgreSQL system database and never connects; a real `relay serve` reads it
through its data plane in read mode; pages are read over HTTP and in Chromium.

- the overview's figures equal a direct GROUP BY on the app's workflow_status, and each links to a list of
  exactly the workflows it counts;
- search finds a substring of an ID or a name, case-insensitively, marks it, and takes `%` literally;
- read mode: no write action on the pages, the reason said instead, and a change posted anyway is refused with
  nothing changed;
- a failed workflow's error (the app's own exception class) is shown decoded, and a crafted pickle in the
  database runs nothing when its page is shown;
- a running workflow's page follows it: steps appear and its status and output change without a reload, and a
  hidden tab asks nothing.
"""

from __future__ import annotations

import base64
import os
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
import requests
from playwright.sync_api import Browser, Page, expect

from tests.e2e.axe_audit import violations
from tests.e2e.console_support import WAIT_S, login, shot
from tests.integration.sdk_apps import ready_info
from tests.support import pg
from tests.support.console_http import console_session, csrf_token
from tests.support.ports import wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

APP_SCRIPT = REPO_ROOT / "tests" / "integration" / "executor_apps" / "console_dataplane_app.py"
CURRENT_PYTHON = REPO_ROOT / ".venv-dbos-current" / "bin" / "python"
ORG = "local"
APP = "dpconsole"
URL_ENV = "DPCONSOLE_SYSTEM_DATABASE_URL"
PAGES = f"/orgs/{ORG}/apps/{APP}"


class CurrentSdkApp(ExecutorProcess):
    def command(self) -> list[str]:
        if not CURRENT_PYTHON.exists():
            raise AssertionError(f"{CURRENT_PYTHON} is missing: `make test-deps` builds .venv-dbos-current")
        return [str(CURRENT_PYTHON), "-u", str(self.script), *self.args]


@dataclass
class World:
    relay: RelayProcess
    app: CurrentSdkApp
    database: str
    ids: dict[str, str]
    control_port: int

    def open_gate(self, label: str) -> None:
        answer = requests.post(f"http://127.0.0.1:{self.control_port}/open", json={"label": label}, timeout=10)
        assert answer.status_code == 200, answer.text

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database) as connection:
            return list(connection.execute(query, args).fetchall())

    def page(self, session: requests.Session, path: str) -> str:
        answer = session.get(self.relay.base_url + path, timeout=30)
        assert answer.status_code == 200, f"{path}: {answer.status_code} {answer.text[:500]}"
        return answer.text


@pytest.fixture(scope="module")
def world(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    database = pg.create_database(pg_server)
    relay = RelayProcess(tmp_path_factory.mktemp("relay-data"), env={
        URL_ENV: database, "RELAY_DATA_PLANE_REFERENCES": f"{ORG}/{APP}=env:{URL_ENV}"})
    relay.remember_secret(database, "system database URL")
    app = CurrentSdkApp(APP_SCRIPT, name="dpconsole-app", cwd=tmp_path_factory.mktemp("dpconsole-app"),
                        env={"APP_NAME": APP, "SYSTEM_DATABASE_URL": database, "APP_VERSION": "v1"})
    try:
        app.start()
        relay.start()
        ready = ready_info(app, timeout=90)
        assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{APP}", json={}).status_code == 204
        configured = relay.api("PUT", f"/relay/v1/orgs/{ORG}/apps/{APP}/data-plane",
                               json={"systemDatabaseUrlFrom": f"env:{URL_ENV}", "mode": "read"})
        assert configured.status_code == 200 and configured.json()["state"]["status"] == "ready", configured.text
        world = World(relay, app, database, ready["workflows"], ready["control_port"])
        # The queue's one slot taken (queued-0 dequeued by the app's queue runner): the counts are settled.
        wait_until(lambda: world.sql("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = 'queued-0'")
                   == [("PENDING",)], WAIT_S, interval=0.1, message="the app never dequeued queued-0")
        yield world
    finally:
        app.kill()
        relay.stop()
        pg.drop_database(database)


@pytest.fixture(scope="module")
def session(world: World) -> requests.Session:
    return console_session(world.relay)[0]


_FIGURE = re.compile(r'<a class="figure[^"]*" href="([^"]+)" data-figure="([^"]+)"><b>([^<]+)</b>')
_STATUS_LINK = re.compile(r'<a href="([^"]+)" data-status="(\w+)">.*?<b>([^<]+)</b></a>', re.DOTALL)


def _count(text: str) -> int:
    return int(text.replace("\u202f", ""))


def _listed(world: World, session: requests.Session, href: str) -> set[str]:
    page = world.page(session, href.replace("&amp;", "&"))
    assert 'data-served-from="database"' in page
    return set(re.findall(r'<tr data-workflow="([^"]+)"', page))


def test_the_overview_counts_in_the_database_and_links_to_what_it_counts(world: World,
                                                                          session: requests.Session) -> None:
    expected = dict(world.sql("SELECT status, count(*) FROM dbos.workflow_status GROUP BY status"))
    assert expected.get("ERROR") == 1 and expected.get("ENQUEUED") == 2, expected  # the scenario's, settled
    page = world.page(session, PAGES)
    assert 'data-served-from="database"' in page
    assert "none is connected" not in page
    by_status = {status: (_count(n), href) for href, status, n in _STATUS_LINK.findall(page)}
    assert {s: n for s, (n, _) in by_status.items()} == expected
    for status, (count, href) in by_status.items():
        ids = _listed(world, session, href)
        assert len(ids) == count, (status, ids)
        assert {str(r[0]) for r in world.sql("SELECT workflow_uuid FROM dbos.workflow_status WHERE status = %s",
                                             status)} == ids
    figures = {label: (_count(n), href) for href, label, n in _FIGURE.findall(page)}
    assert figures["total"][0] == sum(expected.values())
    assert figures["in flight"][0] == expected.get("PENDING", 0)
    assert figures["queued"][0] == expected["ENQUEUED"] == len(_listed(world, session, figures["queued"][1]))
    for label in ("failed in the last hour", "failed in the last 24 h"):
        count, href = figures[label]
        assert count == 1 and _listed(world, session, href) == {world.ids["checkout"]}
        assert "startTime" in parse_qs(urlsplit(href.replace("&amp;", "&")).query)
    queue_row = re.search(r'<tr data-queue="urgent_queue">(.*?)</tr>', page, re.DOTALL)
    assert queue_row is not None, "the queue with work is not among the top queues"
    assert [_count(n) for n in re.findall(r'<a href="[^"]+">([^<]+)</a>', queue_row.group(1))] == [2, 1]
    assert world.ids["stepper"] in page  # recent workflows
    for key in ("7d", "30d"):
        first = world.page(session, f"{PAGES}?range={key}")
        assert 'aria-label="throughput by terminal status"' in first and 'data-testid="series-age"' not in first
        # A long range's chart is kept a minute (web/console/series_cache.py): the page says how old it is.
        again = world.page(session, f"{PAGES}?range={key}")
        assert 'data-testid="series-age"' in again and 'aria-label="throughput by terminal status"' in again


def test_search_finds_a_substring_of_an_id_or_a_name(world: World, session: requests.Session) -> None:
    def found(text: str) -> tuple[set[str], str]:
        page = world.page(session, f"{PAGES}/workflows?q={text}")
        assert 'data-served-from="database"' in page and 'data-testid="search-scope"' in page
        return set(re.findall(r'<tr data-workflow="([^"]+)"', page)), page

    ids, page = found("ALPHA-")
    assert ids == {world.ids[f"greet{n}"] for n in range(3)}
    assert '<mark class="hit">alpha-</mark>' in page and "searched in the application's system database" in page
    assert found("eta-check")[0] == {world.ids["checkout"]}
    by_name, page = found("ckou")  # the name `checkout`, not its id
    assert by_name == {world.ids["checkout"]} and 'che<mark class="hit">ckou</mark>t' in page
    assert found("ste")[0] >= {world.ids["stepper"]}
    assert found("%25")[0] == set()  # a literal %, not a wildcard
    assert found("queued&status=ENQUEUED")[0] == {world.ids["queued1"], world.ids["queued2"]}


def test_read_mode_shows_no_write_action_and_refuses_one(world: World, session: requests.Session) -> None:
    checkout = world.ids["checkout"]
    page = world.page(session, f"{PAGES}/workflows/{checkout}")
    assert 'data-testid="read-only"' in page and "read mode" in page
    assert "Delete workflow" not in page and "Fork workflow" not in page
    assert 'data-testid="workflow-actions"' not in page
    for path in ("/workflows", "/schedules", "/versions"):
        listed = world.page(session, PAGES + path)
        assert 'data-testid="read-only"' in listed, path
        assert "Cancel selected" not in listed and "Make latest" not in listed
    token = csrf_token(page)
    answer = session.post(f"{world.relay.base_url}{PAGES}/workflow-actions/delete", timeout=30,
                          data={"csrf_token": token, "workflow_id": checkout, "confirmed": "yes"})
    assert answer.status_code == 200 and "read mode" in answer.text
    assert world.sql("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = %s", checkout) == [(1,)]


class Crafted:
    """Unpickled normally, runs a shell command that creates a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_errors_are_shown_decoded_and_a_crafted_pickle_runs_nothing(world: World, session: requests.Session,
                                                                    tmp_path: Path) -> None:
    page = world.page(session, f"{PAGES}/workflows/{world.ids['checkout']}")
    assert "PaymentDeclined" in page and "card declined for order-beta" in page
    assert re.search(r"code.{0,80}51", page, re.DOTALL), "the exception's attribute is not shown"
    assert "Stored form (pickle)" in page  # the raw text one click away
    marker = tmp_path / "pwned"
    crafted = base64.b64encode(pickle.dumps(Crafted(marker))).decode()
    victim = world.ids["greet2"]
    with psycopg.connect(world.database) as connection:
        for table in ("workflow_status", "workflow_output"):  # dbos 3.4 reads workflow_output (migration 109)
            connection.execute(f"UPDATE dbos.{table} SET output = %s WHERE workflow_uuid = %s", (crafted, victim))
    shown = world.page(session, f"{PAGES}/workflows/{victim}")
    assert "touch " in shown and "system" in shown  # what it would have run, shown as data
    api = world.relay.api("GET", f"/v2/orgs/{ORG}/apps/{APP}/workflows/{victim}")
    assert api.status_code == 200 and api.json()["output"] == crafted  # the API answers as stored
    assert not marker.exists(), "a pickle in the system database ran code in Relay"


def test_needs_attention_asks_the_data_plane(world: World, session: requests.Session) -> None:
    """Issue 33, point 3 (docs/adr/0054): with no executor, the system database answers Needs attention."""
    page = world.page(session, f"/orgs/{ORG}/attention?stuckAfterSecs=1")
    assert 'data-served-from="many"' in page and f"{APP} (its system database)" in page
    assert f'data-workflow="{world.ids["checkout"]}"' in page  # the one failure, newest first
    stuck = re.search(rf'<tr data-app="{APP}" data-queue="urgent_queue">(.*?)</tr>', page, re.DOTALL)
    assert stuck is not None and '<td class="num">2</td>' in stuck.group(1)  # its two ENQUEUED workflows
    # No executor of v1 ever connected: the version's waiting work is stranded.
    assert f'<tr data-app="{APP}" data-version="v1">' in page and "never, on this Relay" in page
    assert "Nothing: every configured data plane is ready." in page
    assert 'data-testid="attention-problems"' not in page
    assert world.database not in page


def test_a_running_workflow_page_follows_it(world: World, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_S * 1000)
    asked: list[str] = []
    try:
        page: Page = context.new_page()
        page.on("request", lambda r: asked.append(r.url) if "/workflow-changes/" in r.url else None)
        login(page, world.relay, world.relay.admin_token)
        page.goto(world.relay.base_url + f"{PAGES}/workflows/{world.ids['stepper']}")
        page.evaluate("window.loadedOnce = true")
        steps = page.locator("[data-testid=steps] ol.timeline > li")
        expect(page.locator("[data-testid=workflow-status]")).to_have_text("PENDING")
        expect(steps).to_have_count(1)
        world.open_gate("live-0")
        expect(steps).to_have_count(2)
        world.open_gate("live-1")
        expect(steps).to_have_count(3)
        expect(page.locator("[data-testid=workflow-status]")).to_have_text("SUCCESS")
        expect(page.locator("h2.wfid .badge")).to_have_text("SUCCESS")
        expect(page.locator("[data-testid=output]")).to_contain_text("live finished")
        expect(page.locator("[data-follow-state]")).to_have_attribute("data-follow-state", "ended")
        assert page.evaluate("window.loadedOnce") is True  # no reload happened
        shot(page, "70-dataplane-workflow-followed")
        ended_at = len(asked)
        assert all("steps=" in url for url in asked)
        # After the end it asks nothing more; a page of a running workflow in a hidden tab asks nothing either.
        page.goto(world.relay.base_url + f"{PAGES}/workflows/{world.ids['queued1']}")
        expect(page.locator("[data-follow-state]")).to_have_attribute("data-follow-state", "following")
        page.evaluate("Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
                      "document.dispatchEvent(new Event('visibilitychange'))")
        hidden_at = len(asked)
        root = page.locator("[data-follow-state]")
        expect(root).to_have_attribute("data-follow-state", "hidden")
        wait_until(lambda: int(root.get_attribute("data-skipped") or 0) >= 2, WAIT_S, interval=0.2,
                   message="the hidden page's timer never ran")
        assert len(asked) - hidden_at <= 1  # at most the one in flight when the tab was hidden
        assert ended_at >= 2
    finally:
        context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_overview_in_chromium(world: World, browser: Browser, theme: str) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=theme)
    context.set_default_timeout(WAIT_S * 1000)
    try:
        page = context.new_page()
        login(page, world.relay, world.relay.admin_token)
        page.goto(world.relay.base_url + PAGES)
        expect(page.locator("[data-testid=figures] a.figure")).to_have_count(5)
        expect(page.locator("[data-testid=throughput] svg")).to_be_visible()
        expect(page.locator("[data-testid=top-queues]")).to_contain_text("urgent_queue")
        shot(page, f"71-dataplane-overview-{theme}")
        problems = violations(page, "data-plane overview")
        page.click("a.figure[data-figure='failed in the last 24 h']")
        expect(page.locator("[data-testid=workflows] tbody tr")).to_have_count(1)
        expect(page.locator("select[name=status]")).to_have_value("ERROR")
        expect(page.locator("input[name=startTime]")).to_have_value(re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d"))
        page.click("[data-testid=filters] button[type=submit]")  # filtering again keeps the linked window
        expect(page.locator("[data-testid=workflows] tbody tr")).to_have_count(1)
        expect(page).to_have_url(re.compile(r"startTime=\d{4}-"))
        page.goto(world.relay.base_url + f"{PAGES}/workflows")
        page.fill("[data-testid=search]", "alpha")
        page.press("[data-testid=search]", "Enter")
        expect(page).to_have_url(re.compile(r"[?&]q=alpha"))  # the search is in the URL: a deep link
        expect(page.locator("[data-testid=workflows] mark.hit")).to_have_count(3)
        shot(page, f"72-dataplane-search-{theme}")
        problems += violations(page, "search hits marked")
        page.goto(world.relay.base_url + f"{PAGES}/workflows/{world.ids['checkout']}")
        expect(page.locator("[data-testid=read-only]")).to_be_visible()
        shot(page, f"73-dataplane-error-{theme}")
        problems += violations(page, "read-only workflow with an error")
        assert not problems, "\n".join(problems)
    finally:
        context.close()
