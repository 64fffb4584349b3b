"""Audit on Spark: read a MySQL table over JDBC, partitioned by its primary key, and compare
the keys (and values) its rows map to with what Redis holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cachesync.runtime.config import mask_url
from cachesync.consumer.audit import STALE, AuditReport
from cachesync.consumer.spark.applier import AuditConfig, audit_partition
from cachesync.consumer.spark.replay import _Progress
from cachesync.schema.keytext import server_text_sql
from cachesync.schema.sqlnames import quote

JDBC_DRIVER = "org.mariadb.jdbc.Driver"
SCAN_COUNT = 1000


@dataclass(frozen=True)
class TableSource:
    """Where the table is and how to split it: ``pk`` columns and, for one integer
    column, its bounds (``lo``..``hi``) and row count from a quick query."""

    url: str                 # jdbc:mysql://host:port/db?permitMysqlScheme (MariaDB driver)
    user: str
    password: str
    table: str               # the table name inside the url's database
    pk: tuple[str, ...]
    integer_pk: bool
    lo: int | None
    hi: int | None
    rows: int
    # (column, information_schema data_type) of every column: the audit reads each as its
    # key text (schema.keytext.server_text_sql), as the tailer renders it from the binlog
    columns: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        """Without the password, the JDBC URL masked: a logged source shows no secret."""
        return (f"TableSource(url={mask_url(self.url)!r}, user={self.user!r}, password='***', "
                f"table={self.table!r}, pk={self.pk!r}, rows={self.rows})")


PARTITION_COLUMN = "__cachesync_pk"      # the integer key, typed, for JDBC partitioning


def read_table(spark, source: TableSource, partitions: int):
    """The table as a DataFrame, ``partitions`` JDBC queries split by primary key; with
    ``source.columns``, every column as its key text (a subquery), plus PARTITION_COLUMN."""
    props = {"user": source.user, "password": source.password, "driver": JDBC_DRIVER,
             "preferTimestampNTZ": "true"}
    quoted = quote(source.table)
    column = source.pk[0]
    if source.columns:
        texts = ", ".join(server_text_sql(c, t) for c, t in source.columns)
        quoted = (f"(SELECT {quote(column)} AS {PARTITION_COLUMN}, {texts} FROM {quoted}) "
                  "AS cachesync_audit")
        column = PARTITION_COLUMN
    if source.integer_pk and source.lo is not None:
        return spark.read.jdbc(source.url, quoted, column=column, lowerBound=source.lo,
                               upperBound=source.hi + 1, numPartitions=partitions,
                               properties=props)
    # Composite or non-integer key: split by a hash of the key columns.
    cols = ", ".join(quote(c) for c in source.pk)
    predicates = [f"MOD(CRC32(CONCAT_WS(',', {cols})), {partitions}) = {i}"
                  for i in range(partitions)]
    return spark.read.jdbc(source.url, quoted, predicates=predicates, properties=props)


def audit_table(spark, source: TableSource, mapping, adapters, partitions: int = 4,
                sample: int | None = None, scan=None,
                progress: Callable[[int], None] = lambda n: None) -> tuple[AuditReport, list[str]]:
    """Returns the report and every key to repair (stale values and extra keys); the tasks
    read Redis through ``adapters`` (``consumer.ports.Adapters``).

    ``scan(glob)`` iterates the Redis keys matching a glob (SCAN); extra keys are those
    matching one of the table's templates that no row renders. Not looked for when
    sampling: a key of a row outside the sample would look extra. ``progress(n)`` hears
    the rows checked, as the tasks report them.
    """
    frame = read_table(spark, source, partitions)
    if PARTITION_COLUMN in frame.columns:
        frame = frame.drop(PARTITION_COLUMN)
    if sample:
        fraction = min(1.0, 1.5 * sample / max(source.rows, 1))
        frame = frame.sample(fraction=fraction, seed=7).limit(sample)
    config = AuditConfig(mapping, adapters, types=dict(source.columns))
    rows_read = spark.sparkContext.accumulator(0)
    judged = spark.createDataFrame(
        frame.rdd.mapPartitions(lambda rows: audit_partition(rows, config, rows_read)),
        "verdict STRING, key STRING").cache()
    try:
        with _Progress(rows_read, progress):
            counts = {r["verdict"]: r["count"] for r in judged.groupBy("verdict").count().collect()}
        stale = sorted(r["key"] for r in judged.where(f"verdict = '{STALE}'").select("key").collect())
        report = AuditReport(mapping.table, rows_read.value, sampled=bool(sample), stale_keys=stale,
                             **{v: counts.get(v, 0) for v in ("consistent", "stale", "missing",
                                                              "unverified")})
        if not sample and scan is not None:
            extra = _extra_keys(spark, judged, mapping, scan)
            report.extra, report.extra_keys = len(extra), extra
    finally:
        judged.unpersist()
    return report, [*stale, *report.extra_keys]


def _extra_keys(spark, judged, mapping, scan) -> list[str]:
    found = set()
    for template in mapping.keys:
        found.update(k for k in scan(template.glob) if template.regex.fullmatch(k))
    if not found:
        return []
    scanned = spark.createDataFrame([(k,) for k in sorted(found)], "key STRING")
    return sorted(r["key"] for r in scanned.join(judged, "key", "left_anti").collect())
