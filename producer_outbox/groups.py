"""Event groups that are not plain row transactions: XA decisions and table-level changes.

A mixin of :class:`cachesync.producer_outbox.tailer.Tailer` (it uses the tailer's ``_send``,
tracker and mappings), kept apart so the tailer module reads as the binlog loop.
"""

from __future__ import annotations

import logging

from cachesync.producer_outbox.altercolumns import (ALTER_COLUMNS, altered_table,
                                                    column_changes, concerns)
from cachesync.producer_outbox.rows import STATEMENT_EXCERPT, TxnContext, table_change
from cachesync.producer_outbox.statements import TableChange
from cachesync.producer_outbox.preflight import ServerInfo
from cachesync.producer_outbox.xa import XaGroup
from cachesync.schema.event import encode
from cachesync.schema.ids import file_pos_ordinal
from cachesync.schema.keys import kafka_key

log = logging.getLogger("cachesync.producer_outbox.tailer")


class GroupPublishing:
    """XA START/END/COMMIT/ROLLBACK and table-level events, for the Tailer."""

    def _on_xa(self, xa: tuple[str, str, bool], text: str, ctx: TxnContext, txn,
               index: int) -> bool:
        """Handle an XA statement of the open group; True while the group goes on."""
        verb, xid, one_phase = xa
        if verb == "START":                        # MySQL: the group is XA from here
            self._flush_packs()                    # earlier transactions' rows are not held
            self._xa = XaGroup(self._opts.settings.xa_buffer_rows, xid)
            return True
        if verb in ("END", "PREPARE"):
            if self._xa is not None:
                self._xa.xid = xid
            return True
        if verb == "COMMIT" and one_phase and self._xa is not None:
            held, self._xa = self._xa, None
            self._release(held, txn)
        elif verb == "COMMIT":
            self._xa_commit(xid, text, ctx, txn, index)
        elif verb == "ROLLBACK":
            prepared = self._prepared.pop(xid, None)
            if prepared is not None:               # nothing of it is published
                with self._lock:
                    self._tracker.close(prepared.txn, prepared.checkpoint)
                log.info("XA ROLLBACK %s: %d held row(s) dropped", xid, prepared.group.rows)
        return False

    def _xa_commit(self, xid: str, text: str, ctx: TxnContext, txn, index: int) -> None:
        """Publish the prepared group ``xid`` now that it committed."""
        prepared = self._prepared.pop(xid, None)
        if prepared is not None and not prepared.group.overflowed:
            self._release(prepared.group, prepared.txn)
        else:
            if prepared is None:    # prepared before this tailer's start position: rows unknown
                tables, reason = self._matched.statement_tables(), "xa_unknown"
            else:                   # too large to hold: its tables are known
                tables, reason = list(prepared.group.tables), "xa_overflow"
            log.warning("XA COMMIT %s: %s; invalidating its tables as a whole", xid,
                        "prepared before the start position, rows unknown" if prepared is None
                        else f"{prepared.group.rows} rows, over tailer.xa_buffer_rows")
            self._publish_table_events([TableChange(db, t, reason) for db, t in tables], text,
                                       ctx, txn, index)
        if prepared is not None:
            with self._lock:
                self._tracker.close(prepared.txn, prepared.checkpoint)

    def _release(self, group: XaGroup, txn) -> None:
        """Send the records an XA group held, in their order, as part of ``txn``."""
        for key, value, msg_id, rows, partition, row in group.records:
            self._send(key, value, msg_id, txn, rows, partition, row)

    def _altered_columns(self, text: str, default_db: str | None) -> list[TableChange]:
        """The mapped table an ALTER TABLE redefines, adds or drops columns of, when that can
        leave its keys or cached values stale (``altercolumns``)."""
        target = altered_table(text, default_db)
        changes = column_changes(text) if target is not None else None
        if not changes:
            return []
        for db, table in self._matched.statement_tables():
            if (db.lower(), table.lower()) == target:
                mapping = self._mappings.get(db, table)
                if mapping is not None and concerns(mapping, changes):
                    return [TableChange(db, table, ALTER_COLUMNS)]
        return []

    def _file_pos_context(self, stream, event, info: ServerInfo) -> TxnContext:
        position = f"{stream.log_file}:{stream.log_pos}"
        return TxnContext(info.identity, position,
                          file_pos_ordinal(stream.log_file, stream.log_pos), float(event.timestamp),
                          cluster=self._opts.cluster)

    def _publish_table_events(self, changes: list[TableChange], statement: str, ctx: TxnContext,
                              txn, index: int) -> int:
        """One table-level event per changed mapped table, a copy to every partition so that
        it is ordered after the table's earlier rows wherever they went; returns the next index."""
        if self._packer is not None:       # rows packed so far go first, in every partition
            for pack in self._packer.drain():
                self._send_pack(pack, txn)
        partitions = self._publisher.partitions(self._opts.topic)
        for change in changes:
            log.warning("table-level change of %s.%s (%s): every cached key of the table will "
                        "be invalidated; statement: %s", change.db, change.table, change.reason,
                        statement[:STATEMENT_EXCERPT],
                        extra={"table": f"{change.db}.{change.table}"})
            for partition in partitions:
                event = table_change(ctx, index, partition, change.db, change.table,
                                     change.reason, statement)
                self._send(kafka_key(event.db, event.table, ()), encode(event), event.id, txn, 1,
                           partition, row=False)
            self.table_events += 1
            index += 1
        return index

