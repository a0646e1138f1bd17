"""The console's change feed (projections/change_feed.py) and its stream (web/console/live.py): topics from the
audit view of what the runner committed, offered to the subscriptions whose patterns match; the stream checks the
page's permissions, names areas only, is bounded per instance and ends when the instance stops."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient

from relay.actors.runtime import Runtime
from relay.events.application import App
from relay.events.executor import Executor
from relay.events.refs import app_ref, executor_ref
from relay.projections.change_feed import (
    EVERYTHING,
    MAX_GAP,
    ChangeFeed,
    FeedClosedError,
    FeedFullError,
    matches,
    topics_of,
)
from tests.unit.store_cases import INFO_1, at
from tests.unit.test_console_alerts import ADMIN, OTHER_KEY, login, served

__all__ = ["served"]  # the fixture, shared with the alerts page's tests


def test_topics_name_areas_of_an_org_and_app_only() -> None:
    topics = topics_of([("Executor", "acme", "shop"), ("RelayInstance", None, None), ("Organization", "acme", None)])
    assert topics == {("audit", "acme", "shop"), ("executors", "acme", "shop"), ("recoveries", "acme", "shop"),
                      ("audit", "", ""), ("instances", "", ""), ("executors", "", ""), ("audit", "acme", "")}
    assert matches(("executors", "acme", "shop"), ("executors", "acme", "shop"))
    assert not matches(("executors", "acme", "shop"), ("executors", "acme", "other"))
    assert not matches(("executors", "acme", "shop"), ("recoveries", "acme", "shop"))
    assert matches(("audit", "acme", None), ("audit", "acme", "other"))
    assert not matches(("audit", "acme", None), ("audit", "evil", "shop"))
    assert matches(("incidents", "acme", "shop"), EVERYTHING)


def test_the_feed_reads_the_audit_view_only_for_subscribers() -> None:
    asked: list[tuple[int, int]] = []

    def touched(after: int, through: int) -> list[tuple[str, str | None, str | None]]:
        asked.append((after, through))
        return [("Executor", "acme", "shop"), ("Incident", "acme", "other")]

    feed = ChangeFeed()
    feed.position = 10
    feed.advance(20, touched)  # nobody listens: nothing read, the position moves on
    assert asked == [] and feed.position == 20
    shop = feed.subscribe([("executors", "acme", "shop"), ("incidents", "acme", "shop")])
    feed.advance(20, touched)  # nothing new
    assert asked == [] and shop.wait(0) == set()
    feed.advance(25, touched)
    assert asked == [(20, 25)] and shop.wait(0) == {"executors"}  # not the other app's incident
    feed.advance(25 + MAX_GAP + 1, touched)  # far behind: everything changed, nothing read
    assert asked == [(20, 25)] and shop.wait(0) == {"executors", "incidents"}


def test_the_feed_is_bounded_and_ends_every_stream_when_closed() -> None:
    feed = ChangeFeed(max_streams=2)
    first, second = feed.subscribe([("app", "acme", None)]), feed.subscribe([("app", "acme", None)])
    with pytest.raises(FeedFullError):
        feed.subscribe([("app", "acme", None)])
    feed.unsubscribe(second)
    feed.subscribe([("app", "acme", None)])
    feed.close()
    assert first.wait(5) is None  # at once, not after the timeout
    with pytest.raises(FeedClosedError):
        feed.subscribe([("app", "acme", None)])


def _events(client: FlaskClient, url: str) -> tuple[int, Iterator[bytes]]:
    response = client.get(url, buffered=False)
    return response.status_code, iter(response.response)


def test_the_stream_checks_the_pages_permissions(served: tuple[Runtime, FlaskClient]) -> None:
    _, client = served
    status, chunks = _events(client, "/orgs/acme/live?areas=executors,incidents&app=shop")
    assert status == 200
    first = next(chunks).decode()
    assert first.startswith("retry: 1000\n") and '"areas":["executors","incidents"]' in first
    other = client.application.test_client()
    login(other, OTHER_KEY)  # application.read of 'empty' only
    assert other.get("/orgs/acme/live?areas=executors&app=shop").status_code == 403
    assert other.get("/orgs/acme/live?areas=audit").status_code == 403  # no organization.read
    assert other.get("/orgs/acme/live?areas=instances").status_code == 403
    assert other.get("/orgs/acme/live?areas=executors&app=empty", buffered=False).status_code == 200
    assert client.get("/orgs/acme/live?areas=executors").status_code == 400  # which app?
    assert client.get("/orgs/acme/live?areas=secrets&app=shop").status_code == 400
    assert client.get("/orgs/acme/live").status_code == 400
    assert client.application.test_client().get("/orgs/acme/live?areas=audit").status_code in (302, 303)


def test_a_stream_says_which_areas_changed_and_nothing_else(served: tuple[Runtime, FlaskClient]) -> None:
    rt, client = served
    status, chunks = _events(client, "/orgs/acme/live?areas=executors,recoveries&app=shop")
    assert status == 200 and b"ready" in next(chunks)
    rt.runner.feed.publish({("executors", "acme", "empty"), ("audit", "acme", "shop")})  # not its topics
    rt.runner.feed.publish({("recoveries", "acme", "shop")})
    change = next(chunks).decode()
    assert change == 'event: change\ndata: {"areas":["recoveries"]}\n\n'
    assert ADMIN not in change and OTHER_KEY not in change
    rt.runner.feed.close()  # the instance stops: the stream ends
    assert next(chunks, None) is None
    assert rt.runner.feed.streams == 0


def test_beyond_the_bound_a_stream_is_refused_with_503(served: tuple[Runtime, FlaskClient]) -> None:
    rt, client = served
    rt.runner.feed.max_streams = 1
    status, chunks = _events(client, "/orgs/acme/live?areas=app&app=shop")
    assert status == 200 and b"ready" in next(chunks)
    refused = client.get("/orgs/acme/live?areas=app&app=shop")
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "30"
    assert "live streams already" in refused.get_data(as_text=True)


def test_the_runner_publishes_what_its_batches_committed(served: tuple[Runtime, FlaskClient]) -> None:
    rt, _ = served
    rt.views.catch_up(reached=rt.runner._publish)
    subscription = rt.runner.feed.subscribe([("app", "acme", "late"), ("audit", "acme", None)])
    rt.log.ensure(app_ref("acme", "late"), lambda: App.register("acme", "late", at(5)))
    rt.views.catch_up(reached=rt.runner._publish)  # as the runner's pass does
    assert subscription.wait(0) == {"app", "audit"}
    assert json.dumps(sorted(subscription.wait(0) or ())) == "[]"  # told once


@pytest.mark.parametrize(("path", "areas"), [
    ("/orgs/acme/apps/shop", "executors,recoveries,app"),
    ("/orgs/acme/apps/shop/recoveries", "recoveries"),
    ("/orgs/acme/apps/shop/alerts", "incidents,alerts"),
    ("/orgs/acme/audit", "audit"),
    ("/orgs/acme/cluster", "instances"),
])
def test_every_live_page_follows_its_areas(served: tuple[Runtime, FlaskClient], path: str, areas: str) -> None:
    _, client = served
    html = client.get(path).get_data(as_text=True)
    assert f'data-live-url="/orgs/acme/live?areas={areas}' in html
    assert "data-live-region=" in html and 'aria-live="polite"' in html and "live.js" in html
    assert "executors.json" not in html  # nothing polls it any more


def test_the_executors_table_pages_and_filters_by_state_in_the_url(served: tuple[Runtime, FlaskClient]) -> None:
    rt, client = served
    for n in range(120):
        rt.log.run(executor_ref("acme", "shop", f"ex-{n:03}"),
                   lambda found, n=n: Executor.connect_again(found, "acme", "shop", f"ex-{n:03}", INFO_1, "relay-a",
                                                             at(10 + n)))
    for n in (7, 99):
        rt.log.change(executor_ref("acme", "shop", f"ex-{n:03}"), lambda e: e.disconnect("socket closed", at(200)))
    rt.views.catch_up()
    base = "/orgs/acme/apps/shop/executors"
    first = client.get(base).get_data(as_text=True)
    assert first.count('<tr data-executor="') == 50 and 'data-executor="ex-000"' in first
    assert 'data-count="HEALTHY">118<' in first and 'data-count="DISCONNECTED">2<' in first  # counts of all
    assert "executorsPage=2" in first and 'rel="prev"' not in first
    last = client.get(f"{base}?executorsPage=3").get_data(as_text=True)
    assert last.count('<tr data-executor="') == 20 and 'data-executor="ex-119"' in last and 'rel="next"' not in last
    down = client.get(f"{base}?executors=DISCONNECTED").get_data(as_text=True)
    assert down.count('<tr data-executor="') == 2 and 'data-executor="ex-099"' in down
    assert 'data-live-src="/orgs/acme/apps/shop/executors?executors=DISCONNECTED"' in down  # re-read as shown
    assert 'aria-current="true" class="active" data-filter="DISCONNECTED"' in down
    assert 'href="/orgs/acme/apps/shop?executors=DISCONNECTED"' in down  # a deep link to the app page, filtered
    data = client.get("/orgs/acme/apps/shop/executors.json?executorsPage=2").get_json()
    assert len(data["executors"]) == 50 and data["more"] is True and data["counts"]["HEALTHY"] == 118
