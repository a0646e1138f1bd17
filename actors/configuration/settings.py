"""Settings from the environment (RELAY_*), with the defaults of API.md."""

from __future__ import annotations

import ipaddress
import math
import os
import secrets
import socket
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from relay.actors.configuration.limits import Limits
from relay.actors.configuration.oidc import parse_oidc
from relay.events.data_plane import AllowedReferences, parse_allowed_references
from relay.events.errors import InvalidValueError
from relay.projections.backend import StoreConfig, private_dir

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MIN_ADMIN_TOKEN_CHARS = 32
ADMIN_TOKEN_FILE = "admin_token"  # noqa: S105 - a file name, not a token
MAX_WORKERS = 64


class ConfigError(ValueError):
    """A setting with a value Relay cannot use; the message names the variable, never its value."""


@dataclass(frozen=True)
class EnvSetting:
    """One RELAY_* variable: its default as written in the environment ("" when it has none, or when it is
    derived: then ``meaning`` says from what) and what it means. `relay serve --help` and the README's table
    are rendered from ENV_SETTINGS, and `Settings.from_env` takes its defaults from it."""

    name: str
    default: str
    meaning: str


ENV_SETTINGS: tuple[EnvSetting, ...] = (
    EnvSetting("RELAY_HOST", "127.0.0.1", "where `relay serve` listens (HTTP API, console, `/websocket/...`)"),
    EnvSetting("RELAY_PORT", "8090", "the port it listens on"),
    EnvSetting("RELAY_DATA_DIR", "relay-data",
               "the embedded SQLite store (event log + views) and the generated admin token; the directory is "
               "made (or set) 0700 and Relay's files in it 0600"),
    EnvSetting("RELAY_DATABASE_URL", "",
               "`postgresql://user:pass@host:port/db`: use PostgreSQL instead of SQLite"),
    EnvSetting("RELAY_DATABASE_SCHEMA", "public", "the PostgreSQL schema Relay's tables live in"),
    EnvSetting("RELAY_ADMIN_TOKEN", "",
               "bootstrap bearer token with every permission (else generated into RELAY_DATA_DIR/admin_token); at "
               "least 32 characters (e.g. `openssl rand -hex 32`): a shorter one stops `relay serve`"),
    EnvSetting("RELAY_DEFAULT_ORG", "local", "the organization Relay starts with (Conductor's no-auth name)"),
    EnvSetting("RELAY_INSTANCE_ID", "",
               "this instance's identity (default: hostname:port); a start is refused (exit 2, nothing recorded) "
               "while another live process beats with it"),
    EnvSetting("RELAY_ADVERTISE_ADDRESS", "", "the address peers reach this instance at (default: RELAY_HOST)"),
    EnvSetting("RELAY_WORKERS", "1",
               "worker processes `relay serve` runs on its one port (SO_REUSEPORT), each an instance of one cluster "
               "on RELAY_DATABASE_URL (PostgreSQL only); `relay serve --workers N` says the same"),
    EnvSetting("RELAY_HEARTBEAT_INTERVAL_S", "2", "HA: how often an instance beats in the shared instances table"),
    EnvSetting("RELAY_DRAIN_S", "0",
               "on SIGTERM, how long the instance keeps serving while /readyz says it is stopping (503), before it "
               "closes its port and its executors' sockets: behind a load balancer, at least its health check's "
               "interval times the failures it needs (haproxy's inter x fall), so no new request arrives then"),
    EnvSetting("RELAY_INSTANCE_TIMEOUT_S", "10",
               "HA: how long a silent instance has before one survivor adopts its executors (timers, recoveries)"),
    EnvSetting("RELAY_FORWARD_SECRET", "",
               "HA: shared by every instance; signs (HMAC-SHA256) the calls an instance forwards to "
               "`POST /internal/v1/forward/{appID}` on the instance an executor is connected to. Unset: no "
               "forwarding (an instance only reaches its own executors)"),
    EnvSetting("RELAY_REQUEST_TIMEOUT_S", "30", "how long an API call waits for an executor's answer (then 504)"),
    EnvSetting("RELAY_PING_INTERVAL_S", "10", "executor liveness: how often executors are pinged"),
    EnvSetting("RELAY_PONG_TIMEOUT_S", "25", "executor liveness: how long an executor may go without answering"),
    EnvSetting("RELAY_MAX_FRAME_BYTES", "67108864",
               "the largest WebSocket message accepted from an executor (64 MiB); a larger one closes that "
               "socket (1009)"),
    EnvSetting("RELAY_HANDSHAKE_TIMEOUT_S", "10",
               "how long a new connection may take to complete its TLS handshake and send its HTTP request, "
               "and a new socket to answer `executor_info` (then it is closed)"),
    EnvSetting("RELAY_MAX_INFLIGHT_PER_EXECUTOR", "256",
               "API requests one executor may have unanswered; past it the API answers 429, naming the limit"),
    EnvSetting("RELAY_MAX_CONNECTIONS", "1000",
               "executor WebSockets open at once; past it the handshake is refused with 503 and `Retry-After` "
               "(keep it below the process's file-descriptor limit)"),
    EnvSetting("RELAY_MAX_HANDSHAKES_IN_FLIGHT", "8192",
               "executor handshakes in progress at once (until the executor has answered `executor_info` and its "
               "connection is recorded); past it an upgrade waits up to 2 s for a place, then is refused with 503 "
               "and `Retry-After: 1`"),
    EnvSetting("RELAY_MAX_HTTP_CONNECTIONS", "1000",
               "connections being served at once (HTTP requests, keep-alive connections; an executor's only until "
               "its request line names /websocket/, then RELAY_MAX_CONNECTIONS bounds it): past "
               "it a new connection is answered 503 with `Retry-After: 1` (over TLS: closed) at once, unread"),
    EnvSetting("RELAY_MAX_BODY_BYTES", "1048576",
               "the largest request body of an API route (console forms: 64 KiB; the routes below: their own); "
               "a larger `Content-Length` is answered 413 before the body is read, a chunked body once it passes"),
    EnvSetting("RELAY_MAX_LARGE_BODY_BYTES", "16777216",
               "the largest request body of the routes that take large ones: workflow import and raw executor "
               "requests (the HA forward: RELAY_MAX_FRAME_BYTES and its envelope)"),
    EnvSetting("RELAY_BODY_TIMEOUT_S", "60",
               "a request body must arrive whole within this many seconds of its headers (then 408, closed)"),
    EnvSetting("RELAY_BODY_MIN_BYTES_PER_S", "1024",
               "the slowest a request body may arrive: it has RELAY_HANDSHAKE_TIMEOUT_S, plus one second for "
               "every this many bytes received (within RELAY_BODY_TIMEOUT_S); slower, it is cut (408, closed)"),
    EnvSetting("RELAY_LOGIN_FAILURES_PER_MIN", "20",
               "failed logins (an unknown or revoked token at the console's login or as an API bearer) in a "
               "minute, counted per source address (the caller behind RELAY_TRUSTED_PROXIES): past it every login "
               "and every bearer request from that address gets 429 with `Retry-After` until the minute has "
               "passed, before the token is looked up, valid or not; other addresses and console sessions already "
               "open are unaffected (counted in memory, per instance)"),
    EnvSetting("RELAY_HANDSHAKE_FAILURES_PER_MIN", "30",
               "failed executor handshakes (401/403) in a minute, counted per source address, application and key "
               "(a fingerprint; the key is never kept): past it that key from that address gets 429 with "
               "`Retry-After` before it is looked up, and other failing keys from the address get 429 instead of "
               "401/403. A valid key is never refused for other keys' failures (one stale executor behind NAT "
               "does not lock out the fleet); a lockout is logged once, naming the application (counted in "
               "memory, per instance)"),
    EnvSetting("RELAY_DATA_PLANE_REFERENCES", "",
               "the system database references each application's data plane may use, bound by the operator: "
               "`org/app=env:NAME` or `org/app=file:/absolute/path`, separated by commas or spaces (README, "
               "\"Data plane\"); a data plane naming any other reference is refused"),
    EnvSetting("RELAY_TRUSTED_PROXIES", "",
               "comma-separated CIDRs of reverse proxies (e.g. `10.0.0.0/8,127.0.0.1/32`) whose `X-Forwarded-For` "
               "names the caller, for the audit log's `sourceIp` and the per-address limits: the right-most address "
               "in it that is not itself a trusted proxy. From any other peer the header is ignored. Unset: the "
               "direct peer is the caller"),
    EnvSetting("RELAY_TLS_CERT", "",
               "PEM certificate (chain): `relay serve` speaks https:// and wss:// (TLS 1.2 or later) on its one "
               "port; set with RELAY_TLS_KEY (both or neither)"),
    EnvSetting("RELAY_TLS_KEY", "", "PEM private key of RELAY_TLS_CERT"),
    EnvSetting("RELAY_CA_FILE", "",
               "a PEM CA (or self-signed certificate) trusted besides the system's: by the CLI, for https to "
               "the identity provider, and to peer instances (reached at their RELAY_ADVERTISE_ADDRESS, which their "
               "certificate must name)"),
    EnvSetting("RELAY_RECOVERY_TIMEOUT_S", "30",
               "how long a peer may take to answer `recovery` before the next one is tried"),
    EnvSetting("RELAY_RECOVERY_MAX_PER_PEER", "4", "recoveries one peer runs at once; more dead executors queue"),
    EnvSetting("RELAY_ALERT_INTERVAL_S", "30",
               "how often each application's alerting rules are evaluated (incidents open or resolve then)"),
    EnvSetting("RELAY_RETENTION_INTERVAL_S", "300",
               "how often `retention` is sent to one executor of an app with `gcRowsThreshold`, "
               "`gcTimeThresholdMs` or `globalTimeoutMs` set"),
    EnvSetting("RELAY_AUTOSCALE_INTERVAL_S", "15",
               "how often the autoscaling recommendation of an app with an autoscaling policy is refreshed for "
               "`GET /metrics` and the console (`GET .../autoscale` always asks the executors afresh)"),
    EnvSetting("RELAY_ALERT_WEBHOOK_URL", "", "optional: POST every alert there as JSON"),
    EnvSetting("RELAY_ALERT_WEBHOOK_SECRET", "",
               "optional: sign the webhook's POSTs (`X-Relay-Signature: sha256=HMAC(secret, "
               "\"<X-Relay-Timestamp>.<body>\")`); the secret itself is never sent"),
    EnvSetting("RELAY_ALERT_SLACK_WEBHOOK_URL", "",
               "optional: a Slack incoming webhook; every alert is posted there (`text` and Block Kit `blocks`). "
               "A secret: never logged, recorded or shown"),
    EnvSetting("RELAY_ALERT_PAGERDUTY_ROUTING_KEY", "",
               "optional: a PagerDuty Events API v2 integration key; every alert triggers a PagerDuty event "
               "(one dedup key per rule). A secret: never logged, recorded or shown"),
    EnvSetting("RELAY_ALERT_PAGERDUTY_URL", "https://events.pagerduty.com/v2/enqueue",
               "where PagerDuty events are sent (its EU endpoint, or a test receiver)"),
    EnvSetting("RELAY_ALERT_WEBHOOK_TIMEOUT_S", "5", "the timeout of one POST to the webhook, Slack or PagerDuty"),
    EnvSetting("RELAY_ALERT_WEBHOOK_ATTEMPTS", "3",
               "attempts per alert at the webhook, Slack and PagerDuty each (backoff 0.5 s, 1 s, ...; 5xx, 429 "
               "and network errors are retried)"),
    EnvSetting("RELAY_OIDC_ISSUER", "",
               "sign-in through an OpenID Connect provider (OAuth mode; off when unset): its issuer URL, https:// "
               "(http:// only to a loopback address); discovery at `{issuer}/.well-known/openid-configuration`"),
    EnvSetting("RELAY_OIDC_AUDIENCE", "",
               "the audience(s) of the access tokens Relay accepts, separated by commas or spaces (required with "
               "RELAY_OIDC_ISSUER)"),
    EnvSetting("RELAY_OIDC_CLIENT_ID", "", "the console's public client at the provider: \"Sign in with SSO\""),
    EnvSetting("RELAY_OIDC_SCOPES", "openid email profile", "the scopes the console asks for"),
    EnvSetting("RELAY_OIDC_RESOURCE", "",
               "optional: the resource indicator (RFC 8707) the console asks its access tokens for"),
    EnvSetting("RELAY_OIDC_ADMIN_EMAILS", "",
               "e-mails (commas or spaces) of the people who become Organization Admin of RELAY_DEFAULT_ORG when "
               "they register"),
    EnvSetting("RELAY_OIDC_ROLES_CLAIM", "", "optional: the claim holding a person's groups (a list or a string)"),
    EnvSetting("RELAY_OIDC_ROLE_MAP", "",
               "optional, with RELAY_OIDC_ROLES_CLAIM: `group=Role Name;group2=Role` (roles at registration)"),
    EnvSetting("RELAY_OIDC_LEEWAY_S", "30", "clock skew allowed on a token's `exp`, `nbf` and `iat` (at most 300)"),
    EnvSetting("RELAY_OIDC_JWKS_MIN_REFETCH_S", "30",
               "a token signed with an unknown key refetches the provider's keys at most this often"),
    EnvSetting("RELAY_OIDC_TIMEOUT_S", "5", "the timeout of a call to the provider (discovery, keys)"),
    EnvSetting("RELAY_CONSOLE_TOKEN_LOGIN", "true",
               "the console's admin-token/API-key login (break-glass); `false` needs RELAY_OIDC_CLIENT_ID"),
)
_DEFAULTS = {setting.name: setting.default for setting in ENV_SETTINGS}


def settings_help(width: int = 100) -> str:
    """ENV_SETTINGS as `relay serve --help` lists them: name [default], then the meaning, indented."""
    lines = ["settings (environment variables, [default]):"]
    for setting in ENV_SETTINGS:
        lines.append(f"  {setting.name}" + (f" [{setting.default}]" if setting.default else ""))
        lines += textwrap.wrap(setting.meaning.replace("`", ""), width, initial_indent=" " * 6,
                               subsequent_indent=" " * 6)
    return "\n".join(lines)


def settings_table() -> str:
    """ENV_SETTINGS as the README's Markdown table."""
    rows = ["| variable | meaning |", "|---|---|"]
    rows += [f"| `{s.name}`{f' [{s.default}]' if s.default else ''} | {s.meaning} |" for s in ENV_SETTINGS]
    return "\n".join(rows) + "\n"


def _text(env: dict[str, str], name: str) -> str:
    """The variable's value, or its declared default when unset or empty."""
    return env.get(name) or _DEFAULTS[name]


def _drain(env: dict[str, str]) -> float:
    try:
        value = float(_text(env, "RELAY_DRAIN_S"))
    except ValueError:
        raise ConfigError("RELAY_DRAIN_S must be a number") from None
    if not 0 <= value <= 300:  # also refuses nan
        raise ConfigError("RELAY_DRAIN_S must be from 0 to 300 seconds")
    return value


def _float(env: dict[str, str], name: str) -> float:
    raw = _text(env, name)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number")
    if value <= 0:
        raise ConfigError(f"{name} must be positive")
    return value


def _int(env: dict[str, str], name: str) -> int:
    raw = _text(env, name)
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer") from None
    if not 0 < value < 2**31:
        raise ConfigError(f"{name} is out of range")
    return value


def _admin_token(env: dict[str, str]) -> str | None:
    """RELAY_ADMIN_TOKEN: every permission, so long enough that guessing it is hopeless (the generated one has
    55 characters). The message names the variable and the length it needs, never the value."""
    token = env.get("RELAY_ADMIN_TOKEN") or None
    if token is not None and len(token.strip()) < MIN_ADMIN_TOKEN_CHARS:
        raise ConfigError(f"RELAY_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_CHARS} characters long "
                          "(e.g. `openssl rand -hex 32`)")
    return token


def check_workers(settings: Settings, name: str) -> None:
    """Refuse a worker count Relay cannot run; `name` is how the user set it (RELAY_WORKERS or --workers)."""
    if not 1 <= settings.workers <= MAX_WORKERS:
        raise ConfigError(f"{name} must be from 1 to {MAX_WORKERS}")
    if settings.workers > 1 and not settings.database_url:
        # Each worker is a Relay instance with its own connections to the store; the embedded SQLite store
        # belongs to one process (its writers would queue on the file lock, and instances share views).
        raise ConfigError(f"{name} > 1 needs PostgreSQL (RELAY_DATABASE_URL): the workers are instances of one "
                          "cluster on a shared store, and the embedded SQLite store belongs to one process")


def _tls_files(env: dict[str, str]) -> tuple[Path | None, Path | None]:
    cert, key = env.get("RELAY_TLS_CERT") or None, env.get("RELAY_TLS_KEY") or None
    if (cert is None) != (key is None):
        raise ConfigError("RELAY_TLS_CERT and RELAY_TLS_KEY must be set together")
    for name, value in (("RELAY_TLS_CERT", cert), ("RELAY_TLS_KEY", key)):
        if value is not None and not os.access(value, os.R_OK):
            raise ConfigError(f"{name} must name a readable file")
    return (Path(cert), Path(key)) if cert and key else (None, None)


def _trusted_proxies(env: dict[str, str]) -> tuple[Network, ...]:
    """RELAY_TRUSTED_PROXIES: comma-separated CIDRs (a bare address is a /32 or /128)."""
    networks = []
    for position, part in enumerate((p.strip() for p in (env.get("RELAY_TRUSTED_PROXIES") or "").split(",")), 1):
        if part:
            try:
                networks.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise ConfigError(f"RELAY_TRUSTED_PROXIES: entry {position} is not an address or CIDR") from None
    return tuple(networks)


def _data_plane_references(env: dict[str, str]) -> AllowedReferences:
    try:
        return parse_allowed_references(env.get("RELAY_DATA_PLANE_REFERENCES") or "")
    except InvalidValueError as error:
        raise ConfigError(f"RELAY_DATA_PLANE_REFERENCES: {error}") from None


def _ca_file(env: dict[str, str]) -> Path | None:
    value = env.get("RELAY_CA_FILE") or None
    if value is not None and not os.access(value, os.R_OK):
        raise ConfigError("RELAY_CA_FILE must name a readable file")
    return Path(value) if value else None


def _alerting(env: dict[str, str]) -> dict[str, Any]:
    """Alerting and managed retention (actors/alerting.py, actors/retention.py)."""
    url = env.get("RELAY_ALERT_WEBHOOK_URL") or None
    for name in ("RELAY_ALERT_WEBHOOK_URL", "RELAY_ALERT_SLACK_WEBHOOK_URL", "RELAY_ALERT_PAGERDUTY_URL"):
        value = env.get(name) or None
        if value is not None and (urlparse(value).scheme not in ("http", "https") or not urlparse(value).netloc):
            raise ConfigError(f"{name} must be an http:// or https:// URL")
    routing_key = env.get("RELAY_ALERT_PAGERDUTY_ROUTING_KEY") or None
    if routing_key is not None and (not routing_key.isprintable() or len(routing_key) > 256):
        raise ConfigError("RELAY_ALERT_PAGERDUTY_ROUTING_KEY must be a printable key of at most 256 characters")
    return {
        "alert_interval_s": _float(env, "RELAY_ALERT_INTERVAL_S"),
        "retention_interval_s": _float(env, "RELAY_RETENTION_INTERVAL_S"),
        "autoscale_interval_s": _float(env, "RELAY_AUTOSCALE_INTERVAL_S"),
        "alert_webhook_url": url,
        "alert_webhook_secret": env.get("RELAY_ALERT_WEBHOOK_SECRET") or None,
        "alert_webhook_timeout_s": _float(env, "RELAY_ALERT_WEBHOOK_TIMEOUT_S"),
        "alert_webhook_attempts": _int(env, "RELAY_ALERT_WEBHOOK_ATTEMPTS"),
        "alert_slack_webhook_url": env.get("RELAY_ALERT_SLACK_WEBHOOK_URL") or None,
        "alert_pagerduty_routing_key": routing_key,
        "alert_pagerduty_url": _text(env, "RELAY_ALERT_PAGERDUTY_URL"),
    }


def _oidc(env: dict[str, str]) -> dict[str, Any]:
    try:
        return parse_oidc(env, _DEFAULTS)
    except ValueError as error:
        raise ConfigError(str(error)) from None


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8090
    data_dir: Path = field(default_factory=lambda: Path("relay-data"))
    database_url: str | None = None
    database_schema: str = "public"
    admin_token: str | None = None
    default_org: str = "local"
    instance_id: str = ""
    advertise_address: str = "127.0.0.1"
    # `relay serve --workers N`: how many worker processes share the port (web/cli/workers.py). A worker sets
    # `peer_port` to the port of its own where peers forward to it (the public one reaches any worker).
    workers: int = 1
    peer_port: int | None = None
    forward_secret: str | None = None
    # HA: how often this instance beats in the instances table, and how long a silent peer has before a
    # survivor adopts its executors.
    heartbeat_interval_s: float = 2.0
    drain_s: float = 0.0
    instance_timeout_s: float = 10.0
    limits: Limits = field(default_factory=Limits)
    # The edge (web/transport/limits.py): failed executor handshakes per source address per minute, open executor
    # sockets; and the TLS certificate chain and key of `relay serve` (both or neither).
    handshake_failures_per_min: int = 30
    login_failures_per_min: int = 20
    max_connections: int = 1000
    # Executor handshakes in flight at once (upgrade check → executor identified); past it: 503, Retry-After.
    max_handshakes_in_flight: int = 8192
    # HTTP at the edge (web/transport/body_limits.py, web/transport/server.py): connections served at once, body caps,
    # body deadline.
    max_http_connections: int = 1000
    max_body_bytes: int = 1024 * 1024
    max_large_body_bytes: int = 16 * 1024 * 1024
    body_timeout_s: float = 60.0
    body_min_bytes_per_s: int = 1024
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # A PEM CA trusted (besides the system's) for https to peer instances and by the CLI.
    ca_file: Path | None = None
    # Reverse proxies whose X-Forwarded-For names the caller (web/transport/forwarded.py).
    trusted_proxies: tuple[Network, ...] = ()
    data_plane_references: AllowedReferences = field(default_factory=dict)
    # Alerting: how often rules are evaluated, how often managed retention runs, and the optional webhook
    # alerts are POSTed to (URL and secret from the environment only: never logged nor recorded).
    alert_interval_s: float = 30.0
    retention_interval_s: float = 300.0
    autoscale_interval_s: float = 15.0
    alert_webhook_url: str | None = None
    alert_webhook_secret: str | None = None
    alert_webhook_timeout_s: float = 5.0
    alert_webhook_attempts: int = 3
    # The other sinks (actors/adapters/sinks.py): a Slack hook URL and a PagerDuty routing key are secrets themselves.
    alert_slack_webhook_url: str | None = field(default=None, repr=False)
    alert_pagerduty_routing_key: str | None = field(default=None, repr=False)
    alert_pagerduty_url: str = "https://events.pagerduty.com/v2/enqueue"
    # Sign-in through an OIDC provider (actors/configuration/oidc.py parses them): on when oidc_issuer is set.
    oidc_issuer: str | None = None
    oidc_audiences: tuple[str, ...] = ()
    oidc_client_id: str | None = None
    oidc_scopes: str = "openid email profile"
    oidc_resource: str | None = None
    oidc_admin_emails: frozenset[str] = frozenset()
    oidc_roles_claim: str | None = None
    oidc_role_map: dict[str, str] = field(default_factory=dict)
    oidc_leeway_s: float = 30.0
    oidc_jwks_min_refetch_s: float = 30.0
    oidc_timeout_s: float = 5.0
    console_token_login: bool = True

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        port = _int(env, "RELAY_PORT")
        if port > 65535:
            raise ConfigError("RELAY_PORT is out of range")
        host = _text(env, "RELAY_HOST")
        limits = Limits(
            max_frame_bytes=_int(env, "RELAY_MAX_FRAME_BYTES"),
            request_timeout_s=_float(env, "RELAY_REQUEST_TIMEOUT_S"),
            handshake_timeout_s=_float(env, "RELAY_HANDSHAKE_TIMEOUT_S"),
            ping_interval_s=_float(env, "RELAY_PING_INTERVAL_S"),
            pong_timeout_s=_float(env, "RELAY_PONG_TIMEOUT_S"),
            recovery_timeout_s=_float(env, "RELAY_RECOVERY_TIMEOUT_S"),
            max_inflight_per_executor=_int(env, "RELAY_MAX_INFLIGHT_PER_EXECUTOR"),
            recovery_max_per_peer=_int(env, "RELAY_RECOVERY_MAX_PER_PEER"),
        )
        tls_cert, tls_key = _tls_files(env)
        heartbeat_interval_s = _float(env, "RELAY_HEARTBEAT_INTERVAL_S")
        instance_timeout_s = _float(env, "RELAY_INSTANCE_TIMEOUT_S")
        if instance_timeout_s <= heartbeat_interval_s:
            raise ConfigError("RELAY_INSTANCE_TIMEOUT_S must be longer than RELAY_HEARTBEAT_INTERVAL_S")
        url = env.get("RELAY_DATABASE_URL") or None
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError("RELAY_DATABASE_URL must be a postgresql:// URL")
        workers = _text(env, "RELAY_WORKERS")
        try:
            worker_count = int(workers)
        except ValueError:
            raise ConfigError("RELAY_WORKERS must be an integer") from None
        settings = cls(
            host=host,
            port=port,
            data_dir=Path(_text(env, "RELAY_DATA_DIR")),
            database_url=url,
            database_schema=_text(env, "RELAY_DATABASE_SCHEMA"),
            admin_token=_admin_token(env),
            default_org=_text(env, "RELAY_DEFAULT_ORG"),
            instance_id=env.get("RELAY_INSTANCE_ID") or f"{socket.gethostname()}:{port}",
            advertise_address=env.get("RELAY_ADVERTISE_ADDRESS") or host,
            forward_secret=env.get("RELAY_FORWARD_SECRET") or None,
            heartbeat_interval_s=heartbeat_interval_s,
            drain_s=_drain(env),
            instance_timeout_s=instance_timeout_s,
            limits=limits,
            handshake_failures_per_min=_int(env, "RELAY_HANDSHAKE_FAILURES_PER_MIN"),
            login_failures_per_min=_int(env, "RELAY_LOGIN_FAILURES_PER_MIN"),
            max_connections=_int(env, "RELAY_MAX_CONNECTIONS"),
            max_handshakes_in_flight=_int(env, "RELAY_MAX_HANDSHAKES_IN_FLIGHT"),
            max_http_connections=_int(env, "RELAY_MAX_HTTP_CONNECTIONS"),
            max_body_bytes=_int(env, "RELAY_MAX_BODY_BYTES"),
            max_large_body_bytes=_int(env, "RELAY_MAX_LARGE_BODY_BYTES"),
            body_timeout_s=_float(env, "RELAY_BODY_TIMEOUT_S"),
            body_min_bytes_per_s=_int(env, "RELAY_BODY_MIN_BYTES_PER_S"),
            tls_cert=tls_cert,
            tls_key=tls_key,
            ca_file=_ca_file(env),
            trusted_proxies=_trusted_proxies(env),
            data_plane_references=_data_plane_references(env),
            workers=worker_count,
            **_alerting(env),
            **_oidc(env),
        )
        check_workers(settings, "RELAY_WORKERS")
        return settings

    @property
    def advertise_port(self) -> int:
        """The port peers reach this instance at: its own as a worker, else the one it listens on."""
        return self.peer_port or self.port

    @property
    def oidc_enabled(self) -> bool:
        return self.oidc_issuer is not None

    @property
    def store(self) -> StoreConfig:
        return StoreConfig(data_dir=self.data_dir, database_url=self.database_url, schema=self.database_schema)

    @property
    def admin_token_path(self) -> Path:
        return self.data_dir / ADMIN_TOKEN_FILE

    def ensure_admin_token(self) -> tuple[str, bool]:
        """The admin token: RELAY_ADMIN_TOKEN, else the one stored in the data dir, else a new one
        stored there with mode 0600. Returns (token, whether it was generated now)."""
        if self.admin_token:
            return self.admin_token, False
        path = self.admin_token_path
        if path.exists():
            token = path.read_text().strip()
            if token:
                self.admin_token = token
                return token, False
        private_dir(self.data_dir)
        token = "relay_admin_" + secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        self.admin_token = token
        return token, True

    def read_admin_token(self) -> str | None:
        """For CLI commands talking to a running server: the env token or the stored one."""
        if self.admin_token:
            return self.admin_token
        path = self.admin_token_path
        return path.read_text().strip() if path.exists() else None
