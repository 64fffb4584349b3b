"""Pre-fill of a delete-mode table on Spark, per JDBC split (run in the executors' Python
workers; no pyspark import): the split's rows in chunks through ``consumer.prefill``, its
second reads on the task's own MySQL connection in autocommit."""

from __future__ import annotations

from typing import Iterable, Iterator

from cachesync.consumer.spark.applier import SnapshotConfig, _chunks, _replay_cache
from cachesync.consumer.spark.bundle import keep_zip_directories


def prefill_partition(rows: Iterable, config: SnapshotConfig, progress) -> Iterator[tuple]:
    """Fill the missing keys of one split's rows; yields one ``(rows, keys, written, refused,
    skipped, kept)``. ``progress``: a Spark accumulator of rows."""
    from cachesync.consumer.prefill import RowReader, prefill_chunk
    from cachesync.consumer.replay import RateLimiter
    from cachesync.consumer.snapshot import TableSummary
    from cachesync.schema.keytext import row_value
    keep_zip_directories()
    m, dry_run = config.mapping, config.adapters is None
    cache = None if dry_run else _replay_cache(config)
    conn = None if dry_run else config.adapters.mysql(m.db).connect(autocommit=True)
    reader = None if dry_run else RowReader(conn, m.name, config.pk, tuple(config.types.items()))
    limiter, total = RateLimiter(config.rate_per_task), TableSummary(m.table)
    values = (({c: row_value(v, config.types[c]) if c in config.types else v
                for c, v in row.asDict().items()}) for row in rows)
    try:
        for chunk in _chunks(values, config.chunk):
            limiter.acquire(len(chunk))
            total.add(prefill_chunk(cache, reader, chunk, m, config.pk, config.watermark,
                                    dry_run=dry_run))
            progress.add(len(chunk))
    finally:
        if conn is not None:
            conn.close()
    yield (total.rows, total.keys, total.written, total.refused, total.skipped, total.kept)
