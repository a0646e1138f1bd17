"""InstanceActor: this Relay process as an actor; records its start and stop and runs org/key commands."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from typing import Any
from uuid import UUID

import pykka

from relay.actors.application import create_organization_if_missing
from relay.actors.cluster import Cluster
from relay.actors.config_apply import apply_config
from relay.actors.context import ActorContext
from relay.actors.directory import Directory
from relay.actors.membership import Registration, Removal, move, register, remove_member
from relay.actors.policies.config_plan import APP, KEY, SETTINGS, Change
from relay.events.access import OrganizationAccess
from relay.events.errors import ConflictError, NotFoundError
from relay.events.instance import RelayInstance
from relay.events.operation import Operation
from relay.events.organization import Organization
from relay.events.refs import access_ref, instance_ref, org_ref
from relay.events.user import User

log = logging.getLogger("relay.actors.instance")


class InstanceActor(pykka.ThreadingActor):
    def __init__(
        self,
        ctx: ActorContext,
        directory: Directory,
        address: str,
        port: int,
        version: str,
        default_org: str,
        cluster: Cluster | None = None,
        heartbeat_interval_s: float = 2.0,
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.directory = directory
        self.address = address
        self.port = port
        self.version = version
        self.default_org = default_org
        self.cluster = cluster
        self.heartbeat_interval_s = heartbeat_interval_s
        self._stopping = threading.Event()
        # A knock not yet answered: the loop knocks again only once the actor has beaten. While the store is slow
        # or away a beat can take longer than the interval, and knocks queued one per interval in the mailbox, in
        # front of every command of this actor (each one then waited for all the beats before it).
        self._knocked = threading.Event()

    def on_start(self) -> None:
        now = self.ctx.clock()
        if self.cluster is not None:
            # Beat before recording the (re)start: a peer about to adopt us checks our heartbeat again after
            # loading our aggregate, so either it adopts our old records or we resume them, never both.
            self.cluster.join()
            self.cluster.rejoin_handlers.insert(0, self._record_start)
        self._record_start()
        create_organization_if_missing(self.ctx.log, self.default_org, now)
        if self.cluster is not None:
            threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()

    def _record_start(self) -> None:
        me, at = self.ctx.instance_id, self.ctx.clock()
        self.ctx.log.run(instance_ref(me), lambda found: RelayInstance.start_again(
            found, me, self.address, self.port, self.version, at))

    def _heartbeat_loop(self) -> None:
        # The loop only knocks; the beat itself runs inside the actor, one at a time.
        while not self._stopping.wait(self.heartbeat_interval_s):
            if self._knocked.is_set():
                continue
            self._knocked.set()
            try:
                self.actor_ref.tell({"beat": True})
            except pykka.ActorDeadError:
                return

    def on_receive(self, message: object) -> None:
        if isinstance(message, dict) and message.get("beat") and self.cluster is not None:
            try:
                self.cluster.beat()
            except Exception as error:  # the store may be away: beat again next time
                log.warning("heartbeat failed (%s)", type(error).__name__)
            finally:
                self._knocked.clear()

    def on_stop(self) -> None:
        self._stopping.set()
        try:
            self.ctx.log.change(instance_ref(self.ctx.instance_id), lambda i: i.stop(self.ctx.clock()))
        except Exception:
            log.exception("could not record this instance's stop")
        if self.cluster is not None:
            try:
                self.cluster.leave()
            except Exception:
                log.warning("could not mark this instance's heartbeat stale; peers adopt it after the timeout")

    def ensure_organization(self, org: str) -> Organization:
        return create_organization_if_missing(self.ctx.log, org, self.ctx.clock())

    def issue_key(
        self, org: str, key_name: str, key_hash: str, apps: list[str], permissions: list[str], by: str = "relay"
    ) -> Organization:
        at = self.ctx.clock()
        return self.ctx.log.change(org_ref(org), lambda organization: organization.issue_key(
            key_name, key_hash, apps, permissions, at, by), create=lambda: Organization.create(org, at))

    def record_operation(self, operation_id: UUID, **fields: Any) -> None:
        """The audit trail's entry for one control-plane action (events/operation.py)."""
        self.ctx.log.record(Operation.perform(operation_id, at=self.ctx.clock(), **fields))

    def apply_config(self, org: str, changes: tuple[Change, ...], key_hashes: dict[str, str],
                     by: str = "relay") -> int:
        """Record a configuration plan (actors/policies/config.py) in one save: the organization's keys are this
        actor's, and the plan's changes to applications and rules go in the same transaction (all or none; the
        aggregates' versions and the plan's expectations guard against concurrent writers). Then act as the
        single commands do: close the sockets of replaced or revoked keys and of deleted applications, and start
        the actors of the applications changed (they evaluate alerting rules and run retention). Returns how
        many aggregates changed."""
        changed = apply_config(self.ctx.log, org, changes, key_hashes, lambda: str(uuid.uuid4()), self.ctx.clock(), by)
        for change in changes:
            if change.kind == KEY and change.op != "+":
                for ref in self.directory.connections_of_key(org, change.name):
                    ref.tell({"close": "API key revoked"})
            elif change.kind == APP and change.op == "-":
                with contextlib.suppress(pykka.ActorDeadError):
                    self.directory.application(org, change.name).proxy().close_executors("application deleted")
            elif change.app is not None:
                actor = self.directory.application(org, change.app)  # started, if it was not: it watches its rules
                if change.kind == SETTINGS and "executorTimeoutSecs" in change.after:
                    actor.proxy().grace_changed(change.after["executorTimeoutSecs"])  # as PATCH does (ADR 0013)
        return len(changed)

    def revoke_key(self, org: str, key_name: str, by: str = "relay") -> int:
        """Revoke a key and close every socket that connected with it; return how many were closed."""
        at = self.ctx.clock()
        self.ctx.log.change(org_ref(org), lambda organization: organization.revoke_key(key_name, at, by))
        refs = self.directory.connections_of_key(org, key_name)
        for ref in refs:
            ref.tell({"close": "API key revoked"})
        return len(refs)

    # -- people and their organizations (actors/membership.py; the use cases are actors/services/people.py) -----------
    def _people_caught_up(self) -> None:
        """What the people view is checked for (a taken user name or e-mail, a claimed domain) must include this
        actor's own earlier commands: they are serialised here, so the check and the record cannot interleave
        with another request's on this instance."""
        self.ctx.runner.wait_for(self.ctx.log.position)

    def register_person(self, plan: Registration) -> str:
        """Record a registration (a new person, in ``plan.org``); their user id."""
        self._people_caught_up()
        people = self.ctx.views.people
        if people.user_by_name(plan.username) is not None:
            raise ConflictError(f"the user name '{plan.username}' is taken: choose another")
        if people.user_by_email(plan.email) is not None:
            raise ConflictError(f"a person with the e-mail address {plan.email} is registered already")
        return register(self.ctx.log, plan, self.ctx.clock())

    def join_organization(self, user_id: str, org: str, secret_hash: str) -> int:
        """A registered person joins ``org`` with its join secret (leaving their organization: their keys there
        are revoked and their sockets closed); how many sockets were closed."""
        user = self.ctx.log.load(UUID(user_id), User)
        if user is None:
            raise NotFoundError("not registered: register first (POST /v2/users)")
        self._people_caught_up()
        membership = self.ctx.views.people.membership(str(user.id))
        removal = move(self.ctx.log, user, org, secret_hash, membership.org if membership else None,
                       self.ctx.clock())
        return self._close_revoked(removal)

    def remove_member(self, org: str, username: str, by: str) -> Removal:
        """Remove a member and revoke the keys they issued in ``org`` (one transaction); close those keys'
        sockets as revoke_key does."""
        removal = remove_member(self.ctx.log, org, username, by, self.ctx.clock())
        self._close_revoked(removal)
        return removal

    def _close_revoked(self, removal: Removal | None) -> int:
        if removal is None:
            return 0
        closed = 0
        for key_name in removal.revoked_keys:
            for ref in self.directory.connections_of_key(removal.org, key_name):
                ref.tell({"close": "API key revoked"})
                closed += 1
        return closed

    def grant_role(self, org: str, username: str, role: str, by: str) -> None:
        at = self.ctx.clock()

        def grant(access: OrganizationAccess) -> None:
            uid = access.member_named(username)
            if uid is None:
                raise NotFoundError(f"no member '{username}' in '{org}'")
            access.grant(uid, role, by, at)

        self.ctx.log.change(access_ref(org), grant, create=lambda: OrganizationAccess.create(org, at))

    def create_role(self, org: str, name: str, permissions: list[str], by: str) -> None:
        at = self.ctx.clock()
        self.ctx.log.change(access_ref(org), lambda access: access.create_role(name, permissions, by, at),
                            create=lambda: OrganizationAccess.create(org, at))

    def delete_role(self, org: str, name: str, by: str) -> None:
        at = self.ctx.clock()
        self.ctx.log.change(access_ref(org), lambda access: access.delete_role(name, by, at),
                            create=lambda: OrganizationAccess.create(org, at))

    def generate_secret(self, org: str, secret_hash: str, by: str) -> None:
        at = self.ctx.clock()
        self.ctx.log.change(access_ref(org), lambda access: access.generate_secret(secret_hash, by, at),
                            create=lambda: OrganizationAccess.create(org, at))

    def claim_domain(self, org: str, domain: str, by: str) -> None:
        """Claim an e-mail domain for ``org``: ConflictError when another organization holds it."""
        self._people_caught_up()
        holder = self.ctx.views.people.claim_org(domain)
        if holder is not None and holder != org:
            raise ConflictError(f"{domain.lower()} is claimed by another organization: one organization per domain")
        at = self.ctx.clock()
        self.ctx.log.change(access_ref(org), lambda access: access.claim_domain(domain, by, at),
                            create=lambda: OrganizationAccess.create(org, at))

    def release_domain(self, org: str, domain: str, by: str) -> None:
        at = self.ctx.clock()
        self.ctx.log.change(access_ref(org), lambda access: access.release_domain(domain, by, at),
                            create=lambda: OrganizationAccess.create(org, at))

    def change_retention(self, org: str, days: int, by: str) -> None:
        at = self.ctx.clock()
        self.ctx.log.change(org_ref(org), lambda organization: organization.change_retention(days, at, by))
