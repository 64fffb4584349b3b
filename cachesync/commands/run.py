"""``cachesync run``: the whole sidecar in one process (``--direct``: without Kafka)."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import replace

import click

from cachesync.doctor import start_checks
from cachesync.commands.common import handle_errors, on_termination, settings_options
from cachesync.direct_ops import DirectOps
from cachesync.http import parse_listen
from cachesync.runtime.metrics import tailer_totals
from cachesync.operate import consumer_ops, monitor_hook, tail_ops
from cachesync.standby import ActiveStandby
from cachesync.supervisor import run_together
from cachesync.tailer_stack import tailer_stack
from cachesync.wiring import build_direct, build_engine, build_outage_fallback, build_tailer

log = logging.getLogger(__name__)


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

    A purged checkpoint position stops it with exit code 3, or, with
    tailer.on_lost_position: resync, runs `cachesync resync` and goes on (as `tail` does).

    SIGTERM or SIGINT stops both cleanly (the tailer drains what it sent). A fatal error in
    either stops both with its exit code.

    It writes heartbeats and serves /metrics, /healthz, /readyz like `tail` and `consume`
    (metrics.listen auto: 9465 and 9464; port 0: two free ports; a fixed host:port serves
    the consumer's). --direct serves one endpoint with both roles' metrics (auto: 9464);
    ready = MySQL and Redis answer and the lag is under metrics.ready_max_lag_s.
    """
    with handle_errors():
        on_termination()            # until the pipeline is built and can stop cleanly
        start_checks(settings, "direct" if direct else "all")   # doctor's checks, logged
        tailer = _run_direct(settings) if direct else _run_pipeline(settings)
        last = tailer.last
        if last is not None:
            log.info("tailer: %d row events; checkpoint %s", last.published,
                     last.committed.describe() if last.committed else "-")


def _run_direct(settings) -> ActiveStandby:
    """Tailer + in-process engine (rebuilt together on a restart) and their ops endpoint."""
    tailer = None
    current = lambda: tailer.last if tailer else None   # noqa: E731 - rebuilt on restarts
    ops = DirectOps(settings, lambda: current() and current().engine.stats,
                    lambda: current() and current().tailer,
                    lambda: current() and current().engine.tables)
    try:
        tailer = tailer_stack(settings, lambda: build_direct(settings, ops.metrics.on_batch))
        run_together({"direct": tailer}, on_termination)
    finally:
        ops.close()
    return tailer


def _run_pipeline(settings) -> ActiveStandby:
    """Tailer -> Kafka and the consumer in two threads, each with its ops endpoint."""
    engine = None
    tailers = tailer_totals()
    with ExitStack() as closing:
        closing.callback(tail_ops(_tail_metrics(settings), tailers).close)
        ops, metrics = consumer_ops(settings, lambda: engine.stats if engine else None,
                                    tables=lambda: engine.tables if engine else None)
        closing.callback(ops.close)
        engine = build_engine(settings, on_batch=metrics.on_batch,
                              hooks=monitor_hook(settings, ops))
        closing.callback(engine.close)
        tailer = tailer_stack(settings, lambda: tailers.track(build_tailer(settings)),
                              lambda start: build_outage_fallback(settings, start))
        run_together({"tailer": tailer, "consumer": engine}, on_termination)
    s = engine.stats
    log.info("consumer: %d consumed, %d applied, %d duplicates, %d dead-lettered",
             s.consumed, s.applied, s.duplicates, s.dead_lettered)
    return tailer


def _tail_metrics(settings):
    """The tailer's half of the settings for its metrics endpoint: with ``auto`` (role
    ports) or port 0 both halves serve; a fixed host:port belongs to the consumer, and the
    tailer then only writes heartbeats and probes."""
    address = parse_listen(settings.metrics.listen, "consume")
    if settings.metrics.listen == "auto" or address is None or address[1] == 0:
        return settings
    return replace(settings, metrics=replace(settings.metrics, listen="off"))
