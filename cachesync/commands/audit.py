"""``cachesync audit``: compare a MySQL table with the Redis keys it maps to (Spark, JDBC)."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext

import click

from cachesync.runtime import logs
from cachesync.commands.common import handle_errors, settings_options
from cachesync.runtime.config import Settings
from cachesync.progress import Progress
from cachesync import wiring
from cachesync.schema.sqlnames import quote

EXIT_STALE = 4        # the staleness ratio is over --max-stale-ratio (for cron)
_INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}


@click.command("audit")
@settings_options
@click.option("--table", required=True, metavar="DB.TABLE", help="a mapped table.")
@click.option("--repair", is_flag=True, help="delete the stale and the extra keys found.")
@click.option("--sample", type=click.IntRange(min=1), metavar="N",
              help="check about N random rows instead of all (extra keys are not looked for).")
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True,
              help="JDBC queries the table is split into, by primary key.")
@click.option("--max-stale-ratio", type=click.FloatRange(min=0), default=0.01, show_default=True,
              help=f"exit {EXIT_STALE} when the staleness ratio is above this.")
@click.option("--spark-master", envvar="CACHESYNC_SPARK_MASTER", help="master URL (default local[2]).")
def command(settings: Settings, table, repair, sample, partitions, max_stale_ratio,
            spark_master) -> None:
    """Audit one table: consistent, stale, missing and extra keys, and the staleness ratio.

    Reads the table with Spark's JDBC source split by primary key, renders every row's
    keys (and, for update-mode tables, the value cachesync would write), reads them with
    MGET per partition and compares. The staleness ratio is (stale + extra) / cached
    entries. JSON on stdout, a table on stderr; exit 4 when the ratio is over the limit.
    """
    with handle_errors():
        report = run_audit(settings, table, repair, sample, partitions, spark_master)
        click.echo(json.dumps({**report.to_dict(), "max_stale_ratio": max_stale_ratio}, indent=2))
        if not logs.json_enabled():
            click.echo(render_table(report), err=True)
    if report.staleness_ratio > max_stale_ratio:
        sys.exit(EXIT_STALE)


def run_audit(settings: Settings, table: str, repair: bool = False, sample: int | None = None,
              partitions: int = 4, spark_master: str | None = None, spark=None,
              show_progress: bool = True):
    from cachesync.consumer.spark.audit import audit_table
    from cachesync.consumer.spark.session import spark_session
    mapping = settings.tables.get(*table.split(".", 1)) if "." in table else None
    if mapping is None:
        raise click.UsageError(f"--table {table}: not a mapped table "
                               f"(mapped: {', '.join(m.table for m in settings.tables.entries)})")
    source = table_source(settings, table)
    cache = wiring.build_cache(settings)
    try:
        with spark_session("cachesync-audit", spark_master) if spark is None \
                else nullcontext(spark) as session:
            total = min(sample, source.rows) if sample else source.rows
            with Progress(f"audit {table} (rows)", total, show=show_progress) as bar:
                report, to_repair = audit_table(session, source, mapping,
                                                wiring.SettingsAdapters(settings), partitions,
                                                sample, scan=_scanner(settings, mapping),
                                                progress=bar.update)
        if repair and to_repair:
            cache.delete(to_repair)
            report.repaired = len(to_repair)
    finally:
        cache.close()
    return report


def _scanner(settings: Settings, mapping):
    """``scan(glob)`` as audit_table calls it, for the glob of ``mapping``'s templates: the
    keys the templates with that glob render (CacheReader.scan)."""
    def scan(glob: str):
        cache = wiring.build_cache_reader(settings)
        try:
            for template in (t for t in mapping.keys if t.glob == glob):
                yield from cache.scan(template)
        finally:
            cache.close()
    return scan


def table_source(settings: Settings, table: str):
    """Primary key, bounds and row count of ``table`` (as the cachesync user)."""
    from cachesync.consumer.spark.audit import TableSource
    db, name = table.split(".", 1)
    m = settings.mysql
    conn = wiring.mysql_params(settings, db).connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT k.column_name, c.data_type FROM information_schema.key_column_usage k "
                        "JOIN information_schema.columns c ON c.table_schema = k.table_schema AND "
                        "c.table_name = k.table_name AND c.column_name = k.column_name "
                        "WHERE k.table_schema = %s AND k.table_name = %s AND "
                        "k.constraint_name = 'PRIMARY' ORDER BY k.ordinal_position", (db, name))
            pk = cur.fetchall()
            if not pk:
                raise click.UsageError(f"{table} has no primary key (or cachesync may not read it)")
            integer = len(pk) == 1 and pk[0][1].lower() in _INTEGER_TYPES
            col = pk[0][0]
            cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                        (db, name))
            columns = tuple(cur.fetchall())
            if integer:
                cur.execute(f"SELECT MIN({quote(col)}), MAX({quote(col)}), COUNT(*) FROM {quote(name)}")
                lo, hi, rows = cur.fetchone()
            else:
                cur.execute(f"SELECT COUNT(*) FROM {quote(name)}")
                (rows,), lo, hi = cur.fetchone(), None, None
    finally:
        conn.close()
    # Spark picks its MySQL dialect (backtick quoting) by the jdbc:mysql prefix; the MariaDB
    # driver accepts that scheme with permitMysqlScheme.
    return TableSource(f"jdbc:mysql://{m.host}:{m.port}/{db}?permitMysqlScheme{jdbc_tls(m)}",
                       m.user, str(m.password), name,
                       tuple(c for c, _ in pk), integer, lo, hi, rows, columns)


def jdbc_tls(m) -> str:
    """The MariaDB driver's TLS parameters for ``mysql.ssl_*`` (empty without ``ssl_ca`` or
    ``ssl``; ``ssl`` alone: the JVM's trusted CAs)."""
    if not (m.ssl_ca or m.ssl):
        return ""
    mode = "verify-full" if m.ssl_verify_identity else "verify-ca"
    return f"&sslMode={mode}" + (f"&serverSslCert={m.ssl_ca}" if m.ssl_ca else "")


def render_table(report) -> str:
    extra = "n/a (sampled)" if report.extra is None else report.extra
    rows = [("rows" + (" (sampled)" if report.sampled else ""), report.rows),
            ("consistent", report.consistent), ("stale", report.stale),
            ("missing", report.missing), ("extra", extra), ("unverified", report.unverified),
            ("staleness ratio", f"{report.staleness_ratio:.4%}"), ("repaired", report.repaired)]
    return "\n".join([f"audit {report.table}", *(f"  {k:<18} {v}" for k, v in rows)])
