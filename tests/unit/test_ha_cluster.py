"""actors/cluster.py beyond plain adoption (tests/unit/test_cluster.py): three instances over one real store
(one SQLite data dir), a hand-driven wall clock for heartbeats.

- adoption is one transaction (Expired + every LeaseAdopted), and a peer that restarts while a survivor is
  adopting it is never expired: its beat comes first, and the survivor checks it again after a conflict;
- an instance that finds itself EXPIRED rejoins (Restarted, rejoin handlers);
- leftovers: rows on an EXPIRED instance whose adopter died before taking them go to exactly one instance,
  whoever died meanwhile (`responsible`); rows on an instance that never beat are adopted like a silent one;
- which executors sit on other live instances (`remote_executors`).
"""

from datetime import UTC, datetime

import pytest

from relay.actors.cluster import Cluster, adopt_instance, responsible
from relay.actors.context import ActorContext
from relay.actors.heartbeats import InstanceTable
from relay.events.executor import Executor, ExecutorInfo
from relay.events.instance import EXPIRED, RUNNING, RelayInstance, lease_key
from relay.events.refs import executor_ref, instance_ref
from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from relay.projections.views import ProjectionRunner, Views

AT = datetime(2026, 1, 1, tzinfo=UTC)
INFO = ExecutorInfo("v1", "host", "python", "3.2.0", None)
NAMES = ("relay-a", "relay-b", "relay-c")


class Wall:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def trio(tmp_path):
    config = StoreConfig(data_dir=tmp_path)
    wall = Wall(1000.0)
    made = {}
    for port, name in enumerate(NAMES, start=9001):
        log = RelayLog(env=config.event_store_env())
        views = Views(config, log)
        runner = ProjectionRunner(views, poll_interval=0.05)
        runner.start()
        ctx = ActorContext(log=log, views=views, runner=runner, instance_id=name, clock=lambda: AT)
        cluster = Cluster(ctx, InstanceTable(config), "127.0.0.1", port, timeout_s=10, wall=wall)
        cluster.join()
        log.run(instance_ref(name),
                lambda found, me=name, p=port: RelayInstance.start_again(found, me, "127.0.0.1", p, "0.1.0", AT))
        made[name] = cluster
    yield wall, made
    for cluster in made.values():
        cluster.ctx.runner.stop()
        cluster.table.close()
        cluster.ctx.views.close()
        cluster.ctx.log.close()


def beat(wall: Wall, *clusters: Cluster) -> None:
    for cluster in clusters:
        cluster.table.beat(cluster.me, cluster.address, cluster.port, wall.now)


def settle(cluster: Cluster) -> None:
    assert cluster.ctx.runner.wait_for(cluster.ctx.log.recorder.max_notification_id() or 0, timeout=5)


def names_of(log: RelayLog, instance: str) -> list[str]:
    record = log.get(instance_ref(instance))
    return [type(e).__name__ for e in log.events.get(record.id)]


def test_adoption_appends_expired_and_every_lease_in_one_transaction(trio) -> None:
    wall, c = trio
    a, b = c["relay-a"], c["relay-b"]
    for executor in ("e1", "e2", "e3"):
        a.ctx.log.run(executor_ref("local", "shop", executor),
                      lambda found, e=executor: Executor.connect_again(found, "local", "shop", e, INFO, "relay-a", AT))
    settle(b)
    positions = []
    b.ctx.log.listeners.append(positions.append)
    wall.now += 11
    beat(wall, b)
    assert b.adopt("relay-a") is True
    assert len(positions) == 1  # one save: one notification of our position
    recorded = b.ctx.log.recorder.select_notifications(start=1, limit=1000)
    tail = [n.topic.rsplit(".", 1)[-1] for n in recorded[-4:]]
    assert tail == ["Expired", "LeaseAdopted", "LeaseAdopted", "LeaseAdopted"]
    assert set(b.ctx.log.get(instance_ref("relay-b")).leases) == {lease_key("local", "shop", e) for e in ("e1", "e2",
                                                                                                          "e3")}


def test_a_peer_that_restarts_while_being_adopted_is_not_expired(trio) -> None:
    wall, c = trio
    a, b = c["relay-a"], c["relay-b"]
    a.ctx.log.run(executor_ref("local", "shop", "e1"),
                  lambda found: Executor.connect_again(found, "local", "shop", "e1", INFO, "relay-a", AT))
    settle(b)
    wall.now += 11
    beat(wall, b)
    checks = []
    silent = b.silent

    def racing_restart(peer: str) -> bool:
        # The first check happens after b loaded a's aggregate: a restarts right then (beat, then Restarted),
        # so b's save conflicts on a's version; b reloads and checks again.
        answer = silent(peer)
        checks.append(answer)
        if len(checks) == 1:
            a.join()
            a.ctx.log.run(instance_ref("relay-a"),
                          lambda found: RelayInstance.start_again(found, "relay-a", "127.0.0.1", a.port, "0.1.0", AT))
        return answer

    b.silent = racing_restart
    assert b.adopt("relay-a") is False
    assert checks == [True, False]
    assert a.ctx.log.get(instance_ref("relay-a")).status == RUNNING
    assert "Expired" not in names_of(b.ctx.log, "relay-a")
    assert b.ctx.log.get(instance_ref("relay-b")).leases == {}
    settle(b)
    assert [r["instance"] for r in b.ctx.views.registry.executors("local", "shop")] == ["relay-a"]


def test_an_instance_declared_gone_while_alive_rejoins(trio) -> None:
    wall, c = trio
    a, b = c["relay-a"], c["relay-b"]
    rejoined = []
    a.rejoin_handlers.append(lambda: rejoined.append(a.ctx.log.get(instance_ref("relay-a")).status))
    a.rejoin_handlers.insert(0, lambda: a.ctx.log.run(instance_ref("relay-a"),
                                                      lambda found: RelayInstance.start_again(
                                                          found, "relay-a", "127.0.0.1", a.port, "0.1.0", AT)))
    wall.now += 11  # a stalls: b adopts it
    beat(wall, b, c["relay-c"])
    assert b.beat() == ["relay-a"]
    assert a.ctx.log.get(instance_ref("relay-a")).status == EXPIRED
    a.beat()  # a wakes up: it finds itself expired, records its restart and calls the handlers
    assert rejoined == [RUNNING]
    assert names_of(a.ctx.log, "relay-a")[-2:] == ["Expired", "Restarted"]
    a.beat()
    assert rejoined == [RUNNING]  # once


def test_rows_left_on_an_expired_instance_go_to_exactly_one_instance(trio) -> None:
    wall, c = trio
    a, b, cc = c["relay-a"], c["relay-b"], c["relay-c"]
    for executor in ("e1", "e2"):
        a.ctx.log.run(executor_ref("local", "shop", executor),
                      lambda found, e=executor: Executor.connect_again(found, "local", "shop", e, INFO, "relay-a", AT))
    settle(b)
    taken = []
    for cluster in (a, b, cc):
        cluster.handlers.append(lambda org, app, ids, peer, who=cluster.me: taken.append((who, sorted(ids), peer)))
    # b expires a, then dies before adopting anything (as if its view had missed a's executors).
    assert adopt_instance(b.ctx.log, "relay-a", "relay-b", [], AT, lambda: True)
    b.table.remove("relay-a")
    wall.now += 11  # b is silent now too; c beats
    beat(wall, cc)
    assert cc.beat() == ["relay-b"]  # c adopts b (nothing of b's), and in the same beat what a left
    settle(cc)
    assert taken == [("relay-c", ["e1", "e2"], "relay-a")]
    assert {r["instance"] for r in cc.ctx.views.registry.executors("local", "shop")} == {"relay-c"}
    wall.now += 1
    beat(wall, cc)
    cc.beat()
    assert len(taken) == 1  # never twice

    # b comes back (restarted): it was expired after a, so a's leftovers were c's, not its own.
    b.join()
    b.ctx.log.run(instance_ref("relay-b"),
                  lambda found: RelayInstance.start_again(found, "relay-b", "127.0.0.1", b.port, "0.1.0", AT))
    b.beat()
    assert len(taken) == 1


def test_responsibility_follows_expiries_forward_in_the_log() -> None:
    def expired(position: int, who: str, by: str) -> dict:
        return {"position": position, "instance": who, "expired_by": by}

    # a expired by b; b expired by c later: c is responsible for what a left.
    log = [expired(1, "a", "b"), expired(5, "b", "c")]
    assert responsible(log, "a") == "c"
    assert responsible(log, "b") == "c"
    # b was expired BEFORE it expired a (it restarted in between): b itself is responsible.
    assert responsible([expired(1, "b", "c"), expired(5, "a", "b")], "a") == "b"
    # A longer chain; the last expiry of a counts.
    chain = [expired(1, "a", "x"), expired(3, "a", "b"), expired(4, "b", "c"), expired(6, "c", "d")]
    assert responsible(chain, "a") == "d"
    assert responsible(chain, "nobody") is None


def test_rows_on_an_instance_that_never_beat_are_adopted(trio) -> None:
    wall, c = trio
    b = c["relay-b"]
    # An instance of an older Relay: started, connected an executor, never had a heartbeat row.
    b.ctx.log.run(instance_ref("relay-old"),
                  lambda found: RelayInstance.start_again(found, "relay-old", "127.0.0.1", 1, "0.0.9", AT))
    b.ctx.log.run(executor_ref("local", "shop", "e9"),
                  lambda found: Executor.connect_again(found, "local", "shop", "e9", INFO, "relay-old", AT))
    settle(b)
    taken = []
    b.handlers.append(lambda org, app, ids, peer: taken.append((ids, peer)))
    beat(wall, b)
    b.beat()
    assert taken == [(["e9"], "relay-old")]
    assert b.ctx.log.get(instance_ref("relay-old")).status == EXPIRED


def test_remote_executors_are_the_healthy_ones_on_live_running_peers(trio) -> None:
    wall, c = trio
    a, b, cc = c["relay-a"], c["relay-b"], c["relay-c"]
    log = a.ctx.log
    log.run(executor_ref("local", "shop", "on-b"),
            lambda found: Executor.connect_again(found, "local", "shop", "on-b", INFO, "relay-b", AT))
    log.run(executor_ref("local", "shop", "on-c"),
            lambda found: Executor.connect_again(
                found, "local", "shop", "on-c", ExecutorInfo("v2", "h", "python", "3.2.0", None), "relay-c", AT))
    log.run(executor_ref("local", "shop", "mine"),
            lambda found: Executor.connect_again(found, "local", "shop", "mine", INFO, "relay-a", AT))
    log.run(executor_ref("local", "shop", "gone"),
            lambda found: Executor.connect_again(found, "local", "shop", "gone", INFO, "relay-b", AT))
    log.change(executor_ref("local", "shop", "gone"), lambda e: e.disconnect("socket closed", AT))
    log.run(executor_ref("local", "other", "elsewhere"),
            lambda found: Executor.connect_again(found, "local", "other", "elsewhere", INFO, "relay-b", AT))
    settle(a)
    remote = {e.executor_id: e for e in a.remote_executors("local", "shop")}
    assert sorted(remote) == ["on-b", "on-c"]
    # One named executor (the raw endpoint): the same answer from its one row.
    assert a.remote_executor("local", "shop", "on-b") == remote["on-b"]
    assert [a.remote_executor("local", "shop", e) for e in ("mine", "gone", "nope")] == [None, None, None]
    assert a.remote_executor("local", "other", "on-b") is None
    assert (remote["on-b"].instance, remote["on-b"].port, remote["on-b"].address) == ("relay-b", b.port, "127.0.0.1")
    assert remote["on-c"].application_version == "v2" and remote["on-c"].remote is True
    # c goes silent: its executor is not reachable any more; b stops: neither.
    wall.now += 11
    beat(wall, a, b)
    assert [e.executor_id for e in a.remote_executors("local", "shop")] == ["on-b"]
    b.ctx.log.change(instance_ref("relay-b"), lambda i: i.stop(AT))
    assert a.status_of("relay-b", cached=False) == "STOPPED"
    assert a.remote_executors("local", "shop") == []
    assert cc.remote_executors("local", "nope") == []


def test_routing_reuses_the_instances_table_for_its_ttl_only(trio) -> None:
    wall, c = trio
    a, b = c["relay-a"], c["relay-b"]
    beat(wall, a, b)
    a.peers_ttl_s = 60.0  # as the runtime sets it (a second at most), made long enough to see
    assert "relay-b" in a.live_peers()
    b.table.remove("relay-b")
    assert "relay-b" in a.live_peers()  # the read is reused: no query per routed request
    wall.now += 11
    assert a.live_peers() == {}  # a reused row still ages with the wall clock: a silent peer drops out
    wall.now -= 11
    a.peers_ttl_s = 0.0
    assert "relay-b" not in a.live_peers()  # read again
