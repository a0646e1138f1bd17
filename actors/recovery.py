"""The grace timers and recovery dispatches of one application's executors, owned by its ApplicationActor.

DESIGN.md's lifecycle: a DISCONNECTED executor that does not come back within the application's
`executorTimeoutSecs` is declared DEAD; its recovery is dispatched to a healthy live peer of the same
application (same `application_version` first); an error, a disconnect or no answer within the dispatch
deadline fails that attempt and the next candidate is tried; with no candidate the executor stays DEAD until
a peer connects.

`success: true` is not enough to delete the record: the SDKs (dbos 3.2.0 `recover_pending_workflows`,
@dbos-inc/dbos-sdk 5.2.11 `recoverPendingWorkflows`) re-enqueue only the dead executor's PENDING workflows
of THEIR OWN application version, and answer success whatever they found (the Python one even when a
workflow failed to re-enqueue). So a success is confirmed by asking the same peer
`exist_pending_workflows(dead executor, its application_version)` (it reads the shared system database):
`exist: false` acknowledges the recovery and deletes the record; `exist: true` fails that attempt ("workflows
... remain pending") and the executor stays DEAD, visibly (GET .../executors, the recoveries history), retried
in backed-off rounds and dispatched at once to an executor of its version when one connects. A check that
gets no usable answer (an SDK without the type, an error, a timeout) trusts a peer of the dead executor's
own version (the old behaviour) and fails the attempt on a peer of another version.

At most `max_per_peer` dispatches (their checks included) are in flight on one peer; the rest queue, in the
order the executors were declared dead, and go out as slots free: a peer that connects while many executors
are dead does not get all their recoveries at once. A dispatch waits for a slot of the best class of
candidates (same version as the dead executor when there is one) rather than going to a worse one.

Everything here runs inside the application actor. Timers and peers' answers come back as messages
(`post`, handled by `handle`), so this state is only ever touched from the actor's thread. The aggregate
decides every transition: a command it refuses (the executor came back meanwhile, another instance got
there first) just ends that line of work.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from relay.actors.recovery_dispatch import (
    MESSAGE_KEY,
    STORE_RETRY_S,
    RecoveryDispatch,
    _Dead,
    _Dispatch,
)
from relay.actors.scheduler import Cancellable
from relay.events.errors import DomainError, IllegalTransitionError
from relay.events.executor import DEAD, DISCONNECTED, HEALTHY, Executor
from relay.events.refs import executor_ref
from relay.wire.json_types import JSONObject

log = logging.getLogger("relay.actors.recovery")


# A record taken over at a restart (or an adoption) whose grace expires while the other executors taken over
# are still coming back (one came back within the last STORM_QUIET_S) is looked at again STORM_QUIET_S later.
STORM_QUIET_S = 5.0
RESTART_REASON = "not reconnected after relay restart"
ADOPTED_REASON = "not reconnected after its relay instance stopped"
INTERRUPTED_REASON = "relay restarted before the peer answered"


@dataclass
class _Grace:
    token: int
    timer: Cancellable
    grace_secs: float
    # Set when the timer was rebuilt at startup (or at an adoption) for a record still HEALTHY: the time
    # Relay started (adopted it), which is when that executor was last known connected.
    restarted_at: datetime | None = None
    # What the timer was armed for, so it declares dead that and nothing newer (in a cluster, another
    # instance may have seen the executor come back, or go again, meanwhile): the Disconnected it counts
    # from, or, for a HEALTHY record taken over, that connection's time.
    since: datetime | None = None
    connection: datetime | None = None
    reason: str = RESTART_REASON
    # Seconds its expiry was put off because the executors connected before the restart were still coming
    # back (see AppLifecycle._grace_expired); at most one more grace period.
    postponed: float = 0.0
    deadline: float = 0.0  # scheduler time it expires


@dataclass(eq=False, repr=False)
class AppLifecycle(RecoveryDispatch):
    """Grace timers and recovery dispatches of one application (org, app), on this instance."""

    def __post_init__(self) -> None:
        self.max_per_peer = max(1, int(self.max_per_peer))
        self._grace: dict[str, _Grace] = {}
        self._last_comeback: float | None = None  # scheduler time an executor taken over came back
        self._dead: dict[str, _Dead] = {}  # in the order they were declared dead (the queue's order)
        self._inflight: dict[str, int] = {}  # peer executor_id -> dispatches (and checks) in flight on it
        self._freed = False  # a slot freed since the queue was last looked at
        self._tokens = itertools.count(1)

    # -- what the application actor tells us ------------------------------------------------------
    def disconnected(self, executor_id: str, at: datetime) -> None:
        """A Disconnected was recorded at `at`: start its grace period (counted from `at`)."""
        grace = self.grace_secs()
        remaining = grace - (self.clock() - at).total_seconds()
        self._arm_grace(executor_id, remaining, grace, since=at)

    def grace_changed(self, grace: float) -> None:
        """The app's grace period changed: every timer already running moves by the difference (it counts the
        new period from when it started), so lowering it takes effect at once."""
        now = self.scheduler.now()
        for executor_id, watch in list(self._grace.items()):
            remaining = watch.deadline - now + grace - watch.grace_secs
            self._arm_grace(executor_id, remaining, grace, watch.restarted_at, since=watch.since,
                            connection=watch.connection, reason=watch.reason)
            self._grace[executor_id].postponed = watch.postponed

    def returned(self, executor_id: str) -> None:
        """The executor connected again: no grace timer, no recovery (its record becomes HEALTHY)."""
        watch = self._grace.pop(executor_id, None)
        if watch is not None:
            watch.timer.cancel()
            if watch.restarted_at is not None:
                self._last_comeback = self.scheduler.now()
        dead = self._dead.pop(executor_id, None)
        if dead is not None:
            self._cancel(dead)
            log.info("executor %s/%s/%s came back while DEAD: its recovery is no longer needed",
                     self.org, self.app, executor_id)
        self._wake()

    def peer_connected(self) -> None:
        """A live executor joined: dead executors waiting for a candidate get one now (as many as the
        peers' free slots allow; the others queue)."""
        self._wake(everyone=True)

    def adopt(self, rows: Iterable[dict[str, Any]], started_at: datetime, reason: str = RESTART_REASON,
              down_at: datetime | None = None) -> None:
        """Rebuild timers from registry rows after a restart (or an adoption from a silent instance): HEALTHY
        ones get a full grace period from `started_at` (then, if that very connection never came back, they
        are recorded disconnected for `reason` and declared dead), DISCONNECTED ones the rest of theirs, DEAD
        ones their recovery (again).

        `down_at` (a restart): when the previous run stopped accepting executors. The downtime does not count
        against a DISCONNECTED record's grace: nobody could reconnect then. It gets what was left of its grace
        at `down_at`, from `started_at`. Without it (an adoption: the executors could reconnect to a live
        instance meanwhile) the grace runs from the disconnection."""
        live = {p.executor_id for p in self.peers()}
        for row in rows:
            executor_id = row["executor_id"]
            if executor_id in live or executor_id in self._grace or executor_id in self._dead:
                continue
            if row["status"] == HEALTHY:
                grace = self.grace_secs()
                connection = _parse_time(row.get("connected_at"))
                self._arm_grace(executor_id, grace, grace, restarted_at=started_at, since=started_at,
                                connection=connection, reason=reason)
            elif row["status"] == DISCONNECTED:
                at = _parse_time(row.get("disconnected_at")) or started_at
                if down_at is None:
                    self.disconnected(executor_id, at)
                    continue
                grace = self.grace_secs()
                used = max(0.0, (down_at - at).total_seconds())  # while the previous run was up
                remaining = grace - used - (self.clock() - started_at).total_seconds()
                self._arm_grace(executor_id, remaining, grace, since=at)
            elif row["status"] == DEAD:
                self.watch_dead(executor_id, interrupted=True)

    def rewatch(self, executor_id: str) -> None:
        """Look at the record again and watch it as its state says (after a refused connection)."""
        if executor_id in {p.executor_id for p in self.peers()}:
            return
        try:
            record = self.log.get(executor_ref(self.org, self.app, executor_id))
        except Exception:
            # The store is unreachable: the refused connection's claim stopped this executor's timers, so
            # read it again later rather than forget it (it would never be declared dead).
            log.warning("reading %s/%s/%s failed; looking again in %g s", self.org, self.app, executor_id,
                        STORE_RETRY_S)
            self._later(STORE_RETRY_S, "rewatch", executor_id)
            return
        if record is None:
            return
        if record.status == DISCONNECTED and record.disconnected_at is not None:
            self.disconnected(executor_id, record.disconnected_at)
        elif record.status == DEAD:
            self.watch_dead(executor_id)

    def watch_dead(self, executor_id: str, *, interrupted: bool = False) -> None:
        """Take charge of a DEAD record: finish it if it was recovered, else (re)dispatch its recovery.
        `interrupted`: a dispatch still pending in the record was sent by a previous run, whose answer
        can no longer arrive: record it failed first."""
        record = self.log.get(executor_ref(self.org, self.app, executor_id))
        if record is None or record.status != DEAD or executor_id in self._dead:
            return
        now = self.clock()
        try:
            if record.recovered:
                self.log.change(executor_ref(self.org, self.app, executor_id), lambda e: e.delete("recovered", now))
                return
            if interrupted and record.recovery is not None:
                peer = str(record.recovery["peer"])
                record = self.log.change(executor_ref(self.org, self.app, executor_id),
                                         lambda e: e.fail_recovery(peer, INTERRUPTED_REASON, now))
        except DomainError as error:
            log.info("dead executor %s/%s/%s not taken over: %s", self.org, self.app, executor_id, error)
            return
        self._declared(record)

    # -- timers and answers, as messages ----------------------------------------------------------
    def handle(self, message: Mapping[str, object]) -> None:
        kind = message.get(MESSAGE_KEY)
        executor_id = str(message.get("executor"))
        token = message.get("token")
        if kind == "grace_expired":
            self._grace_expired(executor_id, token)
        elif kind == "answer":
            self._answer(executor_id, token, message.get("answer"))
        elif kind == "checked":
            self._checked(executor_id, token, message.get("answer"))
        elif kind == "deadline":
            self._deadline(executor_id, token)
        elif kind == "retry":
            self._retry(executor_id, token)
        elif kind == "rewatch":
            self.rewatch(executor_id)
        self._wake()

    def stop(self) -> None:
        for watch in self._grace.values():
            watch.timer.cancel()
        for dead in self._dead.values():
            self._cancel(dead)
        self._grace.clear()
        self._dead.clear()
        self._inflight.clear()
        self._freed = False

    def snapshot(self) -> JSONObject:
        """What this lifecycle watches: executors in grace, dead ones with their pending dispatch."""
        return {
            "grace": sorted(self._grace),
            "dead": {
                executor_id: {
                    "peer": dead.dispatch.peer.executor_id if dead.dispatch else None,
                    "tried": sorted(dead.tried),
                    "retry": dead.retry is not None,
                    **({"checking": True} if dead.dispatch is not None and dead.dispatch.checking else {}),
                    **({"queued": True} if dead.queued else {}),
                }
                for executor_id, dead in sorted(self._dead.items())
            },
            **({"in_flight": dict(sorted(self._inflight.items()))} if self._inflight else {}),
        }

    # -- grace ------------------------------------------------------------------------------------
    def _arm_grace(
        self, executor_id: str, delay: float, grace: float, restarted_at: datetime | None = None, *,
        since: datetime | None = None, connection: datetime | None = None, reason: str = RESTART_REASON,
    ) -> None:
        previous = self._grace.pop(executor_id, None)
        if previous is not None:
            previous.timer.cancel()
        token = next(self._tokens)
        message: JSONObject = {MESSAGE_KEY: "grace_expired", "executor": executor_id, "token": token}
        timer = self.scheduler.call_later(max(0.0, delay), lambda: self.post(message))
        self._grace[executor_id] = _Grace(token, timer, grace, restarted_at, since, connection, reason,
                                          deadline=self.scheduler.now() + max(0.0, delay))

    def _connected_here(self, executor_id: str) -> bool:
        if self.is_live is not None:
            return self.is_live(executor_id)
        return any(p.executor_id == executor_id for p in self.peers())

    def _grace_expired(self, executor_id: str, token: object) -> None:
        watch = self._grace.get(executor_id)
        if watch is None or watch.token != token:
            return  # cancelled or re-armed since
        del self._grace[executor_id]
        if self._connected_here(executor_id):
            return  # it is back
        if self._storm_goes_on(watch):
            # Executors taken over are still coming back (a restart under thousands of them takes a while,
            # most of their handshakes refused with 503 meanwhile): this one may just not have got in yet.
            self._arm_grace(executor_id, STORM_QUIET_S, watch.grace_secs, watch.restarted_at, since=watch.since,
                            connection=watch.connection, reason=watch.reason)
            self._grace[executor_id].postponed = watch.postponed + STORM_QUIET_S
            return
        now = self.clock()

        def declare(e: Executor) -> None:
            # A record still HEALTHY after a restart: it never reconnected (to us, or to anyone since we
            # started). It was last known connected when this instance started.
            if watch.restarted_at is not None and e.status == HEALTHY and e.connected_at <= min(
                watch.restarted_at, watch.connection or watch.restarted_at
            ):
                e.disconnect(watch.reason, watch.restarted_at)
            elif (e.status == DISCONNECTED and watch.since is not None and e.disconnected_at is not None
                  and e.disconnected_at > watch.since):
                # Another disconnection than ours (it came back elsewhere and went again): whoever
                # recorded it watches it.
                raise IllegalTransitionError(f"executor '{e.executor}'", "disconnected again since", "declare it dead")
            e.declare_dead(watch.grace_secs, now)

        try:
            record = self.log.change(executor_ref(self.org, self.app, executor_id), declare)
        except DomainError as error:
            log.info("executor %s/%s/%s not declared dead: %s", self.org, self.app, executor_id, error)
            return
        except Exception:
            log.exception("declaring %s/%s/%s dead failed; trying again", self.org, self.app, executor_id)
            self._arm_grace(executor_id, STORE_RETRY_S, watch.grace_secs, watch.restarted_at, since=watch.since,
                            connection=watch.connection, reason=watch.reason)
            return
        log.info("executor %s/%s/%s declared DEAD after %g s", self.org, self.app, executor_id, watch.grace_secs)
        self._declared(record)

    def _storm_goes_on(self, watch: _Grace) -> bool:
        """Whether to put off the expiry of a record taken over at a restart (or adoption): another one came
        back within the last STORM_QUIET_S, and this one was put off for less than a grace period so far."""
        if watch.restarted_at is None or self._last_comeback is None or watch.postponed >= watch.grace_secs:
            return False
        return self.scheduler.now() - self._last_comeback < STORM_QUIET_S

    # -- dispatch ---------------------------------------------------------------------------------
    def _declared(self, record: Executor) -> None:
        version = record.info.get("application_version") if isinstance(record.info, dict) else None
        version = version if isinstance(version, str) else None  # check_info stored a string (or nothing)
        self._dead[record.executor] = _Dead(version=version)
        self._dispatch_next(record.executor)

    def _later(self, delay: float, kind: str, executor_id: str, token: int | None = None) -> Cancellable:
        token = next(self._tokens) if token is None else token
        message: JSONObject = {MESSAGE_KEY: kind, "executor": executor_id, "token": token}
        timer = self.scheduler.call_later(delay, lambda: self.post(message))
        return _Tokened(timer, token)

    def _current(self, executor_id: str, token: object) -> tuple[_Dead | None, _Dispatch | None]:
        dead = self._dead.get(executor_id)
        if dead is None or dead.dispatch is None or dead.dispatch.token != token:
            return None, None
        return dead, dead.dispatch

    def _cancel(self, dead: _Dead) -> None:
        self._end_dispatch(dead)
        if dead.retry is not None:
            dead.retry.cancel()
            dead.retry = None

    def _forget_dead(self, executor_id: str) -> None:
        dead = self._dead.pop(executor_id, None)
        if dead is not None:
            self._cancel(dead)


@dataclass
class _Tokened:
    """A timer with the token its message carries (so a retry can tell it is the current one)."""

    timer: Cancellable
    token: int

    def cancel(self) -> None:
        self.timer.cancel()


def _parse_time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None
