"""Builds the components from Settings: the one place that knows every adapter."""

from __future__ import annotations

from cachesync.config import Settings
from cachesync.schema.errors import ConfigError
from cachesync.schema.mapping import MappingSet
from cachesync.consumer.adapters.kafka_source import KafkaDeadLetters, KafkaSource
from cachesync.consumer.adapters.mysql_dedup import MySQLDedupStore
from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.adapters.redis_dedup import RedisDedupStore
from cachesync.consumer.engine import EngineOptions, PythonEngine
from cachesync.producer_outbox.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.producer_outbox.heartbeat import own_rows_only, with_heartbeat
from cachesync.producer_outbox.mysql import MySQLParams
from cachesync.producer_outbox.publisher import KafkaPublisher
from cachesync.producer_outbox.relay import Relay, RelayOptions
from cachesync.producer_outbox.relay_store import OutboxStore
from cachesync.producer_outbox.tailer import Tailer, TailerOptions


def mysql_params(settings: Settings) -> MySQLParams:
    m = settings.mysql
    return MySQLParams(m.host, m.port, m.user, str(m.password), database=m.state_db)


def mappings(settings: Settings) -> MappingSet:
    """The configured tables plus the internal heartbeat table (see cachesync.producer_outbox.heartbeat)."""
    return with_heartbeat(settings.tables, settings.mysql.state_db)


def build_tailer(settings: Settings, start: Checkpoint | None = None) -> Tailer:
    """The binlog tailer; ``start`` overrides the stored checkpoint (``tail --from-...``)."""
    params = mysql_params(settings)
    t = settings.tailer
    return Tailer(params, KafkaPublisher(settings.kafka.bootstrap_servers),
                  MySQLCheckpointStore(params.connect, t.name), mappings(settings),
                  TailerOptions(topic=settings.kafka.topic, replica_server_id=t.server_id,
                                max_inflight=t.max_inflight,
                                checkpoint_interval_s=t.checkpoint_interval_s,
                                pack_rows=t.pack_rows, pack_bytes=t.pack_bytes,
                                xa_buffer_rows=t.xa_buffer_rows, start=start,
                                row_filter=own_rows_only(settings.mysql.state_db, t.name)))


def build_dedup(settings: Settings):
    """The dedup store ``consumer.dedup_store`` names; raises ConfigError for an unknown one."""
    c = settings.consumer
    if c.dedup_store == "mysql":
        return MySQLDedupStore(mysql_params(settings), settings.dedup_namespace)
    if c.dedup_store == "redis":
        return RedisDedupStore(str(settings.redis.url), settings.dedup_namespace,
                               c.dedup_retention_s)
    raise ConfigError(f"consumer.dedup_store: expected 'mysql' or 'redis', got {c.dedup_store!r}")


def engine_options(settings: Settings) -> EngineOptions:
    c = settings.consumer
    return EngineOptions(batch_size=c.batch_size, poll_timeout_s=c.poll_timeout_s,
                         claim_lease_s=c.claim_lease_s, dedup_retention_s=c.dedup_retention_s,
                         purge_interval_s=c.purge_interval_s, purge_batch=c.purge_batch)


def build_engine(settings: Settings, on_batch=None) -> PythonEngine:
    k = settings.kafka
    return PythonEngine(
        source=KafkaSource(k.bootstrap_servers, k.topic, k.group_id),
        dedup=build_dedup(settings),
        cache=RedisCache(str(settings.redis.url)),
        dead_letters=KafkaDeadLetters(k.bootstrap_servers, k.dead_letter_topic),
        mappings=mappings(settings),
        options=engine_options(settings),
        on_batch=on_batch)


def build_relay(settings: Settings) -> Relay:
    """The outbox relay for ``relay.outbox_db``; raises ConfigError if it is not set."""
    r, m = settings.relay, settings.mysql
    if not r.outbox_db:
        raise ConfigError("relay.outbox_db is required: the application database holding "
                          "the outbox table (or CACHESYNC_RELAY_OUTBOX_DB)")
    params = MySQLParams(m.host, m.port, m.user, str(m.password), database=r.outbox_db)
    options = RelayOptions(
        topic=settings.kafka.topic, poll_interval_s=r.poll_interval_s, burst_limit=r.burst_limit,
        redeliver_interval_s=r.redeliver_interval_s, warn_after_attempts=r.warn_after_attempts,
        max_unconfirmed=r.max_unconfirmed, retention_s=r.retention_s, purge_batch=r.purge_batch,
        purge_interval_s=r.purge_interval_s)
    bootstrap = settings.kafka.bootstrap_servers
    return Relay(OutboxStore(params.connect, r.outbox_db, r.outbox_table),
                 lambda: KafkaPublisher(bootstrap, client_id="cachesync-relay"),
                 options, db=r.outbox_db, server=f"{m.host}:{m.port}")
