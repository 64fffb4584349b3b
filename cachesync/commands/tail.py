"""``cachesync tail``: publish binlog row changes of the mapped tables to Kafka."""

from __future__ import annotations

import click

from cachesync.commands.common import handle_errors, log, on_termination, settings_options
from cachesync.metrics import Cumulative
from cachesync.operate import tail_ops
from cachesync.supervisor import RestartingTailer
from cachesync.wiring import build_tailer


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
        tailers = Cumulative(("published", "table_events"))
        ops = tail_ops(settings, tailers)
        supervisor = RestartingTailer(lambda: tailers.track(build_tailer(settings)))
        on_termination(supervisor.stop)
        try:
            supervisor.run()
        finally:
            ops.close()
        tailer = supervisor.last
        if tailer is not None:
            log.info("tailer stopped after %d row events; checkpoint %s", tailer.published,
                     tailer.committed.describe() if tailer.committed else "-")
