"""ExecutorActor as `relay serve` runs it, under gevent's monkey-patching (in a child process, since patching must
come first): no greenlet of its own once idle for DRAIN_LINGER_S, messages handled one at a time and in order, the
handshake and a request without a proxy, and ActorDeadError once it has stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
from gevent import monkey; monkey.patch_all()
import gc, json, time
from dataclasses import dataclass
import gevent, greenlet, pykka
from relay.wire.workflow_requests import GetWorkflowRequest
from relay.actors.application import ApplicationActor
from relay.actors.configuration.limits import Limits
from relay.actors.context import ActorContext
from relay.actors.directory import Directory
from relay.actors.executor import Connection, ExecutorActor
from relay.actors.executor_messages import ask_request
from relay.actors import pykka_gevent
pykka_gevent.install()  # as relay serve does at start-up
from relay.actors.scheduler import ManualScheduler
from relay.events.refs import executor_ref
from relay.projections.store.log import RelayLog

class Socket:
    def __init__(self, clock):
        self.clock, self.sent, self.closed, self.pings = clock, [], None, 0
    def send_text(self, text): self.sent.append(json.loads(text))
    def ping(self): self.pings += 1; return True
    def last_pong(self): return self.clock.now()
    def close(self, code, reason): self.closed = (code, reason)

class Apps:
    def app(self, org, app): return {"settings": {"executorTimeoutSecs": 20}}

@dataclass
class Views:
    applications: Apps

def alive_greenlets():
    return sum(1 for o in gc.get_objects() if isinstance(o, greenlet.greenlet) and o and not o.dead)

def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        gevent.sleep(0.01)

clock = ManualScheduler()
ctx = ActorContext(log=RelayLog(), views=Views(Apps()), runner=None, instance_id="relay-1",
                   limits=Limits(ping_interval_s=10, pong_timeout_s=25), clock=clock.wall, scheduler=clock)
directory = Directory(lambda org, app: ApplicationActor.start(ctx, org, app))
directory.application_proxy("local", "app").live_executors().get(timeout=5)
out = {}
before = alive_greenlets()
admitted = []
actors = []
for i in range(20):
    socket = Socket(clock)
    ref = ExecutorActor.start(ctx, directory, socket, Connection("local", "app", "key", "127.0.0.1"),
                              lambda i=i: admitted.append(i))
    actors.append((ref, socket))
wait_for(lambda: all(socket.sent for _, socket in actors))  # each asked for executor_info
for i, (ref, socket) in enumerate(actors):
    [hello] = socket.sent
    answer = {"type": "executor_info", "request_id": hello["request_id"], "executor_id": f"e{i}",
              "application_version": "v1", "hostname": "h", "language": "python", "dbos_version": "3.2.0"}
    ref.tell({"frame": json.dumps(answer)})
wait_for(lambda: len(admitted) == 20)  # every handshake done
out["busy_greenlets_added"] = alive_greenlets() - before  # each lingers a while for its next message
for _ in range(100):  # then ends (DRAIN_LINGER_S): an idle connection holds no greenlet for its actor
    if alive_greenlets() - before == 0:
        break
    gevent.sleep(0.1)
out["idle_greenlets_added"] = alive_greenlets() - before
out["admitted"] = sorted(admitted)
out["live"] = sorted(e.executor_id for e in directory.application_proxy("local", "app").live_executors().get())
out["status"] = ctx.log.get(executor_ref("local", "app", "e0")).status

ref, socket = actors[0]
futures = [ask_request(ref, GetWorkflowRequest(workflow_id=f"wf{n}")) for n in range(5)]
inner = [f.get(timeout=5) for f in futures]
sent = [m for m in socket.sent if m["type"] == "get_workflow"]
out["order"] = [m["workflow_id"] for m in sent]
for message in reversed(sent):
    ref.tell({"frame": json.dumps({"type": "get_workflow", "request_id": message["request_id"], "output": None})})
out["answered"] = [f.get(timeout=5).request_id for f in inner] == [m["request_id"] for m in sent]
clock.advance(10)
out["pings"] = socket.pings
ref.ask({"closed": "socket closed"})
wait_for(lambda: not ref.is_alive())
try:
    ref.ask({"request": GetWorkflowRequest(workflow_id="late")})
    out["after_stop"] = "answered"
except pykka.ActorDeadError:
    out["after_stop"] = "ActorDeadError"
out["disconnected"] = ctx.log.get(executor_ref("local", "app", "e0")).status
pykka.ActorRegistry.stop_all()
print(json.dumps(out))
'''


def test_executor_actor_under_gevent_has_no_greenlet_while_idle_and_keeps_its_order() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert 0 < out["busy_greenlets_added"] <= 20
    assert out["idle_greenlets_added"] == 0
    assert out["admitted"] == list(range(20))
    assert out["live"] == sorted(f"e{i}" for i in range(20))
    assert out["status"] == "HEALTHY"
    assert out["order"] == [f"wf{n}" for n in range(5)]
    assert out["answered"] is True
    assert out["pings"] == 1
    assert out["after_stop"] == "ActorDeadError"
    assert out["disconnected"] == "DISCONNECTED"
