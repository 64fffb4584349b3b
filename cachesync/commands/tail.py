"""``cachesync tail``: publish binlog row changes of the mapped tables to Kafka."""

from __future__ import annotations

import threading

import click

from cachesync.commands.common import handle_errors, log, on_termination, settings_options
from cachesync.metrics import Cumulative
from cachesync.operate import tail_ops
from cachesync.wiring import build_tailer
from consumer.core.retry import RetryPolicy
from schema.errors import RetryableError


@click.command("tail")
@settings_options
def command(settings) -> None:
    """Tail the MySQL binlog and publish every committed row change to Kafka.

    Starts at the stored checkpoint (table cachesync.cachesync_checkpoint, named by
    tailer.name) or, on first start, at the server's current position. The
    checkpoint advances only past transactions Kafka fully acknowledged. Requires
    binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL and the
    REPLICATION SLAVE + REPLICATION CLIENT grants; says which one is missing.

    Every tailer.heartbeat_interval_s it rewrites its row in cachesync.cachesync_heartbeat
    so the consumer measures lag while the application is idle. Serves /metrics,
    /healthz and /readyz on metrics.listen (default 127.0.0.1:9465); ready = MySQL and
    Kafka answer and the checkpoint moved within metrics.ready_max_lag_s.
    """
    with handle_errors():
        tailers = Cumulative(("published",))
        ops = tail_ops(settings, tailers)
        try:
            run_with_restarts(lambda: tailers.track(build_tailer(settings)))
        finally:
            ops.close()


def run_with_restarts(build, policy: RetryPolicy = RetryPolicy(base_s=0.5, cap_s=30.0)) -> None:
    """Run a fresh tailer until a clean stop; transient failures restart it from the
    stored checkpoint (never skipping), fatal ones propagate."""
    stopping = threading.Event()
    attempt = 0
    while not stopping.is_set():
        try:
            tailer = build()
            on_termination(lambda t=tailer: (stopping.set(), t.stop()))
            tailer.run()
        except RetryableError as e:
            attempt += 1
            wait = policy.backoff(attempt)
            log.warning("tailer failed (%s); restarting from the checkpoint in %.1fs", e, wait)
            if stopping.wait(wait):
                break
            continue
        log.info("tailer stopped after %d row events; checkpoint %s", tailer.published,
                 tailer.committed.describe() if tailer.committed else "-")
        return
