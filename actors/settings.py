"""Settings from the environment (RELAY_*), with the defaults of API.md."""

from __future__ import annotations

import math
import os
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from relay.actors.context import Limits
from relay.projections.backend import StoreConfig

ADMIN_TOKEN_FILE = "admin_token"  # noqa: S105 - a file name, not a token


class ConfigError(ValueError):
    """A setting with a value Relay cannot use; the message names the variable, never its value."""


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number")
    if value <= 0:
        raise ConfigError(f"{name} must be positive")
    return value


def _int(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer") from None
    if not 0 < value < 2**31:
        raise ConfigError(f"{name} is out of range")
    return value


def _tls_files(env: dict[str, str]) -> tuple[Path | None, Path | None]:
    cert, key = env.get("RELAY_TLS_CERT") or None, env.get("RELAY_TLS_KEY") or None
    if (cert is None) != (key is None):
        raise ConfigError("RELAY_TLS_CERT and RELAY_TLS_KEY must be set together")
    for name, value in (("RELAY_TLS_CERT", cert), ("RELAY_TLS_KEY", key)):
        if value is not None and not os.access(value, os.R_OK):
            raise ConfigError(f"{name} must name a readable file")
    return (Path(cert), Path(key)) if cert and key else (None, None)


def _ca_file(env: dict[str, str]) -> Path | None:
    value = env.get("RELAY_CA_FILE") or None
    if value is not None and not os.access(value, os.R_OK):
        raise ConfigError("RELAY_CA_FILE must name a readable file")
    return Path(value) if value else None


def _alerting(env: dict[str, str]) -> dict[str, Any]:
    """Alerting and managed retention (actors/alerting.py, actors/retention.py)."""
    url = env.get("RELAY_ALERT_WEBHOOK_URL") or None
    if url is not None and urlparse(url).scheme not in ("http", "https"):
        raise ConfigError("RELAY_ALERT_WEBHOOK_URL must be an http:// or https:// URL")
    return {
        "alert_interval_s": _float(env, "RELAY_ALERT_INTERVAL_S", 30.0),
        "retention_interval_s": _float(env, "RELAY_RETENTION_INTERVAL_S", 300.0),
        "alert_webhook_url": url,
        "alert_webhook_secret": env.get("RELAY_ALERT_WEBHOOK_SECRET") or None,
        "alert_webhook_timeout_s": _float(env, "RELAY_ALERT_WEBHOOK_TIMEOUT_S", 5.0),
        "alert_webhook_attempts": _int(env, "RELAY_ALERT_WEBHOOK_ATTEMPTS", 3),
    }


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
    forward_secret: str | None = None
    # HA: how often this instance beats in the instances table, and how long a silent peer has before a
    # survivor adopts its executors.
    heartbeat_interval_s: float = 2.0
    instance_timeout_s: float = 10.0
    limits: Limits = field(default_factory=Limits)
    # The edge (web/limits.py): failed executor handshakes per source address per minute, open executor
    # sockets; and the TLS certificate chain and key of `relay serve` (both or neither).
    handshake_failures_per_min: int = 30
    max_connections: int = 1000
    # Executor handshakes in flight at once (upgrade check → executor identified); past it: 503, Retry-After.
    max_handshakes_in_flight: int = 256
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # A PEM CA trusted (besides the system's) for https to peer instances and by the CLI.
    ca_file: Path | None = None
    # Alerting: how often rules are evaluated, how often managed retention runs, and the optional webhook
    # alerts are POSTed to (URL and secret from the environment only: never logged nor recorded).
    alert_interval_s: float = 30.0
    retention_interval_s: float = 300.0
    alert_webhook_url: str | None = None
    alert_webhook_secret: str | None = None
    alert_webhook_timeout_s: float = 5.0
    alert_webhook_attempts: int = 3

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        port = _int(env, "RELAY_PORT", 8090)
        if port > 65535:
            raise ConfigError("RELAY_PORT is out of range")
        host = env.get("RELAY_HOST") or "127.0.0.1"
        limits = Limits(
            max_frame_bytes=_int(env, "RELAY_MAX_FRAME_BYTES", 64 * 1024 * 1024),
            request_timeout_s=_float(env, "RELAY_REQUEST_TIMEOUT_S", 30.0),
            handshake_timeout_s=_float(env, "RELAY_HANDSHAKE_TIMEOUT_S", 10.0),
            ping_interval_s=_float(env, "RELAY_PING_INTERVAL_S", 10.0),
            pong_timeout_s=_float(env, "RELAY_PONG_TIMEOUT_S", 25.0),
            recovery_timeout_s=_float(env, "RELAY_RECOVERY_TIMEOUT_S", 30.0),
            max_inflight_per_executor=_int(env, "RELAY_MAX_INFLIGHT_PER_EXECUTOR", 256),
            recovery_max_per_peer=_int(env, "RELAY_RECOVERY_MAX_PER_PEER", 4),
        )
        tls_cert, tls_key = _tls_files(env)
        heartbeat_interval_s = _float(env, "RELAY_HEARTBEAT_INTERVAL_S", 2.0)
        instance_timeout_s = _float(env, "RELAY_INSTANCE_TIMEOUT_S", 10.0)
        if instance_timeout_s <= heartbeat_interval_s:
            raise ConfigError("RELAY_INSTANCE_TIMEOUT_S must be longer than RELAY_HEARTBEAT_INTERVAL_S")
        url = env.get("RELAY_DATABASE_URL") or None
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError("RELAY_DATABASE_URL must be a postgresql:// URL")
        return cls(
            host=host,
            port=port,
            data_dir=Path(env.get("RELAY_DATA_DIR") or "relay-data"),
            database_url=url,
            database_schema=env.get("RELAY_DATABASE_SCHEMA") or "public",
            admin_token=env.get("RELAY_ADMIN_TOKEN") or None,
            default_org=env.get("RELAY_DEFAULT_ORG") or "local",
            instance_id=env.get("RELAY_INSTANCE_ID") or f"{socket.gethostname()}:{port}",
            advertise_address=env.get("RELAY_ADVERTISE_ADDRESS") or host,
            forward_secret=env.get("RELAY_FORWARD_SECRET") or None,
            heartbeat_interval_s=heartbeat_interval_s,
            instance_timeout_s=instance_timeout_s,
            limits=limits,
            handshake_failures_per_min=_int(env, "RELAY_HANDSHAKE_FAILURES_PER_MIN", 30),
            max_connections=_int(env, "RELAY_MAX_CONNECTIONS", 1000),
            max_handshakes_in_flight=_int(env, "RELAY_MAX_HANDSHAKES_IN_FLIGHT", 256),
            tls_cert=tls_cert,
            tls_key=tls_key,
            ca_file=_ca_file(env),
            **_alerting(env),
        )

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
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
