"""Issue 29, point 9b: a refused API call (404, 409, 422) is an expected outcome, not an error: `relay serve`
logs no traceback for it, whether the refusal comes from Relay's own actors (an unknown key or application, a
key that exists already) or from a real DBOS executor (cancel of a workflow it does not know)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.fake_executor import create_key, dbos_executor, executors, register_app, unique
from tests.support.ports import wait_until
from tests.support.procs import RelayProcess

pytestmark = pytest.mark.integration


def test_refused_calls_leave_no_traceback_in_the_log(tmp_path: Path) -> None:
    app = unique("quiet")
    with RelayProcess() as relay:
        relay.start()
        register_app(relay, app)
        key = create_key(relay, unique("key"), appNames=[app])
        refused = [
            relay.api("DELETE", "/v2/orgs/local/tokens/no-such-key"),
            relay.api("DELETE", "/v2/orgs/local/apps/no-such-app"),
            relay.api("PATCH", "/v2/orgs/local/apps/no-such-app", json={}),
            relay.api("POST", "/v2/orgs/local/tokens/bad name!", json={}),
        ]
        with dbos_executor(relay, app, key, cwd=tmp_path) as real:
            wait_until(lambda: any(e["status"] == "HEALTHY" for e in executors(relay, app).values()), timeout=30,
                       message=f"the DBOS executor did not connect; its log:\n{real.log_tail()}")
            refused.append(relay.api("POST", f"/v2/orgs/local/apps/{app}/workflows/no-such-workflow/cancel"))
        assert [r.status_code // 100 for r in refused] == [4] * len(refused), [(r.status_code, r.text) for r in refused]
        assert {r.status_code for r in refused[:2]} == {404}
        log = relay.log_text()
        assert "Traceback" not in log and "Exception returned from" not in log, log[-4000:]
