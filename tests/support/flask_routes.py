"""Every route of Relay's Flask app, read from its URL map (tests that must cover each route, so that a new one
fails them until it is classified)."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Any


def url_rules() -> list[Any]:
    """The Flask URL map's rules of an app built on a throwaway runtime."""
    from relay.actors.configuration.settings import Settings
    from relay.actors.runtime import Runtime
    from relay.web.wsgi import create_app

    with tempfile.TemporaryDirectory(prefix="relay-routes-") as data_dir:
        rt = Runtime(Settings(data_dir=Path(data_dir), admin_token=f"routes-{secrets.token_urlsafe(24)}"))
        try:
            return list(create_app(rt).url_map.iter_rules())
        finally:
            rt.stop()
