"""Cluster membership and adoption over a real store shared by three instances (one SQLite data dir)."""

from datetime import UTC, datetime

import pytest

from relay.actors.application import register_app
from relay.actors.cluster import Cluster, stale_instances
from relay.actors.context import ActorContext
from relay.actors.heartbeats import InstanceTable
from relay.events.executor import Executor, ExecutorInfo
from relay.events.instance import EXPIRED, RelayInstance
from relay.events.refs import executor_ref, instance_ref
from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from relay.projections.views import ProjectionRunner, Views

AT = datetime(2026, 1, 1, tzinfo=UTC)
INFO = ExecutorInfo("v1", "host", "python", "3.2.0", None)


class Wall:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster_of_three(tmp_path):
    config = StoreConfig(data_dir=tmp_path)
    wall = Wall(1000.0)
    made = []
    for name in ("relay-a", "relay-b", "relay-c"):
        log = RelayLog(env=config.event_store_env())
        views = Views(config, log)
        runner = ProjectionRunner(views, poll_interval=0.05)
        runner.start()
        ctx = ActorContext(log=log, views=views, runner=runner, instance_id=name, clock=lambda: AT)
        table = InstanceTable(config)
        cluster = Cluster(ctx, table, "127.0.0.1", 1, timeout_s=10, wall=wall)
        log.run(instance_ref(name),
                lambda found, me=name: RelayInstance.start_again(found, me, "127.0.0.1", 1, "0.1.0", AT))
        cluster.join()
        made.append((cluster, ctx, table, runner, views, log))
    yield wall, [m[0] for m in made]
    for _, _, table, runner, views, log in made:
        runner.stop()
        table.close()
        views.close()
        log.close()


def test_stale_instances_are_those_silent_longer_than_the_timeout():
    rows = [
        {"instance": "me", "heartbeat_at": 0.0},
        {"instance": "fresh", "heartbeat_at": 95.0},
        {"instance": "silent", "heartbeat_at": 80.0},
    ]
    assert stale_instances(rows, "me", now=100.0, timeout_s=10) == ["silent"]


def test_exactly_one_survivor_adopts_a_silent_peer_and_its_executors(cluster_of_three):
    wall, (a, b, c) = cluster_of_three
    register_app(a.ctx.log, "local", "shop", AT)
    for executor in ("e1", "e2"):
        a.ctx.log.run(executor_ref("local", "shop", executor),
                      lambda found, e=executor: Executor.connect_again(found, "local", "shop", e, INFO, "relay-a", AT))
    adopted: list = []
    b.handlers.append(lambda *args: adopted.append(("b", *args)))
    c.handlers.append(lambda *args: adopted.append(("c", *args)))

    wall.now += 11  # a stops beating; b and c beat
    b.table.beat("relay-b", "127.0.0.1", 1, wall.now)
    c.table.beat("relay-c", "127.0.0.1", 1, wall.now)
    results = [b.beat(), c.beat()]

    assert sorted(map(len, results)) == [0, 1]
    assert len(adopted) == 1
    winner, org, app, executors, gone = adopted[0]
    assert (org, app, sorted(executors), gone) == ("local", "shop", ["e1", "e2"], "relay-a")
    assert b.ctx.log.get(instance_ref("relay-a")).status == EXPIRED
    assert b.ctx.log.get(instance_ref("relay-a")).leases == {}
    survivor = b if winner == "b" else c
    assert set(survivor.ctx.log.get(instance_ref(survivor.me)).leases) == {"local/shop/e1", "local/shop/e2"}
    survivor.ctx.runner.wait_for(survivor.ctx.log.position, timeout=5)
    held = survivor.ctx.views.registry.held_by(survivor.me)
    assert sorted(r["executor_id"] for r in held) == ["e1", "e2"]
    assert [r["instance"] for r in survivor.table.rows()] == ["relay-b", "relay-c"]

    # Beating again adopts nothing more: the silent peer is gone from the table.
    wall.now += 1
    assert b.beat() == [] and c.beat() == []
    assert len(adopted) == 1


def test_a_clean_stop_is_adopted_at_the_next_beat(cluster_of_three):
    _wall, (a, b, _c) = cluster_of_three
    a.leave()
    assert b.beat() == ["relay-a"]
    assert b.ctx.log.get(instance_ref("relay-a")).status == EXPIRED


def test_the_release_floor_is_the_oldest_release_among_the_live_instances(cluster_of_three):
    """docs/adr/0050: all three recorded 0.1.0; as each restarts on this release the floor stays 0.1.0 until the
    last one has; a silent instance no longer counts, and one that comes back on the older release counts again."""
    from relay.events.releases import FIRST_RELEASE, RELEASE

    wall, (a, b, c) = cluster_of_three

    def restart(cluster: Cluster) -> None:
        cluster.ctx.log.run(instance_ref(cluster.me), lambda found: RelayInstance.start_again(
            found, cluster.me, "127.0.0.1", 1, RELEASE, AT))
        cluster.ctx.runner.wait_for(cluster.ctx.log.position, timeout=10)

    assert a.release_floor() == FIRST_RELEASE
    restart(a)
    restart(b)
    assert a.release_floor() == b.release_floor() == FIRST_RELEASE
    wall.now += 11  # c falls silent (it was killed): it no longer holds the cluster back
    a.table.beat("relay-a", "127.0.0.1", 1, wall.now)
    b.table.beat("relay-b", "127.0.0.1", 1, wall.now)
    assert a.release_floor() == RELEASE
    c.join()  # c beats again, still on 0.1.0
    assert a.release_floor() == FIRST_RELEASE
    restart(c)
    a.ctx.runner.wait_for(c.ctx.log.position, timeout=10)
    assert a.release_floor() == RELEASE
