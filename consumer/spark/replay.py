"""Replay on Spark: a batch read of the change topic by offsets, applied per task, counted in SQL.

Ordering does not matter (replay only deletes), so each Kafka partition's range is split
into several tasks (``minPartitions``) for parallelism and a finer progress bar. Distinct
keys per table are counted by Spark across all tasks, so a dry run and the real replay
report the same numbers.
"""

from __future__ import annotations

import json
import threading
from typing import Callable, Mapping

from cachesync.consumer.replay import ReplayCounts
from cachesync.consumer.spark.applier import REPLAY_ROW_SCHEMA, ReplayConfig, replay_partition
from cachesync.consumer.spark.records import KAFKA_SELECT

RECORDS_PER_TASK = 50_000      # progress granularity and task size
PROGRESS_EVERY_S = 0.5


def replay_spark(spark, bootstrap_servers: str, topic: str,
                 ranges: Mapping[int, tuple[int, int]], config: ReplayConfig,
                 progress: Callable[[int], None] = lambda n: None,
                 kafka_options: Mapping[str, str] | None = None) -> ReplayCounts:
    """Replay ``ranges`` (``{partition: (start, end)}``); returns counts (keys as a count only).

    ``kafka_options``: the ``kafka.*`` security options (kafka_security.spark_kafka_options).
    """
    from pyspark.sql import functions as F

    ranges = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not ranges:
        return ReplayCounts()
    total = sum(hi - lo for lo, hi in ranges.values())
    frame = (spark.read.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap_servers)
             .option("assign", json.dumps({topic: sorted(ranges)}))
             .option("startingOffsets", json.dumps({topic: {str(p): lo for p, (lo, _) in ranges.items()}}))
             .option("endingOffsets", json.dumps({topic: {str(p): hi for p, (_, hi) in ranges.items()}}))
             .option("minPartitions", str(max(len(ranges), -(-total // RECORDS_PER_TASK))))
             .option("includeHeaders", "true")
             .option("kafka.isolation.level", "read_committed")
             .options(**(kafka_options or {}))
             .load().selectExpr(*KAFKA_SELECT))
    read = spark.sparkContext.accumulator(0)
    rows = frame.rdd.mapPartitions(lambda it: replay_partition(it, config, read))
    summary = (spark.createDataFrame(rows, REPLAY_ROW_SCHEMA).groupBy("table")
               .agg(F.countDistinct("key").alias("keys"), F.sum("events").alias("events"),
                    F.sum("existed").alias("existed"), F.sum("poison").alias("poison"),
                    F.sum("records").alias("records")))
    with _Progress(read, progress):
        result = summary.collect()
    return _counts(result)


def _counts(result) -> ReplayCounts:
    counts = ReplayCounts(key_totals={})
    for row in result:
        if row["table"] == "":
            counts.records, counts.poison = int(row["records"]), int(row["poison"])
            counts.keys_existed = int(row["existed"])
        else:
            counts.events[row["table"]] = int(row["events"])
            counts.key_totals[row["table"]] = int(row["keys"])
    return counts


class _Progress:
    """Feeds the accumulator's growth to ``progress`` from a thread while the job runs."""

    def __init__(self, accumulator, progress: Callable[[int], None]):
        self._acc, self._progress = accumulator, progress
        self._done = threading.Event()
        self._shown = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self._tick()

    def _loop(self):
        while not self._done.wait(PROGRESS_EVERY_S):
            self._tick()

    def _tick(self):
        value = self._acc.value
        if value > self._shown:
            self._progress(value - self._shown)
            self._shown = value
