"""Helpers of the console's browser tests: screenshots, the executor app, logging in.

Screenshots go to test-output/console/ (gitignored), one per page visited, named after the test step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.support.ports import wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, RelayProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
SCREENSHOTS = REPO_ROOT / "test-output" / "console"
APP = "shop"
PREFIX = "e2e"
EXECUTOR_READY_S = 90.0
WAIT_S = 20.0

expect.set_options(timeout=WAIT_S * 1000)


def shot(page: Page, name: str) -> Path:
    """A full-page screenshot of what the browser shows now."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def start_executor(relay: RelayProcess, app: str, key: str, cwd: Path, *, prefix: str = PREFIX,
                   name: str = "executor", env: dict[str, str] | None = None) -> tuple[ExecutorProcess, dict[str, Any]]:
    """console_app.py connected to `relay` for `app`; returns the process and its READY line. `env` adds to its
    environment (APP_VERSION, SYSTEM_DATABASE_URL: see console_app.py)."""
    proc = ExecutorProcess(
        Path(__file__).with_name("console_app.py"), cwd=cwd, name=name,
        env={"APP_NAME": app, "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key, "SCENARIO_PREFIX": prefix,
             **(env or {})},
    ).start()
    try:
        proc.wait_for_log("READY ", timeout=EXECUTOR_READY_S)
        line = next(x for x in proc.log_text().splitlines() if x.startswith("READY "))
        ready = json.JSONDecoder().raw_decode(line.removeprefix("READY "))[0]
        wait_until(
            lambda: any(e["executorId"] == ready["executor_id"] and e["status"] == "HEALTHY"
                        for e in relay.api("GET", f"/v2/orgs/local/apps/{app}/executors").json()),
            timeout=WAIT_S, message=f"executor of {app} not HEALTHY in Relay",
        )
    except BaseException:
        proc.stop()
        raise
    return proc, ready


def register_app(relay: RelayProcess, app: str) -> str:
    """Register `app` and issue a key for its executors; return the key."""
    assert relay.api("PUT", f"/v2/orgs/local/apps/{app}").status_code == 204
    created = relay.api("POST", f"/v2/orgs/local/tokens/{app}-executor", json={"appNames": [app]})
    assert created.status_code == 201, created.text
    return str(created.json()["token"])


def login(page: Page, relay: RelayProcess, token: str, path: str = "/") -> None:
    page.goto(relay.base_url + path)
    expect(page).to_have_url(re.compile(r"/login"))
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("[data-testid=principal]")).to_be_visible()
