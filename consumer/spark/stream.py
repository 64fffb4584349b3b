"""The Spark engine: Structured Streaming from the change topic, foreachBatch per micro-batch.

Per micro-batch (``batchId``), each Kafka partition's records go to one task that runs
the shared applier (``applier.consume_partition``). Spark writes the batch's
offsets to the checkpoint before running it and marks it committed only after
foreachBatch returned; a crash in between re-runs the same batchId with the same
records on restart, and the dedup table turns every id already done into a skipped
duplicate. Nothing is ever committed to the Kafka consumer group.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Mapping

from cachesync.consumer.applier import Stats
from cachesync.consumer.core.tally import TableTally
from cachesync.consumer.spark.applier import ApplyConfig, consume_partition
from cachesync.consumer.spark.records import KAFKA_SELECT

log = logging.getLogger(__name__)

AWAIT_S = 0.5          # how often run() looks at the stop flag


@dataclass(frozen=True)
class StreamOptions:
    checkpoint_location: str                  # durable: HDFS/S3/a persistent local path
    max_offsets_per_trigger: int = 20_000     # records per micro-batch, over all partitions
    trigger_interval_s: float = 0.5
    starting_offsets: str = "earliest"        # only for a new checkpoint


@dataclass
class BatchReport:
    batch_id: int
    stats: Stats = field(default_factory=Stats)
    lag: list = field(default_factory=list)       # LagSamples of the applied events


class _StopRequested(Exception):
    """Raised by a micro-batch that starts after stop(): nothing applied, nothing committed."""


class SparkEngine:
    """``run()`` until ``stop()``; ``stats`` sums every completed micro-batch and ``offsets``
    holds the next offset per partition of the last one (what the checkpoint commits)."""

    def __init__(self, spark, bootstrap_servers: str, topic: str, apply: ApplyConfig,
                 options: StreamOptions, on_batch=None, kafka_options: Mapping | None = None):
        """``kafka_options``: the ``kafka.*`` security options (kafka_security.spark_kafka_options)."""
        self._spark, self._bootstrap, self._topic = spark, bootstrap_servers, topic
        self._kafka_options = dict(kafka_options or {})
        self._apply, self._opts, self._on_batch = apply, options, on_batch
        self._stop = threading.Event()
        self._idle = threading.Lock()      # held while a micro-batch is applied
        self._query = None
        self.stats = Stats()
        self.tables = TableTally()         # the tasks' per-table counts (metrics)
        self.offsets: dict[int, int] = {}
        self.batches: list[BatchReport] = []

    def start(self):
        """Start the streaming query (returns it); raises on a bad option or a missing jar."""
        reader = (self._spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", self._bootstrap)
                  .option("subscribe", self._topic)
                  .option("startingOffsets", self._opts.starting_offsets)
                  .option("maxOffsetsPerTrigger", str(self._opts.max_offsets_per_trigger))
                  .option("includeHeaders", "true")
                  .option("kafka.isolation.level", "read_committed")
                  .options(**self._kafka_options))
        frame = reader.load().selectExpr(*KAFKA_SELECT)
        self._query = (frame.writeStream.queryName(f"cachesync-{self._topic}")
                       .foreachBatch(self._apply_batch)
                       .option("checkpointLocation", self._opts.checkpoint_location)
                       .trigger(processingTime=f"{self._opts.trigger_interval_s} seconds")
                       .start())
        return self._query

    def run(self) -> None:
        """Run until stop(); a stop waits for the micro-batch in progress to finish."""
        query = self._query or self.start()
        while query.isActive and not self._stop.is_set():
            query.awaitTermination(AWAIT_S)
        if query.isActive:
            with self._idle:           # the batch in progress completes and is committed
                pass
            query.stop()
        error = query.exception()
        if error is not None and not self._stop.is_set():
            raise RuntimeError(f"Spark query failed: {error}")

    def stop(self) -> None:
        self._stop.set()

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

    def _apply_batch(self, frame, batch_id: int) -> None:
        if self._stop.is_set():
            raise _StopRequested(f"stop requested before batch {batch_id}")
        with self._idle:
            apply = self._apply
            parts = frame.rdd.mapPartitions(
                lambda rows: consume_partition(rows, apply, batch_id)).collect()
            report = BatchReport(batch_id)
            for part in parts:
                report.stats.add(part["stats"])
                self.tables.merge(part["tables"])
                report.lag += part["lag"]
                self.offsets.update(part["offsets"])
            self.stats.add(report.stats)
            self.batches.append(report)
            s = report.stats
            if s.consumed:
                log.info("spark batch %d: %d consumed, %d applied, %d duplicates, "
                         "%d dead-lettered, %d keys deleted", batch_id, s.consumed, s.applied,
                         s.duplicates, s.dead_lettered, s.keys_deleted)
            if self._on_batch is not None:
                self._on_batch(report)
