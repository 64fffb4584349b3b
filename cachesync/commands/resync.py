"""``cachesync resync``: the recovery after a lost binlog position (purged binlog)."""

from __future__ import annotations

import json

import click

from cachesync.runtime import logs
from cachesync.commands.common import handle_errors, settings_options
from cachesync.progress import Progress


@click.command("resync")
@settings_options
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE",
              help="invalidate only these mapped tables (repeatable); the checkpoint is then "
                   "left as it is.")
def command(settings, tables) -> None:
    """Invalidate every cached key of the mapped tables, then restart the tailer's
    checkpoint at the server's current position.

    Use it when `cachesync tail` stopped because its checkpoint's binlog is gone
    (exit 3), or before a first start when keys were cached already. Reads the current
    position first, removes every key the tables' templates can produce (SCAN + UNLINK,
    never cachesync: keys), then stores that position as tailer.name's checkpoint. Stop
    the tailer first. Shows a progress bar and ends with the keys removed per table;
    JSON on stdout.
    """
    from cachesync.resync import resync_tables, resync
    with handle_errors():
        try:
            count = len(resync_tables(settings, tuple(tables)))
        except ValueError as e:
            raise click.UsageError(f"--table: {e}") from None
        # a pattern's tables are known only once the server is asked: no total then
        with Progress("resync (tables)", None if settings.tables.patterns else count) as bar:
            report = resync(settings, tuple(tables), lambda _table, _removed: bar.update(1))
        click.echo(json.dumps(report.to_dict(), indent=2))
        if not logs.json_enabled():
            click.echo(render_summary(report), err=True)


def render_summary(report) -> str:
    lines = [f"{'table':<40} {'keys removed':>14}"]
    lines += [f"{table:<40} {n:>14}" for table, n in report.removed.items()]
    stored = report.checkpoint_stored
    lines.append("checkpoint " + (f"stored at {report.position.describe()}" if stored
                                  else "unchanged (--table)"))
    return "\n".join(lines)
