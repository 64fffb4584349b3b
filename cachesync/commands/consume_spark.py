"""``cachesync consume --engine spark``: the consumer as a Spark Structured Streaming query."""

from __future__ import annotations

import threading

import click

from cachesync.commands.common import log, on_termination
from cachesync.config import Settings
from cachesync.wiring import build_dedup, engine_options, mappings as configured_mappings, mysql_params
from cachesync.consumer.engine import purge_dedup
from cachesync.schema.errors import RetryableError

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


def apply_config(settings: Settings):
    """What each Spark task needs to rebuild the python engine's adapters."""
    from cachesync.consumer.spark.applier import ApplyConfig
    k = settings.kafka
    return ApplyConfig(
        mysql=mysql_params(settings), namespace=settings.dedup_namespace,
        redis_url=str(settings.redis.url), bootstrap_servers=k.bootstrap_servers,
        dead_letter_topic=k.dead_letter_topic, mappings=configured_mappings(settings),
        options=engine_options(settings))


def build_spark_engine(settings: Settings, spark, checkpoint_location: str,
                       max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS, on_batch=None):
    from cachesync.consumer.spark.stream import SparkEngine, StreamOptions
    return SparkEngine(spark, settings.kafka.bootstrap_servers, settings.kafka.topic,
                       apply_config(settings),
                       StreamOptions(checkpoint_location, max_offsets_per_trigger),
                       on_batch=on_batch)


def run(settings: Settings, checkpoint_location: str | None, max_offsets_per_trigger: int,
        spark_master: str | None) -> None:
    """Run the streaming query until SIGTERM/SIGINT; the batch in progress completes first."""
    if not checkpoint_location:
        raise click.UsageError("--engine spark needs --checkpoint-location (a durable directory)")
    from cachesync.consumer.spark.session import spark_session
    purger = DedupPurger(settings)
    with spark_session("cachesync-consume", spark_master) as spark:
        engine = build_spark_engine(settings, spark, checkpoint_location, max_offsets_per_trigger)
        on_termination(engine.stop)
        purger.start()
        try:
            engine.run()
        finally:
            purger.stop()
    s = engine.stats
    log.info("spark consumer stopped: %d consumed, %d applied, %d duplicates, %d dead-lettered",
             s.consumed, s.applied, s.duplicates, s.dead_lettered)


class DedupPurger(threading.Thread):
    """The python engine's periodic dedup purge, on the Spark driver: the tasks only
    apply batches, so the driver purges done records past consumer.dedup_retention_s
    every consumer.purge_interval_s (bounded per run, like the python engine)."""

    def __init__(self, settings: Settings, build=build_dedup):
        super().__init__(name="dedup-purge", daemon=True)
        self._settings, self._build = settings, build
        self._stopping = threading.Event()
        self.purged = 0

    def run(self) -> None:
        opts = engine_options(self._settings)
        if opts.purge_interval_s <= 0:
            return
        store = self._build(self._settings)
        try:
            while not self._stopping.wait(opts.purge_interval_s):
                try:
                    n = purge_dedup(store, opts.dedup_retention_s, opts.purge_batch,
                                    opts.purge_batches_per_run)
                except RetryableError as e:
                    log.warning("dedup purge skipped until the next interval: %s", e)
                    continue
                self.purged += n
                if n:
                    log.info("purged %d dedup record(s) done more than %.0fs ago", n,
                             opts.dedup_retention_s)
        finally:
            store.close()

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(30)
