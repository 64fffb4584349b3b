"""Packing: rows of one table and partition share one Kafka record.

Kafka clients pay per record (kafka-python's ``send`` costs tens of microseconds),
so a tailer that sends one record per row cannot go faster than its client. With
``tailer.pack_rows`` > 1 the tailer groups rows by (db, table, partition) and sends
each group as one record (``cachesync.schema.event.encode_pack``), closing a pack at
``pack_rows`` rows or ``pack_bytes`` bytes. With the fast binlog reader, packs span
consecutive transactions (single-row transactions pack too) and every open pack
closes when the reader has nothing more buffered, or ``tailer.pack_linger_ms`` after it
opened; with the library reader, every open pack closes when its transaction ends.
A transaction's rows count as in flight from the moment they enter a pack
(``Pack.txns``), so the checkpoint never passes a row still waiting in a pack.
What stays the same:

* each row keeps its own id, so the consumer claims and dead-letters per row;
* each row's partition is the one Kafka's default partitioner gives its own key,
  and packs of one partition are sent in binlog order, so one row's changes stay
  in one partition, in commit order;
* a pack's Kafka key is its first row's key (``db.table:pk``), so key-prefix
  filters by table (``cachesync replay --table``) still hold.

Pure: no Kafka import; the tailer sends what ``add`` and ``drain`` return.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cachesync.schema.event import encode_pack
from cachesync.schema.partition import partition_for


_PARTITION_CACHE = 10_000       # keys whose partition is remembered (cleared when full: ~2 MB)


@dataclass
class Pack:
    partition: int            # index into the topic's sorted partition ids
    key: str                  # the first row's Kafka key
    msg_id: str               # the first row's id (the record's ``id`` header)
    values: list[bytes] = field(default_factory=list)
    size: int = 0
    # [transaction, rows] in order: rows the tracker already counted as sent when they
    # were added (packs spanning transactions); empty: counted when the pack is sent
    txns: list = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.values)

    def record_value(self) -> bytes:
        """One row goes out as a plain event, more as a pack."""
        return self.values[0] if len(self.values) == 1 else encode_pack(self.values)


class Packer:
    """Open packs of the current transaction, keyed by (db, table, partition)."""

    def __init__(self, max_rows: int, max_bytes: int):
        if max_rows < 1 or max_bytes < 1:
            raise ValueError("pack limits must be positive")
        self._max_rows, self._max_bytes = max_rows, max_bytes
        self._open: dict[tuple[str, str, int], Pack] = {}
        self.opened_at = 0.0      # monotonic time the oldest open pack was opened
        # murmur2 in Python costs ~2 us a key; rows updated again soon after hit this
        self._partitions: dict[tuple[str, int], int] = {}

    def add(self, db: str, table: str, key: str, value: bytes, msg_id: str,
            partitions: int, txn=None) -> Pack | None:
        """Add one encoded row; returns its pack if that is now full (and no longer open).

        ``txn``: the row's transaction, already counted as sent (see ``Pack.txns``).
        """
        partition = self._partitions.get((key, partitions))
        if partition is None:
            if len(self._partitions) >= _PARTITION_CACHE:
                self._partitions.clear()
            partition = self._partitions[(key, partitions)] = partition_for(
                key.encode("utf-8"), partitions)
        group = (db, table, partition)
        pack = self._open.get(group)
        if pack is None:
            if not self._open:
                self.opened_at = time.monotonic()
            pack = self._open[group] = Pack(partition, key, msg_id)
        pack.values.append(value)
        pack.size += len(value) + 1
        if txn is not None:
            if pack.txns and pack.txns[-1][0] is txn:
                pack.txns[-1][1] += 1
            else:
                pack.txns.append([txn, 1])
        if len(pack.values) >= self._max_rows or pack.size >= self._max_bytes:
            del self._open[group]
            return pack
        return None

    def drain(self) -> list[Pack]:
        """Every open pack, in the order they were opened (end of a transaction)."""
        packs = list(self._open.values())
        self._open.clear()
        return packs

    def __bool__(self) -> bool:
        """Whether any pack is open."""
        return bool(self._open)

    @property
    def open_rows(self) -> int:
        return sum(p.rows for p in self._open.values())
