"""Rows the tailer cannot publish exactly: partial row images and rows that cannot be keyed.

A part of :class:`cachesync.producer_outbox.encode.rowevents.RowEncoder`, one object per rows
event that needs it. A row whose images leave out columns the mapping needs
(``producer_outbox.decode.images``) goes out with what it knows, marked (``extra`` ``absent``),
keys only (no value is written from it); when a key template names a column an image
does not know, or the row's Kafka key cannot be rendered at all, its table is
invalidated at table level (a ``ports.TableEvent`` added to the event's output), once
per transaction, with a WARNING and a metric. Nothing here raises for a row: one
session's setting never stops the tailer.
"""

from __future__ import annotations

import logging

from cachesync.producer_outbox.decode.images import (ABSENT, PARTIAL_IMAGE, UNDECODABLE, UNKEYABLE,
                                              UNNAMED, RowImages)
from cachesync.producer_outbox.ports import TableEvent
from cachesync.producer_outbox.decode.rows import (TxnContext, invalidate_only, key_columns,
                                            needed_columns, pk_columns, with_extra)
from cachesync.producer_outbox.binlog.statements import TableChange
from cachesync.schema.event import ChangeEvent

log = logging.getLogger(__name__)


class PartialRows:
    """The rows of one rows event of ``db.table`` that the tailer cannot publish exactly."""

    def __init__(self, encoder, mapping, ctx: TxnContext, db: str, table: str):
        """``encoder``: the RowEncoder whose counters (partial_rows, whole_tables) this keeps."""
        self._encoder, self._mapping, self._ctx = encoder, mapping, ctx
        self._db, self._table = db, table
        self._key_fields = frozenset(f for t in mapping.keys for f in t.fields)
        self._needed = needed_columns(mapping)        # None: every column
        self._unrenderable: set[str] = set()          # key fields an image did not know
        self._valueless: set[str] = set()             # needed columns an image did not know

    @staticmethod
    def unkeyed(images: RowImages, op: str, primary_key) -> bool:
        """Whether the image the row's Kafka key comes from does not know its primary key."""
        image, unknown = ((images.before, images.unknown_before) if op == "delete"
                          else (images.after, images.unknown_after))
        return bool(unknown.intersection(pk_columns(primary_key, image or {})))

    def marked(self, change: ChangeEvent, images: RowImages) -> ChangeEvent:
        """``change`` carrying the columns its images do not know; keys only (fenced deletes
        in update mode) when the mapping needs one of them."""
        self._encoder.partial_rows += 1
        unknown = images.unknown_before | images.unknown_after
        if not unknown:
            return change
        self._unrenderable |= images.unknown(self._key_fields)
        missing = images.unknown(self._needed if self._needed is not None else unknown)
        change = with_extra(change, {ABSENT: images.absent()})
        if not missing:
            return change
        self._valueless |= missing
        return invalidate_only(change, key_columns(self._mapping), PARTIAL_IMAGE)

    def finish(self, out: list, index: int) -> int:
        """After the event's rows: the table-level event its unknown key fields need, or the
        WARNING for rows published keys-only; returns the next row index."""
        if self._unrenderable:
            what = (f"rows logged with a partial row image (binlog_row_image other than FULL "
                    f"in the writing session): key column(s) "
                    f"{', '.join(sorted(self._unrenderable))} not logged")
            return self._whole_table(PARTIAL_IMAGE, what, out, index)
        if self._valueless and self._first_in_txn("keys_only"):
            log.warning("rows of %s.%s at %s logged with a partial row image (binlog_row_image "
                        "other than FULL in the writing session): column(s) %s not logged; "
                        "their keys are invalidated, no value is written (%s)", self._db,
                        self._table, self._ctx.position, ", ".join(sorted(self._valueless)),
                        PARTIAL_IMAGE)
        return index

    def unkeyable(self, error: Exception, out: list, index: int) -> int:
        """A row whose Kafka key (or value) cannot be rendered: its table is invalidated as a
        whole."""
        what = f"a row whose key or value cannot be rendered ({type(error).__name__}: {error})"
        return self._whole_table(UNKEYABLE, what, out, index)

    def unnamed(self, out: list, index: int) -> int:
        """A rows event whose table map carries no column names: its table is invalidated
        as a whole (its rows are not decoded: without names neither keys nor values, and
        without the metadata ENUM, SET and text columns cannot be read exactly)."""
        what = ("rows logged without column names in their table map (binlog_row_metadata="
                "MINIMAL when they were written; set it to FULL)")
        return self._whole_table(UNNAMED, what, out, index)

    def undecodable(self, error: Exception, where: str, out: list, index: int) -> int:
        """A rows event whose bytes cannot be decoded: its table is invalidated as a whole."""
        what = (f"the rows event at {where} cannot be decoded ({type(error).__name__}: "
                f"{str(error)[:200]})")
        return self._whole_table(UNDECODABLE, what, out, index)

    def _whole_table(self, reason: str, what: str, out: list, index: int) -> int:
        """One table-level event of the table per transaction and reason."""
        if not self._first_in_txn(reason):
            return index
        log.warning("%s.%s at %s: %s; invalidating the table as a whole (%s)", self._db,
                    self._table, self._ctx.position, what, reason)
        out.append(TableEvent(self._ctx, index, TableChange(self._db, self._table, reason), what))
        return index + 1

    def _first_in_txn(self, reason: str) -> bool:
        """Whether (this table, ``reason``) is new in the transaction (then remembered)."""
        seen = self._encoder.whole_tables
        if seen[0] is not self._ctx:
            seen = self._encoder.whole_tables = (self._ctx, set())
        mark = (self._db, self._table, reason)
        if mark in seen[1]:
            return False
        seen[1].add(mark)
        return True
