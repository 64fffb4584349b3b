"""Builds the components from Settings: the one place that constructs adapters.

Every engine and command (the python loop, direct mode, the Spark driver and its
workers, replay, audit, status, the probes) calls these factories, so a setting
cannot mean one thing in one engine and another elsewhere. Settings sections go to
the components as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cachesync.runtime.config import Settings, host_list
from cachesync.runtime.kafka_login import refused_login_is_fatal
from cachesync.runtime.kafka_security import admin_options, consumer_options, producer_options
from cachesync.runtime.mysql import MySQLParams, Session, ensure_state_tables
from cachesync.schema.errors import ConfigError
from cachesync.schema.mapping import MappingSet

# The adapters are imported by the factories that build them: `consume` never loads the
# binlog reader, `tail` never the consumer engine, and every command starts sooner.
if TYPE_CHECKING:
    import redis
    from kafka import KafkaConsumer
    from cachesync.consumer.adapters.kafka_source import KafkaDeadLetters
    from cachesync.consumer.adapters.redis_cache import RedisCache
    from cachesync.consumer.adapters.redis_table_jobs import RedisTableJobs
    from cachesync.consumer.engine import PythonEngine
    from cachesync.probes import KafkaOffsets
    from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
    from cachesync.producer_outbox.binlog.heartbeat import HeartbeatWriter
    from cachesync.producer_outbox.binlog.leader import TailerLock
    from cachesync.producer_outbox.outbox_relay.relay import Relay
    from cachesync.producer_outbox.tailer import Tailer


ADAPTER_TIMEOUT_S = 5    # the cache's and the dedup store's Redis socket timeouts


def mysql_params(settings: Settings, database: str | None = None) -> MySQLParams:
    """The cachesync account's connection to ``database`` (default: the state database)."""
    m = settings.mysql
    return MySQLParams(m.host, m.port, m.user, str(m.password), database=database or m.state_db,
                       tls=tls_options(m))


def tls_options(m) -> tuple[tuple[str, object], ...]:
    """pymysql's TLS arguments for ``mysql.ssl_*``; empty (plain text) without ``ssl_ca`` or
    ``ssl``. ``ssl`` alone names the system's CA bundle: pymysql given no CA would encrypt
    without verifying the server."""
    if not (m.ssl_ca or m.ssl):
        return ()
    return (("ssl_ca", m.ssl_ca or system_ca()), ("ssl_cert", m.ssl_cert or None), ("ssl_key", m.ssl_key or None),
            ("ssl_verify_cert", True), ("ssl_verify_identity", m.ssl_verify_identity))


def system_ca() -> str:
    """The system's trusted CA bundle file; raises ConfigError without one."""
    import os
    import ssl
    paths = ssl.get_default_verify_paths()
    found = next((f for f in (paths.cafile, "/etc/ssl/certs/ca-certificates.crt",
                              "/etc/pki/tls/certs/ca-bundle.crt") if f and os.path.isfile(f)), None)
    if not found:
        raise ConfigError("mysql.ssl: this system has no trusted CA bundle (OpenSSL looks at "
                          f"{paths.openssl_cafile}); set mysql.ssl_ca to the server's CA")
    return found


def mappings(settings: Settings) -> MappingSet:
    """The configured tables plus the internal heartbeat table (see cachesync.producer_outbox.binlog.heartbeat)."""
    from cachesync.producer_outbox.binlog.heartbeat import with_heartbeat
    return with_heartbeat(settings.tables, settings.mysql.state_db)


def state_session(settings: Settings) -> Session:
    """A MySQL session on the state database (checkpoints, heartbeats, lag), tables ensured."""
    return Session(mysql_params(settings).connect, setup=ensure_state_tables)


def kafka_offsets(settings: Settings) -> KafkaOffsets:
    from cachesync.probes import KafkaOffsets
    return KafkaOffsets(settings.kafka.bootstrap_servers, security=admin_options(settings.kafka))


def redis_client(settings: Settings, timeout_s: float | None = None) -> redis.Redis:
    """A client of ``redis.url``, of the cluster it is a node of (``redis.cluster``), or of the
    master ``redis.sentinels`` name (every Redis user)."""
    import redis
    from redis.cluster import ClusterNode, RedisCluster
    from redis.connection import parse_url
    from redis.sentinel import Sentinel
    r = settings.redis
    if r.cluster:
        more = [ClusterNode(h, p) for h, p in host_list(r.cluster_nodes, 6379)] \
            if r.cluster_nodes else []
        return RedisCluster.from_url(str(r.url), startup_nodes=more, socket_timeout=timeout_s,
                                     socket_connect_timeout=timeout_s)
    if not r.sentinels:
        return redis.Redis.from_url(str(r.url), socket_timeout=timeout_s,
                                    socket_connect_timeout=timeout_s)
    options = parse_url(str(r.url))
    options.pop("host", None), options.pop("port", None)
    if options.pop("connection_class", None) is redis.SSLConnection:
        options["ssl"] = True
    sentinels = Sentinel(host_list(r.sentinels, 26379),
                         sentinel_kwargs=sentinel_options(r, options, timeout_s))
    return sentinels.master_for(r.master_name, socket_timeout=timeout_s,
                                socket_connect_timeout=timeout_s, **options)


def writer_timeout_s(settings: Settings) -> float:
    """The socket timeout of the clients that write (cache, dedup store): longer than
    ``redis.wait_timeout_ms``, so a WAIT that waits its full time is not cut off as a timeout
    (redis-py would then re-send the batch's commands on other connections)."""
    r = settings.redis
    if not r.wait_replicas:
        return ADAPTER_TIMEOUT_S
    return max(ADAPTER_TIMEOUT_S, r.wait_timeout_ms / 1000 + 2)


def replica_wait(settings: Settings):
    """``redis.wait_replicas`` as the Redis adapters take it (None: do not wait)."""
    from cachesync.consumer.adapters.redis_cluster import ReplicaWait
    r = settings.redis
    return ReplicaWait(r.wait_replicas, r.wait_timeout_ms) if r.wait_replicas else None


# the TLS options of redis.url's query that the sentinels' connections share with the master's
_SENTINEL_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs",
                         "ssl_check_hostname")


def sentinel_options(r, url_options: dict, timeout_s: float | None) -> dict:
    """How a client connects to the sentinels themselves: their own user and password
    (``redis.sentinel_*``), TLS with ``redis.url``'s CA and certificate when asked."""
    options = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if r.sentinel_username:
        options["username"] = r.sentinel_username
    if r.sentinel_password:
        options["password"] = str(r.sentinel_password)
    if r.sentinel_tls:
        options["ssl"] = True
        options.update({k: url_options[k] for k in _SENTINEL_TLS_OPTIONS if k in url_options})
    return options


def range_reader(settings: Settings, **options) -> KafkaConsumer:
    """A group-less Kafka consumer (replay reads offset ranges; nothing is committed)."""
    from kafka import KafkaConsumer
    bootstrap = settings.kafka.bootstrap_servers
    with refused_login_is_fatal(bootstrap):
        return KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None,
                             enable_auto_commit=False,
                             **{**options, **consumer_options(settings.kafka)})


def build_heartbeat(settings: Settings) -> HeartbeatWriter:
    from cachesync.producer_outbox.binlog.heartbeat import HeartbeatWriter
    t = settings.tailer
    return HeartbeatWriter(mysql_params(settings).connect, t.name, t.heartbeat_interval_s)


def build_cache(settings: Settings) -> RedisCache:
    from cachesync.consumer.adapters.redis_cache import RedisCache
    return RedisCache("", client=redis_client(settings, writer_timeout_s(settings)),
                      legacy_companions=settings.redis.legacy_companion_keys,
                      wait=replica_wait(settings), fill_hold_ms=settings.redis.fill_hold_ms)


def build_cache_reader(settings: Settings, timeout_s: float = ADAPTER_TIMEOUT_S):
    """The CacheReader port on its own Redis client (the monitor, audit, lint, probes)."""
    from cachesync.consumer.adapters.redis_reader import RedisCacheReader
    return RedisCacheReader(redis_client(settings, timeout_s))


def build_tailer_lock(settings: Settings) -> TailerLock:
    """The named lock that makes one of the tailers named ``tailer.name`` the active one."""
    from cachesync.producer_outbox.binlog.leader import TailerLock
    return TailerLock(mysql_params(settings).connect, settings.tailer.name,
                      settings.tailer.lock_lease_s)


def tailer_preflight(settings: Settings):
    """A check of the binlog source's settings and the user's grants (raises FatalError,
    RetryableError when no source answers)."""
    from cachesync.producer_outbox.binlog.preflight import check_server
    return lambda: check_server(source_params(settings).connect,
                                replica=bool(settings.tailer.source_hosts))


def source_params(settings: Settings) -> MySQLParams:
    """The server whose binlog the tailer reads: the first of ``tailer.source_hosts`` that
    answers, else ``mysql.host`` (raises RetryableError when none answers, FatalError)."""
    from cachesync.producer_outbox.binlog.server_choice import first_answering, source_candidates
    if not settings.tailer.source_hosts:
        return mysql_params(settings)
    hosts = host_list(settings.tailer.source_hosts, settings.mysql.port)
    return first_answering(source_candidates(mysql_params(settings), hosts))


def build_dedup(settings: Settings, cache=None):
    """The dedup store ``consumer.dedup_store`` names; raises ConfigError for an unknown one.
    ``cache`` (a RedisCache on the same settings): the Redis store may then claim, invalidate
    and confirm a batch in one round trip."""
    c = settings.consumer
    if c.dedup_store == "mysql":
        from cachesync.consumer.adapters.mysql_dedup import MySQLDedupStore
        params = mysql_params(settings)
        if c.dedup_mysql_host:
            (host, port), = host_list(c.dedup_mysql_host, settings.mysql.port)
            params = replace(params, host=host, port=port)
        if c.dedup_mysql_layout == "compact":
            from cachesync.consumer.adapters.mysql_dedup_compact import CompactMySQLDedupStore
            return CompactMySQLDedupStore(params, settings.dedup_namespace,
                                          c.dedup_mysql_window_s, log_bin=c.dedup_mysql_log_bin)
        return MySQLDedupStore(params, settings.dedup_namespace, log_bin=c.dedup_mysql_log_bin)
    if c.dedup_store == "redis":
        from cachesync.consumer.adapters.redis_dedup import RedisDedupStore
        return RedisDedupStore("", settings.dedup_namespace, c.dedup_retention_s,
                               client=redis_client(settings, writer_timeout_s(settings)),
                               wait=replica_wait(settings),
                               leases=None if cache is None else cache.leases,
                               fill_hold_ms=settings.redis.fill_hold_ms)
    raise ConfigError(f"consumer.dedup_store: expected 'mysql' or 'redis', got {c.dedup_store!r}")


def build_dead_letters(settings: Settings) -> KafkaDeadLetters:
    from cachesync.consumer.adapters.kafka_source import KafkaDeadLetters
    k = settings.kafka
    return KafkaDeadLetters(k.bootstrap_servers, k.dead_letter_topic, producer_options(k))


@dataclass(frozen=True)
class SettingsAdapters:
    """This module's adapters for one Settings, as one picklable object
    (``consumer.ports.Adapters``): what the Spark engine's tasks build theirs with on the
    executors, so that the engine does not import the application."""

    settings: Settings

    def mappings(self) -> MappingSet:
        return mappings(self.settings)

    def cache(self):
        return build_cache(self.settings)

    def cache_reader(self, timeout_s: float = ADAPTER_TIMEOUT_S):
        return build_cache_reader(self.settings, timeout_s)

    def dedup(self):
        return build_dedup(self.settings)

    def table_jobs(self):
        return build_table_jobs(self.settings)

    def dead_letters(self):
        return build_dead_letters(self.settings)

    def mysql(self, database: str) -> MySQLParams:
        return mysql_params(self.settings, database)

    def replace_settings(self, settings: Settings) -> "SettingsAdapters":
        return replace(self, settings=settings)


def kafka_group(settings: Settings) -> dict:
    """The consumer group membership settings of ``kafka``, as kafka-python takes them."""
    from cachesync.consumer.adapters.kafka_source import group_config
    k = settings.kafka
    return group_config(k.session_timeout_ms, k.heartbeat_interval_ms, k.max_poll_interval_ms,
                        k.group_instance_id, k.assignment_strategy)


def build_engine(settings: Settings, on_batch=None, source=None, dead_letters=None,
                 hooks=()) -> PythonEngine:
    """The python engine on the Kafka group (or on ``source``, direct mode's queue), with
    extra ``hooks`` (the consistency monitor)."""
    from cachesync.consumer.adapters.kafka_source import KafkaSource
    from cachesync.consumer.engine import PythonEngine
    k = settings.kafka
    cache = build_cache(settings)
    return PythonEngine(
        source=source or KafkaSource(k.bootstrap_servers, k.topic, k.group_id,
                                     group=kafka_group(settings), security=consumer_options(k),
                                     async_commit=settings.consumer.offset_commit == "async",
                                     commit_interval_s=settings.consumer.offset_commit_interval_s,
                                     # an idle consumer's fetch comes back when its poll does
                                     fetch_wait_s=settings.consumer.poll_timeout_s,
                                     client=k.client),
        dedup=build_dedup(settings, cache), cache=cache,
        dead_letters=dead_letters or build_dead_letters(settings),
        mappings=mappings(settings), options=settings.consumer, on_batch=on_batch, hooks=hooks,
        table_jobs=build_table_jobs(settings))


def build_table_jobs(settings: Settings) -> RedisTableJobs:
    """The group's table-level scan records, beside the cache (one scan per event)."""
    from cachesync.consumer.adapters.redis_table_jobs import RedisTableJobs
    return RedisTableJobs(redis_client(settings, ADAPTER_TIMEOUT_S), settings.dedup_namespace,
                          keep_s=settings.consumer.dedup_retention_s)


def start_publisher(settings: Settings):
    """The tailer's Kafka publisher (``tailer.publisher``: its own process, or a thread;
    :func:`publisher_placement`), started in a thread of its own (StartingPublisher): the
    first send waits for it."""
    from cachesync import prespawn
    from cachesync.producer_outbox.publish.kafka_publisher import delivery_timeout_s, new_publisher
    from cachesync.producer_outbox.publish.starting_publisher import StartingPublisher
    bootstrap, security = settings.kafka.bootstrap_servers, producer_options(settings.kafka)
    client, tunable = settings.kafka.client, publisher_tunables(settings.tailer)
    if publisher_placement(settings.tailer.publisher, client, security) == "process":
        from cachesync.producer_outbox.publish.process_publisher import ProcessPublisher
        child = prespawn.take("publisher")      # started with the command, if it was
        return StartingPublisher(lambda: ProcessPublisher(bootstrap, security=security,
                                                          child=child, client=client, **tunable),
                                 delivery_timeout_s(security))
    prespawn.discard_all()
    return StartingPublisher(lambda: new_publisher(bootstrap, client=client, security=security,
                                                   **tunable),
                             delivery_timeout_s(security))


def publisher_placement(publisher: str, client: str, security) -> str:
    """``tailer.publisher`` decided: ``auto`` is ``thread`` when the publisher is on
    librdkafka (kafka.client, rdkafka_publisher.choose), else ``process``."""
    if publisher != "auto":
        return publisher
    from cachesync.producer_outbox.publish import rdkafka_publisher
    from cachesync.schema.errors import ConfigError
    try:
        chosen, _why = rdkafka_publisher.choose(client, security or {})
    except ConfigError:
        return "process"        # the publisher says why when it starts
    return "thread" if chosen == "librdkafka" else "process"


def publisher_tunables(tailer) -> dict:
    """The tailer's publisher's defaults (``kafka.producer_properties`` win over them): no
    linger of the client's own when packs span transactions (``tailer.pack_rows`` above 1,
    the fast reader), since they already wait at the source (the reader's idleness,
    ``tailer.pack_linger_ms`` while busy), and a commit that arrives alone would wait again
    after it."""
    if tailer.pack_rows > 1 and tailer.reader != "library":
        return {"linger_ms": 0}
    return {}


def build_tailer(settings: Settings, start: Checkpoint | None = None, publisher=None,
                 topic: str | None = None, started=None, checkpoints=None,
                 drain_timeout_s: float | None = None) -> Tailer:
    """The binlog tailer publishing to Kafka (or to ``publisher`` on ``topic``: direct mode);
    ``start`` overrides the stored checkpoint (``tail --from-...``); ``started``: a
    :func:`start_publisher` to publish with (default: one started now, beside the tailer's
    preflight and binlog connect); ``checkpoints``: the store (default: the tailer's row in
    the state database). Publishing to Kafka with ``tailer.on_kafka_outage: invalidate``,
    its run stops with KafkaUnreachable after ``tailer.kafka_outage_after_s`` without an
    acknowledgement (cachesync.kafka_outage)."""
    from cachesync.producer_outbox.binlog.checkpoint import MySQLCheckpointStore
    from cachesync.producer_outbox.binlog.heartbeat import own_rows_only
    # the binlog reader needs compiled libraries (zstandard) that Spark executors, which
    # import this module for the consumer's adapters, may not have
    from cachesync.producer_outbox.tailer import Tailer, TailerOptions
    t = settings.tailer
    source = source_params(settings)
    owns = publisher is None
    if owns:
        publisher = started or start_publisher(settings)
    outage = owns and t.on_kafka_outage == "invalidate"
    extra = {} if drain_timeout_s is None else {"drain_timeout_s": drain_timeout_s}
    return Tailer(source, publisher,
                  checkpoints or MySQLCheckpointStore(mysql_params(settings).connect, t.name),
                  mappings(settings),
                  TailerOptions(topic or settings.kafka.topic, t,
                                row_filter=own_rows_only(settings.mysql.state_db, t.name),
                                start=start, owns_publisher=owns, cluster=settings.source.id,
                                outage_after_s=t.kafka_outage_after_s if outage else None,
                                **extra))


def build_direct(settings: Settings, on_batch=None):
    """Direct mode: the tailer, the engine and the in-process queue between them.

    The same adapters as ``build_tailer`` and ``build_engine`` except the queue for
    Kafka and LogDeadLetters for the dead-letter topic. Every row goes out on its own
    (a pack would only be unpacked again in the same process). The dedup namespace is
    ``consumer.namespace`` or ``direct-[<source.id>-]<tailer.name>``, so a direct sidecar
    never shares dedup records with a Kafka consumer group, nor with another cluster's.
    """
    from cachesync.direct import DirectSidecar, InProcessQueue, LogDeadLetters
    cluster = f"{settings.source.id}-" if settings.source.id else ""
    namespace = settings.consumer.namespace or f"direct-{cluster}{settings.tailer.name}"
    settings = replace(settings, consumer=replace(settings.consumer, namespace=namespace),
                       tailer=replace(settings.tailer, pack_rows=1))
    queue = InProcessQueue()
    tailer = build_tailer(settings, publisher=queue, topic="direct")
    engine = build_engine(settings, on_batch, source=queue, dead_letters=LogDeadLetters())
    return DirectSidecar(tailer, engine, queue)


def outage_server_id(server_id: int) -> int:
    """The replica server id of the direct run of a Kafka outage: ``tailer.server_id`` with
    its top bit flipped (two binlog connections with one id: the server drops the older), so
    that it reads beside the tailer run that publishes again (a flip to 0, never valid,
    becomes 2^31 - 1)."""
    return (server_id ^ 1 << 31) or (1 << 31) - 1


def build_outage_fallback(settings: Settings, start: Checkpoint | None = None):
    """What the tailer runs while Kafka does not serve (``tailer.on_kafka_outage:
    invalidate``): direct mode, except that ids are claimed in the consumer group's dedup
    namespace (the consumer then skips what it applied when the tailer publishes the range
    again) and its checkpoint is kept in memory only, from ``start`` (default: the stored
    one, which stays at what Kafka acknowledged). A stop gives up what is queued at once:
    it is published."""
    from cachesync.direct import DirectSidecar, InProcessQueue, LogDeadLetters
    from cachesync.producer_outbox.binlog.checkpoint import (HeldCheckpoints,
                                                             MySQLCheckpointStore)
    settings = replace(settings, consumer=replace(settings.consumer,
                                                  namespace=settings.dedup_namespace),
                       tailer=replace(settings.tailer, pack_rows=1,
                                      server_id=outage_server_id(settings.tailer.server_id)))
    stored = MySQLCheckpointStore(mysql_params(settings).connect, settings.tailer.name)
    queue = InProcessQueue()
    tailer = build_tailer(settings, publisher=queue, topic="direct",
                          checkpoints=HeldCheckpoints(stored, start), drain_timeout_s=0.0)
    engine = build_engine(settings, source=queue, dead_letters=LogDeadLetters())
    return DirectSidecar(tailer, engine, queue)


def build_relay(settings: Settings) -> Relay:
    """The outbox relay for ``relay.outbox_db``; raises ConfigError if it is not set."""
    from cachesync.producer_outbox.publish.kafka_publisher import new_publisher
    from cachesync.producer_outbox.outbox_relay.relay import Relay
    from cachesync.producer_outbox.outbox_relay.store import OutboxStore
    r, m = settings.relay, settings.mysql
    if not r.outbox_db:
        raise ConfigError("relay.outbox_db is required: the application database holding "
                          "the outbox table (or CACHESYNC_RELAY_OUTBOX_DB)")
    params = mysql_params(settings, r.outbox_db)
    bootstrap, security = settings.kafka.bootstrap_servers, producer_options(settings.kafka)
    client = settings.kafka.client
    return Relay(OutboxStore(params.connect, r.outbox_db, r.outbox_table),
                 lambda: new_publisher(bootstrap, client=client, client_id="cachesync-relay",
                                       security=security),
                 r, settings.kafka.topic, db=r.outbox_db, server=f"{m.host}:{m.port}",
                 from_binlog=(r.outbox_db, r.outbox_table) in settings.tailer.outbox_table_names)
