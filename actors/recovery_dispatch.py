"""Recovery dispatch of one application's dead executors: which peer gets a dead executor's recovery, the
dispatch and its confirming check, failures, retries and the per-peer slots (actors/recovery.py holds the grace
timers and the rest of the lifecycle; see its docstring for the whole story). Runs inside the application
actor, as part of AppLifecycle."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from relay.actors.clock import Clock
from relay.actors.policies.ranking import order
from relay.actors.scheduler import Cancellable, Scheduler
from relay.events.errors import DomainError
from relay.events.executor import Executor
from relay.events.refs import executor_ref
from relay.projections.store.log import RelayLog
from relay.wire.errors import PeerUnreachableError
from relay.wire.json_types import JSONObject
from relay.wire.messages import MessageType
from relay.wire.requests import ExistPendingWorkflowsRequest, RecoveryRequest, Request
from relay.wire.responses import ExistPendingWorkflowsResponse, SuccessResponse

log = logging.getLogger("relay.actors.recovery")

MESSAGE_KEY = "lifecycle"  # messages for AppLifecycle.handle carry this key
MAX_RETRY_S = 600.0  # the longest pause before a round of peers that all failed is tried again
STORE_RETRY_S = 5.0  # after the event store refused a write (unreachable), try again this much later
DEFAULT_MAX_PER_PEER = 4  # recovery dispatches in flight on one peer at once; the rest queue
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
    if not isinstance(answer, SuccessResponse) or answer.type != MessageType.RECOVERY.value:
        return "peer sent an unexpected answer"
    if getattr(answer, "success", None) is not True:
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
    if (not isinstance(answer, ExistPendingWorkflowsResponse)
            or answer.type != MessageType.EXIST_PENDING_WORKFLOWS.value):
        return None, "its check got an unexpected answer"
    exist: bool | None = getattr(answer, "exist", None)  # a field of the response class wire/responses.py makes
    if exist is None:
        return None, "its check got an unexpected answer"
    return exist, None


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


@dataclass(eq=False, repr=False)
class LifecycleWiring:
    """What AppLifecycle (actors/recovery.py) is built with: its application, the log, time, and how it reaches
    the executors. Declared once, for both its halves."""

    org: str
    app: str
    _: KW_ONLY
    log: RelayLog
    instance_id: str
    clock: Clock
    scheduler: Scheduler
    grace_secs: Callable[[], float]
    recovery_timeout_s: float
    peers: Callable[[], list[Any]]
    latest_version: Callable[[], str | None]
    send: Callable[[Any, Request, Callable[[Any], None]], None]
    forget: Callable[[Any, str], None]
    post: Callable[[JSONObject], None]
    # In a cluster: HEALTHY executors of the app on other instances, also candidates for recovery (after local
    # ones of the same rank); a dead executor without candidates looks for one every poll.
    remote_peers: Callable[[], list[Any]] | None = None
    remote_poll_s: float = 2.0
    max_per_peer: int = DEFAULT_MAX_PER_PEER
    # Whether an executor id is connected here now: O(1) from the application actor's live map (after a restart
    # thousands of grace timers expire together; scanning every peer for each was O(N^2)). None: scan the peers.
    is_live: Callable[[str], bool] | None = None


class RecoveryDispatch(LifecycleWiring):
    """AppLifecycle's recovery half (its own state is set up by AppLifecycle.__post_init__)."""

    if TYPE_CHECKING:  # what AppLifecycle (actors/recovery.py) gives this half, for the type checker
        _dead: dict[str, _Dead]
        _inflight: dict[str, int]
        _tokens: Iterator[int]

        def _later(self, delay: float, kind: str, executor_id: str, token: int | None = None) -> Cancellable: ...
        def _current(self, executor_id: str, token: object) -> tuple[_Dead | None, _Dispatch | None]: ...
        def _forget_dead(self, executor_id: str) -> None: ...

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
            self.log.change(executor_ref(self.org, self.app, executor_id),
                            lambda e: e.dispatch_recovery(peer.executor_id, self.instance_id, now))
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
        self._send(executor_id, dead, peer, RecoveryRequest(executor_ids=[executor_id]), "answer")

    def _send(self, executor_id: str, dead: _Dead, peer: Peer, request: Request, kind: str) -> None:
        """Send `request` to `peer` in the dead executor's slot there, under the dispatch deadline; the answer
        comes back as a `kind` message."""
        token = next(self._tokens)
        deadline = self._later(self.recovery_timeout_s, "deadline", executor_id, token)
        if dead.dispatch is None:
            self._inflight[peer.executor_id] = self._inflight.get(peer.executor_id, 0) + 1
        dead.dispatch = _Dispatch(token, peer, request.request_id, deadline, checking=kind == "checked")
        message: JSONObject = {MESSAGE_KEY: kind, "executor": executor_id, "token": token}
        self.send(peer, request, lambda answer: self.post({**message, "answer": answer}))

    def _answer(self, executor_id: str, token: object, answer: object) -> None:
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
            check = ExistPendingWorkflowsRequest(executor_id=executor_id, application_version=dead.version)
        except ValueError as error:
            self._end_dispatch(dead)
            self._unconfirmed(executor_id, dead, dispatch.peer, f"no check possible ({error})")
            return
        # The same peer (it read the shared system database), in the same slot: does anything remain?
        self._send(executor_id, dead, dispatch.peer, check, "checked")

    def _checked(self, executor_id: str, token: object, answer: object) -> None:
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
            self.log.change(executor_ref(self.org, self.app, executor_id), acknowledge)
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

    def _deadline(self, executor_id: str, token: object) -> None:
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
            self.log.change(executor_ref(self.org, self.app, executor_id),
                            lambda e: e.fail_recovery(peer.executor_id, reason, now))
        except DomainError as error:
            log.info("failed recovery of %s/%s/%s not recorded: %s", self.org, self.app, executor_id, error)
            self._forget_dead(executor_id)
            return
        except Exception:
            # The dispatch stays pending in the record; a later dispatch may follow a pending one.
            log.exception("recording a failed recovery of %s/%s/%s failed", self.org, self.app, executor_id)
        self._dispatch_next(executor_id)

    def _retry(self, executor_id: str, token: object) -> None:
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
