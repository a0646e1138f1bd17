"""The image's HEALTHCHECK: GET /healthz on this container's Relay; exit 0 when it answers 200, else 1.

Reads the same RELAY_PORT and RELAY_TLS_CERT as `relay serve`. Over TLS the certificate names the public host,
not 127.0.0.1, so it is not verified here: this only asks whether the process answers.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request


def main() -> int:
    port = os.environ.get("RELAY_PORT") or "8090"
    tls = bool(os.environ.get("RELAY_TLS_CERT"))
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/healthz"
    context = ssl._create_unverified_context() if tls else None  # noqa: S323 - liveness only, see above
    try:
        with urllib.request.urlopen(url, timeout=3, context=context) as response:  # noqa: S310 - fixed scheme
            return 0 if response.status == 200 else 1
    except (OSError, urllib.error.URLError) as error:
        sys.stderr.write(f"relay-healthcheck: {url}: {error}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
