"""The identity provider's signing keys (its JWKS at the discovery document's `jwks_uri`), cached by `kid`.

Each key is parsed by PyJWT (PyJWK) for the algorithms Relay accepts; a key Relay cannot use is skipped (another
kty, an HMAC secret, a private key, an RSA key under 2048 bits, `use` other than `sig`), and a document without
one usable key changes nothing. A token whose `kid` is unknown refetches the set, at most every
RELAY_OIDC_JWKS_MIN_REFETCH_S (a stream of made-up kids must not become a stream of fetches); a set older than
`max_age_s` is refetched too, so a key the provider withdrew stops being trusted. One fetch at a time: callers
that arrive during it wait for it and use its outcome (threading.Lock is gevent's under `relay serve`). With the
provider unreachable the cached keys keep working and an unknown kid is refused (fails closed)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from jwt import PyJWK
from jwt.exceptions import PyJWTError

from relay.actors.adapters.http_client import HttpClient
from relay.actors.adapters.oidc.discovery import Discovery, fetch_json
from relay.actors.errors import IdentityProviderUnavailableError, TokenRefusedError

log = logging.getLogger("relay.actors.oidc")

# What Relay accepts (never `none`, never HS*: an HMAC "key" would be the public key, known to all).
ALLOWED_ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
# A JWK without `alg` serves the algorithms its type fits (kty, and crv for EC and OKP keys).
_ALGORITHMS_OF = {("RSA", None): ("RS256", "PS256"), ("EC", "P-256"): ("ES256",), ("OKP", "Ed25519"): ("EdDSA",)}
_PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
MAX_KEYS = 100  # a provider publishes a handful; parsing thousands of RSA keys is work an attacker could ask for
MAX_KEYS_AGE_S = 600.0


@dataclass(frozen=True)
class KeySet:
    """The usable keys by kid (None: a key without one), each by the algorithm it verifies."""

    by_kid: Mapping[str | None, Mapping[str, PyJWK]] = field(default_factory=dict)
    skipped: int = 0

    def find(self, kid: str | None, algorithm: str) -> PyJWK | None:
        if kid is None:  # a token without kid: only when one key of the set fits its algorithm
            fitting = [by_alg[algorithm] for by_alg in self.by_kid.values() if algorithm in by_alg]
            return fitting[0] if len(fitting) == 1 else None
        return self.by_kid.get(kid, {}).get(algorithm)

    def knows(self, kid: str | None) -> bool:
        return kid in self.by_kid if kid is not None else bool(self.by_kid)


def _usable(jwk: Mapping[str, object]) -> dict[str, PyJWK]:
    """The key parsed for each algorithm it may verify; empty when Relay cannot use it."""
    if any(member in jwk for member in _PRIVATE_MEMBERS) or jwk.get("use", "sig") != "sig":
        return {}
    declared = jwk.get("alg")
    if declared is not None:
        algorithms: tuple[str, ...] = (declared,) if declared in ALLOWED_ALGORITHMS else ()
    else:
        crv = jwk.get("crv") if jwk.get("kty") != "RSA" else None
        algorithms = _ALGORITHMS_OF.get((str(jwk.get("kty")), crv if isinstance(crv, str) else None), ())
    parsed: dict[str, PyJWK] = {}
    for algorithm in algorithms:
        try:
            key = PyJWK(dict(jwk), algorithm)
        except (PyJWTError, TypeError, ValueError, KeyError, AttributeError):  # missing or malformed members
            return {}
        if key.Algorithm.check_key_length(key.key) is not None:  # PyJWT's minimum: RSA under 2048 bits
            return {}
        parsed[algorithm] = key
    return parsed


def parse_key_set(document: Mapping[str, object]) -> KeySet:
    """The usable keys of a JWKS document; IdentityProviderUnavailableError when it has none."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise IdentityProviderUnavailableError("the identity provider's key set has no `keys` list")
    if len(entries) > MAX_KEYS:
        raise IdentityProviderUnavailableError(f"the identity provider's key set has more than {MAX_KEYS} keys")
    keys: dict[str | None, dict[str, PyJWK]] = {}
    skipped = 0
    for entry in entries:
        kid = entry.get("kid") if isinstance(entry, dict) else None
        usable = _usable(entry) if isinstance(entry, dict) and isinstance(kid, str | None) else {}
        if not usable:
            skipped += 1
            continue
        for algorithm, key in usable.items():
            keys.setdefault(kid, {}).setdefault(algorithm, key)  # a repeated kid: the first one counts
    if not keys:
        raise IdentityProviderUnavailableError("the identity provider's key set has no key Relay can use")
    return KeySet(keys, skipped)


class JwksCache:
    """The provider's keys. `clock` is monotonic (tests pass their own)."""

    def __init__(self, discovery: Discovery, http: HttpClient, *, timeout_s: float, min_refetch_s: float,
                 max_age_s: float = MAX_KEYS_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._discovery = discovery
        self._http = http
        self._timeout_s = timeout_s
        self._min_refetch_s = min_refetch_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._keys = KeySet()
        self._fetched_at: float | None = None  # when the cached set was fetched
        self._attempted_at: float | None = None  # the last fetch, whatever came of it
        self._last_error: IdentityProviderUnavailableError | None = None
        self.fetches = 0  # fetches attempted (tests, and a sign of a kid storm)

    @property
    def keys(self) -> KeySet:
        return self._keys

    def signing_key(self, kid: str | None, algorithm: str) -> PyJWK:
        """The key that verifies a token with this `kid` and `alg`; TokenRefusedError when there is none."""
        if self._keys.knows(kid):
            if self._is_stale() and self._lock.acquire(blocking=False):  # one refresh; the others go on
                try:
                    self._fetch_if_due()
                finally:
                    self._lock.release()
        else:
            fetches = self.fetches
            with self._lock:
                if self.fetches == fetches and not self._keys.knows(kid):  # none finished while this one waited
                    self._fetch_if_due()
        key = self._keys.find(kid, algorithm)
        if key is not None:
            return key
        if self._keys.knows(kid):
            raise TokenRefusedError(f"algorithm {algorithm} does not match the signing key")
        if self._last_error is not None:
            raise TokenRefusedError("unknown signing key (kid) and the identity provider is unreachable")
        raise TokenRefusedError("unknown signing key (kid)" if kid is not None else "token has no key id (kid)")

    def refresh(self) -> None:
        """Fetch the set now, whatever the rate limit (startup, tests); errors as IdentityProviderUnavailableError."""
        with self._lock:
            self._fetch()
            if self._last_error is not None:
                raise self._last_error

    def _is_stale(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= self._max_age_s

    def _fetch_if_due(self) -> None:
        if self._attempted_at is None or self._clock() - self._attempted_at >= self._min_refetch_s:
            self._fetch()

    def _fetch(self) -> None:
        """Replace the cached set with the provider's (under the lock); on failure keep it and remember why."""
        self.fetches += 1
        self._attempted_at = self._clock()
        try:
            metadata = self._discovery.metadata()
            keys = parse_key_set(fetch_json(self._http, metadata.jwks_uri, "key set", self._timeout_s))
        except IdentityProviderUnavailableError as error:
            self._last_error = error
            log.warning("OIDC keys not refreshed (the cached ones stay): %s", error.detail)
            return
        if keys.by_kid.keys() != self._keys.by_kid.keys():
            log.info("OIDC signing keys: %d usable (%d skipped)", len(keys.by_kid), keys.skipped)
        self._keys, self._fetched_at, self._last_error = keys, self._clock(), None
