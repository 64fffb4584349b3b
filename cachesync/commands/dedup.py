"""``cachesync dedup purge``: forget done message ids older than the retention."""

from __future__ import annotations

import click

from cachesync.commands.common import handle_errors, settings_options
from cachesync.progress import Progress
from cachesync.schema.retry import purge_in_batches
from cachesync.wiring import build_dedup


@click.group("dedup")
def command() -> None:
    """The dedup store (consumer.dedup_store: mysql or redis)."""


@command.command("purge")
@settings_options
@click.option("--retention", "retention_s", type=click.FloatRange(min=0), default=None,
              help="Seconds; default consumer.dedup_retention_s. Keep it longer than the "
                   "topic's retention, or a rewound consumer re-applies old messages.")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Records per delete statement; default consumer.purge_batch.")
def purge_command(settings, retention_s, batch) -> None:
    """Delete done dedup records older than the retention, in bounded batches.

    The consumer also does this every consumer.purge_interval_s; this command is for
    a one-off clean-up (e.g. after shortening the retention). Claims that were never
    confirmed are kept: their messages have not been committed in Kafka yet.
    """
    c = settings.consumer
    retention = c.dedup_retention_s if retention_s is None else retention_s
    with handle_errors():
        store = build_dedup(settings)
        try:
            with Progress("dedup purge (records)") as bar:
                total = purge_in_batches(lambda n: _counted(bar, store.purge(retention, n)),
                                         batch or c.purge_batch)
        finally:
            store.close()
    click.echo(f"purged {total} done record(s) older than {retention:.0f}s "
               f"from namespace {settings.dedup_namespace}")


def _counted(bar: Progress, n: int) -> int:
    """``n``, shown on the progress bar."""
    bar.update(n)
    return n
