"""Settings: one YAML file plus ``CACHESYNC_<SECTION>_<FIELD>`` environment overrides.

Declared once, typed, validated at load; every error names the field. Secrets
(``password``, URLs with credentials) are masked in ``repr`` and never logged. A
``..._FILE`` variable reads the value from a file (Docker/Kubernetes secrets).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from cachesync.schema.errors import ConfigError
from cachesync.schema.mapping import MappingSet, parse_mappings

ENV_PREFIX = "CACHESYNC_"


class Secret(str):
    """A string that never shows itself in repr/str formatting of settings."""

    def __repr__(self) -> str:
        return "Secret('***')"


def mask_url(url: str) -> str:
    """``redis://:pw@host`` -> ``redis://:***@host``."""
    return re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", url)


@dataclass(frozen=True)
class MySQLSettings:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "cachesync"
    password: Secret = field(default=Secret(""), repr=False)
    state_db: str = "cachesync"


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "cachesync.changes"
    dead_letter_topic: str = "cachesync.dlq"
    group_id: str = "cachesync"


@dataclass(frozen=True)
class RedisSettings:
    url: Secret = Secret("redis://127.0.0.1:6379/0")

    def __repr__(self) -> str:
        return f"RedisSettings(url={mask_url(self.url)!r})"


@dataclass(frozen=True)
class TailerSettings:
    name: str = "default"
    server_id: int = 88001
    max_inflight: int = 20000
    checkpoint_interval_s: float = 0.5
    # > 1 packs the rows of one transaction, table and partition into one Kafka record
    # (consumers read both forms); 1 = one record per row
    pack_rows: int = 1
    pack_bytes: int = 262144
    heartbeat_interval_s: float = 2.0  # heartbeat row write interval (lag when idle); 0 = off
    # rows of one prepared XA transaction held until its XA COMMIT; beyond, its tables
    # are invalidated as a whole at the commit (bounded memory)
    xa_buffer_rows: int = 100_000
    # the checkpoint's binlog is gone (purged): "fail" (exit 3) or "resync"
    on_lost_position: str = "fail"

    def __post_init__(self):
        if self.xa_buffer_rows < 1:
            raise ConfigError(f"tailer.xa_buffer_rows: must be at least 1, got {self.xa_buffer_rows}")
        if self.on_lost_position not in ("fail", "resync"):
            raise ConfigError("tailer.on_lost_position: expected 'fail' or 'resync', got "
                              f"{self.on_lost_position!r}")
        if self.pack_rows < 1:
            raise ConfigError(f"tailer.pack_rows: must be at least 1, got {self.pack_rows}")
        if not 1024 <= self.pack_bytes <= 900_000:
            raise ConfigError("tailer.pack_bytes: must be between 1024 and 900000 (under "
                              f"Kafka's default 1 MB record limit), got {self.pack_bytes}")


@dataclass(frozen=True)
class ConsumerSettings:
    batch_size: int = 2000
    poll_timeout_s: float = 0.2
    claim_lease_s: float = 30.0
    namespace: str = ""            # dedup namespace; defaults to the Kafka group id
    dedup_store: str = "mysql"     # "mysql" (cachesync_dedup table) or "redis"
    dedup_retention_s: float = 691200.0   # 8 days: must exceed the topic's retention (7 d default)
    purge_interval_s: float = 300.0       # periodic purge of done dedup records; 0 = off
    purge_batch: int = 5000


@dataclass(frozen=True)
class RelaySettings:
    outbox_db: str = ""            # the application database holding the outbox; required by relay
    outbox_table: str = "cachesync_outbox"
    poll_interval_s: float = 0.1
    burst_limit: int = 500
    redeliver_interval_s: float = 30.0
    warn_after_attempts: int = 5
    max_unconfirmed: int = 5000
    retention_s: float = 604800.0  # 7 days
    purge_batch: int = 1000
    purge_interval_s: float = 60.0


@dataclass(frozen=True)
class MetricsSettings:
    # host:port of /metrics /healthz /readyz; "auto" = 127.0.0.1 and the role's port
    # (consume 9464, tail 9465, relay 9466); port 0 = any free port; "off" = no endpoint
    listen: str = "auto"
    ready_max_lag_s: float = 30.0     # /readyz fails when the measured lag exceeds this
    probe_interval_s: float = 5.0     # how often Kafka/MySQL are probed (consumer lag, checkpoint age)


@dataclass(frozen=True)
class Settings:
    mysql: MySQLSettings
    kafka: KafkaSettings
    redis: RedisSettings
    tailer: TailerSettings
    consumer: ConsumerSettings
    tables: MappingSet
    source: str = "<defaults>"
    relay: RelaySettings = RelaySettings()
    metrics: MetricsSettings = MetricsSettings()

    @property
    def dedup_namespace(self) -> str:
        return self.consumer.namespace or self.kafka.group_id


_SECTIONS = {"mysql": MySQLSettings, "kafka": KafkaSettings, "redis": RedisSettings,
             "tailer": TailerSettings, "consumer": ConsumerSettings, "relay": RelaySettings,
             "metrics": MetricsSettings}


def load(path: str | os.PathLike | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Load ``path`` (optional) and apply env overrides; raises ConfigError naming the field."""
    environ = os.environ if environ is None else environ
    source = str(path) if path else "<environment>"
    raw = _read_yaml(Path(path)) if path else {}
    unknown = set(raw) - set(_SECTIONS) - {"tables"}
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {sorted(unknown)}; "
                          f"expected {sorted([*_SECTIONS, 'tables'])}")
    sections = {name: _section(name, cls, raw.get(name) or {}, environ, source)
                for name, cls in _SECTIONS.items()}
    tables = parse_mappings(raw.get("tables"), source)
    return Settings(**sections, tables=tables, source=source)


def read_env_file(path: str | os.PathLike) -> dict[str, str]:
    """Parse KEY=VALUE lines (the devstack's env file); raises ConfigError if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read env file {path}: {e.strerror}") from None
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def _section(name: str, cls, raw: Any, environ: Mapping[str, str], source: str):
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: {name}: expected a mapping")
    known = {f.name: f for f in fields(cls)}
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"{source}: {name}: unknown field(s) {sorted(unknown)}; "
                          f"expected some of {sorted(known)}")
    values = {}
    for fname, f in known.items():
        where, value = f"{source}: {name}.{fname}", raw.get(fname, dataclasses.MISSING)
        env_key = f"{ENV_PREFIX}{name.upper()}_{fname.upper()}"
        if env_key in environ:
            where, value = f"environment {env_key}", environ[env_key]
        elif f"{env_key}_FILE" in environ:
            where, value = f"environment {env_key}_FILE", _read_secret_file(environ[f"{env_key}_FILE"], env_key)
        if value is not dataclasses.MISSING:
            values[fname] = _coerce(value, f.type, where)
    return cls(**values)


def _read_secret_file(path: str, env_key: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ConfigError(f"{env_key}_FILE: cannot read {path}: {e.strerror}") from None


def _coerce(value: Any, type_name: str, where: str):
    try:
        if type_name == "int":
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if type_name == "float":
            return float(value)
        if type_name == "Secret":
            return Secret(str(value))
        if isinstance(value, (dict, list)):
            raise ValueError
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {_EXPECTED.get(type_name, type_name)}, "
                          f"got {value!r}") from None


_EXPECTED = {"int": "an integer", "float": "a number", "str": "a string", "Secret": "a string"}
