"""Snapshot on Spark: read the table over JDBC split by primary key (as the audit does) and
write every split's rows through the version fence at the watermark's version, per task; a
delete-mode table with ``prefill`` fills its missing keys by read_through's protocol
(``consumer.spark.prefill``)."""

from __future__ import annotations

from typing import Callable

from cachesync.consumer.snapshot import TableSummary, Watermark
from cachesync.consumer.spark.applier import SnapshotConfig, snapshot_partition
from cachesync.consumer.spark.audit import PARTITION_COLUMN, TableSource, read_table
from cachesync.consumer.spark.prefill import prefill_partition
from cachesync.consumer.spark.replay import _Progress

def snapshot_spark(spark, source: TableSource, mapping, watermark: Watermark, adapters,
                   partitions: int, rate: float | None = None,
                   progress: Callable[[int], None] = lambda n: None) -> TableSummary:
    """Fill ``mapping``'s keys from ``source``; the tasks write through ``adapters``
    (``consumer.ports.Adapters``), None is a dry run. ``rate``:
    rows per second over all tasks."""
    frame = read_table(spark, source, partitions)
    if PARTITION_COLUMN in frame.columns:
        frame = frame.drop(PARTITION_COLUMN)
    per_task = rate / max(1, min(partitions, spark.sparkContext.defaultParallelism)) if rate else None
    config = SnapshotConfig(mapping, source.pk, watermark, adapters, dict(source.columns),
                            rate_per_task=per_task)
    read = spark.sparkContext.accumulator(0)
    task = snapshot_partition if mapping.updates else prefill_partition
    tasks = frame.rdd.mapPartitions(lambda rows: task(rows, config, read))
    with _Progress(read, progress):
        parts = tasks.collect()
    total = TableSummary(mapping.table)
    for part in parts:              # (rows, keys, written, refused, skipped[, kept])
        total.add(TableSummary(mapping.table, *part))
    return total
