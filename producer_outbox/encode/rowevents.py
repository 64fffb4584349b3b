"""One rows event of the binlog -> the records (and table-level events) it publishes.

The per-row turn of a row into an event lives here, in this order: decode the rows
(``fastrows``, else the library's), apply partial JSON diffs (``jsoncolumns``), correct
key text (``keycolumns.key_images``), mark columns a partial row image left out
(``images``/``partial``), trim to the columns the mapping needs (``rows``), drop the rows
of the row filter, build the ChangeEvent with its deterministic id (``rows.row_change``),
its Kafka key, and encode it (invalidate-only over the record limit, or in update mode
when the table's column types could not be read). Rows of the
outbox tables read from the binlog go through ``outbox_binlog.OutboxRouter`` instead.

``RowEncoder.rows_to_records`` is the one call the binlog source makes per rows event.
A row that cannot be keyed, whose images are partial, or a rows event whose bytes cannot be
decoded, is a value (a table-level event in the returned list), never an exception: one
session's setting or one malformed event never stops the tailer.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, NamedTuple

from pymysqlreplication.row_event import (DeleteRowsEvent, PartialUpdateRowsEvent,
                                          UpdateRowsEvent, WriteRowsEvent)

from cachesync.producer_outbox.binlog.reading import DECODE_ERRORS, decode_error
from cachesync.producer_outbox.binlog.dumpstream import FAST_ROW_EVENTS
from cachesync.producer_outbox.decode.fastrows import decode_rows
from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.decode import rowdecode
from cachesync.producer_outbox.decode.images import event_absence, known_images
from cachesync.producer_outbox.decode.jsoncolumns import resolve_partial, unknown_after
from cachesync.producer_outbox.decode.keycolumns import key_images, kept_specs, table_specs
from cachesync.producer_outbox.binlog.libraryrows import library_rows
from cachesync.producer_outbox.decode.matched import MatchedTables
from cachesync.producer_outbox.decode.outbox_binlog import OutboxRouter
from cachesync.producer_outbox.decode.partial import PartialRows
from cachesync.producer_outbox.ports import Change, Record
from cachesync.producer_outbox.publish.kafka_publisher import MAX_RECORD_BYTES
from cachesync.producer_outbox.decode.rows import (TxnContext, invalidate_only, key_columns,
                                            needed_columns, pk_columns, row_change, trim_image)
from cachesync.producer_outbox.decode.servertypes import ColumnTypes
from cachesync.schema.event import HEARTBEAT_KIND, HEARTBEAT_TABLE, encode
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import MappingSet

log = logging.getLogger(__name__)

ROW_EVENTS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete",
              PartialUpdateRowsEvent: "update"}   # MySQL binlog_row_value_options=PARTIAL_JSON
ROW_EVENTS.update({fast: ROW_EVENTS[lib] for fast, lib in FAST_ROW_EVENTS.items()})

_PLAN_CACHE = 1024      # rows-event plans remembered (cleared when full)
# why an update-mode row went out invalidate-only: its table's column types could not be read,
# so whether a logged row is the current one (system versioning) is unknown
TYPES_UNREAD = "column_types_unread"
NO_PLAN = object()      # compiled_plan: the compiled run leaves this table map to Python


class RowsPlan(NamedTuple):
    """What every rows event of one table map and columns-present bitmaps shares."""
    mapping: Any                    # the table's mapping
    keep: frozenset[str] | None     # the columns its images keep (None: all)
    specs: tuple                    # the kept columns' key-text specs
    absent: tuple                   # the columns each image (before, after) leaves out
    row_filter: Any                 # the row filter, when it may drop rows of this table
    versioned: Any                  # its system versioning, when its map has the period columns
    unnamed: bool                   # its table map has no column names
    inexact: str | None             # why its rows go out invalidate-only (None: exact)


# (db, table, the row's image trimmed to the kept columns) -> publish it; a filter with a
# ``tables`` attribute (a set of (db, table)) keeps every row of the other tables unseen
RowFilter = Callable[[str, str, Mapping[str, Any]], bool]


def unnamed_columns(table_obj) -> bool:
    """Whether the table map carries no column names (binlog_row_metadata=MINIMAL, or a
    server before MySQL 8.0.1): the readers would name the columns UNKNOWN_COL0.., which
    no key template or consumer knows."""
    return any(not getattr(c, "name", None) for c in getattr(table_obj, "columns", ()))


def event_rows(event) -> list[dict]:
    """A rows event's rows: the per-table fast decoder's, else the library's (read in a loop
    the event's size bounds). Raises one of DECODE_ERRORS for bytes that are not rows."""
    if type(event) in FAST_ROW_EVENTS:
        return event.rows       # the fast reader's: its decoder, else the library's, bounded
    rows = decode_rows(event)
    return rows if rows is not None else library_rows(event)


def row_images(op: str, row: dict) -> tuple[dict | None, dict | None]:
    """The (before, after) images of a decoded row of an ``op`` rows event."""
    if op == "update":
        return row["before_values"], row["after_values"]
    if op == "insert":
        return None, row["values"]
    return row["values"], None


class RowEncoder:
    """Turns rows events of mapped tables (and outbox tables) into records; counts what it
    could not publish exactly."""

    def __init__(self, mappings: MappingSet, matched: MatchedTables, *,
                 row_filter: RowFilter | None = None, max_record_bytes: int = MAX_RECORD_BYTES,
                 outbox: OutboxRouter | None = None, types: ColumnTypes | None = None,
                 cascades=None):
        self._mappings, self._matched = mappings, matched
        self._row_filter, self.max_record_bytes = row_filter, max_record_bytes
        self.outbox, self.types = outbox, types
        self._keep: dict = {}   # (table, primary key) -> columns row images keep, None = all
        self._plans: dict = {}  # per table map and bitmaps: see _plan
        # the tables an XA group's rows touched, while the source holds one (else None)
        self.xa_tables: dict[tuple[str, str], None] | None = None
        self.oversized = 0      # rows over the record limit, published invalidate-only
        self.partial_rows = 0   # rows logged with a partial image (binlog_row_image per session)
        # rows whose Kafka key could not be rendered, and rows events of a table map without
        # column names (their rows are never decoded, so not counted): table invalidated
        self.unkeyable = 0
        self.json_unknown = 0   # updates whose partial JSON after value could not be computed
        self.undecodable_rows = 0   # rows events whose bytes could not be decoded: table level
        self.whole_tables: tuple = (None, set())   # (txn context, tables invalidated in it)
        self.cascades = cascades    # a cascades.Cascades: foreign keys the server does not log

    def hold_xa(self) -> None:
        """An XA group starts: note the tables its rows touch (``end_xa``)."""
        self.xa_tables = {}

    def end_xa(self) -> tuple[tuple[str, str], ...]:
        """The tables the XA group's rows touched; the group is no longer held."""
        tables, self.xa_tables = tuple(self.xa_tables or ()), None
        return tables

    def rows_to_records(self, event, ctx: TxnContext, row_index: int, schema: str, table: str,
                        where: Callable[[], str]) -> tuple[list[Change], int]:
        """The records (and table-level events) of one rows event, and the next row index.
        Rows whose bytes cannot be decoded are a table-level event of their table (counted,
        WARNING); an outbox table's raise the tailer's decode error (naming table and
        position): the events they carry cannot be told."""
        out: list[Change] = []
        op = ROW_EVENTS[type(event)]
        if self.outbox is not None and self.outbox.covers(schema, table):
            self._outbox_records(event, op, schema, table, where, out)
            return out, row_index   # outbox rows take no row index: the ids of the others stay
        cascades = self.cascades
        if cascades is not None and cascades.covers(schema, table):
            return self._cascading(event, op, ctx, row_index, schema, table, where)
        return self._mapped(event, op, ctx, row_index, schema, table, where, out)

    def _cascading(self, event, op: str, ctx: TxnContext, row_index: int, schema: str,
                   table: str, where: Callable[[], str]) -> tuple[list[Change], int]:
        """A cascade source's rows event: its own records (a mapped table), then the
        invalidations of what its deletes and key updates cascaded into (``cascades``)."""
        try:
            rows = event_rows(event)
        except DECODE_ERRORS:
            # the table's own rows as any mapped table's (invalidated as a whole, counted
            # there), then every table its deletes or key updates could cascade into
            if self._mappings.get(schema, table) is None:
                self.undecodable_rows += 1
            out, row_index = self._mapped(event, op, ctx, row_index, schema, table, where, [])
            return out, self.cascades.undecodable(ctx, schema, table, row_index, out)
        out, row_index = self._mapped(event, op, ctx, row_index, schema, table, where, [], rows)
        if op == "insert":      # a new row cascades nothing (foreignkeys.row_change)
            return out, row_index
        specs = table_specs(event.table_map[event.table_id],
                            self.types.of(schema, table) if self.types is not None else ())
        images = [row_images(op, key_images(row, specs)) for row in rows]
        return out, self.cascades.rows(ctx, schema, table, op, images, row_index, out)

    def _mapped(self, event, op: str, ctx: TxnContext, row_index: int, schema: str, table: str,
                where: Callable[[], str], out: list, rows: list | None = None
                ) -> tuple[list[Change], int]:
        """``rows_to_records`` of a table that is not an outbox table (``rows``: already
        decoded)."""
        plan = self._plan(event, schema, table)
        if plan is None:
            return out, row_index   # decided here, by the names of this event group's map
        mapping, keep, specs, absent, row_filter, versioned, unnamed, inexact = plan
        if unnamed:     # no column names to key or value its rows: never decoded
            self.unkeyable += 1     # per event: counting its rows would mean decoding them
            return out, PartialRows(self, mapping, ctx, schema, table).unnamed(out, row_index)
        pk = event.primary_key if versioned is None else versioned.declared_key(event.primary_key)
        # the compiled writer trims as it writes, unless the row filter reads trimmed images
        late_trim = keep is not None and row_filter is None and hotpath.record is not None
        if self.xa_tables is not None:
            self.xa_tables[(schema, table)] = None
        partial = PartialRows(self, mapping, ctx, schema, table) if absent[0] or absent[1] else None
        diffs = type(event) is PartialUpdateRowsEvent    # JSON after values may be diffs
        if rows is None:
            try:
                rows = event_rows(event)
            except DECODE_ERRORS as e:      # a value: the table invalidated as a whole
                self.undecodable_rows += 1
                partial = partial or PartialRows(self, mapping, ctx, schema, table)
                return out, partial.undecodable(e, where(), out, row_index)
        if partial is None and not diffs and not specs and row_filter is None and late_trim \
                and versioned is None and inexact is None:
            return out, self._plain_rows(event, op, ctx, row_index, mapping, keep, rows, out)
        for row in rows:
            unknown = ()
            if diffs:             # applied to the before image's documents (jsoncolumns)
                row, unknown = self._resolve_json(row, schema, table, ctx)
            row = key_images(row, specs)   # values whose text is the server's (key text)
            before, after = row_images(op, row)
            images = None
            if partial is not None or unknown:     # left-out columns are not NULLs: drop them
                partial = partial or PartialRows(self, mapping, ctx, schema, table)
                images = unknown_after(known_images(op, before, after, absent), unknown)
                before, after = images.before, images.after
            row_op = op
            if versioned is not None and images is None and mapping.updates:
                current = versioned.current_row(op, before, after)
                if current is None:      # history only: no current row changed
                    row_index += 1       # the ids of the rows that follow stay
                    continue
                row_op, before, after = current
            trim = keep if late_trim and images is None else None    # trimmed in _row
            if keep is not None and trim is None:
                before, after = trim_image(before, keep), trim_image(after, keep)
            if row_filter is not None and not row_filter(
                    event.schema, event.table, after if after is not None else before):
                row_index += 1       # ids of the rows that follow do not depend on the filter
                continue
            row_index = self._row(event, row_op, pk, ctx, row_index, mapping, before, after,
                                  images, partial, out, trim, inexact)
        if partial is not None:
            row_index = partial.finish(out, row_index)
        return out, row_index

    def _plan(self, event, schema: str, table: str) -> RowsPlan | None:
        """What every rows event of this table map and columns-present bitmaps shares, or
        None for a table no mapping names.
        Cached per table map and bitmaps, and made again once the column types were
        reloaded (a DDL)."""
        table_obj = event.table_map.get(event.table_id)
        if table_obj is None:       # no table to cache on: decided by the names alone
            if self._mappings.get(schema, table) is None:
                return None
            table_obj = event.table_map[event.table_id]     # the library's KeyError
        types = self.types
        version = types.version if types is not None else 0
        key = (id(table_obj), type(event), getattr(event, "columns_present_bitmap", None),
               getattr(event, "columns_present_bitmap2", None))
        found = self._plans.get(key)
        if found is not None and found[0] is table_obj and found[1] == version:
            return found[2]
        mapping = self._mappings.get(schema, table)
        plan = None
        if mapping is not None:
            if mapping.pattern is not None and self._matched.seen(mapping) \
                    and types is not None:
                types.track(schema, table)     # a new table: its key columns' types
                version = types.version
            versioned = types.versioning(schema, table) if types is not None else None
            if versioned is not None and versioned.row_end not in {
                    c.name for c in table_obj.columns}:
                versioned = None        # a map written before ADD SYSTEM VERSIONING
            pk = event.primary_key if versioned is None else versioned.declared_key(
                event.primary_key)
            keep = self._keep_columns(mapping, pk)
            # key text corrected only where a kept column needs it (trimmed columns never count)
            specs = kept_specs(table_obj, keep, types.of(schema, table) if types else ())
            unread = mapping.updates and types is not None and types.unread(schema, table)
            plan = RowsPlan(mapping, keep, specs, event_absence(event, table_obj),
                            self._filter_of(event.schema, event.table), versioned,
                            unnamed_columns(table_obj), TYPES_UNREAD if unread else None)
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.clear()
        self._plans[key] = (table_obj, types.version if types is not None else 0, plan)
        return plan

    def compiled_plan(self, event, schema: str, table: str):
        """How the compiled run (``binlog_source``, ``_speedups.plain_run``) writes the rows
        of this rows event's table map itself: a ``compile_plan`` capsule, None for a table
        no mapping names (its rows make no records), or NO_PLAN where this class decides
        every row (no compiled run, an outbox table, a cascade source (inserts included:
        one plan serves every rows event of a table map), key text corrected, a row filter, a
        partial image, a system-versioned table, rows that go out invalidate-only, a column the
        compiled run does not decode as the Python path does).
        Made once per table map, after ``rows_to_records`` took one of its events, so that a
        new table of a pattern is tracked first."""
        run = hotpath.compiled_run()
        table_obj = event.table_map.get(event.table_id)
        if run is None or table_obj is None or type(event) not in FAST_ROW_EVENTS or (
                self.outbox is not None and self.outbox.covers(schema, table)) or (
                self.cascades is not None and self.cascades.covers(schema, table)):
            return NO_PLAN
        plan = self._plan(event, schema, table)
        if plan is None:
            return None
        mapping, keep, specs, absent, row_filter, versioned, unnamed, inexact = plan
        if specs or row_filter is not None or absent[0] or absent[1] or versioned is not None \
                or unnamed or inexact is not None:
            return NO_PLAN
        columns = rowdecode.table_plan(table_obj.columns)
        columns = None if columns is None else rowdecode.compiled_columns(columns, keep)
        if columns is None:
            return NO_PLAN
        kind = HEARTBEAT_KIND if event.table == HEARTBEAT_TABLE else "binlog"
        return run[0](event.schema, event.table, kind, event.primary_key, columns)

    def _plain_rows(self, event, op: str, ctx: TxnContext, row_index: int, mapping,
                    keep: frozenset[str], rows: list[dict], out: list) -> int:
        """The rows of an event every row of which the compiled writer may write as it is
        (full images, no key-text correction, no row filter): ``rows_to_records``' loop
        without its per-row decisions. Returns the next row index."""
        record, db, table, pk = hotpath.record, event.schema, event.table, event.primary_key
        limit = self.max_record_bytes
        for row in rows:
            before, after = row_images(op, row)
            compiled = None if record is None else record(ctx, row_index, db, table, op, pk,
                                                          before, after, limit, keep)
            if compiled is None:
                row_index = self._python_row(event, op, pk, ctx, row_index, mapping,
                                             trim_image(before, keep), trim_image(after, keep),
                                             None, None, out)
            else:
                out.append(Record(db, table, *compiled))
                row_index += 1
        return row_index

    def _filter_of(self, db: str, table: str) -> RowFilter | None:
        """The row filter if it may drop rows of this table (RowFilter), else None."""
        tables = getattr(self._row_filter, "tables", None)
        return self._row_filter if tables is None or (db, table) in tables else None

    def _row(self, event, op: str, pk, ctx: TxnContext, row_index: int, mapping, before, after,
             images, partial, out: list, trim: frozenset[str] | None = None,
             inexact: str | None = None) -> int:
        """One row's record, or (a row that cannot be keyed) its table's table-level event.
        ``pk``: the table's primary key (the library's form); ``trim``: the columns the
        images keep, not trimmed yet (the compiled writer trims); ``inexact``: why the row
        goes out invalidate-only (None: with its values)."""
        if images is None and inexact is None and hotpath.record is not None:   # else below
            compiled = hotpath.record(ctx, row_index, event.schema, event.table, op,
                                      pk, before, after, self.max_record_bytes, trim)
            if compiled is not None:
                out.append(Record(event.schema, event.table, *compiled))
                return row_index + 1
        if trim is not None:
            before, after = trim_image(before, trim), trim_image(after, trim)
        return self._python_row(event, op, pk, ctx, row_index, mapping, before, after, images,
                                partial, out, inexact)

    def _python_row(self, event, op: str, pk, ctx: TxnContext, row_index: int, mapping,
                    before, after, images, partial, out: list, inexact: str | None = None
                    ) -> int:
        """``_row`` by the Python path (images already trimmed)."""
        try:
            if images is not None and partial.unkeyed(images, op, pk):
                raise ValueError("the primary key is not in the logged image")
            change = row_change(ctx, row_index, event.schema, event.table, op, pk, before, after)
            if images is not None:
                change = partial.marked(change, images)
            key = kafka_key(change.db, change.table, change.pk)
            value = self._encode(change, mapping, inexact)  # a type it cannot write: below
        except (ValueError, TypeError, KeyError) as e:    # a value: invalidate the table
            self.unkeyable += 1
            partial = partial or PartialRows(self, mapping, ctx, event.schema, event.table)
            partial.unkeyable(e, out, row_index)    # the table event takes the row's index
            return row_index + 1
        out.append(Record(change.db, change.table, key, value, change.id))
        return row_index + 1

    def _resolve_json(self, row: dict, schema: str, table: str,
                      ctx: TxnContext) -> tuple[dict, tuple[str, ...]]:
        """An update row of a partial JSON event with its diffs applied (jsoncolumns), and
        the JSON columns whose after value stays unknown (counted; the row then goes out as
        a partial image does). A before image without the document is the usual cause (the
        partial image's WARNING says so); a diff its document rejects is reported here."""
        row, unknown = resolve_partial(row)
        if unknown:
            self.json_unknown += 1
            rejected = [c for c in unknown if c in (row.get("before_values") or {})
                        and row["before_values"][c] is not None]
            if rejected:
                log.warning("row of %s.%s at %s: the partial JSON update of %s does not apply to "
                            "the before image's document; its keys are invalidated, no value is "
                            "written (partial_json)", schema, table, ctx.position,
                            ", ".join(rejected))
        return row, unknown

    @staticmethod
    def _decode(event, schema: str, table: str, where: Callable[[], str]) -> list[dict]:
        """The event's rows; raises the tailer's decode error naming the table and position."""
        try:
            return event_rows(event)
        except DECODE_ERRORS as e:
            raise decode_error(e, where(), f"{schema}.{table}") from e

    def _outbox_records(self, event, op: str, schema: str, table: str,
                        where: Callable[[], str], out: list) -> None:
        """An outbox table's rows: each insert goes out as the event it carries; deletes
        (the purge) and updates (a relay's bookkeeping) carry none."""
        if op != "insert":
            return
        rows = self._decode(event, schema, table, where)
        for rec in self.outbox.records(schema, table, [r["values"] for r in rows]):
            if self.xa_tables is not None:   # too large to hold: its aggregates' tables go
                self.xa_tables[(schema, rec.aggregate_type)] = None
            out.append(Record(schema, rec.aggregate_type, rec.key, rec.value, rec.msg_id))

    def _keep_columns(self, mapping, primary_key) -> frozenset[str] | None:
        """The columns a row image of ``mapping`` keeps (cached per table and key)."""
        cache_key = (mapping.table, primary_key if isinstance(primary_key, (str, tuple)) else None)
        keep = self._keep.get(cache_key, False)
        if keep is False:
            needed = needed_columns(mapping)
            # without a primary key the pk (and the Kafka key) is the whole image: keep it
            keep = None if needed is None or not primary_key else needed | set(
                pk_columns(primary_key, {}))
            self._keep[cache_key] = keep
        return keep

    def _encode(self, change, mapping, inexact: str | None = None) -> bytes:
        """The event's record value: only the columns the mapping needs; the keys-only form
        when ``inexact`` says why (counted and named where that was found), or over Kafka's
        record limit (counted, WARNING naming the table)."""
        if inexact is not None:
            return encode(invalidate_only(change, key_columns(mapping), inexact))
        value = encode(change)
        if len(value) <= self.max_record_bytes:
            return value
        self.oversized += 1
        log.warning("row of %s at %s is %d bytes encoded, over the %d-byte Kafka record limit: "
                    "published invalidate-only (keys, no values)", mapping.table,
                    change.source.position, len(value), self.max_record_bytes)
        return encode(invalidate_only(change, key_columns(mapping), "over_record_limit"))
