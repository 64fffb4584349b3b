"""Pre-fill of a delete-mode table (``tables.<t>.prefill``): missing keys filled by
``read_through``'s protocol, so a fill can never leave a stale value.

A delete-mode invalidation deletes the key and its fill lease and leaves no version behind,
so the update-mode snapshot's fence (a low watermark's version) cannot guard these fills.
What guards ``read_through``'s fills guards them instead, per chunk of rows:

1. render the chunk's keys and take their fill leases (SET NX; a key already cached, or
   one another reader holds the lease of, is left alone);
2. read the chunk's rows again by primary key, *after* the leases are held, each statement
   a fresh read (autocommit): it sees every change committed before it;
3. fill each leased key from that second read with the lease-checked fill.

A change committed after the second read is invalidated by the consumer: before the fill it
deletes the lease (the fill is refused), after it the filled key. A row deleted meanwhile is
not in the second read (its key is not filled), and a leased key its row no longer renders is
not filled either (its lease is given back).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Mapping, Sequence

from cachesync.consumer.core.writes import KIND_DELETE
from cachesync.consumer.ports import CacheWriter
from cachesync.consumer.snapshot import TableSummary, Watermark, rendered
from cachesync.schema.keytext import server_text_param_sql, server_text_sql
from cachesync.schema.mapping import TableMapping
from cachesync.schema.sqlnames import quote

# How long a pre-fill holds a key's lease: its second read and its fill of one chunk. A lease
# that runs out only refuses that fill; meanwhile an application's read_through of the key
# loads without filling (as when another reader holds the lease).
PREFILL_LEASE_MS = 30_000

Row = Mapping[str, Any]
# the rows with these primary-key values, read when called (a fresh read)
Reread = Callable[[Sequence[tuple]], list[Row]]


def prefill_chunk(cache: CacheWriter, reread: Reread, rows: Sequence[Row], mapping: TableMapping,
                  pk: tuple[str, ...], watermark: Watermark, dry_run: bool = False) -> TableSummary:
    """Fill the missing keys of ``rows`` (each as the tailer publishes its values); returns
    ``written`` (filled), ``refused`` (its lease was voided: the row changed) and ``kept``
    (left alone: cached, another reader's lease, the row gone or keyed otherwise when read
    again, a value over max_value_bytes). A dry run only renders."""
    fills, summary = _fills(rows, mapping, pk, watermark)
    if dry_run:
        return summary
    token = uuid.uuid4().hex
    leased = set(cache.take_leases(list(fills), token, PREFILL_LEASE_MS)) if fills else set()
    again = list(dict.fromkeys(fills[key][1] for key in fills if key in leased))
    fresh, _ = _fills(reread(again), mapping, pk, watermark) if again else ({}, None)
    writes = [w for key, (w, _) in fresh.items() if key in leased]
    done = cache.fill_leased(writes, token)
    cache.release_leases(sorted(leased - {w.key for w in writes}), token)
    summary.written, summary.refused = done.applied, done.refused
    summary.kept = summary.keys - done.applied - done.refused
    return summary


def _fills(rows: Sequence[Row], mapping: TableMapping, pk: tuple[str, ...], watermark: Watermark
           ) -> tuple[dict[str, tuple], TableSummary]:
    """``{key: (its fill, its row's primary-key values)}`` for the values ``rows`` render in
    the table's prefill format (an oversized value renders none), and rows and keys counted."""
    out, summary = {}, TableSummary(mapping.table)
    for row, writes in rendered(rows, mapping.prefill_mapping, pk, watermark):
        summary.rows += 1
        summary.keys += len(writes)
        if not writes:
            summary.skipped += 1
        key = tuple(row[c] for c in pk)
        out.update((w.key, (w, key)) for w in writes if w.kind != KIND_DELETE)
    return out, summary


ROW = "cachesync_row"


class RowReader:
    """``Reread`` on a connection in autocommit (each SELECT a fresh read, never a snapshot
    taken before the leases): the rows by primary key, each column as its key text turned
    into the value the tailer publishes (``cachesync.schema.keytext.row_value``)."""

    def __init__(self, conn, table: str, pk: tuple[str, ...], columns: Sequence[tuple[str, str]]):
        self._conn, self._pk, self._types = conn, pk, dict(columns)
        texts = ", ".join(server_text_sql(c, t) for c, t in columns)
        self._select = f"SELECT {texts} FROM {quote(table)} AS {ROW} WHERE "
        cols = ", ".join(f"{ROW}.{quote(c)}" for c in pk)
        self._target = cols if len(pk) == 1 else f"({cols})"
        one = ", ".join(server_text_param_sql(self._types[c]) for c in pk)
        self._one = one if len(pk) == 1 else f"({one})"

    def __call__(self, keys: Sequence[tuple]) -> list[Row]:
        from cachesync.schema.keytext import row_value
        sql = f"{self._select}{self._target} IN ({', '.join([self._one] * len(keys))})"
        with self._conn.cursor() as cur:
            cur.execute(sql, [v for key in keys for v in key])
            names = [d[0] for d in cur.description]
            return [{c: row_value(v, self._types[c]) for c, v in zip(names, row)}
                    for row in cur.fetchall()]
