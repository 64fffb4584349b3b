"""Per-partition work of the Spark engine, run inside Spark's Python workers (no pyspark import).

A Spark task gets one or more Kafka partitions' slices of a micro-batch, each in offset
order. It runs the shared applier (``cachesync.consumer.applier``: decode -> plan ->
claim -> apply -> confirm -> dead letters) on them, with adapters built by the same factories
as every other engine, through the pickled ``consumer.ports.Adapters`` the application passes
(``cachesync.wiring.SettingsAdapters``). The side jobs
run on the driver, never in a worker's thread (an executor may be lost at any time):
each task returns what they need — the lag samples, and the plans of the events the
delayed second deletes and the consistency monitor act on. Spark, not Kafka's group,
owns the offsets: they move in the checkpoint only after every task of the batch returned.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Iterable, Iterator

from cachesync.runtime.gc_pacing import paced
from cachesync.consumer.applier import Applier, Stats
from cachesync.consumer.core.offsets import commit_offsets
from cachesync.consumer.ports import Adapters
from cachesync.consumer.spark.bundle import keep_zip_directories
from cachesync.consumer.spark.records import arrow_records, to_record
from cachesync.consumer.spark.table_events import finish_scans, task_table_scans
from cachesync.schema.mapping import MappingSet
from cachesync.runtime.zipnative import accelerator

log = logging.getLogger(__name__)

AUDIT_TIMEOUT_S = 10.0      # one MGET or pipelined HGETALL of a chunk


@dataclass(frozen=True)
class ApplyConfig:
    """Everything a task needs: the adapters' factory and its Settings (pickled to the workers
    with the job)."""

    adapters: Adapters
    # Identifies one engine run: worker processes keep that run's connections under it.
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def settings(self):
        return self.adapters.settings


class _LazyDeadLetters:
    """The dead-letter producer, created on the first poison record rather than per task."""

    def __init__(self, adapters: Adapters):
        self._adapters, self._producer = adapters, None

    def send(self, record, reason: str, detail: str) -> None:
        if self._producer is None:
            adapters = self._adapters
            self._producer = adapters.replace_settings(_codec_here(adapters.settings)).dead_letters()
        self._producer.send(record, reason, detail)

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush()


# kafka-python's codecs that need a compiled library, which the zip shipped to executors
# cannot carry (consumer/spark/bundle.py); gzip is in the standard library
_CODEC_MODULES = {"zstd": "zstandard", "lz4": "lz4", "snappy": "snappy"}


def _codec_here(settings):
    """``settings`` with ``kafka.compression_type`` gzip when this executor's Python lacks
    the configured codec's library (said in a WARNING): a dead letter must still go out."""
    import dataclasses
    import importlib.util
    codec = settings.kafka.compression_type
    module = _CODEC_MODULES.get(codec)
    if module is None or importlib.util.find_spec(module) is not None:
        return settings
    log.warning("dead letters from this Spark executor are gzip-compressed: kafka.compression_type "
                "is %s, but its library (%s) is not installed in the executors' Python", codec,
                module)
    return dataclasses.replace(settings, kafka=dataclasses.replace(settings.kafka,
                                                                   compression_type="gzip"))


class _Worker:
    """One engine run's adapters in a worker process (Spark reuses its Python workers,
    spark.python.worker.reuse, so connections are opened once per worker)."""

    def __init__(self, adapters: Adapters):
        self.settings, self.mappings = adapters.settings, adapters.mappings()
        self.cache, self.dedup = adapters.cache(), adapters.dedup()
        self.table_jobs = adapters.table_jobs()     # one scan per table event
        self.dead_letters = _LazyDeadLetters(adapters)


# per engine run (its token), in this worker process: a consume run's _Worker, or a
# replay run's cache; Spark reuses the process across that run's tasks
_WORKERS: dict[str, object] = {}


def _worker(config: ApplyConfig) -> _Worker:
    found = _WORKERS.get(config.token)
    if found is None:
        found = _WORKERS[config.token] = _Worker(config.adapters)
    return found


def consume_partition(rows: Iterable, config: ApplyConfig, batch_id: int) -> Iterator[dict]:
    """:func:`consume_records` of a task's pickled Rows (``RDD.mapPartitions``)."""
    return consume_records(map(to_record, rows), config, batch_id)


# the one column each consume_arrow task returns: its result dict, pickled
ARROW_RESULT_SCHEMA = "result BINARY"


def consume_arrow(batches: Iterable, config: ApplyConfig, batch_id: int) -> Iterator:
    """:func:`consume_records` of a task's Arrow record batches (``DataFrame.mapInArrow``,
    needs pyarrow in the executors' Python); yields one pyarrow RecordBatch of
    ARROW_RESULT_SCHEMA holding the pickled result (:func:`arrow_result` reads it)."""
    import pickle

    import pyarrow as pa
    for result in consume_records(arrow_records(batches), config, batch_id):
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(result)], pa.binary())],
                                         ["result"])


def arrow_result(row) -> dict:
    """A consume_arrow task's result from the row the driver collected."""
    import pickle
    return pickle.loads(row[0])


def consume_records(records: Iterable, config: ApplyConfig, batch_id: int) -> Iterator[dict]:
    """Apply one task's records of micro-batch ``batch_id`` (one or more Kafka partitions,
    each in offset order); yields one dict:
    ``stats`` (a Stats dict), ``tables`` (a TableTally snapshot), ``lag`` (a
    metrics.LagBatch per chunk),
    ``offsets`` ({partition: next}), ``plans`` (for the driver's hooks, see
    :func:`driver_plans`), ``applied_at`` (epoch seconds of the last chunk), ``timings``
    (TaskClock) and ``accelerator`` (zipnative.accelerator: compiled or pure Python, why).

    Records are applied in chunks of ``consumer.batch_size`` (one dedup round trip
    each). Transient errors are retried and never skipped; anything else fails the
    task, so Spark does not commit the batch and runs it again.
    """
    from cachesync.runtime.metrics import lag_batch
    keep_zip_directories()
    clock = TaskClock()
    worker, stats, lag, offsets, plans = _worker(config), Stats(), [], {}, []
    clock.lap("setup")
    c, stop = config.settings.consumer, threading.Event()
    scans = task_table_scans(worker.cache, worker.table_jobs, stats, stop, c.claim_lease_s, c)
    applier = Applier(worker.cache, worker.mappings, c, worker.dedup, worker.dead_letters,
                      stats=stats, stop=stop, table_jobs=scans)
    applied_at = 0.0
    chunks = _chunks(iter(records), c.batch_size)
    # the garbage collector paced as in the python engine's loop (cachesync.runtime.gc_pacing): at
    # CPython's pace it walked the task's live records, events and plans again and again
    try:
        with paced():
            for part, prepared, result in _applied(applier, chunks, c.overlap_batches, clock, stop):
                plans += driver_plans(prepared.plan.events, config.settings.monitor)
                lag.append(lag_batch(result))
                applied_at = result.applied_at
                offsets.update({p: o for (_, p), o in commit_offsets(part).items()})
            finish_scans(scans, batch_id)
    finally:
        scans.close()
    log.debug("batch %d: partition done: %s", batch_id, stats)
    yield {"stats": asdict(stats), "tables": applier.tables.snapshot(), "lag": lag,
           "offsets": offsets, "plans": plans, "applied_at": applied_at,
           "timings": clock.totals(), "accelerator": accelerator()}


def _applied(applier: Applier, chunks: Iterator[list], overlap: bool, clock: "TaskClock",
             stop: threading.Event) -> Iterator[tuple]:
    """``(records, prepared, result)`` of each chunk, in order.

    With ``overlap`` (``consumer.overlap_batches``, as in the Python engine) a worker thread
    applies chunk n (its dedup claim, Redis writes and confirm: waits on the network) while
    this thread reads chunk n+1 from the JVM and decodes and plans it. The cache and the
    dedup store still see the chunks one at a time, in order. If this thread fails, the
    chunk in flight gives up its retries (``stop``) and the error fails the task.
    """
    if not overlap:
        for part in chunks:
            clock.lap("read")
            prepared = applier.prepare(part)
            clock.lap("prepare")
            result = applier.apply(part, prepared)
            clock.lap("apply")
            yield part, prepared, result
        return
    with ThreadPoolExecutor(1, thread_name_prefix="cachesync-apply") as pool:
        flight = None
        try:
            for part in chunks:
                clock.lap("read")
                prepared = applier.prepare(part)
                clock.lap("prepare")
                if flight is not None:
                    done, flight = flight, None
                    result = done[2].result()
                    clock.lap("apply")        # what this thread waited for the worker
                    yield done[0], done[1], result
                flight = (part, prepared, pool.submit(applier.apply, part, prepared))
            if flight is not None:
                done, flight = flight, None
                result = done[2].result()
                clock.lap("apply")
                yield done[0], done[1], result
        except BaseException:
            stop.set()
            if flight is not None:
                wait([flight[2]])
            raise


class TaskClock:
    """Seconds a task spent per phase (``laps``), returned with its result so the driver can
    tell where a micro-batch's time goes: ``setup`` (the worker's adapters, once per Python
    worker), ``read`` (records from the JVM), ``prepare`` (decode, plan), ``apply`` (dedup and
    Redis round trips; with overlapped chunks only what the task waited for them).
    ``totals()`` adds ``cpu``: the worker process's CPU seconds over the task (both threads);
    on a crowded host a phase's wall time far above it is time spent waiting for a core."""

    def __init__(self):
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()
        self._cpu = time.process_time()

    def totals(self) -> dict[str, float]:
        return {**self.laps, "cpu": time.process_time() - self._cpu}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = self.laps.get(phase, 0.0) + now - self._last
        self._last = now


def driver_plans(events: Iterable, monitor) -> list:
    """The plans the driver's hooks need: every event of a table with a delayed second
    delete, applied now or a duplicate (re-derived from the batch, so a second delete
    an executor lost with its attempt is scheduled again; it is idempotent), and the
    events the consistency monitor samples (the same deterministic choice it makes)."""
    from cachesync.consumer.consistency import sampled
    ratio = monitor.sample_ratio if monitor.enabled else 0.0
    return [ep for ep in events
            if (ep.double_delete_s and ep.keys)
            or (ratio > 0 and sampled(ep.event.id, ratio) and not ep.event.table_level)]


def _chunks(records: Iterable, size: int) -> Iterator[list]:
    """``records`` in lists of ``size`` (the last one shorter), taken by islice."""
    it = iter(records)
    while chunk := list(islice(it, size)):
        yield chunk


@dataclass(frozen=True)
class ReplayConfig:
    """What a replay task needs; ``adapters=None`` is a dry run (counts, touches nothing)."""

    mappings: MappingSet
    adapters: Adapters | None    # builds the cache
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
    keep_zip_directories()
    cache = None if config.adapters is None else _replay_cache(config)
    applier = ReplayApplier(config.mappings, cache, config.tables, config.batch_size)
    limiter = RateLimiter(config.rate_per_task)
    for chunk in _chunks(map(to_record, rows), config.batch_size):
        limiter.acquire(len(chunk))
        applier.apply(chunk)
        progress.add(len(chunk))
    c = applier.counts
    for table, keys in c.keys.items():
        yield (table, None, c.events[table], 0, 0, 0)
        for key in keys:
            yield (table, key, 0, 0, 0, 0)
    yield ("", None, 0, c.keys_existed, c.poison, c.records)


def _replay_cache(config: ReplayConfig):
    found = _WORKERS.get(config.token)
    if found is None:
        found = _WORKERS[config.token] = config.adapters.cache()
    return found


@dataclass(frozen=True)
class AuditConfig:
    mapping: "TableMapping"  # noqa: F821 (cachesync.schema.mapping.TableMapping, pickled)
    adapters: Adapters       # the Redis client
    chunk: int = 500
    # column -> data_type when the rows hold key texts (audit.read_table): turned back into
    # the values the tailer publishes (schema.keytext.value_from_text); empty: rows as read
    types: dict = field(default_factory=dict)


def audit_partition(rows: Iterable, config: AuditConfig, rows_read) -> Iterator[tuple[str, str]]:
    """Yields ``(verdict, key)`` for every key the partition's rows render.

    Values are read in chunks: one MGET (JSON values) and one pipelined HGETALL
    (update mode ``hash`` values) per chunk. ``rows_read`` is a Spark accumulator.
    """
    from cachesync.consumer.audit import expected_entries, verdict
    from cachesync.schema.keytext import value_from_text
    keep_zip_directories()
    cache = config.adapters.cache_reader(AUDIT_TIMEOUT_S)
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
                yield from _judge(cache, config.mapping, chunk, verdict)
                chunk = []
        if chunk:
            yield from _judge(cache, config.mapping, chunk, verdict)
        rows_read.add(seen)
    finally:
        cache.close()


def _judge(cache, mapping, entries, verdict) -> Iterator[tuple[str, str]]:
    """Each entry's verdict against what the cache reader port reads for its key."""
    values = cache.read(mapping, [k for k, _ in entries])
    for (key, expected), cached in zip(entries, values):
        yield verdict(mapping, expected, cached), key


@dataclass(frozen=True)
class SnapshotConfig:
    """What a snapshot task needs; ``adapters=None`` is a dry run (renders, writes nothing)."""

    mapping: "TableMapping"  # noqa: F821 (cachesync.schema.mapping.TableMapping)
    pk: tuple[str, ...]
    watermark: "Watermark"   # noqa: F821 (cachesync.consumer.snapshot.Watermark)
    adapters: Adapters | None
    types: dict = field(default_factory=dict)    # column -> data_type (rows hold key texts)
    chunk: int = 1000
    rate_per_task: float | None = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)


def snapshot_partition(rows: Iterable, config: SnapshotConfig, progress) -> Iterator[tuple]:
    """Write one JDBC split's rows through the fence at the watermark's version; yields one
    ``(rows, keys, written, refused, skipped)``. ``progress``: a Spark accumulator of rows."""
    from cachesync.consumer.replay import RateLimiter
    from cachesync.consumer.snapshot import TableSummary, check_tombstone_window, snapshot_writes
    from cachesync.schema.keytext import row_value
    keep_zip_directories()
    cache = None if config.adapters is None else _replay_cache(config)
    limiter, total = RateLimiter(config.rate_per_task), TableSummary(config.mapping.table)
    values = (({c: row_value(v, config.types[c]) if c in config.types else v
                for c, v in row.asDict().items()}) for row in rows)
    for chunk in _chunks(values, config.chunk):
        limiter.acquire(len(chunk))
        writes, summary = snapshot_writes(chunk, config.mapping, config.pk, config.watermark)
        if cache is not None and writes:
            check_tombstone_window(config.mapping, config.watermark)
            done = cache.write(writes)
            summary.written, summary.refused = done.applied, done.refused
        total.add(summary)
        progress.add(len(chunk))
    yield (total.rows, total.keys, total.written, total.refused, total.skipped)
