"""Relay's OpenAPI document as a real (not started) Relay app serves it, with the app's URL rules beside it."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def served_document(**settings: Any) -> Iterator[dict[str, Any]]:
    """GET /openapi.json from a Relay app with `settings`, without an Authorization header; `__rules__` holds
    every (method, rule, endpoint) the app routes (HEAD, OPTIONS and static files left out)."""
    from relay.actors.configuration.settings import Settings
    from relay.actors.runtime import Runtime
    from relay.web.wsgi import create_app

    with tempfile.TemporaryDirectory(prefix="relay-openapi-") as data_dir:
        rt = Runtime(Settings(data_dir=Path(data_dir), admin_token="openapi-test-admin-token", **settings))
        try:
            app = create_app(rt)
            response = app.test_client().get("/openapi.json")
            assert response.status_code == 200, response.data
            assert response.mimetype == "application/json"
            doc = response.get_json()
            doc["__rules__"] = sorted(
                (m.lower(), r.rule, r.endpoint) for r in app.url_map.iter_rules() for m in r.methods or ()
                if m not in ("HEAD", "OPTIONS") and r.endpoint != "static"
            )
            yield doc
        finally:
            rt.stop()
