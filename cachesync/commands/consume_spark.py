"""``cachesync consume --engine spark``: the consumer as a Spark Structured Streaming query."""

from __future__ import annotations

import click

from cachesync.commands.common import log, on_termination
from cachesync.config import Settings
from cachesync.wiring import mappings as configured_mappings, mysql_params
from consumer.engine import EngineOptions

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
    from consumer.spark.applier import ApplyConfig
    c, k = settings.consumer, settings.kafka
    return ApplyConfig(
        mysql=mysql_params(settings), namespace=settings.dedup_namespace,
        redis_url=str(settings.redis.url), bootstrap_servers=k.bootstrap_servers,
        dead_letter_topic=k.dead_letter_topic, mappings=configured_mappings(settings),
        options=EngineOptions(batch_size=c.batch_size, poll_timeout_s=c.poll_timeout_s,
                              claim_lease_s=c.claim_lease_s))


def build_spark_engine(settings: Settings, spark, checkpoint_location: str,
                       max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS, on_batch=None):
    from consumer.spark.stream import SparkEngine, StreamOptions
    return SparkEngine(spark, settings.kafka.bootstrap_servers, settings.kafka.topic,
                       apply_config(settings),
                       StreamOptions(checkpoint_location, max_offsets_per_trigger),
                       on_batch=on_batch)


def run(settings: Settings, checkpoint_location: str | None, max_offsets_per_trigger: int,
        spark_master: str | None) -> None:
    """Run the streaming query until SIGTERM/SIGINT; the batch in progress completes first."""
    if not checkpoint_location:
        raise click.UsageError("--engine spark needs --checkpoint-location (a durable directory)")
    from consumer.spark.session import spark_session
    with spark_session("cachesync-consume", spark_master) as spark:
        engine = build_spark_engine(settings, spark, checkpoint_location, max_offsets_per_trigger)
        on_termination(engine.stop)
        engine.run()
    s = engine.stats
    log.info("spark consumer stopped: %d consumed, %d applied, %d duplicates, %d dead-lettered",
             s.consumed, s.applied, s.duplicates, s.dead_lettered)
