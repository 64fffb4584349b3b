"""Rows whose partial JSON update cannot be computed: what the tailer publishes instead.

A mixin of :class:`cachesync.producer_outbox.tailer.Tailer` (it uses the tailer's
``_publish`` and ``_publish_table_events``), kept apart so the tailer module reads as the
binlog loop. ``jsoncolumns.unknown_effect`` decides; this publishes and reports.
"""

from __future__ import annotations

import logging

from cachesync.producer_outbox.jsoncolumns import TABLE
from cachesync.producer_outbox.rows import TxnContext, invalidate_only, key_columns
from cachesync.producer_outbox.statements import TableChange
from cachesync.schema.event import ChangeEvent, encode
from cachesync.schema.keys import kafka_key

log = logging.getLogger("cachesync.producer_outbox.tailer")

PARTIAL_JSON = "partial_json"      # the reason in the event and the WARNING


class PartialJsonPublishing:
    """Publishing of update rows a partial JSON diff left without a known after value."""

    json_unknown = 0     # such rows of mapped tables that read the column (metric)

    def _publish_unknown_json(self, change: ChangeEvent, mapping, effect: str,
                              unknown: tuple[str, ...], ctx: TxnContext, txn,
                              row_index: int) -> int:
        """Invalidate what ``change`` may have changed without writing a value: its keys
        (``ROW``), or the whole table when a key field is unknown (``TABLE``); returns the
        next row index."""
        self.json_unknown += 1
        columns = ", ".join(unknown)
        if effect == TABLE:
            statement = (f"UPDATE of {change.db}.{change.table} at {change.source.position}: "
                         f"key column(s) {columns} logged as a partial JSON diff the before "
                         "image cannot resolve")
            return self._publish_table_events(
                [TableChange(change.db, change.table, PARTIAL_JSON)], statement, ctx, txn,
                row_index)
        log.warning("row of %s at %s: the partial JSON update of %s cannot be computed (the "
                    "before image lacks the column: binlog_row_image=FULL resolves it); "
                    "published invalidate-only (keys, no value)", mapping.table,
                    change.source.position, columns)
        small = invalidate_only(change, key_columns(mapping), PARTIAL_JSON)
        self._publish(small.db, small.table, kafka_key(small.db, small.table, small.pk),
                      encode(small), small.id, txn)
        return row_index + 1
