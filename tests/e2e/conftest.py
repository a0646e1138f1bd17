"""Fixtures of the console's browser tests: a real `relay serve`, a real DBOS Python executor (dbos 3.2.0,
tests/e2e/console_app.py), and Debian's headless Chromium (/usr/bin/chromium) driven by Playwright.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.e2e.console_support import (
    APP,
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT_S,
    login,
    register_app,
    start_executor,
)
from tests.support.procs import RelayProcess


@pytest.fixture(scope="session")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    # Alerting rules evaluated every second: the alerts page's test waits for one to fire.
    with RelayProcess(tmp_path_factory.mktemp("relay-data"), env={"RELAY_ALERT_INTERVAL_S": "1"}) as server:
        yield server


@pytest.fixture(scope="session")
def shop(relay: RelayProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The `shop` application with one executor that ran the scenario of console_app.py."""
    key = register_app(relay, APP)
    proc, ready = start_executor(relay, APP, key, tmp_path_factory.mktemp("shop-executor"), name="shop")
    try:
        yield {**ready, "key": key, "proc": proc}
    finally:
        proc.kill()  # its approval workflows wait for ever: no point in a graceful stop


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium", pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": 1360, "height": 900})
    ctx.set_default_timeout(WAIT_S * 1000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext, relay: RelayProcess, shop: dict[str, Any]) -> Page:
    """A page logged in with the admin token, with the shop executor running."""
    del shop
    opened = context.new_page()
    login(opened, relay, relay.admin_token)
    return opened
