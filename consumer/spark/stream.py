"""The Spark engine: Structured Streaming from the change topic, foreachBatch per micro-batch.

Per micro-batch (``batchId``), each Kafka partition's records go to one task (several
partitions to one task when there are more partitions than executor cores) that runs the
shared applier (``applier.consume_records``) on them, each partition in offset order.
The records reach the task's Python worker as Arrow record batches (``mapInArrow``)
when the executors' Python has pyarrow, else as pickled Rows (``arrow_transfer``).
Spark writes the batch's offsets to the checkpoint before running it and marks it
committed only after
foreachBatch returned; a crash in between re-runs the same batchId with the same
records on restart, and the dedup table turns every id already done into a skipped
duplicate. Nothing is ever committed to the Kafka consumer group.

The side jobs (delayed second deletes, the dedup purge, the consistency monitor) are
hooks on the driver: the tasks return the plans they need with each batch
(``applier.driver_plans``), a Ticker thread runs what is due. A lost executor loses
none of them; its task runs again and returns them again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping

from cachesync.consumer.applier import BatchResult, Stats
from cachesync.consumer.hooks import Hook, Ticker
from cachesync.consumer.core.tally import TableTally
from cachesync.consumer.spark import DEFAULT_MAX_OFFSETS
from cachesync.consumer.spark.applier import (ARROW_RESULT_SCHEMA, ApplyConfig, arrow_result,
                                              consume_arrow, consume_partition)
from cachesync.consumer.spark.records import KAFKA_SELECT

log = logging.getLogger(__name__)

AWAIT_S = 0.5          # how often run() looks at the stop flag
# The executors' Kafka consumers read a micro-batch's known offset range; a fetch that finds
# nothing new yet (a pre-fetch past the range's end) held the task for the broker's default
# fetch.max.wait.ms (500 ms) in every small micro-batch.
FETCH_MAX_WAIT_MS = 50


# Spark writes two checkpoint files per micro-batch (offsets/N before it, commits/N after).
# For a path on the local file system its default manager (Hadoop's FileContext) forks a
# `chmod` or `readlink` process for nearly every file it creates or renames when Hadoop's
# native library is absent, as in the pyspark distribution: about 12 processes per
# micro-batch, in the query's own thread. The FileSystem-based manager writes the same files
# the same way (a temporary file, then a rename, atomic on a local file system) and started
# none (strace of the driver's JVM over several micro-batches).
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_MANAGER = ("org.apache.spark.sql.execution.streaming."
                            "FileSystemBasedCheckpointFileManager")


# Spark hands a mapInArrow task's records to its Python worker in Arrow batches of at most
# this many records (10,000 unless the session says otherwise). The worker applies them in
# chunks of consumer.batch_size (2,000) and can start on the first chunk only once the
# executor's JVM has fetched and converted a whole Arrow batch; batches of one chunk let the
# JVM fetch and convert the next records while the worker applies these.
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"


AVAILABLE_NOW = "availableNow"
# StreamOptions.transfer
AUTO, ARROW, ROWS = "auto", "arrow", "rows"


@dataclass(frozen=True)
class StreamOptions:
    checkpoint_location: str                  # durable: HDFS/S3/a persistent local path
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS   # records per micro-batch, all partitions
    # seconds between micro-batches, or AVAILABLE_NOW: apply what the topic holds now (in
    # batches of max_offsets_per_trigger), then stop (catch-up runs, e.g. from a scheduler)
    trigger: float | str = 0.5
    starting_offsets: str = "earliest"        # only for a new checkpoint
    # at most one task per executor core (_per_slot); False: one task per Kafka partition
    per_slot: bool = True
    # how the executors hand records to the Python workers: ARROW (Arrow record batches),
    # ROWS (pickled Rows, any executor Python) or AUTO (arrow_transfer decides, once)
    transfer: str = AUTO

    def __post_init__(self):
        if self.transfer not in (AUTO, ARROW, ROWS):
            raise ValueError(f"transfer {self.transfer!r}: expected {AUTO}, {ARROW} or {ROWS}")

    def trigger_kwargs(self) -> dict:
        if self.trigger == AVAILABLE_NOW:
            return {"availableNow": True}
        return {"processingTime": f"{float(self.trigger)} seconds"}


def parse_trigger(text: str) -> float | str:
    """``availableNow``, ``500ms``, ``2s`` or plain seconds -> StreamOptions.trigger;
    raises ValueError naming the accepted forms."""
    value = text.strip()
    if value.lower() == AVAILABLE_NOW.lower():
        return AVAILABLE_NOW
    scale = 1.0
    if value.endswith("ms"):
        value, scale = value[:-2], 0.001
    elif value.endswith("s"):
        value = value[:-1]
    try:
        seconds = float(value) * scale
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise ValueError(f"trigger {text!r}: expected availableNow or an interval such as "
                         "500ms, 2s or 0 (as fast as possible), at most 3600s")
    return seconds


def arrow_transfer(spark) -> tuple[bool, str]:
    """Whether micro-batches can reach the Python workers as Arrow record batches, and why
    not: PySpark's Arrow path needs pyarrow and pandas (its minimum versions) on the driver
    and pyarrow in the executors' Python. The executors are asked with one small task per
    task slot; a cluster is expected to run one Python everywhere."""
    from pyspark.sql.pandas.utils import (require_minimum_pandas_version,
                                          require_minimum_pyarrow_version)
    try:
        require_minimum_pandas_version()
        require_minimum_pyarrow_version()
    except Exception as e:  # noqa: BLE001 (PySpark raises its own error classes)
        return False, f"the driver's Python lacks it: {e}"
    slots = task_slots(spark)
    found = (spark.sparkContext.parallelize(range(slots), slots)
             .mapPartitions(_executor_pyarrow).collect())
    missing = [python for python, version in found if version is None]
    if missing:
        return False, f"pyarrow is not installed in the executors' Python ({missing[0]})"
    return True, f"pyarrow {found[0][1]} on the executors"


def _executor_pyarrow(rows):
    """In an executor: (its Python, its pyarrow version or None)."""
    import sys
    list(rows)        # a worker that left input unread is not reused (pyspark worker.py)
    try:
        import pyarrow
    except ImportError:
        return [(sys.executable, None)]
    return [(sys.executable, pyarrow.__version__)]


@dataclass
class BatchReport:
    batch_id: int
    stats: Stats = field(default_factory=Stats)
    lag: list = field(default_factory=list)       # metrics.LagBatch per applied chunk
    plans: list = field(default_factory=list)     # EventPlans for the driver's hooks
    # seconds: the tasks' phases summed (applier.TaskClock), and the driver's wall time
    # from submitting the tasks to having every result
    timings: dict = field(default_factory=dict)
    wall_s: float = 0.0


class _StopRequested(Exception):
    """Raised by a micro-batch that starts after stop(): nothing applied, nothing committed."""


def checkpoint_on_local_disk(spark, location: str) -> bool:
    """Whether ``location`` resolves to Hadoop's local file system (``file:``, or a path
    without a scheme while fs.defaultFS is local); False when Hadoop cannot tell."""
    from py4j.protocol import Py4JError
    sc = spark.sparkContext
    try:
        path = sc._jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(sc._jsc.hadoopConfiguration()).getScheme() == "file"
    except Py4JError:
        return False


def use_local_checkpoint_manager(spark, location: str) -> bool:
    """Give a checkpoint on the local disk Spark's FileSystem-based checkpoint manager
    (LOCAL_CHECKPOINT_MANAGER), unless the session names a manager itself; True if set."""
    if spark.conf.get(CHECKPOINT_MANAGER_CONF, None) or not checkpoint_on_local_disk(spark, location):
        return False
    spark.conf.set(CHECKPOINT_MANAGER_CONF, LOCAL_CHECKPOINT_MANAGER)
    return True


def size_arrow_batches(spark, records: int) -> bool:
    """Arrow batches of ``records`` (consumer.batch_size) for the session's queries
    (ARROW_BATCH_CONF), unless the session sets a size itself; True if set."""
    if spark.conf.get(ARROW_BATCH_CONF, None):
        return False
    spark.conf.set(ARROW_BATCH_CONF, str(records))
    return True


def task_slots(spark) -> int:
    """The tasks the cluster runs at once now: its executors' cores (over spark.task.cpus),
    as barrier execution counts them. ``defaultParallelism`` is never below 2, so one
    executor core got two tasks per micro-batch, run one after the other. Falls back to
    ``defaultParallelism`` while no executor is registered, or on a Spark without this API."""
    from py4j.protocol import Py4JError
    sc = spark.sparkContext
    try:
        jsc = sc._jsc.sc()
        slots = jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile())
    except Py4JError:
        slots = 0
    return slots if slots > 0 else sc.defaultParallelism


def _per_slot(rdd, slots: int):
    """At most ``slots`` tasks (task_slots: the executors' cores): a task costs a scheduling round trip and a Python worker hand-over whatever it holds, and
    with more Kafka partitions than cores the extra tasks only queue. ``coalesce`` joins
    whole partitions without a shuffle, each one's records still in offset order."""
    if rdd.getNumPartitions() > slots:
        return rdd.coalesce(slots)
    return rdd


class SparkEngine:
    """``run()`` until ``stop()``; ``stats`` sums every completed micro-batch and ``offsets``
    holds the next offset per partition of the last one (what the checkpoint commits)."""

    def __init__(self, spark, bootstrap_servers: str, topic: str, apply: ApplyConfig,
                 options: StreamOptions, on_batch=None, kafka_options: Mapping | None = None,
                 hooks: Hook | None = None, stats: Stats | None = None):
        """``kafka_options``: the ``kafka.*`` security options (kafka_security.spark_kafka_options);
        ``hooks``: the driver's side jobs, given each batch's plans and ticked while it runs."""
        self._spark, self._bootstrap, self._topic = spark, bootstrap_servers, topic
        self._kafka_options = dict(kafka_options or {})
        self._apply, self._opts, self._on_batch = apply, options, on_batch
        self._stop = threading.Event()
        self._idle = threading.Lock()      # held while a micro-batch is applied
        self._query = None
        self._hooks = hooks
        self.stats = stats or Stats()
        self.tables = TableTally()         # the tasks' per-table counts (metrics)
        self.offsets: dict[int, int] = {}
        self.batches: list[BatchReport] = []
        self.transfer: str | None = None   # ARROW or ROWS, chosen at the first micro-batch
        self.accelerator: str | None = None  # what the first task said (zipnative.accelerator)

    def start(self):
        """Start the streaming query (returns it); raises on a bad option or a missing jar."""
        reader = (self._spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", self._bootstrap)
                  .option("subscribe", self._topic)
                  .option("startingOffsets", self._opts.starting_offsets)
                  .option("maxOffsetsPerTrigger", str(self._opts.max_offsets_per_trigger))
                  .option("includeHeaders", "true")
                  .option("kafka.isolation.level", "read_committed")
                  .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
                  .options(**self._kafka_options))
        frame = reader.load().selectExpr(*KAFKA_SELECT)
        use_local_checkpoint_manager(self._spark, self._opts.checkpoint_location)
        size_arrow_batches(self._spark, self._apply.settings.consumer.batch_size)
        self._query = (frame.writeStream.queryName(f"cachesync-{self._topic}")
                       .foreachBatch(self._apply_batch)
                       .option("checkpointLocation", self._opts.checkpoint_location)
                       .trigger(**self._opts.trigger_kwargs())
                       .start())
        return self._query

    def run(self) -> None:
        """Run until stop() (or, with availableNow, until the topic is caught up); a stop
        waits for the micro-batch in progress to finish. The hooks' pending work runs
        before it returns (Ticker.stop closes them)."""
        ticker = Ticker(self._hooks, "cachesync-spark-hooks") if self._hooks else None
        if ticker is not None:
            ticker.start()
        try:
            query = self._run_query()
        finally:
            if ticker is not None:
                ticker.stop()
        error = query.exception()
        if error is not None and not self._stop.is_set():
            raise RuntimeError(f"Spark query failed: {error}")

    def _run_query(self):
        query = self._query or self.start()
        while query.isActive and not self._stop.is_set():
            query.awaitTermination(AWAIT_S)
        if query.isActive:
            with self._idle:           # the batch in progress completes and is committed
                pass
            query.stop()
        return query

    def stop(self) -> None:
        self._stop.set()

    def progress(self) -> list[dict]:
        """The query's recent progress reports (Spark's StreamingQueryProgress as dicts: the
        ``durationMs`` of each micro-batch's phases among them); empty before start()."""
        return list(self._query.recentProgress) if self._query is not None else []

    def committed_offsets(self) -> dict[int, int]:
        """Next offset per partition as far as the checkpoint has committed: the query's
        last progress (every partition, also idle ones) and the batches this run applied."""
        found = dict(self.offsets)
        progress = self._query.lastProgress if self._query is not None else None
        for source in (progress or {}).get("sources") or []:
            end = source.get("endOffset")
            end = json.loads(end) if isinstance(end, str) else end
            for partition, offset in ((end or {}).get(self._topic) or {}).items():
                found[int(partition)] = max(found.get(int(partition), 0), int(offset))
        return found

    def _transfer(self) -> str:
        """ARROW or ROWS: the option, or with AUTO what arrow_transfer finds (asked once,
        said once in the log)."""
        if self.transfer is None:
            if self._opts.transfer == AUTO:
                arrow, why = arrow_transfer(self._spark)
                self.transfer = ARROW if arrow else ROWS
                log.info("spark consume: records reach the Python workers as %s (%s)%s",
                         "Arrow record batches" if arrow else "pickled rows", why,
                         "" if arrow else "; pyarrow in the executors' Python makes it faster")
            else:
                self.transfer = self._opts.transfer
        return self.transfer

    def _note_accelerator(self, found: str | None) -> None:
        """Say once which code the executors decode with (the C accelerator or pure Python)."""
        if found and self.accelerator is None:
            self.accelerator = found
            log.info("spark consume: the executors' cachesync runs %s", found)

    def _arrow_parts(self, frame, apply: ApplyConfig, batch_id: int) -> list[dict]:
        """The tasks' results, the records handed over as Arrow batches (mapInArrow). The
        same tasks as the Rows path: DataFrame.coalesce joins whole partitions, each in
        offset order, and never raises their number."""
        if self._opts.per_slot:
            frame = frame.coalesce(task_slots(self._spark))
        rows = frame.mapInArrow(lambda batches: consume_arrow(batches, apply, batch_id),
                                ARROW_RESULT_SCHEMA).collect()
        return [arrow_result(row) for row in rows]

    def _rows_parts(self, frame, apply: ApplyConfig, batch_id: int) -> list[dict]:
        """The tasks' results, the records handed over as pickled Rows (any executor Python)."""
        rdd = frame.rdd
        if self._opts.per_slot:
            rdd = _per_slot(rdd, task_slots(self._spark))
        return rdd.mapPartitions(lambda rows: consume_partition(rows, apply, batch_id)).collect()

    def _apply_batch(self, frame, batch_id: int) -> None:
        if self._stop.is_set():
            raise _StopRequested(f"stop requested before batch {batch_id}")
        with self._idle:
            apply = self._apply
            started = time.perf_counter()
            parts = (self._arrow_parts if self._transfer() == ARROW
                     else self._rows_parts)(frame, apply, batch_id)
            report = BatchReport(batch_id, wall_s=time.perf_counter() - started)
            applied_at = 0.0
            for part in parts:
                for phase, seconds in part["timings"].items():
                    report.timings[phase] = report.timings.get(phase, 0.0) + seconds
                report.stats.add(part["stats"])
                self.tables.merge(part["tables"])
                report.lag += part["lag"]
                report.plans += part["plans"]
                applied_at = max(applied_at, part["applied_at"])
                self.offsets.update(part["offsets"])
                self._note_accelerator(part.get("accelerator"))
            if self._hooks is not None and report.plans:
                self._hooks.after_batch(BatchResult(applied=report.plans, applied_at=applied_at))
            self.stats.add(report.stats)
            self.batches.append(report)
            s = report.stats
            if s.consumed:
                log.info("spark batch %d: %d consumed, %d applied, %d duplicates, "
                         "%d dead-lettered, %d keys deleted; its job %.2fs (tasks: %s)",
                         batch_id, s.consumed, s.applied, s.duplicates, s.dead_lettered,
                         s.keys_deleted, report.wall_s,
                         ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items()))
            if self._on_batch is not None:
                self._on_batch(report)
