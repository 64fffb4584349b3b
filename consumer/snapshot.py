"""Snapshot: fill an update-mode table's keys from MySQL through the same version fence.

Parallel reads (JDBC splits, or pages read one after the other) cannot share one
consistent read. So the snapshot records a **low watermark** first, the server's binlog
position, and writes every row it reads afterwards with the version of that position
(the highest version a change at or before it can carry). Every change committed after
the watermark reaches Redis through the stream with a higher version, so, whatever the
order in which the two arrive:

* a row updated while the snapshot reads: the stream's newer version wins; a snapshot
  write arriving after it is refused by the fence;
* a row deleted while the snapshot reads: the stream's delete leaves a tombstone with
  its version, and the snapshot's older write is refused for as long as the tombstone
  lives (``tombstone_ttl``): the snapshot stops before it has run that long.

What a snapshot writes is what the consumer would write for an insert of the row
(``plan.event_keys``: the same key templates, value rendering and TTLs).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from cachesync.consumer.core.plan import event_keys
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.errors import FatalError
from cachesync.schema.gtid import GtidState
from cachesync.schema.ids import MAX_ROWS_PER_TXN, binlog_version, file_pos_ordinal
from cachesync.schema.mapping import MappingSet, TableMapping

SNAPSHOT_SERVER = "snapshot"


@dataclass(frozen=True)
class Watermark:
    """The server's binlog position when the snapshot began, and the version it stands for."""

    position: str           # GTID state or file:pos, as read
    ordinal: int            # its place in the history, as the tailer counts it
    taken_at: float         # time.time() when it was read

    @property
    def version(self) -> int:
        """The highest version a change at or before the watermark can carry."""
        return binlog_version(self.ordinal, MAX_ROWS_PER_TXN - 1)


def read_watermark(cur) -> Watermark:
    """The current position of the server ``cur`` talks to (MariaDB GTID, MySQL GTID, or
    file:pos); raises FatalError when binary logging is off."""
    from pymysql.err import OperationalError
    try:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")            # MariaDB
        (position,), = cur.fetchall()
    except OperationalError:                                     # MySQL: unknown variable
        cur.execute("SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_executed")
        (mode, executed), = cur.fetchall()
        position = executed if str(mode).upper() == "ON" else ""
    if position:
        return Watermark(position, GtidState.parse(position).ordinal, time.time())
    from cachesync.runtime.mysql import binlog_status
    row = binlog_status(cur)
    if row is None:
        raise FatalError("binary logging is off (SHOW BINARY LOG STATUS is empty): a "
                         "snapshot needs a binlog position to fence against")
    return Watermark(f"{row[0]}:{row[1]}", file_pos_ordinal(row[0], int(row[1])), time.time())


@dataclass
class TableSummary:
    """What the snapshot did to one table (summed over chunks and tasks)."""

    table: str
    rows: int = 0
    keys: int = 0              # keys rendered (writes sent, or counted in a dry run)
    written: int = 0
    refused: int = 0           # fenced: Redis held a newer version (the stream won)
    skipped: int = 0           # rows that render no key (a NULL in every template)
    # pre-fill (delete mode): keys left as they were (cached, another reader's lease, the row
    # gone or keyed otherwise when read again, a value over max_value_bytes)
    kept: int = 0

    def add(self, other: "TableSummary") -> None:
        for f in ("rows", "keys", "written", "refused", "skipped", "kept"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def snapshot_writes(rows: Iterable[Mapping[str, Any]], mapping: TableMapping, pk: tuple[str, ...],
                    watermark: Watermark) -> tuple[list, TableSummary]:
    """The fenced writes for ``rows`` (each as the tailer publishes its values; ``pk`` its
    primary-key columns) at the watermark's version; raises the planner's poison errors
    for a row it cannot key."""
    summary, writes = TableSummary(mapping.table), []
    for _, row_writes in rendered(rows, mapping, pk, watermark):
        summary.rows += 1
        if not row_writes:
            summary.skipped += 1
        writes += row_writes
    summary.keys = len(writes)
    return writes, summary


def rendered(rows: Iterable[Mapping[str, Any]], mapping: TableMapping, pk: tuple[str, ...],
             watermark: Watermark) -> Iterator[tuple[Mapping[str, Any], tuple]]:
    """Each row with the writes the consumer would make for its insert (update mode), at
    the watermark's version."""
    mappings = MappingSet({mapping.table: mapping})
    ctx = TxnContext(SNAPSHOT_SERVER, watermark.position, watermark.ordinal, watermark.taken_at)
    for row in rows:
        event = row_change(ctx, 0, mapping.db, mapping.name, "insert", pk, None, dict(row))
        event = dataclasses.replace(event, version=watermark.version)
        yield row, event_keys(event, mappings).writes


def check_tombstone_window(mapping: TableMapping, watermark: Watermark,
                           now: float | None = None) -> None:
    """Raises FatalError once the snapshot has run longer than the table's tombstones
    live: a row deleted right after the watermark could then be brought back."""
    elapsed = (now if now is not None else time.time()) - watermark.taken_at
    if elapsed > mapping.tombstone_s:
        raise FatalError(
            f"snapshot of {mapping.table} has run {elapsed:.0f}s, longer than its tombstones "
            f"live (tombstone_ttl {mapping.tombstone_s}s): a row deleted since the watermark "
            "could be written back. Raise tables.<table>.tombstone_ttl above the snapshot's "
            "duration, or snapshot faster (--rate, more partitions)")


@dataclass
class SnapshotReport:
    watermark: str
    dry_run: bool
    tables: dict[str, TableSummary] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "dry_run": self.dry_run,
                "elapsed_s": round(self.elapsed_s, 3),
                "tables": {t: s.as_dict() for t, s in self.tables.items()}}
