"""The key set under gevent's monkey-patching, as `relay serve` runs it (in a child process, since patching must come
first): greenlets that meet an unknown kid at once wait for one fetch (the lock is gevent's) and all use it, and
the hub is not blocked while the provider is slow to answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
from gevent import monkey; monkey.patch_all()
import json, threading, time
import gevent
from relay.actors.adapters.http_client import HttpClient
from relay.actors.adapters.oidc.discovery import Discovery
from relay.actors.adapters.oidc.keys import JwksCache
from relay.actors.adapters.oidc.verifier import TokenVerifier
from tests.support.oidc_provider import AUDIENCE, FakeProvider, rsa_key

OLD, NEW = rsa_key("old"), rsa_key("new")
provider = FakeProvider()
provider.publish(OLD)
provider.start()
http = HttpClient()
discovery = Discovery(provider.issuer, http, 5)
keys = JwksCache(discovery, http, timeout_s=5, min_refetch_s=0)
verifier = TokenVerifier(provider.issuer, (AUDIENCE,), keys, discovery, leeway_s=5)
verifier.verify(provider.mint(OLD))
lock_type = type(keys._lock).__module__
provider.publish(OLD, NEW)
asked = []
real_lock = keys._lock
class Counting:
    def acquire(self, blocking=True):
        asked.append(1); return real_lock.acquire(blocking)
    def release(self): real_lock.release()
    def __enter__(self): return self.acquire()
    def __exit__(self, *exc): self.release()
keys._lock = Counting()
provider.gate.clear()
token = provider.mint(NEW)
greenlets = [gevent.spawn(lambda: verifier.verify(token).subject) for _ in range(8)]
deadline = time.monotonic() + 10
while (len(asked) < 8 or provider.hits["/jwks"] < 2) and time.monotonic() < deadline:
    gevent.sleep(0.01)
# This greenlet saw every caller queued while the fetch was waiting for the provider: the hub was not blocked.
queued_while_fetching = len(asked) == 8 and provider.hits["/jwks"] == 2
provider.gate.set()
gevent.joinall(greenlets, timeout=10)
provider.stop()
print(json.dumps({"subjects": [g.value for g in greenlets], "fetches": provider.hits["/jwks"],
                  "asked": len(asked), "queued_while_fetching": queued_while_fetching, "lock": lock_type}))
'''


def test_greenlets_with_an_unknown_kid_share_one_fetch_and_the_hub_keeps_running() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["subjects"] == ["person-1"] * 8
    assert result["asked"] == 8 and result["fetches"] == 2  # the first fetch, then one for all eight
    assert result["queued_while_fetching"]  # other greenlets ran while the fetch waited on the provider
    assert result["lock"].startswith("gevent")
