"""The cluster wired into a real Runtime (SQLite store, in-process, fast heartbeats): GET /relay/v1/instances,
adoption handing records to the application actor's lifecycle, and what a restart resumes (own records only)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from relay.actors.configuration.settings import Settings
from relay.actors.runtime import Runtime
from relay.events.executor import Executor, ExecutorInfo
from relay.events.instance import RelayInstance
from relay.events.refs import executor_ref, instance_ref
from relay.web.wsgi import create_app
from tests.support.ports import wait_until

ADMIN = "ha-runtime-admin-token-0123456789"
AT = datetime(2026, 1, 1, tzinfo=UTC)
INFO = ExecutorInfo("v1", "host", "python", "3.2.0", None)


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = Runtime(Settings(data_dir=tmp_path, admin_token=ADMIN, instance_id="relay-unit", port=18090,
                               heartbeat_interval_s=0.05, instance_timeout_s=30.0))
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()


def instances(client) -> dict[str, dict]:
    response = client.get("/relay/v1/instances", headers={"Authorization": f"Bearer {ADMIN}"})
    assert response.status_code == 200, response.data
    return {i["instanceId"]: i for i in response.get_json()["instances"]}


def test_a_single_instance_sees_itself(rt: Runtime) -> None:
    client = create_app(rt).test_client()
    [(name, me)] = instances(client).items()
    assert name == "relay-unit"
    assert (me["status"], me["port"], me["address"], me["leases"]) == ("RUNNING", 18090, "127.0.0.1", [])
    assert 0 <= me["heartbeatAgeSecs"] < 1 and me["startedAt"]
    assert client.get("/relay/v1/instances").status_code == 401
    doc = client.get("/openapi.json").get_json()
    assert doc["paths"]["/relay/v1/instances"]["get"]["operationId"] == "listRelayInstances"
    assert doc["paths"]["/internal/v1/forward/{appID}"]["post"]["security"] == []


def test_records_of_an_instance_that_never_beat_are_adopted_and_watched(rt: Runtime) -> None:
    # An instance of an older Relay recorded an executor and vanished (no heartbeat row ever).
    rt.log.run(instance_ref("relay-old"),
               lambda found: RelayInstance.start_again(found, "relay-old", "127.0.0.1", 1, "0.0.9", AT))
    rt.log.run(executor_ref("local", "shop", "e9"),
               lambda found: Executor.connect_again(found, "local", "shop", "e9", INFO, "relay-old", AT))
    client = create_app(rt).test_client()
    shown = wait_until(lambda: (i := instances(client)).get("relay-old", {}).get("status") == "EXPIRED" and i, 10)
    assert shown["relay-old"]["heartbeatAgeSecs"] is None and shown["relay-old"]["leases"] == []
    assert [lease["executorId"] for lease in shown["relay-unit"]["leases"]] == ["e9"]
    app = rt.directory.application("local", "shop").proxy()
    assert wait_until(lambda: app.lifecycle_snapshot().get(timeout=5)["grace"] == ["e9"], 10)


def test_a_restart_resumes_its_own_records_not_a_live_peers(rt: Runtime) -> None:
    rt.log.run(executor_ref("local", "shop", "mine"),
               lambda found: Executor.connect_again(found, "local", "shop", "mine", INFO, "relay-unit", AT))
    rt.log.run(instance_ref("relay-peer"),
               lambda found: RelayInstance.start_again(found, "relay-peer", "127.0.0.1", 2, "0.1.0", AT))
    # A live peer (its beat an hour ahead, so it stays fresh for this test whatever the machine's load).
    rt.table.beat("relay-peer", "127.0.0.1", 2, rt.cluster.wall() + 3600, started=True)
    rt.log.run(executor_ref("local", "shop", "theirs"),
               lambda found: Executor.connect_again(found, "local", "shop", "theirs", INFO, "relay-peer", AT))
    rt.wait_for_views()
    assert rt.resume_lifecycles() == 1
    snapshot = rt.directory.application("local", "shop").proxy().lifecycle_snapshot().get(timeout=5)
    assert snapshot["grace"] == ["mine"]
