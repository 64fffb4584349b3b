"""Settings: one YAML file plus ``CACHESYNC_<SECTION>_<FIELD>`` environment overrides.

Declared once, typed, validated at load; every error names the field. Secrets
(``password``, URLs with credentials) are masked in ``repr`` and never logged. A
``..._FILE`` variable reads the value from a file (Docker/Kubernetes secrets).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from cachesync.runtime.config_env import ENV_PREFIX, service_links, unknown_variables
from cachesync.schema.errors import ConfigError
from cachesync.schema.key_formats import FORMATS, KeyFormat
from cachesync.schema.mapping import MappingSet, parse_mappings
from cachesync.schema.sqlnames import IDENTIFIER_PATTERN


class Secret(str):
    """A string that never shows itself in repr/str formatting of settings."""

    def __repr__(self) -> str:
        return "Secret('***')"


class Properties(dict):
    """Kafka client properties passed through as they are (``kafka.producer_properties``
    ...): kafka-python's names, or the Java client's (``linger.ms`` is ``linger_ms``).
    Read-only and hashable like the rest of the settings."""

    def __init__(self, items: Mapping[str, Any] = ()) -> None:
        super().__init__({str(k).replace(".", "_"): v for k, v in dict(items).items()})

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))

    def __reduce__(self):
        return Properties, (dict(self),)      # pickled to Spark executors

    def _read_only(self, *args, **kwargs):
        raise TypeError("settings are read-only")

    __setitem__ = __delitem__ = update = pop = clear = setdefault = _read_only  # type: ignore


def mask_url(url: str) -> str:
    """``redis://user:pw@host/0?password=x`` -> ``redis://user:***@host/0?password=***``.

    The user info ends at the LAST ``@`` before the query (a password may contain ``@``);
    query parameters named ``password`` or ``...password`` (JDBC's ``trustStorePassword``,
    any case) are masked too.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    head, q, query = rest.partition("?")
    at = head.rfind("@")
    if at >= 0:
        user, colon, _ = head[:at].partition(":")
        head = f"{user}{colon}***{head[at:]}" if colon else head
    if q:
        query = re.sub(r"(^|&)([^=&]*password=)[^&]*", r"\1\2***", query, flags=re.I)
    return f"{scheme}{sep}{head}{q}{query}"


@dataclass(frozen=True)
class Rule:
    """What a setting accepts, declared beside it; ``problem`` says what is wrong or None.

    Numbers: ``lo``/``hi`` bounds (``lo_open``: strictly above ``lo``); every float must be
    finite. Text: ``choices``, a ``pattern`` it must match whole (``what`` names it in the
    error), or a ``check`` function returning the problem.
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] | None = None
    pattern: str | None = None
    what: str = ""
    check: Callable[[Any], str | None] | None = None

    def problem(self, value: Any) -> str | None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self._number_problem(value)
        if self.choices is not None and value not in self.choices:
            return f"expected one of {list(self.choices)}, got {value!r}"
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            shown = mask_url(value) if isinstance(value, Secret) else value
            return f"expected {self.what}, got {shown!r}"
        return self.check(value) if self.check is not None else None

    def _number_problem(self, value: float) -> str | None:
        if isinstance(value, float) and not math.isfinite(value):
            return f"expected a finite number, got {value!r}"
        low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        if low or (self.hi is not None and value > self.hi):
            return f"expected {self._range()}, got {value!r}"
        return None

    def _range(self) -> str:
        if self.hi is None:
            return f"a number {'above' if self.lo_open else 'of at least'} {self.lo:,}"
        return f"a number from {self.lo:,} to {self.hi:,}"


def setting(default: Any, doc: str = "", *, secret: bool = False, shown: str = "",
            **rule: Any):
    """A settings field: its default, its user-facing ``doc`` text and its :class:`Rule`.

    ``doc`` is Markdown for the configuration reference, which is generated from these
    declarations (docs/_ext/cachesync_reference.py): write it for users. ``secret`` keeps the
    value out of ``repr`` and marks it in the reference (set it from a ``..._FILE``);
    ``shown`` replaces the default in the reference when the literal would mislead ("the
    Kafka group id").
    """
    meta = {"rule": Rule(**rule), "doc": doc, "secret": secret, "shown": shown}
    return field(default=default, repr=not secret, metadata=meta)


def _hostports_problem(value: str) -> str | None:
    servers = [s.strip() for s in value.split(",")]
    if not value.strip() or not all(servers):
        return f"expected a comma-separated list of host:port, got {value!r}"
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not _port_ok(port, lowest=1):
            return f"expected host:port with a port from 1 to 65535, got {server!r}"
    return None


def host_list(value: str, default_port: int) -> tuple[tuple[str, int], ...]:
    """``a, b:3307`` -> ``(("a", default_port), ("b", 3307))``; raises ConfigError."""
    problem = _hosts_problem(value)
    if problem:
        raise ConfigError(problem)
    out = []
    for server in (s.strip() for s in value.split(",")):
        host, sep, port = server.rpartition(":")
        out.append((host, int(port)) if sep else (server, default_port))
    return tuple(out)


def _hosts_problem(value: str) -> str | None:
    """A comma-separated list of host or host:port (empty: none)."""
    if not value:
        return None
    for server in (s.strip() for s in value.split(",")):
        host, sep, port = server.rpartition(":")
        if not server or (sep and (not host or not _port_ok(port, lowest=1))):
            return f"expected a comma-separated list of host or host:port (port 1 to 65535), got {value!r}"
    return None


def _host_problem(value: str) -> str | None:
    """One host or host:port (empty: none)."""
    if "," in value:
        return f"expected one host or host:port, got {value!r}"
    return _hosts_problem(value)


def _listen_problem(value: str) -> str | None:
    host, sep, port = value.rpartition(":")
    if value in ("auto", "off") or (sep and _port_ok(port, lowest=0)):
        return None
    return f"expected auto, off or host:port with a port from 0 (any free port) to 65535, got {value!r}"


def _port_ok(text: str, lowest: int) -> bool:
    return text.isdigit() and lowest <= int(text) <= 65535


class _Validated:
    """Checks every field's Rule after construction; the error names ``section.field``."""

    SECTION = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            rule = f.metadata.get("rule")
            problem = rule.problem(getattr(self, f.name)) if rule else None
            if problem:
                raise ConfigError(f"{self.SECTION}.{f.name}: {problem}")


PORT = {"lo": 1, "hi": 65535}
POSITIVE = {"lo": 0, "lo_open": True}        # seconds and sizes that must be above zero
AT_LEAST_1 = {"lo": 1}
NOT_NEGATIVE = {"lo": 0}                     # 0 turns the feature off
# Backticked in SQL: a database or table name cachesync creates or reads.
_NAME = IDENTIFIER_PATTERN
OUTBOX_TABLES = rf"( *{_NAME}\.{_NAME} *(, *{_NAME}\.{_NAME} *)*)?"
IDENTIFIER = {"pattern": IDENTIFIER_PATTERN, "what": "a MySQL identifier (letters, digits, _ or $; 1 to 64)"}
NON_EMPTY = {"pattern": r"\S(.*\S)?", "what": "a non-empty value"}
TOPIC = {"pattern": r"[A-Za-z0-9._-]{1,249}", "what": "a Kafka topic name ([A-Za-z0-9._-], 1 to 249)"}


@dataclass(frozen=True)
class MySQLSettings(_Validated):
    SECTION = "mysql"
    host: str = setting("127.0.0.1", "the source server", **NON_EMPTY)
    port: int = setting(3306, "its port (1 to 65535)", **PORT)
    user: str = setting("cachesync", "the cachesync account (least privilege: the grants in "
                        "*Adopting cachesync*)", **NON_EMPTY)
    password: Secret = setting(Secret(""), "the account's password", secret=True)
    state_db: str = setting("cachesync", "database holding `cachesync_dedup`, "
                            "`cachesync_dedup_done` and `cachesync_checkpoint`", **IDENTIFIER)
    # verified TLS when ssl_ca (or ssl) is set, for every session, the binlog stream and audit's JDBC
    ssl_ca: str = setting("", "PEM CA of the server's certificate; set, every MySQL connection "
                          "(sessions, the binlog stream, audit's JDBC) uses verified TLS. A "
                          "certificate that fails verification stops the process with exit code 3")
    ssl: bool = setting(False, "verified TLS without `mysql.ssl_ca`: the server's certificate is "
                        "checked against the system's trusted CAs (`SSL_CERT_FILE` moves them; "
                        "audit's JDBC: the JVM's); RDS and Aurora: see *Operating*, MySQL TLS")
    ssl_cert: str = setting("", "PEM client certificate (with `mysql.ssl_key`; needs "
                            "`mysql.ssl_ca` or `mysql.ssl`; not passed to audit's JDBC)")
    ssl_key: str = setting("", "PEM private key of `mysql.ssl_cert`")
    ssl_verify_identity: bool = setting(True, "the server's certificate must name `mysql.host` "
                                        "(JDBC `sslMode=verify-full`); `false`: the CA only "
                                        "(`verify-ca`)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.ssl_cert) != bool(self.ssl_key):
            raise ConfigError("mysql.ssl_cert and mysql.ssl_key: set both or neither")
        if self.ssl_cert and not (self.ssl_ca or self.ssl):
            raise ConfigError("mysql.ssl_ca: required with mysql.ssl_cert (TLS is on when it, "
                              "or mysql.ssl, is set)")


# Kafka client properties cachesync sets itself (its delivery guarantees, its group
# membership, or a setting of its own): a pass-through of one is refused, naming the setting
_SECURITY_OWNED = {"bootstrap_servers": "kafka.bootstrap_servers",
                   "security_protocol": "kafka.security_protocol",
                   "sasl_mechanism": "kafka.sasl_mechanism",
                   "sasl_plain_username": "kafka.sasl_username",
                   "sasl_plain_password": "kafka.sasl_password",
                   "sasl_oauth_token_provider": "kafka.sasl_oauth_token_file or _command",
                   "ssl_cafile": "kafka.ssl_cafile", "ssl_certfile": "kafka.ssl_certfile",
                   "ssl_keyfile": "kafka.ssl_keyfile", "ssl_check_hostname": "kafka.ssl_check_hostname",
                   "client_id": "cachesync's own client ids", "api_version": "auto-detection"}
OWNED_PROPERTIES = {
    "producer": {**_SECURITY_OWNED, "acks": "acks=all (at-least-once)",
                 "enable_idempotence": "the idempotent producer",
                 "max_in_flight_requests_per_connection": "5, the idempotent producer's order window",
                 "retries": "retry until delivery_timeout_ms",
                 "compression_type": "kafka.compression_type",
                 "key_serializer": "cachesync's record format",
                 "value_serializer": "cachesync's record format",
                 "transactional_id": "the idempotent producer"},
    "consumer": {**_SECURITY_OWNED, "group_id": "kafka.group_id",
                 "enable_auto_commit": "commits after the cache is updated",
                 "isolation_level": "read_committed",
                 "session_timeout_ms": "kafka.session_timeout_ms",
                 "heartbeat_interval_ms": "kafka.heartbeat_interval_ms",
                 "max_poll_interval_ms": "kafka.max_poll_interval_ms",
                 "group_instance_id": "kafka.group_instance_id",
                 "partition_assignment_strategy": "kafka.assignment_strategy",
                 "key_deserializer": "cachesync's record format",
                 "value_deserializer": "cachesync's record format",
                 "auto_offset_reset": "each command's own start"},
    "admin": dict(_SECURITY_OWNED),
}


def _properties_problem(value: Mapping[str, Any], client: str) -> str | None:
    owned = OWNED_PROPERTIES[client]
    for name in sorted(value):
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            return f"expected kafka-python property names (linger_ms or linger.ms), got {name!r}"
        if name in owned:
            return f"{name} is set by cachesync ({owned[name]}); it cannot be passed through"
        if not isinstance(value[name], (str, int, float, bool)):
            return f"{name}: expected a string, number or boolean, got {value[name]!r}"
    return None


@dataclass(frozen=True)
class KafkaSettings(_Validated):
    SECTION = "kafka"
    bootstrap_servers: str = setting("127.0.0.1:9092", "the brokers, comma-separated `host:port`",
                                     check=_hostports_problem)
    topic: str = setting("cachesync.changes", "change events, key `db.table:pk`, header `id`",
                         **TOPIC)
    dead_letter_topic: str = setting(
        "cachesync.dlq", "poison records, original bytes, headers `reason`, `detail`, `topic`, "
        "`partition`, `offset`, `pack_index` (one event of a packed record), `attempts`, `id`",
        **TOPIC)
    # `cachesync topics create` (and tail/consume with create_topics: true) create both
    # topics with these. Retention stays below consumer.dedup_retention_s (doctor checks it).
    create_topics: bool = setting(False, "`tail` and `consume` create missing topics at start, "
                                  "as `cachesync topics create` does")
    topic_partitions: int = setting(6, "partitions of the topics `cachesync topics create` "
                                    "creates", lo=1, hi=10_000)
    topic_replication_factor: int = setting(-1, "replication factor of created topics; -1 = the "
                                            "broker's `default.replication.factor`", lo=-1, hi=32)
    topic_retention_s: float = setting(604800.0, "`retention.ms` of created topics (7 days); keep "
                                       "it below `consumer.dedup_retention_s`", **POSITIVE)
    group_id: str = setting("cachesync", "consumer group; also the dedup namespace", **NON_EMPTY)
    # Group membership: a consumer that dies is replaced after the session timeout; with a
    # group_instance_id (static membership) one restarted under the same id within it takes its
    # partitions back without a rebalance. 6 s is the broker's group.min.session.timeout.ms: the
    # fastest failover a broker allows by default.
    session_timeout_ms: int = setting(6_000, "a consumer that stops heartbeating loses its "
                                      "partitions after this", lo=1_000, hi=1_800_000)
    heartbeat_interval_ms: int = setting(2_000, "group heartbeats; at most a third of the "
                                         "session timeout", lo=100, hi=600_000)
    max_poll_interval_ms: int = setting(300_000, "a consumer whose batch takes longer than this "
                                        "is taken out of the group", lo=1_000, hi=86_400_000)
    group_instance_id: str = setting(
        "", "static membership: a stable id per consumer (a pod name); a restart under it within "
        "the session timeout keeps its partitions without a rebalance. Each consumer needs its own",
        pattern=r"[A-Za-z0-9._-]{0,249}",
        what="an instance id ([A-Za-z0-9._-], up to 249), unique per consumer")
    assignment_strategy: str = setting(
        "cooperative-sticky", "`cooperative-sticky` (the consumers that stay keep consuming "
        "during a rebalance), `sticky`, `range` or `roundrobin`",
        choices=("cooperative-sticky", "sticky", "range", "roundrobin"))
    # Security: every Kafka client, python and Spark, uses these
    security_protocol: str = setting(
        "PLAINTEXT", "`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`; applies to every Kafka "
        "client (consumer, tailer, relay, probes, status, replay, dlq tools, Spark)",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))
    sasl_mechanism: str = setting(
        "SCRAM-SHA-512", "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` (with `kafka.sasl_username` "
        "and `kafka.sasl_password`), `OAUTHBEARER` (with a token file or command) or "
        "`AWS_MSK_IAM` (Amazon MSK with IAM: `SASL_SSL`, the AWS credentials chain, the "
        "`aws` extra); with a `SASL_*` protocol",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM"))
    sasl_username: str = setting("", "required with `PLAIN` and `SCRAM-*`")
    sasl_password: Secret = setting(Secret(""), "required with `PLAIN` and `SCRAM-*`",
                                    secret=True)
    # OAUTHBEARER: the token comes from a file or a command, never from the settings text
    sasl_oauth_token_file: str = setting(
        "", "`OAUTHBEARER`: a file holding the token (a JWT), read again whenever it changes "
        "(a Kubernetes projected token, a sidecar renewing it). The Spark engine reads it too")
    sasl_oauth_token_command: Secret = setting(
        Secret(""), "`OAUTHBEARER`: a command printing the token, or an OAuth token endpoint's JSON "
        "(`access_token`, `expires_in`); run without a shell, again before the token expires. "
        "Keep secrets out of its arguments (read them inside the command). Python engine only",
        secret=True)
    sasl_oauth_token_max_age_s: float = setting(
        300.0, "a token from `kafka.sasl_oauth_token_command` is renewed after 80 % of its "
        "lifetime (its `exp` claim or `expires_in`), and at the latest after this",
        lo=1, hi=86_400)
    sasl_oauth_extensions: str = setting(
        "", "`OAUTHBEARER` SASL extensions, `key=value` comma-separated (Confluent Cloud: "
        "`logicalCluster=lkc-…,identityPoolId=pool-…`)",
        pattern=r"(\s*[A-Za-z0-9]+=[^,=\s][^,=]*(,\s*[A-Za-z0-9]+=[^,=\s][^,=]*)*)?\s*",
        what="key=value pairs separated by commas")
    aws_region: str = setting(
        "", "`AWS_MSK_IAM`: the cluster's AWS region; empty = the AWS chain's "
        "(`AWS_DEFAULT_REGION`, the profile's region)",
        pattern=r"([a-z]{2}(-[a-z]+)+-\d+)?", what="an AWS region such as eu-west-1")
    ssl_cafile: str = setting("", "PEM CA bundle that signed the brokers' certificates (`SSL`, "
                              "`SASL_SSL`); empty = the system's trusted CAs")
    ssl_certfile: str = setting("", "PEM client certificate for mutual TLS (with "
                                "`kafka.ssl_keyfile`; python engine only)")
    ssl_keyfile: str = setting("", "PEM private key of `kafka.ssl_certfile`")
    ssl_check_hostname: bool = setting(True, "check that the broker's certificate names the "
                                       "host connected to")
    # Record batch compression of every producer (the tailer, the relay, dead letters): lz4
    # by measurement. At the head of the binlog each batch holds a read's rows of one
    # partition, and zstd's fixed cost per batch (a fresh compression context in librdkafka,
    # kafka-python and the broker) made it the dearest codec per commit (bench/compression.py
    # head_*_us_per_batch, bench/head_cost.py); lz4 costs little more than none there and
    # still shrinks large packs about 6 times. Every consumer must read it.
    compression_type: str = setting(
        "lz4", "record batch compression of every producer (tailer, relay, dead letters): "
        "`zstd`, `lz4`, `snappy`, `gzip` or `none`; every consumer must be able to read it",
        choices=("zstd", "lz4", "snappy", "gzip", "none"))
    client: str = setting(
        "auto", "the Kafka client the tailer and the outbox relay publish and the consumer "
        "consumes with: "
        "`librdkafka` (the confluent-kafka package: the same guarantees at a fraction of the "
        "CPU per request), `kafka-python`, or `auto`: librdkafka when confluent-kafka is "
        "installed and every Kafka setting maps onto it (not the OAUTHBEARER and AWS_MSK_IAM "
        "logins), else kafka-python; "
        "admin clients, probes, the monitor and dead letters use kafka-python",
        choices=("auto", "librdkafka", "kafka-python"))
    # the ones cachesync sets itself are refused by name
    producer_properties: Properties = setting(
        Properties(), "other kafka-python producer properties, passed through (a mapping); "
        "the ones cachesync sets itself are refused by name",
        check=lambda v: _properties_problem(v, "producer"))
    consumer_properties: Properties = setting(
        Properties(), "other kafka-python consumer properties, passed through (a mapping); "
        "the ones cachesync sets itself are refused by name",
        check=lambda v: _properties_problem(v, "consumer"))
    admin_properties: Properties = setting(
        Properties(), "other kafka-python admin client properties, passed through (a mapping); "
        "the ones cachesync sets itself are refused by name",
        check=lambda v: _properties_problem(v, "admin"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            raise ConfigError(f"kafka.heartbeat_interval_ms: must be at most a third of "
                              f"kafka.session_timeout_ms ({self.session_timeout_ms}), got "
                              f"{self.heartbeat_interval_ms}")
        if self.security_protocol.startswith("SASL_"):
            self._check_login()
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ConfigError("kafka.ssl_certfile and kafka.ssl_keyfile: set both or neither")

    def _check_login(self) -> None:
        """The credentials ``sasl_mechanism`` needs are there; the ones of another are not."""
        mechanism, oauth = self.sasl_mechanism, (self.sasl_oauth_token_file,
                                                 self.sasl_oauth_token_command)
        if mechanism == "OAUTHBEARER":
            if all(oauth) or not any(oauth):
                raise ConfigError("kafka.sasl_oauth_token_file or kafka.sasl_oauth_token_command:"
                                  " OAUTHBEARER needs exactly one of them")
        elif any(oauth):
            raise ConfigError(f"kafka.sasl_oauth_token_{'file' if oauth[0] else 'command'}: "
                              f"only used with kafka.sasl_mechanism OAUTHBEARER, not {mechanism}")
        if mechanism == "AWS_MSK_IAM" and self.security_protocol != "SASL_SSL":
            raise ConfigError("kafka.security_protocol: AWS_MSK_IAM needs SASL_SSL, got "
                              f"{self.security_protocol}")
        if mechanism not in ("OAUTHBEARER", "AWS_MSK_IAM") and not (self.sasl_username
                                                                    and self.sasl_password):
            raise ConfigError(f"kafka.sasl_username and kafka.sasl_password: required with "
                              f"kafka.security_protocol {self.security_protocol} and "
                              f"kafka.sasl_mechanism {mechanism}")


@dataclass(frozen=True)
class RedisSettings(_Validated):
    SECTION = "redis"
    url: Secret = setting(Secret("redis://127.0.0.1:6379/0"),
                          "`redis://`, `rediss://` (TLS) or `unix://` URL; credentials in it "
                          "are masked in logs", pattern=r"(rediss?|unix)://.*",
                          what="a redis://, rediss:// or unix:// URL")
    # Sentinel: the sentinels' host:port list; the URL then gives only the user, password,
    # database and TLS of the master, which the sentinels name
    sentinels: str = setting(
        "", "Redis Sentinel: comma-separated `host:port` of the sentinels; every Redis client "
        "then asks them for the master `redis.master_name` and follows a failover. `redis.url` "
        "still gives the user, password, database and TLS (its host is not used)",
        check=lambda v: _hostports_problem(v) if v else None)
    master_name: str = setting("", "the master's name in Sentinel (required with "
                               "`redis.sentinels`)")
    # The sentinels' own login and TLS: a sentinel's requirepass or ACL user is not the master's
    sentinel_username: str = setting("", "the ACL user cachesync logs in to the sentinels as "
                                     "(Redis 6.2+); empty: the default user")
    sentinel_password: Secret = setting(
        Secret(""), "the sentinels' password (their `requirepass`, or `redis.sentinel_username`'s); "
        "empty: none. The master's own credentials stay in `redis.url`", secret=True)
    sentinel_tls: bool = setting(
        False, "connect to the sentinels over TLS, verified with the CA (and client certificate) "
        "that `redis.url`'s query names: `ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`")
    # Redis Cluster: the URL names one node (the others are discovered) and gives the user,
    # password and TLS; keys are grouped per hash slot, SCANs visit every master
    cluster: bool = setting(False, "Redis Cluster: `redis.url` names one node (the others are "
                            "discovered) and gives the user, password and TLS; every Redis "
                            "client then groups keys per hash slot, follows MOVED/ASK and SCANs "
                            "every master")
    # more nodes to start from: a process (re)started while redis.url's node is down
    # still finds the cluster
    cluster_nodes: str = setting(
        "", "Redis Cluster: more nodes to discover the cluster from (comma-separated "
        "`host:port`), tried when `redis.url`'s node does not answer, so that a process can "
        "start while that node is down (the user, password and TLS are still `redis.url`'s)",
        check=lambda v: _hostports_problem(v) if v else None)
    # Redis replicates asynchronously: a master lost right after it answered can take the
    # last invalidations with it, after the consumer confirmed them and committed offsets
    wait_replicas: int = setting(
        0, "after each pipeline of deletes, fenced writes or dedup records, wait until this "
        "many replicas of every master it wrote to have it (Redis `WAIT`), so that a master "
        "lost and replaced by its replica (Sentinel, Cluster) cannot take back an invalidation "
        "cachesync already confirmed; fewer acknowledgements within `redis.wait_timeout_ms` "
        "fail the batch as retryable (it is applied again). 0: do not wait", lo=0, hi=16)
    wait_timeout_ms: int = setting(
        1000, "how long `redis.wait_replicas` waits for the replicas' acknowledgements",
        lo=1, hi=60000)
    # The server writes a commit to its binlog before its storage engine makes it visible,
    # so an invalidation can land before readers see the new row; a reader that missed in
    # between would fill the old row. Holding the fill lease makes such a fill expire with it.
    fill_hold_ms: int = setting(
        500, "after invalidating a key, hold its `read_through` fill lease this long: no "
        "reader takes it, and what a reader fills meanwhile expires when the hold does. MySQL "
        "and MariaDB write a commit to the binlog before it is visible to other sessions, so "
        "an invalidation can land before a reader sees the new row, and its fill of the old "
        "row would otherwise stay until the key's next change or its TTL. Keep it above the "
        "longest time your server's commits take between the binlog and the engine (a "
        "loaded server: tens to hundreds of ms). 0: delete the lease (the behaviour before)",
        lo=0, hi=60000)
    # Also read the old untagged version keys and void the old untagged leases
    # (cachesync:ver:<key>, cachesync:lease:<key>): a single server upgraded from the layout
    # before hash-tagged companions; off once the longest TTL has passed (docs/upgrading.md)
    legacy_companion_keys: bool = setting(
        True, "on a single server, also read the old untagged version keys and void the old "
        "untagged leases (`cachesync:ver:<key>`, `cachesync:lease:<key>`) written before "
        "companion keys got a hash tag; turn it off once the longest table TTL has passed since "
        "the upgrade (ignored with `redis.cluster`). See *Upgrading*")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sentinels and not self.master_name:
            raise ConfigError("redis.master_name: required with redis.sentinels")
        if not self.sentinels and (self.sentinel_username or self.sentinel_password
                                   or self.sentinel_tls):
            raise ConfigError("redis.sentinel_username, redis.sentinel_password and "
                              "redis.sentinel_tls: only with redis.sentinels")
        if self.sentinels and self.cluster:
            raise ConfigError("redis.cluster: a cluster has no sentinels; set redis.cluster or "
                              "redis.sentinels, not both")
        if self.cluster_nodes and not self.cluster:
            raise ConfigError("redis.cluster_nodes: only with redis.cluster")
        if self.cluster and str(self.url).startswith("unix://"):
            raise ConfigError("redis.cluster: the URL must be redis:// or rediss:// (a node's "
                              "host and port), not unix://")

    def __repr__(self) -> str:
        return (f"RedisSettings(url={mask_url(self.url)!r}, sentinels={self.sentinels!r}, "
                f"master_name={self.master_name!r}, "
                f"sentinel_username={self.sentinel_username!r}, sentinel_tls={self.sentinel_tls!r}, "
                f"cluster={self.cluster!r}, cluster_nodes={self.cluster_nodes!r}, wait_replicas={self.wait_replicas!r}, "
                f"wait_timeout_ms={self.wait_timeout_ms!r}, "
                f"fill_hold_ms={self.fill_hold_ms!r}, "
                f"legacy_companion_keys={self.legacy_companion_keys!r})")


@dataclass(frozen=True)
class TailerSettings(_Validated):
    SECTION = "tailer"
    name: str = setting("default", "checkpoint row name; `tail` processes sharing it are one "
                        "active tailer and its hot standbys", pattern=r"[A-Za-z0-9._-]{1,64}",
                        what="a name of 1 to 64 letters, digits, '.', '_' or '-'")
    server_id: int = setting(88001, "replica server id; unique among the server's replicas",
                             lo=1, hi=2**32 - 1)
    max_inflight: int = setting(20000, "unacknowledged rows before the tailer waits for Kafka; "
                                "it reads on once half of them are acknowledged",
                                **AT_LEAST_1)
    checkpoint_interval_s: float = setting(0.5, "how often the acknowledged position is "
                                           "stored; `0` = after every transaction",
                                           **NOT_NEGATIVE)
    # > 1 packs rows of one table and partition into one Kafka record, across consecutive
    # transactions with the fast reader (consumers read both forms); 1 = one record per row
    pack_rows: int = setting(
        500, "above 1, rows of one table and partition go out as one record of up to this many "
        "events: with the fast reader (`tailer.reader: auto`) rows of consecutive transactions "
        "share a pack, with `tailer.reader: library` only those of one transaction; `1` = one "
        "record per row", **AT_LEAST_1)
    # the busy head of the binlog: how long rows wait in an open pack for the next ones
    pack_linger_ms: float = setting(
        5.0, "with the fast reader and `pack_rows` above 1, while transactions arrive close "
        "together: an open pack is sent this long after it opened (or once the stream is "
        "silent that long); longer packs fewer, larger Kafka records and consumer batches "
        "into each second, and adds up to this long to the lag of each change",
        lo=1, hi=100)
    # the head of the binlog: how far apart the fast reader's reads are while transactions
    # arrive close together (each read's transactions are packed and sent together)
    read_linger_ms: float = setting(
        20.0, "with the fast reader, at the head of the binlog while transactions arrive "
        "within twice this of each other: a read waits until this long after the one before "
        "it (or less, once about 4 KB would have arrived at the recent pace), so that it "
        "takes in every transaction that arrived meanwhile, and they are published together; "
        "fewer, larger reads, Kafka records and consumer batches cost less CPU per commit, "
        "and each adds up to this long to the lag of a change, never while transactions are "
        "further apart or the binlog is read from behind; `0` = each read as soon as bytes "
        "arrive", lo=0, hi=100)
    # under Kafka's default 1 MB record limit
    pack_bytes: int = setting(262144, "a pack also closes at this size (1024 to 900000, under "
                              "Kafka's 1 MB record limit)", lo=1024, hi=900_000)
    # heartbeat row write interval (lag when idle); 0 = off
    heartbeat_interval_s: float = setting(2.0, "how often `tail` rewrites its heartbeat row "
                                          "(lag while idle); `0` = off", **NOT_NEGATIVE)
    # a standby takes over at most this long after the active tailer's host or network is
    # lost (a killed process releases the lock at once)
    lock_lease_s: float = setting(
        10.0, "any number of `tail` processes may share a `tailer.name`: one is active, the "
        "others are hot standbys; a standby takes over at once when the active process dies, "
        "and at most this long after its host or network is lost", lo=2, hi=3600)
    # rows of one prepared XA transaction held until its XA COMMIT; beyond, its tables
    # are invalidated as a whole at the commit (bounded memory)
    xa_buffer_rows: int = setting(100_000, "rows of one prepared XA transaction held until its "
                                  "`XA COMMIT`; a larger one has its tables invalidated as a "
                                  "whole at the commit", **AT_LEAST_1)
    on_lost_position: str = setting("fail", "the checkpoint's binlog is gone (purged): `fail` "
                                    "(exit 3, naming it) or `resync` (run `cachesync resync`, "
                                    "then go on tailing)", choices=("fail", "resync"))
    on_kafka_outage: str = setting(
        "invalidate", "Kafka acknowledges no send for `tailer.kafka_outage_after_s`: "
        "`invalidate` = the tailer applies the changes to Redis itself (claimed in the "
        "consumer group's dedup namespace, as the consumer would) from its checkpoint until "
        "Kafka serves the topic again, then publishes from that checkpoint, which did not "
        "move (the consumer skips what was applied); `wait` = the tailer waits for Kafka "
        "and the cache waits with it", choices=("invalidate", "wait"))
    kafka_outage_after_s: float = setting(
        1.0, "how long sends may go unacknowledged before `tailer.on_kafka_outage` applies",
        **POSITIVE)
    kafka_outage_lookback_s: float = setting(
        5.0, "with `tailer.on_kafka_outage: invalidate`, the tailer applies the changes from "
        "the checkpoint Kafka had acknowledged this long before its last acknowledgement: what "
        "a broker going away acknowledged but no longer handed to the consumer is applied too "
        "(what the consumer had applied is skipped as done; a consumer further behind applies "
        "the rest once Kafka is back)", **NOT_NEGATIVE)
    source_hosts: str = setting(
        "", "read the binlog from these servers instead of `mysql.host` (comma-separated `host` "
        "or `host:port`, port default `mysql.port`; the first that answers, tried again in "
        "order at each restart), typically a replica with `log_slave_updates` (required of "
        "each); account and TLS are `mysql.*`; checkpoint, lock and heartbeat stay on "
        "`mysql.host`", check=_hosts_problem)
    outbox_tables: str = setting(
        "", "outbox tables the tailer publishes from the binlog, `db.table,db.table`: each "
        "inserted row goes out as the outbox event it carries, as the relay would publish it; "
        "deletes and updates of those rows are ignored", pattern=OUTBOX_TABLES,
        what="a comma-separated list of db.table names")

    @property
    def outbox_table_names(self) -> frozenset[tuple[str, str]]:
        """``outbox_tables`` as (db, table) pairs."""
        names = (n.strip() for n in self.outbox_tables.split(",") if n.strip())
        return frozenset(tuple(n.split(".", 1)) for n in names)
    # the binlog reader: "auto"/"fast" = hot events parsed from the raw dump stream
    # (producer_outbox/binlog/dumpstream.py), "library" = python-mysql-replication for every event
    reader: str = setting(
        "auto", "the binlog reader: `auto` or `fast` parse the hot events (GTID, table map, "
        "rows, XID) straight from the dump stream and hand every other event to "
        "python-mysql-replication; `library` reads every event through python-mysql-replication",
        choices=("auto", "fast", "library"))
    # where the Kafka producer runs: "process" = a child process (producer_outbox/publish/
    # process_publisher.py: kafka-python's work off the tailer's GIL), "thread" = in the
    # tailer, "auto" = thread on librdkafka (its work runs outside the GIL), else process
    publisher: str = setting(
        "auto", "where the Kafka producer runs: `auto` = `thread` when the publisher is on "
        "librdkafka (`kafka.client`), whose work runs on its own threads outside the "
        "interpreter's lock, else `process`; `process` = a child process of the tailer (the "
        "same producer, fed records over a pipe, so kafka-python's batching and acks run on "
        "another core than the binlog decoding; if it dies, the records it had not "
        "acknowledged fail and the tailer stops before its checkpoint passes them), `thread` = "
        "in the tailer's own process (no hand-over to another process and back per send)",
        choices=("auto", "process", "thread"))


@dataclass(frozen=True)
class SourceSettings(_Validated):
    SECTION = "source"
    id: str = setting(
        "", "the name of the MySQL/MariaDB cluster `tail` reads (never a server's: a replica "
        "or a promoted replica of it must keep giving the same ids). Set it, different per "
        "cluster, when several clusters feed one topic: it enters every message id (and the "
        "direct mode's dedup namespace), so equal GTIDs of two clusters (same domain and server "
        "id, or servers cloned from one data directory) never collide. Empty: ids as without "
        "it; changing it on a running deployment re-publishes nothing but makes ids new",
        pattern=r"([A-Za-z0-9._-]{1,64})?",
        what="empty or a name of 1 to 64 letters, digits, '.', '_' or '-'")


@dataclass(frozen=True)
class ConsumerSettings(_Validated):
    SECTION = "consumer"
    batch_size: int = setting(2000, "events per poll (fewer records when they are packed) and "
                              "per dedup round trip", lo=1, hi=1_000_000)
    # 2 s, the group's heartbeat interval: an idle consumer's Kafka client then wakes for its
    # poll, its held fetch and its heartbeat at about the same times
    poll_timeout_s: float = setting(
        2.0, "the longest a poll waits when no record arrives (it returns as soon as one does; "
        "sooner when a delayed second delete or the dedup purge is due), and the longest the "
        "broker holds a fetch that finds none (kafka-python's `fetch_max_wait_ms`, at least "
        "0.5 s, unless `kafka.consumer_properties` sets it): how often an idle consumer wakes "
        "and asks Kafka again, how long a stop may wait for the poll in progress, and how long "
        "partitions newly assigned to it may wait for their first fetch", **POSITIVE)
    offset_commit: str = setting(
        "async", "how a batch's offsets are committed, always after its cache writes and dedup "
        "confirm: `async` sends the commit and goes on to the next poll without waiting for the "
        "broker's reply (at most 5 unanswered; after one failed with an error that is not "
        "retriable, after 30 s of retriable failures such as a group coordinator still loading "
        "after a broker restart, and at shutdown, the consumer waits again), so a crash can leave the last few batches to be delivered again, which "
        "the dedup store skips as duplicates; `sync` waits for every reply",
        choices=("async", "sync"))
    offset_commit_interval_s: float = setting(
        1.0, "offsets of the batches applied within this time of the last offset commit sent "
        "are committed together, by the next batch or poll after it (one broker request "
        "instead of one per batch: at the head of the binlog each commit is its own batch). A "
        "crash or a partition handed to another consumer delivers up to this much again, "
        "which the dedup store skips as duplicates; a clean stop commits them. `0`: every "
        "batch's offsets as soon as it is applied", **NOT_NEGATIVE)
    overlap_batches: bool = setting(
        True, "poll, decode and plan the next batch while a worker thread applies the current "
        "one (its dedup claim, Redis writes and confirm); batches still reach Redis and the "
        "dedup store one at a time, in order, and each batch's offsets are committed after it "
        "was applied. `false`: each batch is polled, applied and committed in turn")
    # A claim only matters when a partition changes hands: the next owner waits it out
    # before applying what a dead consumer had claimed. Kept below the session timeout so
    # that it has expired by the time the group hands the partitions over.
    claim_lease_s: float = setting(
        5.0, "how long a claim protects a message from other consumers; a consumer that takes "
        "over a dead one's partitions waits this long (from the dead one's last claim) before "
        "applying what it had claimed. Keep it below `kafka.session_timeout_ms`", **POSITIVE)
    # A table-level invalidation (TRUNCATE, DDL, statement-logged writes) SCANs the whole
    # keyspace beside the row stream; Redis serves one command at a time, so its calls are
    # paced to leave Redis to the other tables' changes (consumer.core.scan_pace)
    table_scan_busy_share: float = setting(
        0.5, "the share of time a table-level invalidation's scan may keep Redis busy: after "
        "each SCAN call or UNLINK pipeline it pauses so that its calls take at most this share "
        "(a slower Redis, longer pauses); `1` = back to back, fastest, while other tables' "
        "changes wait behind it", lo=0, lo_open=True, hi=1)
    table_scan_count: int = setting(
        1000, "keys each SCAN call of a table-level invalidation examines (`COUNT`): smaller "
        "calls hold Redis for less time each", lo=10, hi=1_000_000)
    table_scan_keys_per_s: float = setting(
        0.0, "at most this many keys examined per second by a table-level invalidation's "
        "scan, on top of `consumer.table_scan_busy_share`; `0` = no bound", **NOT_NEGATIVE)
    namespace: str = setting("", "dedup namespace", shown="the Kafka group id")
    dedup_store: str = setting(
        "redis", "`redis` (`cachesync:dedup:<ns>:{<tag>}<id>`, spread over 64 hash slots; nothing "
        "written to MySQL; run Redis with AOF and `maxmemory-policy noeviction` for the records "
        "to outlive a restart and memory pressure) or `mysql` (`cachesync_dedup` in the state "
        "database, or on `consumer.dedup_mysql_host`). What each guarantees: "
        "the Scale page", choices=("mysql", "redis"))
    dedup_mysql_host: str = setting(
        "", "`host[:port]` of a MySQL server of its own for the MySQL dedup store (the `mysql` "
        "section's account and TLS); empty: `mysql.host`. A server of its own keeps the claims "
        "off the primary and its binlog", check=_host_problem)
    dedup_mysql_log_bin: bool = setting(
        True, "`false`: the MySQL dedup store's session runs `SET sql_log_bin = 0`, so its rows "
        "stay out of the binlog and off the replicas; needs `BINLOG ADMIN` (MariaDB 10.5.2+) or "
        "`SESSION_VARIABLES_ADMIN` (MySQL 8.0.14+), else the consumer stops naming the grant")
    dedup_mysql_layout: str = setting(
        "rows", "the MySQL dedup store's tables: `rows` (`cachesync_dedup`, a row per message "
        "id, purged row by row) or `compact` (`cachesync_dedup_compact`: 16-byte keys ordered "
        "by commit time, so claims stay in the buffer pool, partitioned by "
        "`consumer.dedup_mysql_window_s` windows that the purge drops whole; needs `ALTER, "
        "DROP` on the state database). Switching: the Upgrading page",
        choices=("rows", "compact"))
    dedup_mysql_window_s: float = setting(
        3600.0, "the compact layout's partition width, in commit time; a window is dropped "
        "once all of it is older than `consumer.dedup_retention_s`", **POSITIVE)
    # 8 days: must exceed the topic's retention (7 d default)
    dedup_retention_s: float = setting(691200.0, "done records older than this are purged; "
                                       "keep it above the topic's retention",
                                       shown="`691200` (8 days)", **NOT_NEGATIVE)
    purge_interval_s: float = setting(300.0, "how often the consumer purges (bounded: "
                                      "`consumer.purge_batches_per_run`); `0` = never",
                                      **NOT_NEGATIVE)
    purge_batch: int = setting(5000, "records deleted per purge statement", **AT_LEAST_1)
    # bounds the time one periodic purge takes from consuming
    purge_batches_per_run: int = setting(20, "purge statements per periodic run at most (the "
                                         "rest waits for the next run)", **AT_LEAST_1)


@dataclass(frozen=True)
class RelaySettings(_Validated):
    SECTION = "relay"
    outbox_db: str = setting("", "the application database holding the outbox table",
                             shown="required by `relay`", pattern=f"({IDENTIFIER_PATTERN})?",
                             what="a MySQL identifier (letters, digits, _ or $; up to 64)")
    outbox_table: str = setting("cachesync_outbox", "the outbox table (DDL: "
                                "`schema/sql/outbox.sql`)", **IDENTIFIER)
    poll_interval_s: float = setting(0.1, "wait between polls when the last one claimed less "
                                     "than a burst", **POSITIVE)
    burst_limit: int = setting(500, "rows leased per poll", **AT_LEAST_1)
    redeliver_interval_s: float = setting(30.0, "lease of a claimed row; unacknowledged rows "
                                          "are redelivered after it", **POSITIVE)
    warn_after_attempts: int = setting(5, "log a warning at this attempt (and every N after) "
                                       "of one row", **AT_LEAST_1)
    max_unconfirmed: int = setting(5000, "sends Kafka has not acknowledged before the relay "
                                   "stops claiming", **AT_LEAST_1)
    retention_s: float = setting(604800.0, "published rows older than this are purged (7 days)",
                                 **POSITIVE)
    purge_batch: int = setting(1000, "rows deleted per purge statement", **AT_LEAST_1)
    purge_interval_s: float = setting(60.0, "how often the running relay purges", **POSITIVE)


@dataclass(frozen=True)
class MetricsSettings(_Validated):
    SECTION = "metrics"
    listen: str = setting(
        "auto", "`/metrics` `/healthz` `/readyz` address: `auto` = 127.0.0.1 and the role's port "
        "(consume 9464, tail 9465, relay 9466, monitor 9467); `host:port`; port `0` = any; "
        "`off`. In a container, `0.0.0.0:<port>` so that the kubelet's probes and Prometheus "
        "reach it", check=_listen_problem)
    ready_max_lag_s: float = setting(30.0, "`/readyz` fails above this commit->apply lag "
                                     "(consumer) or checkpoint age (tailer)", **POSITIVE)
    probe_interval_s: float = setting(5.0, "how often Kafka consumer lag, checkpoint age and "
                                      "connectivity are probed", **POSITIVE)


@dataclass(frozen=True)
class MonitorSettings(_Validated):
    SECTION = "monitor"
    # on by default: a 1 % sample capped at max_checks_per_s costs 2 point SELECTs and one
    # Redis read per look, and operators see their consistency without asking for it
    enabled: bool = setting(True, "run the consistency monitor inside `consume` (either "
                            "engine; Spark: on the driver) and `run` (not `run --direct`); "
                            "`cachesync monitor` runs it whatever this says")
    sample_ratio: float = setting(0.01, "share of applied events whose row and keys are checked "
                                  "(0 to 1; a hash of the event id, so every monitor samples the "
                                  "same events)", lo=0, hi=1)
    window_s: float = setting(2.0, "a sample is checked this long after it was applied "
                              "(`consume`) or read (`cachesync monitor`); a key that disagrees "
                              "is checked again one window later", **POSITIVE)
    max_checks_per_s: float = setting(
        20.0, "new samples above this rate are dropped "
        "(`cachesync_monitor_samples_dropped_total{reason=\"rate_limit\"}`); a sample costs "
        "2 primary-key SELECTs and one Redis read per look", **POSITIVE)
    queue_size: int = setting(1000, "samples waiting for their check; more are dropped "
                              "(`reason=\"queue_full\"`), the consumer never waits",
                              lo=1, hi=1_000_000)
    max_attempts: int = setting(3, "looks at a row that keeps changing under the check before "
                                "it counts as `unsettled`", lo=1, hi=100)
    warn_interval_s: float = setting(60.0, "at most one stale-key WARNING per table per "
                                     "interval (the others are counted)", **POSITIVE)


_NO_BRACES = {"pattern": r"[^{}]*", "what": "text without '{' or '}'"}


@dataclass(frozen=True)
class FrameworkSettings(_Validated):
    SECTION = "framework"
    key_format: str = setting(
        "plain", "the form the application's cache gives the keys of `tables:` (each entry may "
        "name its own with `key_format`): `plain` (the template is the Redis key); `django` "
        "(`<key_prefix>:<version>:<key>`, Django's default key function); `rails` "
        "(`<key_prefix>:<key>`, the cache store's `namespace`); `laravel` "
        "(`<connection_prefix><key_prefix><key>`); `spring` (`<key_prefix><cache>::<key>`). "
        "Framework caches hold serialized objects: use `mode: delete` (see Frameworks)",
        choices=FORMATS)
    key_prefix: str = setting(
        "", "Django `KEY_PREFIX`; Rails `namespace`; Laravel `cache.prefix` (e.g. "
        "`laravel_cache_`); Spring `spring.cache.redis.key-prefix`", **_NO_BRACES)
    version: int = setting(1, "Django's cache `VERSION` (`key_format: django`): set it from "
                           "the same place as the application's, so a bump renames both",
                           lo=0)
    connection_prefix: str = setting(
        "", "Laravel: the Redis connection's `options.prefix` (`REDIS_PREFIX`, e.g. "
        "`laravel_database_`)", **_NO_BRACES)

    @property
    def keys(self) -> KeyFormat:
        """The key form every table entry uses unless it names its own."""
        return KeyFormat(self.key_format, self.key_prefix, self.version, self.connection_prefix)


@dataclass(frozen=True)
class Settings:
    mysql: MySQLSettings
    kafka: KafkaSettings
    redis: RedisSettings
    tailer: TailerSettings
    consumer: ConsumerSettings
    tables: MappingSet
    origin: str = "<defaults>"      # the settings file (or "<environment>")
    relay: RelaySettings = RelaySettings()
    metrics: MetricsSettings = MetricsSettings()
    monitor: MonitorSettings = MonitorSettings()
    source: SourceSettings = SourceSettings()
    framework: FrameworkSettings = FrameworkSettings()

    @property
    def dedup_namespace(self) -> str:
        return self.consumer.namespace or self.kafka.group_id


# the configuration's sections (YAML keys, CACHESYNC_<SECTION>_<FIELD>) and their settings
# classes; ``tables`` is the mapping (schema.mapping)
SECTIONS = {"mysql": MySQLSettings, "kafka": KafkaSettings, "redis": RedisSettings,
            "tailer": TailerSettings, "consumer": ConsumerSettings, "relay": RelaySettings,
            "metrics": MetricsSettings, "monitor": MonitorSettings, "source": SourceSettings,
            "framework": FrameworkSettings}


def load(path: str | os.PathLike | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Load ``path`` (optional) and apply env overrides; raises ConfigError naming every
    problem of the file and the environment at once."""
    return load_with_origins(path, environ)[0]


def load_with_origins(path: str | os.PathLike | None,
                      environ: Mapping[str, str] | None = None) -> tuple[Settings, dict[str, str]]:
    """:func:`load`, plus where each value came from: ``{"mysql.port": "environment
    CACHESYNC_MYSQL_PORT"}`` (``default``, ``<file>``, ``environment NAME``)."""
    environ = os.environ if environ is None else environ
    source = str(path) if path else "<environment>"
    raw = _read_yaml(Path(path)) if path else {}
    problems: list[str] = []
    unknown = set(raw) - set(SECTIONS) - {"tables"}
    if unknown:
        problems.append(f"{source}: unknown section(s) {sorted(unknown)}; "
                        f"expected {sorted([*SECTIONS, 'tables'])}")
    problems += unknown_variables(environ, section_fields())
    links = service_links(environ)         # once: it scans the whole environment
    env = {k: v for k, v in environ.items() if k not in links}
    origins: dict[str, str] = {}
    sections = {name: _section(name, cls, raw.get(name) or {}, env, source, problems, origins)
                for name, cls in SECTIONS.items()}
    framework = sections["framework"] or FrameworkSettings()
    tables = _tables(raw.get("tables"), source, problems, framework.keys)
    if not problems:
        _collect(problems, _check_outbox_not_mapped, sections["tailer"], tables, source)
    if problems:
        raise ConfigError(_one_message(problems))
    return Settings(**sections, tables=tables, origin=source), origins


def load_section(name: str, environ: Mapping[str, str] | None = None):
    """One section from the environment alone (``cachesync init`` has no config file yet);
    raises ConfigError naming every problem."""
    environ = os.environ if environ is None else environ
    problems: list[str] = []
    links = service_links(environ)         # once: it scans the whole environment
    env = {k: v for k, v in environ.items() if k not in links}
    section = _section(name, SECTIONS[name], {}, env, "<environment>", problems, {})
    if problems:
        raise ConfigError(_one_message(problems))
    return section


def section_fields() -> dict[str, list[str]]:
    """Every section's field names."""
    return {name: [f.name for f in fields(cls)] for name, cls in SECTIONS.items()}


def _collect(problems: list[str], fn, *args):
    """``fn(*args)``, or None with its ConfigError added to ``problems``."""
    try:
        return fn(*args)
    except ConfigError as e:
        problems.append(str(e))
        return None


def _tables(raw: Any, source: str, problems: list[str], key_format: KeyFormat) -> MappingSet | None:
    """The mappings; each table's first problem is collected, not only the first table's."""
    if isinstance(raw, Mapping) and len(raw) > 1:
        before = len(problems)
        for name, spec in raw.items():
            _collect(problems, parse_mappings, {name: spec}, source, key_format)
        if len(problems) > before:
            return None
    return _collect(problems, parse_mappings, raw, source, key_format)


def _one_message(problems: list[str]) -> str:
    """One problem as it is; several as a count and one line each."""
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


def _check_outbox_not_mapped(tailer: TailerSettings, tables: MappingSet, source: str) -> None:
    """An outbox table's rows are events, not cached rows: it cannot be mapped too."""
    both = sorted(f"{db}.{t}" for db, t in tailer.outbox_table_names if f"{db}.{t}" in tables.tables)
    if both:
        raise ConfigError(f"{source}: tailer.outbox_tables lists {', '.join(both)}, which "
                          "tables: also maps; an outbox table's rows are published as the "
                          "events they carry, so it cannot be a mapped table")


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


def _section(name: str, cls, raw: Any, environ: Mapping[str, str], source: str,
             problems: list[str], origins: dict[str, str]):
    """The section built from ``raw`` and the environment; its problems are added to
    ``problems`` (then None: a cross-field check of half-read values would mislead)."""
    if not isinstance(raw, Mapping):
        problems.append(f"{source}: {name}: expected a mapping")
        return None
    known = {f.name: f for f in fields(cls)}
    before = len(problems)
    unknown = set(raw) - set(known)
    if unknown:
        problems.append(f"{source}: {name}: unknown field(s) {sorted(unknown)}; "
                        f"expected some of {sorted(known)}")
    values = {}
    for fname, f in known.items():
        where, value = f"{source}: {name}.{fname}", raw.get(fname, dataclasses.MISSING)
        origins[f"{name}.{fname}"] = "default" if value is dataclasses.MISSING else source
        env_key = f"{ENV_PREFIX}{name.upper()}_{fname.upper()}"
        if env_key in environ:
            where, value = f"environment {env_key}", environ[env_key]
        elif f"{env_key}_FILE" in environ:
            where = f"environment {env_key}_FILE"
            value = _collect(problems, _read_secret_file, environ[f"{env_key}_FILE"], env_key)
            if value is None:
                continue
        if value is not dataclasses.MISSING:
            origins[f"{name}.{fname}"] = where if where.startswith("environment") else source
            _field_value(values, fname, f, value, where, problems)
    if len(problems) > before:
        return None
    return _collect(problems, lambda: cls(**values))


def _field_value(values: dict, fname: str, f, value: Any, where: str, problems: list[str]) -> None:
    """Coerce and check one value into ``values[fname]``, or add its problem."""
    coerced = _collect(problems, _coerce, value, f.type, where)
    if coerced is None:
        return
    rule = f.metadata.get("rule")
    problem = rule.problem(coerced) if rule else None
    if problem:
        problems.append(f"{where}: {problem}")
    else:
        values[fname] = coerced


def _read_secret_file(path: str, env_key: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ConfigError(f"{env_key}_FILE: cannot read {path}: {e.strerror}") from None


def _coerce(value: Any, type_name: str, where: str):
    try:
        if type_name == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if type_name == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if type_name == "Secret":
            return Secret(str(value))
        if type_name == "Properties":
            return _properties(value)
        if type_name == "bool":
            return _boolean(value)
        if isinstance(value, (dict, list)):
            raise ValueError
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {_EXPECTED.get(type_name, type_name)}, "
                          f"got {value!r}") from None


def _boolean(value: Any) -> bool:
    """YAML's booleans as they are; text true/false/yes/no/1/0 (environment variables)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    raise ValueError(text)


def _properties(value: Any) -> Properties:
    """A mapping (YAML) or a JSON object (an environment variable)."""
    if isinstance(value, str):
        import json
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise ValueError(value) from None
    if not isinstance(value, Mapping):
        raise ValueError(value)
    return Properties(value)


_EXPECTED = {"int": "an integer", "float": "a number", "str": "a string", "Secret": "a string",
             "bool": "true or false",
             "Properties": "a mapping of property names to values (in the environment: a JSON object)"}
