"""``cachesync tail``: publish binlog row changes of the mapped tables to Kafka."""

from __future__ import annotations

import click

from cachesync.commands.common import handle_errors, log, on_termination, settings_options
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
    """
    with handle_errors():
        tailer = build_tailer(settings)
        on_termination(tailer.stop)
        tailer.run()
        log.info("tailer stopped after %d row events; checkpoint %s", tailer.published,
                 tailer.committed.describe() if tailer.committed else "-")
