"""``cachesync relay``: publish the application's outbox rows to Kafka, at least once."""

from __future__ import annotations

import logging

import click

from cachesync.progress import Progress
from cachesync.commands.common import handle_errors, on_termination, settings_options
from cachesync.operate import relay_ops
from cachesync.wiring import build_relay

log = logging.getLogger(__name__)


@click.command("relay")
@click.option("--purge-only", is_flag=True,
              help="Delete rows published longer than relay.retention_s ago (in batches of "
                   "relay.purge_batch), then exit; when the table is in tailer.outbox_tables "
                   "(published from the binlog, never marked), rows created longer ago. The "
                   "running relay also purges every relay.purge_interval_s.")
@settings_options
def command(settings, purge_only: bool) -> None:
    """Publish outbox rows (table relay.outbox_table in relay.outbox_db) to Kafka.

    Applications insert outbox rows in their own transactions with
    cachesync.producer_outbox.outbox.emit(). Each round the relay leases up to relay.burst_limit
    unpublished rows (attempts + 1, lease = relay.redeliver_interval_s) with
    SELECT ... FOR UPDATE SKIP LOCKED, sends them keyed db.aggregate_type:aggregate_id
    with header id = event id, and sets published_at only after Kafka acknowledged.
    Rows of a relay that died are redelivered when their lease ends; the consumer
    drops the duplicate ids. Any number of relays may run on one table.

    Unconfirmed sends are bounded by relay.max_unconfirmed; a row leased
    relay.warn_after_attempts times is logged as a warning. While Kafka is
    unreachable the relay logs, backs off and resumes; nothing is marked published
    before Kafka acknowledged it. Needs SELECT, UPDATE, DELETE on the outbox table.

    Serves /metrics, /healthz and /readyz on metrics.listen (default 127.0.0.1:9466).
    """
    with handle_errors():
        on_termination()            # until the pipeline is built and can stop cleanly
        relay = build_relay(settings)
        if purge_only:
            with Progress("relay purge (rows)") as bar:
                deleted = relay.purge_all(bar.update)
            log.info("purged %d outbox rows %s more than %.0fs ago", deleted,
                     "created" if relay.from_binlog else "published", settings.relay.retention_s)
            return
        on_termination(relay.stop)
        ops = relay_ops(settings, relay)
        try:
            relay.run()
        finally:
            ops.close()
