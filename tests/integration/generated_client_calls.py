"""Calls Relay through the client openapi-python-client generated from /openapi-3.0.json (test_generated_client.py
runs this with .venv-openapi-client's python, the generated package on PYTHONPATH).

Reads RELAY_URL, RELAY_ADMIN_TOKEN (secret: from the environment, not argv), ORG, APP and KEY_NAME from the
environment; prints one JSON object of what the generated client parsed (never a token).
"""

from __future__ import annotations

import json
import os
from typing import Any

from relay_client import AuthenticatedClient, Client
from relay_client.api.applications import get_app, list_apps, register_app
from relay_client.api.tokens import create_token
from relay_client.models import CreateTokenInputBody, PutAppInputBody


def _app(parsed: Any) -> dict[str, Any]:
    return {"type": type(parsed).__name__, "name": parsed.name, "status": str(parsed.status),
            "private_mode": parsed.private_mode, "executor_timeout_secs": parsed.executor_timeout_secs}


def main() -> None:
    url, org, app = os.environ["RELAY_URL"], os.environ["ORG"], os.environ["APP"]
    admin = AuthenticatedClient(base_url=url, token=os.environ["RELAY_ADMIN_TOKEN"], raise_on_unexpected_status=True)
    out: dict[str, Any] = {}

    registered = register_app.sync_detailed(org, app, client=admin, body=PutAppInputBody(private_mode=True))
    out["register_status"] = int(registered.status_code)

    created = create_token.sync(org, os.environ["KEY_NAME"], client=admin,
                                body=CreateTokenInputBody(app_names=[app]))
    out["token"] = {"type": type(created).__name__, "token_name": created.token_name,
                    "prefix": created.token[:5], "length": len(created.token)}

    # the API key the generated client just parsed authenticates the next calls
    with AuthenticatedClient(base_url=url, token=created.token, raise_on_unexpected_status=True) as key:
        listed = list_apps.sync(org, client=key)
        out["apps"] = [_app(a) for a in listed]
        out["app"] = _app(get_app.sync(org, app, client=key))

    refused = list_apps.sync_detailed(org, client=Client(base_url=url))  # no credentials
    out["unauthenticated"] = {"status": int(refused.status_code), "type": type(refused.parsed).__name__}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
