"""``cachesync consume --engine spark``: the consumer as a Spark Structured Streaming query."""

from __future__ import annotations

from contextlib import contextmanager

import click

from cachesync.commands.common import log, on_termination
from cachesync.config import Settings
from cachesync.consumer.hooks import DedupPurge, Ticker
from cachesync.kafka_security import spark_kafka_options
from cachesync.operate import consumer_ops
from cachesync.wiring import build_dedup

DEFAULT_MAX_OFFSETS = 20_000


def spark_options(fn):
    """--checkpoint-location, --max-offsets-per-trigger, --spark-master (used by --engine spark)."""
    options = [
        click.option("--checkpoint-location", envvar="CACHESYNC_SPARK_CHECKPOINT", show_envvar=True,
                     help="[spark] durable checkpoint directory (offsets and committed "
                          "batches); required with --engine spark."),
        click.option("--max-offsets-per-trigger", type=click.IntRange(min=1),
                     default=DEFAULT_MAX_OFFSETS, show_default=True,
                     help="[spark] records per micro-batch, over all partitions."),
        click.option("--spark-master", envvar="CACHESYNC_SPARK_MASTER", show_envvar=True,
                     help="[spark] master URL (default local[2])."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def build_spark_engine(settings: Settings, spark, checkpoint_location: str,
                       max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS, on_batch=None):
    from cachesync.consumer.spark.applier import ApplyConfig
    from cachesync.consumer.spark.stream import SparkEngine, StreamOptions
    return SparkEngine(spark, settings.kafka.bootstrap_servers, settings.kafka.topic,
                       ApplyConfig(settings),
                       StreamOptions(checkpoint_location, max_offsets_per_trigger),
                       on_batch=on_batch, kafka_options=spark_kafka_options(settings.kafka))


def run(settings: Settings, checkpoint_location: str | None, max_offsets_per_trigger: int,
        spark_master: str | None) -> None:
    """Run the streaming query until SIGTERM/SIGINT; the batch in progress completes first.

    Serves the python engine's metrics on metrics.listen (Kafka lag measured from the
    checkpoint's offsets); the driver runs the dedup purge hook, the tasks apply.
    """
    if not checkpoint_location:
        raise click.UsageError("--engine spark needs --checkpoint-location (a durable directory)")
    from cachesync.consumer.spark.session import spark_session
    engine = None
    ops, metrics = consumer_ops(settings, lambda: engine.stats if engine else None,
                                committed=lambda: engine.committed_offsets() if engine else {},
                                tables=lambda: engine.tables if engine else None)
    try:
        with spark_session("cachesync-consume", spark_master) as spark:
            engine = build_spark_engine(settings, spark, checkpoint_location,
                                        max_offsets_per_trigger,
                                        on_batch=lambda report: metrics.observe(report.lag))
            on_termination(engine.stop)
            with dedup_purge(settings, engine.stats):
                engine.run()
    finally:
        ops.close()
    log.info("spark consumer stopped: %s", engine.stats.summary())


@contextmanager
def dedup_purge(settings: Settings, stats, build=build_dedup):
    """The python engine's dedup purge hook, ticked on the Spark driver (the tasks only
    apply batches); stopped, and its store closed, on exit."""
    store = build(settings)
    ticker = Ticker(DedupPurge(store, settings.consumer, stats), "cachesync-dedup-purge")
    ticker.start()
    try:
        yield ticker
    finally:
        ticker.stop()
        store.close()
