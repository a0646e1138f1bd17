"""Keeps the benchmark harness from rotting: the load generator's executors answer the protocol (against an
in-process stub server, for about a second), and the reference server relays a request to one of them.
No figures are asserted (benchmarks are not tests): only that the answers are the ones the protocol wants."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest
from websockets.asyncio.server import serve

from bench import httpload, run
from bench.loadgen import LoadGen, Options, source_addresses
from bench.reference import Reference
from relay.wire.codec import decode_response
from relay.wire.responses import (
    ExecutorInfoResponse,
    ExistPendingWorkflowsResponse,
    GetWorkflowResponse,
    RawResponse,
    SuccessResponse,
)

KEY = "bench-smoke-key"



def run_in_own_loop(coro):
    """asyncio.run in a thread of its own: an earlier test (Playwright's sync API) may leave an event
    loop set on the main thread, where asyncio.run refuses to start."""
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(asyncio.wait_for(coro, 10))
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "scenario did not finish"
    if "error" in result:
        raise result["error"]
    return result["value"]

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _wait(predicate, timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _listening(port: int, timeout: float = 3.0) -> None:
    """Until something accepts connections on ``port`` on 127.0.0.1."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert loop.time() < deadline, f"nothing listens on port {port}"
            await asyncio.sleep(0.01)
        else:
            writer.close()
            return


def test_simulated_executors_answer_the_protocol() -> None:
    answers: dict[str, list[dict]] = {}

    async def stub(ws) -> None:
        # Speak like Relay: executor_info first, then requests; every answer must decode as wire/codec.py says.
        requests = [
            {"type": "executor_info", "request_id": "r-info"},
            {"type": "get_workflow", "request_id": "r-wf", "workflow_id": "wf-1", "load_input": True,
             "load_output": True},
            {"type": "recovery", "request_id": "r-rec", "executor_ids": ["dead-1"]},
            {"type": "exist_pending_workflows", "request_id": "r-ex", "executor_id": "e", "application_version": "v"},
            {"type": "brand_new_type", "request_id": "r-new"},
        ]
        got = answers.setdefault(str(id(ws)), [])
        for request in requests:
            await ws.send(json.dumps(request))
            got.append(json.loads(await ws.recv()))
        pong = await ws.ping()
        await asyncio.wait_for(pong, 2)  # the library answers pings by itself
        got.append({"type": "pong"})
        await ws.wait_closed()

    async def scenario() -> LoadGen:
        port = _free_port()
        async with serve(stub, "127.0.0.1", port, compression=None):
            gen = LoadGen(Options(payload_bytes=64, client_ping_interval=None))
            started = gen.start(f"ws://127.0.0.1:{port}/websocket/app/{KEY}", ["sim-0", "sim-1"])
            assert started == 2
            await _wait(lambda: sum(len(v) for v in answers.values()) == 12)
            killed = gen.kill(["sim-0"])
            assert [k["executor_id"] for k in killed] == ["sim-0"]
            await _wait(lambda: gen.status()["open"] == 1)
            await gen.stop()
            return gen

    gen = run_in_own_loop(scenario())
    for got in answers.values():
        decoded = [decode_response(json.dumps(a)) for a in got[:5]]
        info, workflow, recovery, exist, raw = decoded
        assert isinstance(info, ExecutorInfoResponse) and info.executor_id.startswith("sim-")
        assert info.language == "python" and info.dbos_version == "3.2.0"
        assert isinstance(workflow, GetWorkflowResponse)
        assert workflow.output["WorkflowUUID"] == "wf-1" and len(workflow.output["Output"]) == 64
        assert isinstance(recovery, SuccessResponse) and recovery.success is True
        assert isinstance(exist, ExistPendingWorkflowsResponse) and exist.exist is False
        assert isinstance(raw, RawResponse) and raw.request_id == "r-new"
        assert got[5] == {"type": "pong"}
    assert gen.stats.recoveries and gen.stats.recoveries[0]["executor_ids"] == ["dead-1"]
    assert gen.status()["killed"] == 1


def test_reference_relays_a_request_to_an_executor() -> None:
    async def scenario() -> tuple[httpload.LoadResult, httpload.LoadResult]:
        ws_port, http_port = _free_port(), _free_port()
        ref = Reference("token", KEY, max_seconds=10)
        server = asyncio.create_task(ref.run("127.0.0.1", ws_port, http_port))
        gen = LoadGen(Options(payload_bytes=16, client_ping_interval=None))
        await _listening(ws_port)  # the reference listens on its HTTP port first, then on this one
        gen.start(f"ws://127.0.0.1:{ws_port}/websocket/bench/{KEY}", ["ref-0"])
        await _wait(lambda: gen.status()["identified"] == 1 and ("bench", "ref-0") in ref.executors)
        headers = {"Authorization": "Bearer token"}
        raw = await httpload.saturate(
            "127.0.0.1", http_port, headers,
            lambda n: ("POST", "/relay/v1/orgs/local/apps/bench/executors/ref-0/requests",
                       {"type": "get_workflow", "workflow_id": f"wf-{n}", "load_input": True, "load_output": True}),
            concurrency=2, duration=0.3)
        get = await httpload.fixed_rate(
            "127.0.0.1", http_port, headers, lambda n: ("GET", f"/v2/orgs/local/apps/bench/workflows/wf-{n}", None),
            rate=50, duration=0.3)
        await gen.stop()
        server.cancel()
        return raw, get

    raw, get = run_in_own_loop(scenario())
    assert raw.ok > 0 and set(raw.statuses) == {200} and not raw.errors
    assert get.ok == 15 and set(get.statuses) == {200}
    assert raw.percentile(50) is not None


def test_source_addresses_cover_the_port_range() -> None:
    assert source_addresses(10, "127.0.0.1") == ["127.0.0.1"]
    many = source_addresses(200_000, "127.0.0.1")
    assert len(many) > 1 and all(a.startswith("127.0.0.") for a in many)


def test_storm_env_takes_only_relay_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench.run --storm-env` refuses anything but RELAY_NAME=VALUE before it starts a process."""
    for bad in ("RELAY_MAX_HANDSHAKES_IN_FLIGHT", "PATH=/tmp", "=3"):
        with pytest.raises(SystemExit) as refused:
            run.main(["--only", "storm", "--storm-env", bad])
        assert refused.value.code == 2
        assert "--storm-env takes RELAY_NAME=VALUE" in capsys.readouterr().err
