"""One configuration change at a time: registering (and deleting) an application, its settings and data plane,
issuing and revoking API keys. The HTTP API (web/api/applications.py, dataplane.py) and the console's forms
(web/console/views.py) make them through here; a whole configuration document is actors/services/configuration.py.
Each is one actor command (actors/application.py, actors/instance.py) run by `run_command`: the aggregate's
refusal (a DomainError) or TimedOutError reaches the caller as it is, and the views have caught up when it
returns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from relay.actors.adapters.dataplane.reference import check_reference
from relay.actors.services.commands import run_command
from relay.wire.json_types import JSONObject

if TYPE_CHECKING:
    import pykka

    from relay.actors.instance import InstanceActor
    from relay.actors.runtime import Runtime


class ConfigurationChanges:
    """Single changes to an organization's applications and keys, by `by` (the principal's display name)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def register_app(self, org: str, app: str, by: str) -> None:
        run_command(self.rt, lambda: self.rt.directory.application_proxy(org, app).register(by=by))

    def delete_app(self, org: str, app: str, by: str) -> None:
        run_command(self.rt, lambda: self.rt.directory.application_proxy(org, app).delete(by=by))

    def change_settings(self, org: str, app: str, changes: JSONObject, by: str) -> None:
        run_command(self.rt, lambda: self.rt.directory.application_proxy(org, app).change_settings(changes, by=by))

    def check_data_plane_reference(self, org: str, app: str, reference: str) -> None:
        """InvalidValueError when the reference is not one the operator bound to this application, or names a file
        Relay never reads (a device, a FIFO, a large file): checked before anything is recorded (and before the
        console asks to confirm), for PUT .../data-plane, the console and `relay apply` alike."""
        settings = self.rt.settings
        check_reference(reference, org, app, settings.data_plane_references, private=(settings.data_dir,))

    def configure_data_plane(self, org: str, app: str, config: JSONObject | None, by: str) -> None:
        """Set (None: remove) the application's data plane; its reference was checked before
        (check_data_plane_reference)."""
        run_command(self.rt, lambda: self.rt.directory.application_proxy(org, app).configure_data_plane(
            config, by=by))

    def issue_key(self, org: str, name: str, key_hash: str, apps: list[str], permissions: list[str],
                  by: str) -> None:
        """Record a key by its hash (the secret is the caller's to show, once)."""
        instance = self._instance()
        run_command(self.rt, lambda: instance.proxy().issue_key(org, name, key_hash, apps, permissions, by=by))

    def revoke_key(self, org: str, name: str, by: str) -> int:
        """Revoke a key; how many executor sockets that used it were closed."""
        instance = self._instance()
        return int(run_command(self.rt, lambda: instance.proxy().revoke_key(org, name, by=by)))

    def _instance(self) -> pykka.ActorRef[InstanceActor]:
        instance = self.rt.instance
        assert instance is not None  # callers refuse before, while the instance is not started
        return instance
