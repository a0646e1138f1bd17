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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from relay.actors.clock import Clock
from relay.actors.ranking import order
from relay.actors.scheduler import Cancellable, Scheduler
from relay.events.errors import DomainError, IllegalTransitionError
from relay.events.executor import DEAD, DISCONNECTED, HEALTHY, Executor
from relay.events.log import RelayLog
from relay.wire import protocol
from relay.wire.errors import PeerUnreachableError

log = logging.getLogger("relay.actors.recovery")

MESSAGE_KEY = "lifecycle"  # messages for AppLifecycle.handle carry this key
DEFAULT_MAX_PER_PEER = 4  # recovery dispatches in flight on one peer at once; the rest queue
MAX_RETRY_S = 600.0  # the longest pause before a round of peers that all failed is tried again
STORE_RETRY_S = 5.0  # after the event store refused a write (unreachable), try again this much later
RESTART_REASON = "not reconnected after relay restart"
ADOPTED_REASON = "not reconnected after its relay instance stopped"
INTERRUPTED_REASON = "relay restarted before the peer answered"
_REASON_CHARS = 200


class Peer(Protocol):
    """What peer selection needs of a live executor (ApplicationActor's LiveExecutor, or an executor on
    another instance: actors/cluster.py's RemoteExecutor, whose class says ``remote = True``)."""

    executor_id: str
    application_version: str
    connected_at: float


def rank_peers(
    dead_id: str, dead_version: str | None, live: Iterable[Peer], tried: Iterable[str] = (),
    latest_version: str | None = None,
) -> list[Peer]:
    """The candidates to recover `dead_id`, best first: never itself nor one already tried; the dead
    executor's own application_version first (the SDK only recovers workflows of its own version), then the
    application's latest version, then executors connected to this instance before those on others, then the
    longest-connected; executor_id breaks ties."""
    skip = {dead_id, *tried}
    return order((p for p in live if p.executor_id not in skip), latest=latest_version, version=dead_version,
                 local_first=True, longest_connected=True)


def describe_answer(answer: Any) -> str | None:
    """None when `answer` acknowledges a recovery; otherwise why the attempt failed (short, one line)."""
    if isinstance(answer, PeerUnreachableError):
        return str(answer)[:_REASON_CHARS]
    if isinstance(answer, BaseException):
        return "peer disconnected before answering"
    if getattr(answer, "error_message", None):
        first_line = str(answer.error_message).strip().splitlines()[0] if answer.error_message.strip() else ""
        return f"peer answered an error: {first_line}"[:_REASON_CHARS]
    if not isinstance(answer, protocol.SuccessResponse) or answer.type != protocol.MessageType.RECOVERY.value:
        return "peer sent an unexpected answer"
    if answer.success is not True:
        return "peer answered success: false"
    return None


def read_check(answer: Any) -> tuple[bool | None, str | None]:
    """An exist_pending_workflows answer: (exist, None), or (None, why it says nothing)."""
    if isinstance(answer, PeerUnreachableError):
        return None, str(answer)[:_REASON_CHARS]
    if isinstance(answer, BaseException):
        return None, "peer disconnected before answering its check"
    if getattr(answer, "error_message", None):
        text = str(answer.error_message).strip()
        return None, f"its check answered an error: {text.splitlines()[0] if text else ''}"[:_REASON_CHARS]
    if (not isinstance(answer, protocol.ExistPendingWorkflowsResponse)
            or answer.type != protocol.MessageType.EXIST_PENDING_WORKFLOWS.value or answer.exist is None):
        return None, "its check got an unexpected answer"
    return answer.exist, None


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


@dataclass
class _Dispatch:
    token: int
    peer: Peer
    request_id: str
    deadline: Cancellable
    # The peer answered success: this is its exist_pending_workflows check (same slot, same attempt).
    checking: bool = False


@dataclass
class _Dead:
    version: str | None
    tried: set[str] = field(default_factory=set)
    dispatch: _Dispatch | None = None
    retry: Cancellable | None = None
    rounds: int = 0
    waiting: bool = False  # logged as waiting for a peer
    queued: bool = False  # waiting for a free dispatch slot on a peer
    waiting_version: bool = False  # logged as waiting for a peer of its own version


class AppLifecycle:
    """Grace timers and recovery dispatches of one application (org, app), on this instance."""

    def __init__(
        self,
        org: str,
        app: str,
        *,
        log: RelayLog,
        instance_id: str,
        clock: Clock,
        scheduler: Scheduler,
        grace_secs: Callable[[], float],
        recovery_timeout_s: float,
        peers: Callable[[], list[Any]],
        latest_version: Callable[[], str | None],
        send: Callable[[Any, protocol.Request, Callable[[Any], None]], None],
        forget: Callable[[Any, str], None],
        post: Callable[[dict[str, Any]], None],
        remote_peers: Callable[[], list[Any]] | None = None,
        remote_poll_s: float = 2.0,
        max_per_peer: int = DEFAULT_MAX_PER_PEER,
    ) -> None:
        self.org = org
        self.app = app
        self.log = log
        self.instance_id = instance_id
        self.clock = clock
        self.scheduler = scheduler
        self.grace_secs = grace_secs
        self.recovery_timeout_s = recovery_timeout_s
        self.peers = peers
        self.latest_version = latest_version
        self.send = send
        self.forget = forget
        self.post = post
        # In a cluster: HEALTHY executors of the app on other instances, also candidates for recovery (after
        # local ones of the same rank); a dead executor without candidates looks for one every poll.
        self.remote_peers = remote_peers
        self.remote_poll_s = remote_poll_s
        self.max_per_peer = max(1, int(max_per_peer))
        self._grace: dict[str, _Grace] = {}
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

    def returned(self, executor_id: str) -> None:
        """The executor connected again: no grace timer, no recovery (its record becomes HEALTHY)."""
        watch = self._grace.pop(executor_id, None)
        if watch is not None:
            watch.timer.cancel()
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

    def adopt(self, rows: Iterable[dict[str, Any]], started_at: datetime, reason: str = RESTART_REASON) -> None:
        """Rebuild timers from registry rows after a restart (or an adoption from a silent instance): HEALTHY
        ones get a full grace period from `started_at` (then, if that very connection never came back, they
        are recorded disconnected for `reason` and declared dead), DISCONNECTED ones the rest of theirs, DEAD
        ones their recovery (again)."""
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
                self.disconnected(executor_id, at)
            elif row["status"] == DEAD:
                self.watch_dead(executor_id, interrupted=True)

    def rewatch(self, executor_id: str) -> None:
        """Look at the record again and watch it as its state says (after a refused connection)."""
        if executor_id in {p.executor_id for p in self.peers()}:
            return
        try:
            record = self.log.executor(self.org, self.app, executor_id)
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
        record = self.log.executor(self.org, self.app, executor_id)
        if record is None or record.status != DEAD or executor_id in self._dead:
            return
        now = self.clock()
        try:
            if record.recovered:
                self.log.update_executor(self.org, self.app, executor_id, lambda e: e.delete("recovered", now))
                return
            if interrupted and record.recovery is not None:
                peer = str(record.recovery["peer"])
                record = self.log.update_executor(
                    self.org, self.app, executor_id, lambda e: e.fail_recovery(peer, INTERRUPTED_REASON, now)
                )
        except DomainError as error:
            log.info("dead executor %s/%s/%s not taken over: %s", self.org, self.app, executor_id, error)
            return
        self._declared(record)

    # -- timers and answers, as messages ----------------------------------------------------------
    def handle(self, message: dict[str, Any]) -> None:
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

    def snapshot(self) -> dict[str, Any]:
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
        message = {MESSAGE_KEY: "grace_expired", "executor": executor_id, "token": token}
        timer = self.scheduler.call_later(max(0.0, delay), lambda: self.post(message))
        self._grace[executor_id] = _Grace(token, timer, grace, restarted_at, since, connection, reason)

    def _grace_expired(self, executor_id: str, token: Any) -> None:
        watch = self._grace.get(executor_id)
        if watch is None or watch.token != token:
            return  # cancelled or re-armed since
        del self._grace[executor_id]
        if executor_id in {p.executor_id for p in self.peers()}:
            return  # it is back
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
            record = self.log.update_executor(self.org, self.app, executor_id, declare)
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

    # -- dispatch ---------------------------------------------------------------------------------
    def _declared(self, record: Executor) -> None:
        version = record.info.get("application_version") if isinstance(record.info, dict) else None
        self._dead[record.executor] = _Dead(version=version)
        self._dispatch_next(record.executor)

    def _dispatch_next(self, executor_id: str, candidates: list[Any] | None = None) -> None:
        """Send the recovery of `executor_id` to its best candidate with a free slot. `candidates`: the live
        peers, when the caller read them already (the queue is woken for many executors at once)."""
        dead = self._dead.get(executor_id)
        if dead is None or dead.dispatch is not None:
            return
        live = self._candidates() if candidates is None else candidates
        ranked = rank_peers(executor_id, dead.version, live, dead.tried, self.latest_version())
        if not ranked:
            dead.queued = False
            if dead.tried and dead.retry is None:
                # Every live peer failed this round: try them all again later, backing off.
                delay = min(self.recovery_timeout_s * 2**dead.rounds, MAX_RETRY_S)
                dead.rounds += 1
                dead.retry = self._later(delay, "retry", executor_id)
                log.warning("recovery of %s/%s/%s failed on every live peer; again in %g s",
                            self.org, self.app, executor_id, delay)
            elif not dead.tried:
                if not dead.waiting:
                    dead.waiting = True
                    log.warning("executor %s/%s/%s is DEAD and no healthy peer is connected: its recovery waits "
                                "for one", self.org, self.app, executor_id)
                if self.remote_peers is not None and dead.retry is None:
                    # A peer may connect to another instance, which would not tell us: look again later.
                    dead.retry = self._later(self.remote_poll_s, "retry", executor_id)
            return
        peer = self._with_a_free_slot(ranked, dead.version)
        if peer is None:
            if not dead.queued:
                dead.queued = True
                log.info("recovery of %s/%s/%s queued: its candidates have %d recoveries in flight each",
                         self.org, self.app, executor_id, self.max_per_peer)
            return
        now = self.clock()
        try:
            self.log.update_executor(
                self.org, self.app, executor_id, lambda e: e.dispatch_recovery(peer.executor_id, self.instance_id, now)
            )
        except DomainError as error:
            log.info("recovery of %s/%s/%s not dispatched: %s", self.org, self.app, executor_id, error)
            self._forget_dead(executor_id)
            return
        except Exception:
            log.exception("recording the recovery dispatch of %s/%s/%s failed; trying again",
                          self.org, self.app, executor_id)
            dead.queued = False
            if dead.retry is None:
                dead.retry = self._later(STORE_RETRY_S, "retry", executor_id)
            return
        dead.queued = False
        if dead.retry is not None:
            dead.retry.cancel()
            dead.retry = None
        log.info("recovery of %s/%s/%s dispatched to %s", self.org, self.app, executor_id, peer.executor_id)
        self._send(executor_id, dead, peer, protocol.RecoveryRequest(executor_ids=[executor_id]), "answer")

    def _send(self, executor_id: str, dead: _Dead, peer: Peer, request: protocol.Request, kind: str) -> None:
        """Send `request` to `peer` in the dead executor's slot there, under the dispatch deadline; the answer
        comes back as a `kind` message."""
        token = next(self._tokens)
        deadline = self._later(self.recovery_timeout_s, "deadline", executor_id, token)
        if dead.dispatch is None:
            self._inflight[peer.executor_id] = self._inflight.get(peer.executor_id, 0) + 1
        dead.dispatch = _Dispatch(token, peer, request.request_id, deadline, checking=kind == "checked")
        message: dict[str, Any] = {MESSAGE_KEY: kind, "executor": executor_id, "token": token}
        self.send(peer, request, lambda answer: self.post({**message, "answer": answer}))

    def _answer(self, executor_id: str, token: Any, answer: Any) -> None:
        dead, dispatch = self._current(executor_id, token)
        if dead is None or dispatch is None or dispatch.checking:
            return  # stale: timed out, or the executor came back
        dispatch.deadline.cancel()
        reason = describe_answer(answer)
        if reason is not None:
            self._end_dispatch(dead)
            self._failed(executor_id, dead, dispatch.peer, reason)
            return
        if not dead.version:
            # Nothing to ask about (a record without a version): the success is all there is.
            self._end_dispatch(dead)
            self._acknowledge(executor_id, dead, dispatch.peer)
            return
        try:
            check = protocol.ExistPendingWorkflowsRequest(executor_id=executor_id, application_version=dead.version)
        except ValueError as error:
            self._end_dispatch(dead)
            self._unconfirmed(executor_id, dead, dispatch.peer, f"no check possible ({error})")
            return
        # The same peer (it read the shared system database), in the same slot: does anything remain?
        self._send(executor_id, dead, dispatch.peer, check, "checked")

    def _checked(self, executor_id: str, token: Any, answer: Any) -> None:
        dead, dispatch = self._current(executor_id, token)
        if dead is None or dispatch is None or not dispatch.checking:
            return
        dispatch.deadline.cancel()
        self._end_dispatch(dead)
        peer = dispatch.peer
        exist, why = read_check(answer)
        if exist is False:
            self._acknowledge(executor_id, dead, peer)
        elif exist is True:
            self._pending_remain(executor_id, dead, peer)
        else:
            self._unconfirmed(executor_id, dead, peer, why or "no answer")

    def _pending_remain(self, executor_id: str, dead: _Dead, peer: Peer) -> None:
        """The peer answered success, yet the dead executor's workflows of its version are still PENDING."""
        if peer.application_version != dead.version:
            reason = (f"peer answered success but workflows of version {dead.version} remain pending (the peer "
                      f"runs {peer.application_version}; only an executor of {dead.version} recovers them)")
            if not any(p.application_version == dead.version for p in self._candidates()) and not dead.waiting_version:
                dead.waiting_version = True
                log.warning("executor %s/%s/%s stays DEAD: its PENDING workflows of version %s wait for an "
                            "executor of that version to connect", self.org, self.app, executor_id, dead.version)
        else:
            reason = f"peer answered success but workflows of version {dead.version} remain pending"
        self._failed(executor_id, dead, peer, reason[:_REASON_CHARS])

    def _unconfirmed(self, executor_id: str, dead: _Dead, peer: Peer, why: str) -> None:
        """A success whose check got no usable answer: trusted from a peer of the dead executor's own version
        (the SDK recovers those), not from one of another version."""
        if peer.application_version == dead.version:
            log.warning("recovery of %s/%s/%s by %s not confirmed (%s); taken as done: same application version",
                        self.org, self.app, executor_id, peer.executor_id, why)
            self._acknowledge(executor_id, dead, peer)
        else:
            self._failed(executor_id, dead, peer,
                         f"peer of version {peer.application_version} answered success; not confirmed: {why}"
                         [:_REASON_CHARS])

    def _acknowledge(self, executor_id: str, dead: _Dead, peer_: Peer) -> None:
        peer = peer_.executor_id
        now = self.clock()

        def acknowledge(e: Executor) -> None:
            e.acknowledge_recovery(peer, now)
            e.delete(f"recovered by {peer}", now)

        try:
            self.log.update_executor(self.org, self.app, executor_id, acknowledge)
        except DomainError as error:
            log.info("recovery of %s/%s/%s not acknowledged: %s", self.org, self.app, executor_id, error)
        except Exception:
            # Not recorded: dispatch again (idempotent) rather than lose it.
            log.exception("recording the recovery of %s/%s/%s failed; dispatching again",
                          self.org, self.app, executor_id)
            dead.retry = self._later(STORE_RETRY_S, "retry", executor_id)
            return
        else:
            log.info("executor %s/%s/%s recovered by %s; its record is deleted", self.org, self.app, executor_id, peer)
        self._forget_dead(executor_id)

    def _deadline(self, executor_id: str, token: Any) -> None:
        dead, dispatch = self._current(executor_id, token)
        if dead is None or dispatch is None:
            return
        self._end_dispatch(dead)
        self.forget(dispatch.peer, dispatch.request_id)
        why = f"no answer within {self.recovery_timeout_s:g} s"
        if dispatch.checking:
            self._unconfirmed(executor_id, dead, dispatch.peer, f"its check got {why}")
        else:
            self._failed(executor_id, dead, dispatch.peer, why)

    def _failed(self, executor_id: str, dead: _Dead, peer: Peer, reason: str) -> None:
        now = self.clock()
        log.warning("recovery of %s/%s/%s on %s failed: %s", self.org, self.app, executor_id, peer.executor_id, reason)
        dead.tried.add(peer.executor_id)
        try:
            self.log.update_executor(
                self.org, self.app, executor_id, lambda e: e.fail_recovery(peer.executor_id, reason, now)
            )
        except DomainError as error:
            log.info("failed recovery of %s/%s/%s not recorded: %s", self.org, self.app, executor_id, error)
            self._forget_dead(executor_id)
            return
        except Exception:
            # The dispatch stays pending in the record; a later dispatch may follow a pending one.
            log.exception("recording a failed recovery of %s/%s/%s failed", self.org, self.app, executor_id)
        self._dispatch_next(executor_id)

    def _retry(self, executor_id: str, token: Any) -> None:
        dead = self._dead.get(executor_id)
        if dead is None or dead.retry is None or getattr(dead.retry, "token", token) != token:
            return
        dead.retry = None
        if dead.dispatch is None:
            dead.tried.clear()
            self._dispatch_next(executor_id)

    # -- the per-peer bound -----------------------------------------------------------------------
    def _with_a_free_slot(self, ranked: list[Peer], version: str | None) -> Peer | None:
        """The best-ranked candidate with a free slot, among those of the best class (the dead executor's own
        version when any candidate runs it): a full peer of the right version is waited for rather than a
        dispatch wasted on one that cannot recover those workflows."""
        same = ranked[0].application_version == version
        for peer in ranked:
            if (peer.application_version == version) != same:
                break
            if self._inflight.get(peer.executor_id, 0) < self.max_per_peer:
                return peer
        return None

    def _end_dispatch(self, dead: _Dead) -> None:
        """The dispatch (or its check) is over: its slot is free."""
        dispatch, dead.dispatch = dead.dispatch, None
        if dispatch is None:
            return
        dispatch.deadline.cancel()
        left = self._inflight.get(dispatch.peer.executor_id, 0) - 1
        if left > 0:
            self._inflight[dispatch.peer.executor_id] = left
        else:
            self._inflight.pop(dispatch.peer.executor_id, None)
        self._freed = True

    def _wake(self, *, everyone: bool = False) -> None:
        """Give freed slots to the queued dispatches, oldest dead first (`everyone`: a peer joined, every
        dead executor without a dispatch is a taker)."""
        if not (everyone or self._freed):
            return
        self._freed = False
        waiting = [e for e, d in self._dead.items() if d.dispatch is None and (everyone or d.queued)]
        if not waiting:
            return
        live = self._candidates()
        for index, executor_id in enumerate(waiting):
            if live and not any(self._inflight.get(p.executor_id, 0) < self.max_per_peer for p in live):
                # Every peer is full: the rest queue until a slot frees.
                for other in waiting[index:]:
                    dead = self._dead.get(other)
                    if dead is not None and dead.dispatch is None:
                        dead.queued = True
                break
            self._dispatch_next(executor_id, live)

    # -- small helpers ----------------------------------------------------------------------------
    def _candidates(self) -> list[Any]:
        local = list(self.peers())
        if self.remote_peers is None:
            return local
        here = {p.executor_id for p in local}
        try:
            remote = [p for p in self.remote_peers() if p.executor_id not in here]
        except Exception as error:  # the store is away: local peers only, this time
            log.warning("looking for peers of %s/%s on other instances failed (%s)", self.org, self.app,
                        type(error).__name__)
            remote = []
        return local + remote

    def _later(self, delay: float, kind: str, executor_id: str, token: int | None = None) -> Cancellable:
        token = next(self._tokens) if token is None else token
        message = {MESSAGE_KEY: kind, "executor": executor_id, "token": token}
        timer = self.scheduler.call_later(delay, lambda: self.post(message))
        return _Tokened(timer, token)

    def _current(self, executor_id: str, token: Any) -> tuple[_Dead | None, _Dispatch | None]:
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


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None
