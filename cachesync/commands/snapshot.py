"""``cachesync snapshot``: warm update-mode tables' keys from MySQL, fenced at a low watermark,
and fill the missing keys of delete-mode tables with ``prefill`` by read_through's protocol."""

from __future__ import annotations

import json
import logging
import sys
import time
from contextlib import nullcontext
from functools import partial

import click

from cachesync import wiring
from cachesync.commands.audit import table_source
from cachesync.commands.common import handle_errors, settings_options
from cachesync.runtime.config import Settings
from cachesync.consumer.prefill import RowReader, prefill_chunk
from cachesync.consumer.replay import RateLimiter
from cachesync.consumer.snapshot import (SnapshotReport, TableSummary, check_tombstone_window,
                                         read_watermark, snapshot_writes)
from cachesync.schema.keytext import server_text_sql
from cachesync.schema.sqlnames import quote

log = logging.getLogger(__name__)


@click.command("snapshot")
@settings_options
@click.option("--table", "tables", multiple=True, metavar="DB.TABLE",
              help="a mapped update-mode table, or delete-mode table with prefill "
              "(repeatable); default: every one.")
@click.option("--engine", "engine_kind", type=click.Choice(["python", "spark"]), default="python",
              show_default=True, help="python: pages read one after the other; spark: JDBC "
              "splits by primary key, one task each.")
@click.option("--dry-run", is_flag=True, help="read and render every key, write nothing.")
@click.option("--rate", type=click.FloatRange(min=1), help="rows per second at most (spark: "
              "over all tasks).")
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True,
              help="[spark] JDBC splits per table.")
@click.option("--chunk", type=click.IntRange(min=1), default=1000, show_default=True,
              help="rows per read (python) and per fenced write or prefill round.")
@click.option("--spark-master", envvar="CACHESYNC_SPARK_MASTER", help="[spark] master URL.")
def command(settings: Settings, tables, engine_kind, dry_run, rate, partitions, chunk,
            spark_master) -> None:
    """Fill the keys of update-mode tables from a read of MySQL, through the version fence.

    Records the server's binlog position first (the low watermark) and writes every row
    read after it with that position's version, so any change committed since, applied
    by the running consumer before or after the snapshot's write, wins: an updated row is
    never overwritten with its older value, a deleted one never brought back (its
    tombstone refuses the write; the snapshot stops if it runs longer than a table's
    tombstone_ttl). Delete-mode tables with tables.<t>.prefill get their missing keys
    filled as read_through fills them: leases taken, the rows read again after them, and a
    fill refused when a change voided its lease. Run it with the tailer and the consumer
    running. JSON report on stdout (per table: rows, keys, written, refused, skipped, kept),
    progress on stderr.
    """
    with handle_errors():
        report = run_snapshot(settings, tables, engine_kind, dry_run, rate, partitions, chunk,
                              spark_master)
    click.echo(json.dumps(report.as_dict(), indent=2))


def snapshot_tables(settings: Settings, tables) -> list:
    """The mappings to snapshot: update-mode tables and delete-mode ones with ``prefill``;
    raises UsageError for an unknown table or a delete-mode one without ``prefill``."""
    mapped = settings.tables.tables
    chosen = list(tables) or [t for t, m in sorted(mapped.items()) if _fills(m)]
    for table in chosen:
        if table not in mapped:
            raise click.UsageError(f"--table {table}: not a mapped table")
        if not _fills(mapped[table]):
            raise click.UsageError(
                f"--table {table}: a delete-mode table without prefill: readers fill it. "
                f"Set tables.{table}.prefill (the value your readers cache, json or hash) to "
                "let snapshot fill its missing keys")
    if not chosen:
        raise click.UsageError("no update-mode table, nor delete-mode table with prefill, is "
                               "mapped: nothing to snapshot")
    return [mapped[t] for t in chosen]


def _fills(mapping) -> bool:
    return mapping.updates or mapping.prefill is not None


def _check_columns(mapping, source) -> None:
    """A prefill's value columns must be columns of the table (UsageError)."""
    missing = sorted(set(mapping.prefill_columns or ()) - {c for c, _ in source.columns})
    if missing:
        raise click.UsageError(f"tables.{mapping.table}.prefill_columns: {', '.join(missing)} "
                               "not in the table: no value can be rendered")


def run_snapshot(settings: Settings, tables=(), engine_kind: str = "python", dry_run=False,
                 rate: float | None = None, partitions: int = 4, chunk: int = 1000,
                 spark_master: str | None = None, spark=None, on_chunk=None,
                 show_progress: bool = True, on_reread=None) -> SnapshotReport:
    """``on_chunk(table, rows)``: called (python engine) between a chunk's read and its write
    (a prefill: its leases); ``on_reread(table, rows)``: a prefill's second read, before
    its fills."""
    mappings = snapshot_tables(settings, tables)
    conn = wiring.mysql_params(settings).connect()
    try:
        with conn.cursor() as cur:
            watermark = read_watermark(cur)
    finally:
        conn.close()
    log.info("snapshot: low watermark %s (version %d)", watermark.position, watermark.version)
    report, t0 = SnapshotReport(watermark.position, dry_run), time.monotonic()
    for mapping in mappings:
        source = table_source(settings, mapping.table)
        _check_columns(mapping, source)
        with click.progressbar(length=source.rows, label=mapping.table, file=sys.stderr,
                               hidden=not show_progress) as bar:
            if engine_kind == "spark":
                summary = _spark(settings, source, mapping, watermark, dry_run, rate, partitions,
                                 spark_master, spark, bar.update)
            else:
                summary = _python(settings, source, mapping, watermark, dry_run, rate, chunk,
                                  (on_chunk, on_reread), bar.update)
        report.tables[mapping.table] = summary
        log.info("snapshot of %s: %s", mapping.table, summary.as_dict())
    report.elapsed_s = time.monotonic() - t0
    return report


def _spark(settings, source, mapping, watermark, dry_run, rate, partitions, master, spark,
           progress) -> TableSummary:
    from cachesync.consumer.spark.session import spark_session
    from cachesync.consumer.spark.snapshot import snapshot_spark
    from cachesync.wiring import SettingsAdapters
    with spark_session("cachesync-snapshot", master) if spark is None else nullcontext(spark) as s:
        adapters = None if dry_run else SettingsAdapters(settings)
        return snapshot_spark(s, source, mapping, watermark, adapters,
                              partitions, rate, progress)


def _python(settings, source, mapping, watermark, dry_run, rate, chunk, hooks,
            progress) -> TableSummary:
    from cachesync.schema.keytext import row_value
    types = dict(source.columns)
    total, limiter = TableSummary(mapping.table), RateLimiter(rate)
    cache = None if dry_run else wiring.build_cache(settings)
    params = wiring.mysql_params(settings, mapping.db)
    conn, again = params.connect(), None
    try:
        if not mapping.updates:     # a prefill: the second reads, each a fresh one
            again = params.connect(autocommit=True)
            write = _prefill(cache, again, source, mapping, watermark, hooks[1])
        else:
            write = partial(_fenced, cache, source, mapping, watermark)
        for page in _pages(conn, source, chunk):
            limiter.acquire(len(page))
            rows = [{c: row_value(v, types[c]) for c, v in row.items()} for row in page]
            if hooks[0] is not None:
                hooks[0](mapping.table, rows)
            total.add(write(rows))
            progress(len(page))
    finally:
        for c in (conn, again):
            if c is not None:
                c.close()
        if cache is not None:
            cache.close()
    return total


def _fenced(cache, source, mapping, watermark, rows) -> TableSummary:
    """Update mode: the rows written through the fence at the watermark's version."""
    writes, summary = snapshot_writes(rows, mapping, source.pk, watermark)
    if cache is not None and writes:
        check_tombstone_window(mapping, watermark)
        done = cache.write(writes)
        summary.written, summary.refused = done.applied, done.refused
    return summary


def _prefill(cache, conn, source, mapping, watermark, on_reread):
    """Delete mode with prefill: ``write(rows)`` fills their missing keys (consumer.prefill)."""
    reader = RowReader(conn, source.table, source.pk, source.columns)

    def reread(keys):
        rows = reader(keys)
        if on_reread is not None:
            on_reread(mapping.table, rows)
        return rows
    return lambda rows: prefill_chunk(cache, reread, rows, mapping, source.pk, watermark,
                                      dry_run=cache is None)


ROW = "cachesync_row"


def _pages(conn, source, chunk: int):
    """The table in primary-key order, ``chunk`` rows per query (keyset pagination: each
    page starts after the last key of the one before, never OFFSET); each row as
    {column: key text}."""
    # qualified: the key texts are aliased by their column names, and ORDER BY would take
    # the (text) alias over the column
    pk = ", ".join(f"{ROW}.{quote(c)}" for c in source.pk)
    texts = ", ".join(server_text_sql(c, t) for c, t in source.columns)
    base = f"SELECT {pk}, {texts} FROM {quote(source.table)} AS {ROW}"
    names, last, width = [c for c, _ in source.columns], None, len(source.pk)
    while True:
        with conn.cursor() as cur:
            if last is None:
                cur.execute(f"{base} ORDER BY {pk} LIMIT %s", (chunk,))
            else:
                marks = ", ".join(["%s"] * width)
                cur.execute(f"{base} WHERE ({pk}) > ({marks}) ORDER BY {pk} LIMIT %s",
                            (*last, chunk))
            found = cur.fetchall()
        if not found:
            return
        last = found[-1][:width]
        yield [dict(zip(names, row[width:])) for row in found]
        if len(found) < chunk:
            return
