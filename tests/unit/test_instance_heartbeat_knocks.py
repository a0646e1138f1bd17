"""The heartbeat loop knocks on the instance actor once per interval, but never while a knock is unanswered
(actors/instance.py): a slow store made knocks pile up in the mailbox, in front of the actor's commands."""

from __future__ import annotations

from typing import Any

from relay.actors.instance import InstanceActor


class Ticks:
    """Stands in for the stop event: `wait` returns at once, `count` times, then says "stopping"."""

    def __init__(self, count: int) -> None:
        self.left = count

    def wait(self, _timeout: float) -> bool:
        self.left -= 1
        return self.left < 0


class Cluster:
    def __init__(self) -> None:
        self.beats = 0

    def beat(self) -> list[str]:
        self.beats += 1
        return []


class Mailbox:
    def __init__(self, actor: InstanceActor | None = None) -> None:
        self.told: list[Any] = []
        self.actor = actor  # answers each knock at once when given

    def tell(self, message: Any) -> None:
        self.told.append(message)
        if self.actor is not None:
            self.actor.on_receive(message)


class Knocked(InstanceActor):
    """The actor with a mailbox of the test's: its loop's knocks land there."""

    mailbox: Mailbox

    @property
    def actor_ref(self) -> Any:  # type: ignore[override]
        return self.mailbox


def _actor(cluster: Cluster) -> Knocked:
    return Knocked(None, None, "127.0.0.1", 0, "test", "local", cluster=cluster,  # type: ignore[arg-type]
                   heartbeat_interval_s=0.01)


def test_an_unanswered_knock_is_not_repeated() -> None:
    actor = _actor(Cluster())
    mailbox = Mailbox()
    actor.mailbox = mailbox
    actor._stopping = Ticks(50)  # type: ignore[assignment]
    actor._heartbeat_loop()
    assert len(mailbox.told) == 1


def test_each_answered_knock_is_followed_by_the_next() -> None:
    cluster = Cluster()
    actor = _actor(cluster)
    mailbox = Mailbox(actor)
    actor.mailbox = mailbox
    actor._stopping = Ticks(50)  # type: ignore[assignment]
    actor._heartbeat_loop()
    assert len(mailbox.told) == 50 and cluster.beats == 50


def test_a_failed_beat_still_lets_the_next_knock_in() -> None:
    class Away(Cluster):
        def beat(self) -> list[str]:
            super().beat()
            raise OSError("the store is away")

    cluster = Away()
    actor = _actor(cluster)
    actor.mailbox = Mailbox(actor)
    actor._stopping = Ticks(5)  # type: ignore[assignment]
    actor._heartbeat_loop()
    assert cluster.beats == 5
