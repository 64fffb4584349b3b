"""``cachesync consume --engine spark``: the consumer as a Spark Structured Streaming query."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import click

from cachesync.commands.common import on_termination
from cachesync.runtime.config import Settings
from cachesync.consumer.applier import Stats
from cachesync.consumer.hooks import DedupPurge, DelayedDeletes, Hooks, Ticker
from cachesync.consumer.spark import DEFAULT_MAX_OFFSETS
from cachesync.runtime.kafka_security import spark_kafka_options
from cachesync.operate import consumer_ops, monitor_hook
from cachesync.wiring import SettingsAdapters, build_cache, build_dedup

log = logging.getLogger(__name__)

DEFAULT_TRIGGER = "0.5s"


def _trigger(ctx, param, value):
    from cachesync.consumer.spark.stream import parse_trigger
    try:
        return parse_trigger(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def spark_options(fn):
    """--checkpoint-location, --max-offsets-per-trigger, --trigger, --spark-master (used by
    --engine spark)."""
    options = [
        click.option("--checkpoint-location", envvar="CACHESYNC_SPARK_CHECKPOINT", show_envvar=True,
                     help="[spark] durable checkpoint directory (offsets and committed "
                          "batches); required with --engine spark."),
        click.option("--max-offsets-per-trigger", type=click.IntRange(min=1),
                     default=DEFAULT_MAX_OFFSETS, show_default=True,
                     help="[spark] records per micro-batch, over all partitions."),
        click.option("--trigger", envvar="CACHESYNC_SPARK_TRIGGER", show_envvar=True,
                     default=DEFAULT_TRIGGER, show_default=True, callback=_trigger,
                     help="[spark] time between micro-batches (500ms, 2s; 0: back to back), "
                          "or availableNow: apply what the topic holds now, then exit."),
        click.option("--spark-master", envvar="CACHESYNC_SPARK_MASTER", show_envvar=True,
                     help="[spark] master URL (default local[2]); spark://, k8s://, yarn "
                          "ship cachesync to the executors. Ignored under spark-submit."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def build_spark_engine(settings: Settings, spark, checkpoint_location: str,
                       max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS, on_batch=None,
                       trigger: float | str = 0.5, hooks=(), per_slot: bool = True,
                       transfer: str = "auto"):
    """The engine with the driver's hooks: delayed second deletes (its own Redis client),
    then ``hooks`` (the dedup purge, the consistency monitor); ``per_slot``, ``transfer``:
    see StreamOptions."""
    from cachesync.consumer.spark.applier import ApplyConfig
    from cachesync.consumer.spark.stream import SparkEngine, StreamOptions
    stats = Stats()
    driver_hooks = Hooks([DelayedDeletes(build_cache(settings), stats), *hooks])
    return SparkEngine(spark, settings.kafka.bootstrap_servers, settings.kafka.topic,
                       ApplyConfig(SettingsAdapters(settings)),
                       StreamOptions(checkpoint_location, max_offsets_per_trigger, trigger,
                                     per_slot=per_slot, transfer=transfer),
                       on_batch=on_batch, kafka_options=spark_kafka_options(settings.kafka),
                       hooks=driver_hooks, stats=stats)


def run(settings: Settings, checkpoint_location: str | None, max_offsets_per_trigger: int,
        spark_master: str | None, trigger: float | str = 0.5) -> None:
    """Run the streaming query until SIGTERM/SIGINT (availableNow: until caught up); the
    batch in progress completes first.

    Serves the python engine's metrics on metrics.listen (Kafka lag measured from the
    checkpoint's offsets); the driver runs the side jobs (dedup purge, delayed second
    deletes, the consistency monitor), the tasks apply.
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
                                        on_batch=lambda report: _observe_lag(metrics, report),
                                        trigger=trigger, hooks=monitor_hook(settings, ops))
            on_termination(engine.stop)
            with dedup_purge(settings, engine.stats):
                engine.run()
    finally:
        ops.close()
    log.info("spark consumer stopped: %s", engine.stats.summary())


def _observe_lag(metrics, report) -> None:
    """A micro-batch's lag (the tasks' LagBatches) into the commit->apply metrics."""
    for batch in report.lag:
        metrics.observe_batch(batch)


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
