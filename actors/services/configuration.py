"""Declarative configuration as a use case (`relay diff|apply`, POST .../config/plan and .../config/apply; the HTTP
API is web/api/config.py): plan a document (actors/policies/config*.py) against the organization as the views show
it, and apply that plan, all of it or nothing.

- `Configurations.plan` reads the views (`current_state`), makes the plan and checks its data planes' references as
  PUT .../data-plane does. ConfigInvalidError names every bad item by its path.
- `Configurations.apply` refuses a plan made on another basis (ConcurrentChangeError) or replacing keys unasked
  (KeysCannotChangeError), or granting more than the caller holds (NotAllowedError), draws the new keys' secrets
  and has the instance actor record it (actors/instance.py).
- The instance actor records it with actors/config_apply.py, every change in one save or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from relay.actors.errors import NotAllowedError
from relay.actors.policies.config import Config, ConfigInvalidError, KeySpec, parse_config
from relay.actors.policies.config_plan import (
    DATA_PLANE,
    KEY,
    AppState,
    Change,
    Plan,
    State,
    plan,
    rule_from_row,
)
from relay.actors.services.commands import run_command
from relay.actors.services.configuration_changes import ConfigurationChanges
from relay.events.application import DEFAULT_SETTINGS
from relay.events.errors import AlreadyExistsError, ConcurrentChangeError, InvalidValueError
from relay.projections.identity import Principal, hash_key, new_api_key
from relay.projections.views import Views

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime


class KeysCannotChangeError(AlreadyExistsError):
    """The document changes the scope of keys that exist, and replacing them was not asked for."""


@dataclass(frozen=True)
class Applied:
    """What an apply did: the plan's changes (none: nothing was recorded) and each issued key's secret, by name
    (shown once)."""

    changes: tuple[Change, ...]
    secrets: dict[str, str]


def current_state(views: Views, org: str) -> State:
    """The organization as the views show it: live applications (settings, data plane, rules), active keys, and the
    rules of deleted applications (which come back with them)."""
    apps = {}
    for row in views.applications.apps(org):
        settings = {key: row["settings"].get(key, default) for key, default in DEFAULT_SETTINGS.items()}
        rules = tuple((r["rule_id"], rule_from_row(r)) for r in views.alerting.rules(org, row["name"]))
        apps[row["name"]] = AppState(settings, row["settings"].get("dataPlane"), rules)
    keys = {r["name"]: KeySpec(r["name"], tuple(r["apps"]), tuple(r["permissions"]))
            for r in views.applications.keys(org) if r["revoked_at"] is None}
    dormant = {app: tuple((r["rule_id"], rule_from_row(r)) for r in views.alerting.rules(org, app))
               for ruled_org, app in sorted(views.alerting.ruled_apps()) if ruled_org == org and app not in apps}
    return State(apps, keys, dormant)


class Configurations:
    """An organization's declarative configuration, planned from the views and applied through the instance actor."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def plan(self, org: str, document: Any, *, prune: bool) -> tuple[Plan, bool]:
        """The plan that brings ``org`` to ``document``, and whether it prunes (asked, or by the file);
        ConfigInvalidError naming every bad item by its path."""
        config = parse_config(document)
        if config.org is not None and config.org != org:
            raise ConfigInvalidError([("org", f"is '{config.org}', not this request's organization '{org}'")])
        made = plan(config, current_state(self.rt.views, org), org=org, prune=prune)
        self._check_data_plane_references(config, made, org)
        return made, prune or config.prune

    def _check_data_plane_references(self, config: Config, made: Plan, org: str) -> None:
        """The data planes the plan sets follow PUT .../data-plane's rules: only references the operator bound to
        each application, never a file Relay does not read; refused before anything is recorded."""
        changes = ConfigurationChanges(self.rt)
        index = {spec.name: position for position, spec in enumerate(config.apps)}
        errors = []
        for change in made.changes:
            if change.kind != DATA_PLANE or change.after is None:
                continue
            try:
                changes.check_data_plane_reference(org, change.name, str(change.after["systemDatabaseUrlFrom"]))
            except InvalidValueError as error:
                errors.append((f"apps[{index.get(change.name, 0)}].dataPlane.systemDatabaseUrlFrom", str(error)))
        if errors:
            raise ConfigInvalidError(errors)

    def check(self, made: Plan, *, basis: str | None, replace_keys: bool, who: Principal) -> None:
        """Whether ``made`` (planned just now) may be applied for ``who``: on the plan's ``basis`` when the caller
        gives one (ConcurrentChangeError), replacing keys only when asked (KeysCannotChangeError), granting no
        permission the caller lacks (NotAllowedError)."""
        if basis is not None and basis != made.basis:
            raise ConcurrentChangeError("the organization changed since the plan was made: nothing was applied; "
                                        "plan again")
        if made.key_replacements and not replace_keys:
            raise KeysCannotChangeError(
                "API keys cannot change, and the file changes the scope of "
                f"{', '.join(made.key_replacements)}: nothing was applied. Replacing such keys (revoked, then issued "
                "again with new secrets; executors using the old ones are disconnected) needs replaceKeys (relay "
                "apply --replace-keys)")
        issued = [c for c in made.changes if c.kind == KEY and c.op != "-"]
        if not who.admin:
            beyond = sorted({p for c in issued for p in c.after.permissions} - who.permissions)
            if beyond:
                raise NotAllowedError(f"a token cannot grant more than its own permissions ({', '.join(beyond)})")

    def apply(self, org: str, made: Plan, who: Principal) -> Applied:
        """Record ``made`` (`check`ed) for ``who``, every change or none; nothing at all when it changes nothing."""
        if not made.changes:
            return Applied((), {})
        secrets = {c.name: new_api_key() for c in made.changes if c.kind == KEY and c.op != "-"}
        instance = self.rt.instance
        assert instance is not None
        hashes = {name: hash_key(secret) for name, secret in secrets.items()}
        run_command(self.rt, lambda: instance.proxy().apply_config(org, made.changes, hashes, who.display))
        return Applied(made.changes, secrets)
