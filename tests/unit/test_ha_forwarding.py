"""Forwarding between instances, over real HTTP on loopback: the forward endpoint (web/api/cluster.py) of a
"peer" instance served by werkzeug in a thread, with scripted executor actors behind it, and a "caller"
instance whose executor calls (actors/services/executor_calls.py) go through the real Forwarder
(actors/adapters/forwarder.py).

- the endpoint: a signed frame runs on the named local executor and its raw answer comes back; forged, old,
  looping, replayed and unconfigured forwards are refused before anything is sent to an executor; an unknown
  app id, an executor not connected there, one that disconnects or never answers: 404/503/503/504;
- the caller: with no local executor, a remote one answers; its error, its silence, its absence, a refused
  forward, an unknown type, an unreachable instance map as a local executor's would (502/504/502/502/501/502);
- settings: RELAY_HEARTBEAT_INTERVAL_S, RELAY_INSTANCE_TIMEOUT_S, RELAY_FORWARD_SECRET.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pykka
import pytest
import requests
from flask import Flask
from werkzeug.serving import make_server

from relay.actors.adapters.dataplane.client import DataPlanes
from relay.actors.adapters.forwarder import Forwarder
from relay.actors.cluster import RemoteExecutor
from relay.actors.configuration.limits import Limits
from relay.actors.configuration.settings import ConfigError, Settings
from relay.actors.directory import Directory
from relay.actors.edge_state import EdgeState
from relay.actors.executor import LiveExecutor
from relay.projections.backend import StoreConfig
from relay.web.api import cluster as api_cluster
from relay.web.context import executor_calls
from relay.web.problems import DomainFailure, answer_problems, api_error
from relay.wire import signing as forwarding
from relay.wire.codec import decode_response
from relay.wire.errors import ExecutorGoneError, PeerUnreachableError
from relay.wire.requests import RecoveryRequest
from relay.wire.workflow_requests import GetWorkflowRequest
from tests.support.ports import free_port

ORG, APP, APP_ID = "local", "fwd-app", "4b0c7c8e-1111-5222-8333-944445555666"
SECRET = "unit-test-forward-secret-" + secrets.token_hex(8)
GET = GetWorkflowRequest(workflow_id="wf-1")


class FakeApplication(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.live: dict[str, LiveExecutor] = {}

    def claim(self, executor: LiveExecutor) -> None:
        self.live[executor.executor_id] = executor

    def mark_unsupported(self, executor_id: str, message_type: str) -> None:
        self.live[executor_id].unsupported.add(message_type)

    def routing_snapshot(self) -> tuple[list[LiveExecutor], str | None]:
        return list(self.live.values()), None


class ScriptedExecutor(pykka.ThreadingActor):
    """Answers with ``script(request)``: response fields, an exception class, or None (never answers)."""

    def __init__(self, script: Callable[[Any], Any]) -> None:
        super().__init__()
        self.script = script
        self.received: list[Any] = []

    def request(self, request: Any) -> pykka.ThreadingFuture[Any]:
        self.received.append(request)
        future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
        answer = self.script(request)
        if isinstance(answer, type) and issubclass(answer, Exception):
            future.set_exception((answer, answer("scripted"), None))
        elif answer is not None:
            frame = {"type": str(request.type), "request_id": request.request_id, **answer}
            future.set(decode_response(json.dumps(frame)))
        return future

    def forget(self, request_id: str) -> None:
        pass

    def seen(self) -> list[Any]:
        return list(self.received)


_NO_ROWS = SimpleNamespace(executors=lambda org, app: [], counts_by_status=lambda org, app: {},  # a registry
                           executor=lambda org, app, executor_id: None)  # expecting no executor back


class Apps:
    def app(self, org: str, app: str) -> dict[str, Any] | None:
        return {"id": APP_ID, "org": org, "name": app} if (org, app) == (ORG, APP) else None

    def app_setting(self, org: str, app: str, name: str) -> Any:
        return None  # no settings: no data plane


def flask_app(name: str, rt: Any) -> Flask:
    app = Flask(name)
    app.extensions["relay"] = rt
    app.register_blueprint(api_cluster.bp)

    answer_problems(app)
    return app


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """Instance relay-2: the forward endpoint on a real loopback port, executors added with `add`."""
    directory = Directory(lambda org, app: FakeApplication.start())
    settings = SimpleNamespace(forward_secret=SECRET, limits=Limits(request_timeout_s=0.3))
    edge_state = EdgeState(StoreConfig(data_dir=tmp_path))  # the nonces seen
    rt = SimpleNamespace(settings=settings, views=SimpleNamespace(applications=Apps(), registry=_NO_ROWS),
                         ctx=SimpleNamespace(instance_id="relay-2"), directory=directory, edge_state=edge_state)
    server = make_server("127.0.0.1", 0, flask_app("peer", rt), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    refs: dict[str, pykka.ActorRef[Any]] = {}

    def add(executor_id: str, script: Callable[[Any], Any]) -> None:
        refs[executor_id] = ScriptedExecutor.start(script)
        live = LiveExecutor(executor_id, refs[executor_id], "v1", "python", "3.2.0", time.monotonic())
        directory.application(ORG, APP).proxy().claim(live).get()

    def seen(executor_id: str) -> list[Any]:
        return refs[executor_id].proxy().seen().get()

    yield SimpleNamespace(port=server.server_port, url=f"http://127.0.0.1:{server.server_port}", add=add,
                          seen=seen, settings=settings)
    server.shutdown()
    pykka.ActorRegistry.stop_all()
    edge_state.close()


def remote(executor_id: str, port: int) -> RemoteExecutor:
    return RemoteExecutor(executor_id, "v1", "python", "3.2.0", 1.0, "relay-2", "127.0.0.1", port)


def post(peer: SimpleNamespace, body: dict[str, Any], *, secret: str = SECRET, now: float | None = None,
         hop: str = "0", app_id: str = APP_ID, payload: bytes | None = None) -> requests.Response:
    payload = payload if payload is not None else json.dumps(body).encode()
    headers = forwarding.signed_headers(secret, payload, now=now, target="relay-2")
    headers[forwarding.HOP_HEADER] = hop
    return requests.post(f"{peer.url}/internal/v1/forward/{app_id}", data=payload, headers=headers, timeout=5)


def frame_for(executor_id: str | None, frame: dict[str, Any]) -> dict[str, Any]:
    body = {"org": ORG, "app": APP, "frame": {**frame, "request_id": secrets.token_hex(6)}}
    if executor_id is not None:
        body["executor_id"] = executor_id
    return body


# ------------------------------------------------------------------------------------- the endpoint


def test_a_signed_forward_runs_on_the_named_local_executor(peer: SimpleNamespace) -> None:
    peer.add("other", lambda r: {"output": {"WorkflowUUID": "no"}})
    peer.add("e1", lambda r: {"output": {"WorkflowUUID": r.fields["workflow_id"]}})
    body = frame_for("e1", {"type": "get_workflow", "workflow_id": "wf-7", "load_input": False})
    answer = post(peer, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"] == {"WorkflowUUID": "wf-7"} and answer.json()["error_message"] is None
    [sent] = peer.seen("e1")
    assert (sent.type, dict(sent.fields)) == ("get_workflow", {"workflow_id": "wf-7", "load_input": False})
    assert sent.request_id != body["frame"]["request_id"]  # its own request id, never the caller's
    assert peer.seen("other") == []
    # No executor named: the best one here.
    assert post(peer, frame_for(None, {"type": "get_workflow", "workflow_id": "wf-8"})).status_code == 200


def test_refused_forwards_reach_no_executor(peer: SimpleNamespace) -> None:
    peer.add("e1", lambda r: {"success": True})
    cancel = frame_for("e1", {"type": "cancel", "workflow_id": "wf-1"})
    assert post(peer, cancel, secret="another-secret-entirely").status_code == 401
    assert post(peer, cancel, now=time.time() - 31).status_code == 401
    assert post(peer, cancel, now=time.time() + 31).status_code == 401
    looping = post(peer, cancel, hop="1")
    assert looping.status_code == 409 and looping.headers["Content-Type"] == "application/problem+json"
    assert post(peer, cancel, payload=json.dumps(cancel).encode() + b" ").status_code == 200  # (signed as sent)
    once = json.dumps(frame_for("e1", {"type": "cancel", "workflow_id": "wf-2"})).encode()
    headers = {**forwarding.signed_headers(SECRET, once, target="relay-2"), forwarding.HOP_HEADER: "0"}
    assert requests.post(f"{peer.url}/internal/v1/forward/{APP_ID}", data=once, headers=headers).status_code == 200
    replay = requests.post(f"{peer.url}/internal/v1/forward/{APP_ID}", data=once, headers=headers)
    assert replay.status_code == 401 and "replay" in replay.json()["detail"]
    assert [r.fields["workflow_id"] for r in peer.seen("e1")] == ["wf-1", "wf-2"]  # only the two accepted
    peer.settings.forward_secret = None  # forwarding not configured here
    unconfigured = post(peer, frame_for("e1", {"type": "cancel", "workflow_id": "wf-3"}))
    assert unconfigured.status_code == 401
    assert len(peer.seen("e1")) == 2
    for answer in (looping, replay, unconfigured):
        assert SECRET not in answer.text


def test_what_the_endpoint_answers_when_no_executor_does(peer: SimpleNamespace) -> None:
    peer.add("gone", lambda r: ExecutorGoneError)
    peer.add("silent", lambda r: None)
    peer.add("failing", lambda r: {"error_message": "boom"})
    get = {"type": "get_workflow", "workflow_id": "wf"}
    assert post(peer, frame_for("gone", get), app_id="00000000-0000-0000-0000-000000000000").status_code == 404
    assert post(peer, {**frame_for("gone", get), "app": "no-such-app"}).status_code == 404
    assert post(peer, frame_for("elsewhere", get)).status_code == 503
    assert post(peer, frame_for("gone", get)).status_code == 503
    assert post(peer, frame_for("silent", get)).status_code == 504
    failing = post(peer, frame_for("failing", get))
    assert failing.status_code == 200 and failing.json()["error_message"] == "boom"  # the raw answer
    assert post(peer, {"org": ORG, "app": APP, "frame": {"no": "type"}}).status_code == 422
    assert post(peer, {}, payload=b"not json").status_code == 400


# ------------------------------------------------------------------------------------- the caller


@pytest.fixture
def caller(peer: SimpleNamespace) -> Iterator[Callable[..., Any]]:
    """Instance relay-1, no executor of its own; `remotes` are what its cluster sees on other instances."""
    remotes: list[RemoteExecutor] = []
    cluster = SimpleNamespace(me="relay-1", remote_executors=lambda org, app: list(remotes))
    forwarder = Forwarder(cluster, Apps(), SECRET, poll_s=1.0, max_bytes=1 << 20)  # type: ignore[arg-type]
    rt = SimpleNamespace(directory=Directory(lambda org, app: FakeApplication.start()),
                         settings=SimpleNamespace(limits=Limits(request_timeout_s=0.3)), forwarder=forwarder,
                         views=SimpleNamespace(applications=Apps(), registry=_NO_ROWS),
                         data_planes=DataPlanes(environ={}))
    app = flask_app("caller", rt)

    def run(request: Any, *, to: list[RemoteExecutor]) -> Any:
        remotes[:] = to
        with app.app_context():
            return executor_calls().call(ORG, APP, request)

    run.forwarder = forwarder  # type: ignore[attr-defined]
    return run


def status_of(run: Callable[[], Any]) -> tuple[int, str]:
    """The call's domain error, as the API answers it."""
    with pytest.raises(DomainFailure) as caught:
        run()
    problem = api_error(caught.value)
    return problem.status, problem.detail


def test_a_call_with_no_local_executor_is_answered_by_a_remote_one(peer, caller) -> None:
    peer.add("far", lambda r: {"output": {"WorkflowUUID": r.fields["workflow_id"]}})
    assert caller(GET, to=[remote("far", peer.port)]).output == {"WorkflowUUID": "wf-1"}
    assert status_of(lambda: caller(GET, to=[])) == (503, f"no executor of application '{APP}' is connected")


def test_forwards_to_a_peer_reuse_one_connection(peer, caller) -> None:
    peer.add("far", lambda r: {"output": {"WorkflowUUID": r.fields["workflow_id"]}})
    for _ in range(3):
        assert caller(GET, to=[remote("far", peer.port)]).output == {"WorkflowUUID": "wf-1"}
    assert caller.forwarder.http.connections_made(f"http://127.0.0.1:{peer.port}/") == 1


def test_remote_answers_map_as_local_ones(peer, caller) -> None:
    traceback = "it broke\nTraceback (most recent call last):\n  x\nValueError: no"
    peer.add("failing", lambda r: {"error_message": traceback})
    peer.add("silent", lambda r: None)
    peer.add("lacking", lambda r: {"error_message": "Unknown message type"})
    peer.add("fine", lambda r: {"output": {"WorkflowUUID": "ok"}})
    assert status_of(lambda: caller(GET, to=[remote("failing", peer.port)])) == (
        502, "python 3.2.0 executor 'failing' answered 'get_workflow' with an error: it broke: ValueError: no")
    assert status_of(lambda: caller(GET, to=[remote("silent", peer.port)]))[0] == 504
    assert status_of(lambda: caller(GET, to=[remote("lacking", peer.port)]))[0] == 501
    # Not connected there any more, or its instance is gone: the next candidate; none left: 502.
    closed = free_port()
    gone = [remote("moved-away", peer.port), RemoteExecutor("e", "v1", "python", "3.2.0", 2.0, "relay-3",
                                                              "127.0.0.1", closed)]
    assert status_of(lambda: caller(GET, to=gone))[0] == 502
    assert caller(GET, to=[*gone, remote("fine", peer.port)]).output == {"WorkflowUUID": "ok"}
    # Instances that do not share the secret: the forward is refused, and the caller says so.
    peer.settings.forward_secret = "not-the-same-secret-anywhere"
    status, detail = status_of(lambda: caller(GET, to=[remote("fine", peer.port)]))
    assert status == 502 and "refused the forwarded request" in detail and SECRET not in detail


def test_the_recovery_side_gets_peer_unreachable_errors(peer, caller) -> None:
    peer.add("far", lambda r: {"success": True})
    forwarder = caller.forwarder
    answer = forwarder.send(remote("far", peer.port), ORG, APP, RecoveryRequest(executor_ids=["dead"]), 1)
    assert (answer.type, answer.success) == ("recovery", True)
    with pytest.raises(PeerUnreachableError, match="relay-2 did not answer"):
        forwarder.send(remote("nobody", peer.port), ORG, APP, RecoveryRequest(executor_ids=["dead"]), 1)
    assert SECRET not in repr(forwarder)


# ------------------------------------------------------------------------------------- settings


def test_cluster_settings_from_the_environment() -> None:
    defaults = Settings.from_env({})
    assert (defaults.heartbeat_interval_s, defaults.instance_timeout_s, defaults.forward_secret) == (2.0, 10.0, None)
    custom = Settings.from_env({"RELAY_HEARTBEAT_INTERVAL_S": "0.5", "RELAY_INSTANCE_TIMEOUT_S": "3",
                                "RELAY_FORWARD_SECRET": SECRET})
    assert (custom.heartbeat_interval_s, custom.instance_timeout_s, custom.forward_secret) == (0.5, 3.0, SECRET)
    with pytest.raises(ConfigError, match="RELAY_INSTANCE_TIMEOUT_S must be longer"):
        Settings.from_env({"RELAY_HEARTBEAT_INTERVAL_S": "5", "RELAY_INSTANCE_TIMEOUT_S": "5"})
    with pytest.raises(ConfigError, match="RELAY_HEARTBEAT_INTERVAL_S") as caught:
        Settings.from_env({"RELAY_HEARTBEAT_INTERVAL_S": "soon"})
    assert "soon" not in str(caught.value)


def test_the_ca_file_for_tls_peers_must_be_readable(tmp_path: Path) -> None:
    assert Settings.from_env({}).ca_file is None
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert Settings.from_env({"RELAY_CA_FILE": str(ca)}).ca_file == ca
    with pytest.raises(ConfigError, match="RELAY_CA_FILE must name a readable file"):
        Settings.from_env({"RELAY_CA_FILE": str(tmp_path / "missing.pem")})
