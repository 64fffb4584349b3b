"""Per-partition work of the Spark engine, run inside Spark's Python workers (no pyspark import).

A Spark task gets one Kafka partition's slice of a micro-batch, in offset order. It
runs the python engine's ``process`` on it (decode -> claim -> plan -> delete -> confirm,
dead letters flushed) with the real adapters, so both engines share one implementation
of the consumer semantics. Spark, not Kafka's group, owns the offsets: they move in the
checkpoint only after every task of the batch returned.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

from cachesync.consumer.adapters.memory import MemorySource
from cachesync.consumer.engine import EngineOptions, PythonEngine, Stats
from cachesync.consumer.spark.records import to_record
from cachesync.producer_outbox.mysql import MySQLParams
from cachesync.schema.errors import RetryableError
from cachesync.schema.mapping import MappingSet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApplyConfig:
    """Everything a task needs to build its adapters; pickled to the workers with the job."""

    mysql: MySQLParams
    namespace: str                  # dedup namespace (the python engine's: the group id)
    redis_url: str
    bootstrap_servers: str
    dead_letter_topic: str
    mappings: MappingSet
    options: EngineOptions = EngineOptions()
    # Identifies one engine run: worker processes keep that run's connections under it.
    token: str = field(default_factory=lambda: uuid.uuid4().hex)


class _LazyDeadLetters:
    """A Kafka dead-letter producer created on the first poison record, not per task."""

    def __init__(self, bootstrap_servers: str, topic: str):
        self._args = (bootstrap_servers, topic)
        self._producer = None

    def send(self, record, reason: str, detail: str) -> None:
        if self._producer is None:
            from cachesync.consumer.adapters.kafka_source import KafkaDeadLetters
            self._producer = KafkaDeadLetters(*self._args)
        self._producer.send(record, reason, detail)

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush()


# Spark reuses its Python worker processes across tasks (spark.python.worker.reuse), so
# the connections of one engine run are opened once per worker, not once per batch.
_ADAPTERS: dict[str, tuple] = {}


def _adapters(config: ApplyConfig) -> tuple:
    found = _ADAPTERS.get(config.token)
    if found is None:
        from cachesync.consumer.adapters.mysql_dedup import MySQLDedupStore
        from cachesync.consumer.adapters.redis_cache import RedisCache
        found = (MySQLDedupStore(config.mysql, config.namespace), RedisCache(config.redis_url),
                 _LazyDeadLetters(config.bootstrap_servers, config.dead_letter_topic))
        _ADAPTERS[config.token] = found
    return found


def consume_partition(rows: Iterable, config: ApplyConfig, batch_id: int) -> Iterator[dict]:
    """Apply one partition's records of micro-batch ``batch_id``; yields one Stats dict.

    Records are processed in chunks of ``options.batch_size`` (one dedup round trip
    each). Transient errors are retried inside ``process`` and never skipped; anything
    else fails the task, so Spark does not commit the batch and runs it again.
    """
    dedup, cache, dead_letters = _adapters(config)
    engine = PythonEngine(MemorySource(), dedup, cache, dead_letters, config.mappings,
                          config.options)
    chunk = []
    for row in rows:
        chunk.append(to_record(row))
        if len(chunk) >= config.options.batch_size:
            _schedule_double_deletes(engine.process(chunk), cache)
            chunk = []
    if chunk:
        _schedule_double_deletes(engine.process(chunk), cache)
    log.debug("batch %d: partition done: %s", batch_id, engine.stats)
    yield asdict(engine.stats)


def _schedule_double_deletes(result, cache) -> None:
    """Delete-mode ``double_delete_s``: invalidate the keys again after the delay.

    The python engine keeps these in its loop; a task's engine ends with the task, so
    the worker process (which Spark keeps) runs them on a timer. Like the python
    engine's, they are an extra, not the guarantee: a worker that dies loses them.
    """
    by_delay: dict[float, dict[str, None]] = {}
    for ep in result.applied:
        if getattr(ep, "double_delete_s", None) and ep.keys:
            by_delay.setdefault(ep.double_delete_s, {}).update(dict.fromkeys(ep.keys))
    for delay, keys in by_delay.items():
        timer = threading.Timer(delay, _delete_quietly, (cache, list(keys)))
        timer.daemon = True
        timer.start()


def _delete_quietly(cache, keys: list[str]) -> None:
    try:
        cache.delete(keys)
    except RetryableError as e:
        log.warning("%d delayed second delete(s) not run: %s", len(keys), e)


def add_stats(total: Stats, part: dict) -> None:
    """Add one partition's Stats dict into ``total``."""
    for name, value in part.items():
        setattr(total, name, getattr(total, name) + value)


@dataclass(frozen=True)
class ReplayConfig:
    """What a replay task needs; ``redis_url=None`` is a dry run (counts, touches nothing)."""

    mappings: MappingSet
    redis_url: str | None
    tables: tuple[str, ...] = ()
    rate_per_task: float | None = None
    batch_size: int = 2000
    token: str = field(default_factory=lambda: uuid.uuid4().hex)


# (table, key, events, existed, poison, records): one row per distinct key of a table,
# one per table with its event count (key None), one per task with its totals (table "").
REPLAY_ROW_SCHEMA = ("`table` STRING, key STRING, events LONG, existed LONG, poison LONG, "
                     "records LONG")


def replay_partition(rows: Iterable, config: ReplayConfig, progress) -> Iterator[tuple]:
    """Replay one task's records (any order is fine: deletes only); yields REPLAY_ROW_SCHEMA rows.

    ``progress`` is a Spark accumulator of records read, for the driver's progress bar.
    """
    from cachesync.consumer.replay import RateLimiter, ReplayApplier
    cache = None if config.redis_url is None else _redis(config)
    applier = ReplayApplier(config.mappings, cache, config.tables, config.batch_size)
    limiter = RateLimiter(config.rate_per_task)
    chunk = []
    for row in rows:
        chunk.append(to_record(row))
        if len(chunk) >= config.batch_size:
            limiter.acquire(len(chunk))
            applier.apply(chunk)
            progress.add(len(chunk))
            chunk = []
    if chunk:
        limiter.acquire(len(chunk))
        applier.apply(chunk)
        progress.add(len(chunk))
    c = applier.counts
    for table, keys in c.keys.items():
        yield (table, None, c.events[table], 0, 0, 0)
        for key in keys:
            yield (table, key, 0, 0, 0, 0)
    yield ("", None, 0, c.keys_existed, c.poison, c.records)


def _redis(config: ReplayConfig):
    found = _ADAPTERS.get(config.token)
    if found is None:
        from cachesync.consumer.adapters.redis_cache import RedisCache
        found = _ADAPTERS[config.token] = RedisCache(config.redis_url)
    return found


@dataclass(frozen=True)
class AuditConfig:
    mapping: "TableMapping"  # noqa: F821 (cachesync.schema.mapping.TableMapping, pickled)
    redis_url: str
    chunk: int = 500
    # column -> data_type when the rows hold key texts (audit.read_table): turned back into
    # the values the tailer publishes (schema.keytext.value_from_text); empty: rows as read
    types: dict = field(default_factory=dict)


def audit_partition(rows: Iterable, config: AuditConfig, rows_read) -> Iterator[tuple[str, str]]:
    """Yields ``(verdict, key)`` for every key the partition's rows render.

    Values are read in chunks: one MGET (JSON values) and one pipelined HGETALL
    (update mode ``hash`` values) per chunk. ``rows_read`` is a Spark accumulator.
    """
    import redis
    from cachesync.consumer.audit import expected_entries, verdict
    from cachesync.schema.keytext import value_from_text
    client = redis.Redis.from_url(config.redis_url, socket_timeout=10)
    types = config.types
    seen = 0
    try:
        chunk = []
        for row in rows:
            seen += 1
            values = row.asDict()
            if types:
                values = {c: value_from_text(v, types[c]) if c in types else v
                          for c, v in values.items()}
            chunk += expected_entries(values, config.mapping)
            if len(chunk) >= config.chunk:
                yield from _judge(client, config.mapping, chunk, verdict)
                chunk = []
        if chunk:
            yield from _judge(client, config.mapping, chunk, verdict)
        rows_read.add(seen)
    finally:
        client.close()


def _judge(client, mapping, entries, verdict) -> Iterator[tuple[str, str]]:
    keys = [k for k, _ in entries]
    if mapping.updates and mapping.value_format == "hash":
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.hgetall(k)
        values = pipe.execute()
    else:
        values = client.mget(keys)
    for (key, expected), cached in zip(entries, values):
        yield verdict(mapping, expected, cached), key
