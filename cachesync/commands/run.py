"""``cachesync run``: the whole sidecar in one process (``--direct``: without Kafka)."""

from __future__ import annotations

import click

from cachesync.commands.common import handle_errors, log, on_termination, settings_options
from cachesync.direct import build_direct
from cachesync.supervisor import RestartingTailer, run_together
from cachesync.wiring import build_engine, build_tailer


@click.command("run")
@click.option("--direct", is_flag=True,
              help="No Kafka: apply each change to Redis in this process (claim in the dedup "
                   "table, delete keys, confirm) before the checkpoint may pass it. Dedup "
                   "namespace: consumer.namespace or direct-<tailer.name>; dead letters are "
                   "logged as errors.")
@settings_options
def command(settings, direct: bool) -> None:
    """Run the sidecar: tailer and consumer in one process, one thread each.

    Same behaviour as `cachesync tail` plus `cachesync consume`: the tailer publishes to
    Kafka, restarting from its checkpoint after a transient failure; the consumer applies
    the topic to Redis. With --direct there is no Kafka: the tailer hands every change
    to the consumer logic in-process, and the checkpoint advances only past transactions
    whose invalidations were applied to Redis, so a kill -9 loses nothing.

    SIGTERM or SIGINT stops both cleanly (the tailer drains what it sent). A fatal error in
    either stops both with its exit code.
    """
    with handle_errors():
        if direct:
            tailer = RestartingTailer(lambda: build_direct(settings))
            run_together({"direct": tailer}, on_termination)
        else:
            engine = build_engine(settings)
            tailer = RestartingTailer(lambda: build_tailer(settings))
            try:
                run_together({"tailer": tailer, "consumer": engine}, on_termination)
            finally:
                engine.close()
            s = engine.stats
            log.info("consumer: %d consumed, %d applied, %d duplicates, %d dead-lettered",
                     s.consumed, s.applied, s.duplicates, s.dead_lettered)
        last = tailer.last
        if last is not None:
            log.info("tailer: %d row events; checkpoint %s", last.published,
                     last.committed.describe() if last.committed else "-")
