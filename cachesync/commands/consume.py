"""``cachesync consume``: apply change events from Kafka to Redis, idempotently."""

from __future__ import annotations

import logging

import click

from cachesync.runtime import startup
from cachesync.commands import consume_spark
from cachesync.doctor import start_checks
from cachesync.commands.common import handle_errors, on_termination, settings_options
from cachesync.operate import consumer_ops, monitor_hook
from cachesync.wiring import build_engine

log = logging.getLogger(__name__)


@click.command("consume")
@settings_options
@click.option("--engine", "engine_kind", type=click.Choice(["python", "spark"]), default="python",
              show_default=True, help="python: one process in the Kafka group; spark: a "
              "Structured Streaming query (consumer/spark/).")
@consume_spark.spark_options
def command(settings, engine_kind, **spark) -> None:
    """Consume change events and invalidate (or, in update mode, write) the mapped Redis keys.

    Per batch: claim the message ids in the dedup store (consumer.dedup_store), skip
    those already done, delete the keys rendered from the before and after images
    (update-mode tables: fenced writes, newest version wins), mark the ids done,
    then commit the Kafka offsets. Undecodable records and unknown tables go to the
    dead-letter topic (kafka.dead_letter_topic) with a reason; consumption goes on.
    Done dedup records past consumer.dedup_retention_s are purged periodically.

    Serves /metrics, /healthz and /readyz on metrics.listen (default 127.0.0.1:9464),
    with either engine (spark: Kafka lag measured from its checkpoint); ready = Kafka,
    MySQL and Redis answer and the commit->apply lag is under metrics.ready_max_lag_s.

    With monitor.enabled (the default; spark: on the driver), a sample of the applied events
    (monitor.sample_ratio) is checked monitor.window_s later against MySQL, read-only:
    cachesync_monitor_checks_total{table,result} (see cachesync monitor).
    """
    if engine_kind == "spark":
        with handle_errors():
            consume_spark.run(settings, **spark)
        return
    with handle_errors():
        on_termination()            # until the engine is built and can stop cleanly
        start_checks(settings, "consume")  # kafka.create_topics; doctor's checks once polling
        engine = None
        ops, metrics = consumer_ops(settings, lambda: engine.stats if engine else None,
                                    tables=lambda: engine.tables if engine else None,
                                    scans=lambda: engine.table_scans.scans()
                                    if engine and engine.table_scans else ())
        startup.mark("metrics")
        try:
            engine = build_engine(settings, on_batch=metrics.on_batch,
                                  hooks=monitor_hook(settings, ops))
            startup.mark("engine")
            on_termination(engine.stop)
            try:
                engine.run()
            finally:
                engine.close()
        finally:
            ops.close()
        log.info("consumer stopped: %s", engine.stats.summary())
