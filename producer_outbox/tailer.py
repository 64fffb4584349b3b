"""Binlog tailer: python-mysql-replication -> ChangeEvent -> Kafka, checkpointed.

The checkpoint only moves past transactions whose every row Kafka acknowledged
(InflightTracker), so a crash at any point resumes at a transaction boundary and
re-publishes with the same deterministic ids; the consumer drops the duplicates.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import pymysql
from kafka.errors import KafkaError
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (GtidEvent, HeartbeatLogEvent, MariadbGtidEvent,
                                      QueryEvent, RotateEvent, XAPrepareEvent, XidEvent)
from pymysqlreplication.row_event import (DeleteRowsEvent, PartialUpdateRowsEvent, TableMapEvent,
                                          UpdateRowsEvent, WriteRowsEvent)

from cachesync.producer_outbox.binlog_read import DECODE_ERRORS, TableMaps, decode_error, read_events

from cachesync.collector import paced
from cachesync.config import TailerSettings
from cachesync.producer_outbox.dumpstream import FAST_ROW_EVENTS, DumpStreamReader, reader_kind
from cachesync.producer_outbox.framing import LibraryStreamReader, UndecodedEvent
from cachesync.producer_outbox.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.producer_outbox.fastrows import decode_rows
from cachesync.producer_outbox.groups import GroupPublishing
from cachesync.producer_outbox import hotpath
from cachesync.producer_outbox.images import event_absence, known_images
from cachesync.producer_outbox.inflight import InflightTracker
from cachesync.producer_outbox.jsoncolumns import resolve_partial, unknown_after
from cachesync.producer_outbox.partial import PartialRows
from cachesync.producer_outbox.keycolumns import key_images, kept_specs
from cachesync.producer_outbox.matched import MatchedTables
from cachesync.producer_outbox.mysql import MySQLParams
from cachesync.producer_outbox.outbox_binlog import OutboxRouter
from cachesync.producer_outbox.packing import PACK_LINGER_S, Pack, Packer
from cachesync.producer_outbox.preflight import ServerInfo, check_server
from cachesync.producer_outbox.servertypes import ColumnTypes
from cachesync.producer_outbox.publisher import MAX_RECORD_BYTES, is_permanent
from cachesync.producer_outbox.source import check_resumable
from cachesync.producer_outbox.rows import (TxnContext, invalidate_only, key_columns,
                                            needed_columns, pk_columns, row_change, trim_image)
from cachesync.producer_outbox.statements import (STATEMENT, TableChange, statement_kind,
                                                  table_changes)
from cachesync.producer_outbox.xa import FL_PREPARED_XA, Prepared, XaGroup, xa_statement
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.event import encode
from cachesync.schema.gtid import GtidState, parse_gtid
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import MappingSet

log = logging.getLogger(__name__)

_ROW_EVENTS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete",
               PartialUpdateRowsEvent: "update"}   # MySQL binlog_row_value_options=PARTIAL_JSON
_ROW_EVENTS.update({fast: _ROW_EVENTS[lib] for fast, lib in FAST_ROW_EVENTS.items()})
STREAM_HEARTBEAT_S = 1.0    # the binlog stream's heartbeat period (the server's, not our row's)
_TXN_MARKERS = {"BEGIN", "COMMIT"}
# passwords in account statements (CREATE/ALTER USER ... IDENTIFIED BY, SET PASSWORD) never
# reach the log
_SECRETS = re.compile(r"""((?:IDENTIFIED\s+(?:(?:WITH|VIA)\s+\S+\s+)?(?:BY|AS|USING)|PASSWORD\s*=)\s*"""
                      r"""(?:PASSWORD\s*\(?\s*)?|PASSWORD\s*\(\s*)('(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.)*")""", re.I)
# MySQL's GtidEvent ("uuid:gno") and MariaDB's ("domain-server-seq"); both open a transaction.
_GTID_EVENTS = (GtidEvent, MariadbGtidEvent)


@dataclass(frozen=True)
class TailerOptions:
    """The ``tailer`` settings section as loaded, plus what the wiring decides (topic, filter).

    The settings are declared once, in TailerSettings, and read from ``settings``.
    """

    topic: str
    settings: TailerSettings = TailerSettings()
    # (db, table, row image) -> False drops the row; used to publish only this
    # tailer's own heartbeat row (cachesync.producer_outbox.heartbeat.own_rows_only)
    row_filter: Callable[[str, str, Mapping[str, Any]], bool] | None = None
    heartbeat_s: float = STREAM_HEARTBEAT_S
    start: Checkpoint | None = None     # tail from here instead of the stored checkpoint
    max_record_bytes: int = MAX_RECORD_BYTES    # a larger event goes out invalidate-only
    cluster: str = ""       # source.id: enters every message id (several clusters, one topic)
    # the tailer made its publisher (build_tailer): run() closes it when it ends, so a
    # restarted tailer leaves no producer (or producer process) behind
    owns_publisher: bool = False


class Tailer(GroupPublishing):
    """Reads the binlog from the stored checkpoint and publishes mapped tables' rows."""

    def __init__(self, mysql: MySQLParams, publisher, checkpoints: MySQLCheckpointStore,
                 mappings: MappingSet, options: TailerOptions):
        self._mysql = mysql
        self._publisher = publisher
        self._checkpoints = checkpoints
        self._mappings = mappings
        self._opts = options
        self._tracker: InflightTracker[Checkpoint] = InflightTracker()
        t = options.settings
        self._packer = Packer(t.pack_rows, t.pack_bytes) if t.pack_rows > 1 else None
        self._partitions = 0          # the topic's partition count, read once per transaction
        self._partitions_read = -1.0  # when (monotonic), for packs spanning transactions
        self._span = False            # packs span transactions (the reader signals idleness)
        self._lock = threading.Lock()
        self._failure: Exception | None = None
        self._stop = threading.Event()
        self.published = 0      # rows handed to the publisher
        self.acked = 0          # rows Kafka acknowledged
        self.table_events = 0   # table-level changes published (each to every partition)
        self.oversized = 0      # rows over the record limit, published invalidate-only
        self.partial_rows = 0   # rows logged with a partial image (binlog_row_image per session)
        self.unkeyable = 0      # rows whose Kafka key could not be rendered: table invalidated
        self.json_unknown = 0   # updates whose partial JSON after value could not be computed
        self.whole_tables: tuple = (None, set())   # (txn context, tables invalidated in it)
        self.versions_not_newer = 0     # GTIDs that did not advance the history (versions)
        self.undecoded_events = 0       # events with rows cachesync cannot decode: table level
        self._keep: dict = {}   # (table, primary key) -> columns row images keep, None = all
        self._matched = MatchedTables(mappings)    # exact and pattern-matched tables
        self._xa: XaGroup | None = None             # the open group is XA: records held
        self._prepared: dict[str, Prepared] = {}    # xid -> prepared group awaiting its decision
        self._outbox: OutboxRouter | None = None    # tailer.outbox_tables, built at run()
        self._types: ColumnTypes | None = None      # INET4/INET6/UUID columns, read at run()
        self.committed: Checkpoint | None = None

    @property
    def outbox_events(self) -> int:
        """Outbox events published from the binlog (tailer.outbox_tables)."""
        return self._outbox.events if self._outbox is not None else 0

    @property
    def outbox_invalid(self) -> int:
        """Outbox rows published without a payload or keys that were not valid JSON."""
        return self._outbox.invalid if self._outbox is not None else 0

    def stop(self) -> None:
        self._stop.set()

    def preflight(self) -> ServerInfo:
        """Check settings and grants; raises FatalError listing every problem."""
        return check_server(self._mysql.connect, replica=bool(self._opts.settings.source_hosts))

    def match_existing(self) -> None:
        """The existing tables of the mapping's patterns (raises AmbiguousTableError)."""
        if self._matched.has_patterns:
            conn = self._mysql.connect(database=None)
            try:
                self._matched.load_existing(conn)
            finally:
                conn.close()

    def run(self) -> None:
        """Tail until stop(); raises RetryableError/FatalError when publishing fails. The
        checkpoint store, and the publisher if the tailer owns it, are closed at the end.
        The collector is paced for the loop while it runs (cachesync.collector)."""
        try:
            with paced():
                self._run()
        finally:
            self._close()

    def _close(self) -> None:
        owned = [self._publisher] if self._opts.owns_publisher else []
        for part in [self._checkpoints, *owned]:
            try:
                close = getattr(part, "close", None)
                if close is not None:
                    close()
            except Exception as e:     # closing must not hide why the tailer ended
                log.warning("tailer: closing %s failed: %s", type(part).__name__, e)

    def _run(self) -> None:
        info = self.preflight()
        for report in info.binlog_settings():
            log.info("binlog setting %s", report.line())
        self.match_existing()
        start = self._start_position(info)
        self._checkpoints.save(start)
        self.committed = start
        self._outbox = self._outbox_router(info)
        self._types = ColumnTypes(self._mysql.connect, self._matched.statement_tables())
        self._types.load()
        log.info("tailer starting at %s (server %s, tables %s, %s binlog reader)",
                 start.describe(), info.identity, ", ".join(m.table for m in self._mappings.entries),
                 reader_kind(self._opts.settings.reader))
        stream = self._open_stream(info, start)
        self._attach(stream)
        try:
            self._loop(stream, info, start)
        finally:
            stream.close()
            self._drain()

    def _outbox_router(self, info: ServerInfo) -> OutboxRouter | None:
        """The router of tailer.outbox_tables, or None when none are configured."""
        names = self._opts.settings.outbox_table_names
        if not names:
            return None
        log.info("tailer publishing the outbox events of %s from the binlog",
                 ", ".join(sorted(f"{db}.{t}" for db, t in names)))
        return OutboxRouter(names, info.identity, self._utc_offset_s(),
                            self._opts.max_record_bytes)

    def _utc_offset_s(self) -> float:
        """The server's time zone offset: outbox ``created_at`` values are its local time."""
        conn = self._mysql.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())")
                return float(cur.fetchone()[0])
        finally:
            conn.close()

    def _attach(self, stream) -> None:
        """Packs span transactions when the reader says when it is idle (the fast reader)."""
        if self._packer is not None and getattr(stream, "signals_idle", False):
            self._span = True
            stream.on_idle, stream.idle_wait_s = self._flush_packs, PACK_LINGER_S

    def current_position(self) -> Checkpoint:
        """The server's current binlog position (after preflight); raises FatalError."""
        return self._current_position(self.preflight())

    def _start_position(self, info: ServerInfo) -> Checkpoint:
        """``options.start`` (re-tail from an operator's position), else the stored
        checkpoint, else (first start) the server's current position."""
        if self._opts.start is not None:
            log.warning("tailer re-tailing from %s, not from its stored checkpoint; "
                        "duplicates are skipped by the consumer's dedup store",
                        self._opts.start.describe())
            return replace(self._opts.start, server=info.identity)
        stored = self._checkpoints.load()
        check_resumable(stored, info.identity)
        return stored or self._current_position(info)

    def _open_stream(self, info: ServerInfo, start: Checkpoint) -> BinLogStreamReader:
        kwargs = {}
        if start.gtid is not None:
            # MariaDB: @slave_connect_state; MySQL: COM_BINLOG_DUMP_GTID with the GTID set.
            kwargs.update(is_mariadb=info.flavor == "mariadb", auto_position=start.gtid)
        else:
            kwargs.update(log_file=start.log_file, log_pos=start.log_pos, resume_stream=True,
                          is_mariadb=info.flavor == "mariadb")
        fast = reader_kind(self._opts.settings.reader) == "fast"
        return (DumpStreamReader if fast else LibraryStreamReader)(
            connection_settings=self._mysql.client_options(),
            server_id=self._opts.settings.server_id, blocking=True,
            # No only_schemas/only_tables: the library would drop the table maps of the
            # tables it filters and decode a reused table id with a stale map
            # (see binlog_read). TableMapEvent is listed so the loop sees each map.
            only_events=[*_GTID_EVENTS, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
                         TableMapEvent, XAPrepareEvent, *_ROW_EVENTS],
            slave_heartbeat=self._opts.heartbeat_s, **kwargs)

    def _current_position(self, info: ServerInfo) -> Checkpoint:
        """First start: begin at the server's current position (history is already cached)."""
        conn = self._mysql.connect()
        try:
            with conn.cursor() as cur:
                gtid = None
                if info.flavor == "mariadb":
                    cur.execute("SELECT @@gtid_binlog_pos")
                    gtid = cur.fetchone()[0]
                else:
                    cur.execute("SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_executed")
                    mode, executed = cur.fetchone()
                    if str(mode).upper() == "ON":
                        gtid = str(GtidState.parse(executed)) or None
                row = _binlog_status(cur)
        finally:
            conn.close()
        if row is None:
            raise FatalError("binary logging is off (SHOW BINARY LOG STATUS is empty): set log_bin")
        return Checkpoint(info.identity, gtid, row[0], int(row[1]))

    def _loop(self, stream: BinLogStreamReader, info: ServerInfo, start: Checkpoint) -> None:
        try:
            gtid_state = GtidState.parse(start.gtid)
        except ValueError as e:
            raise FatalError(f"stored checkpoint has an unreadable GTID state: {e}") from e
        txn = ctx = None
        row_index = 0
        last_save = time.monotonic()
        maps = TableMaps()
        server = info.identity     # (a property) in every transaction's context and checkpoint

        def close_txn(hold: bool = False) -> Checkpoint:
            """End the open group; ``hold``: a prepared XA group stays open in the tracker."""
            if self._packer is not None and (not self._span or self._xa is not None or hold
                                             or time.monotonic() - self._packer.opened_at
                                             >= PACK_LINGER_S):
                self._flush_packs(txn)
            cp = Checkpoint(server, str(gtid_state) or None,
                            stream.log_file, stream.log_pos)
            if not hold:
                with self._lock:
                    self._tracker.close(txn, cp)
            if cp.gtid is not None:
                # python-mysql-replication reconnects on its own from auto_position;
                # keep it at the last transaction boundary so a dropped connection
                # resumes here instead of replaying everything since start.
                stream.auto_position = cp.gtid
            return cp

        def where() -> str:
            return f"{stream.log_file}:{stream.log_pos}" if stream.log_file else start.describe()

        save_every = self._opts.settings.checkpoint_interval_s
        for event in read_events(stream, where):
            if self._failure is not None:
                self._raise_if_failed()
            if isinstance(event, TableMapEvent):
                maps.add(event.table_id, event.schema, event.table)
                continue
            if isinstance(event, UndecodedEvent):   # its table map, if any, stays in force
                alone = ctx is None
                if alone:    # between transactions: a group of its own
                    ctx = self._file_pos_context(stream, event, info)
                    txn, row_index = self._tracker_open(), 0
                row_index = self._undecoded(event, maps, ctx, txn, row_index, where)
                if alone:
                    close_txn()
                    txn = ctx = None
                continue
            if type(event) not in _ROW_EVENTS and not isinstance(event, HeartbeatLogEvent):
                maps.reset()     # any other event ends or starts an event group
            if isinstance(event, _GTID_EVENTS):
                if txn is not None:
                    # Every event group ends in XID, COMMIT or DDL. A new GTID
                    # with one open means the stream was cut and replayed (the library
                    # reconnects silently): restart from the stored checkpoint rather
                    # than declare half a transaction done.
                    raise RetryableError(f"binlog stream broke inside transaction {ctx.position}")
                gtid = getattr(event, "parsed", None) or parse_gtid(event.gtid)
                before = gtid_state.ordinal
                gtid_state.add(gtid)
                if gtid_state.ordinal <= before:
                    self._version_not_newer(gtid, before, gtid_state.ordinal)
                # the version orders by the stream's place in the history, not by the GTID's
                # own number: that survives a failover (schema.gtid, GtidState.ordinal)
                ctx = TxnContext(server, str(gtid), gtid_state.ordinal,
                                 float(event.timestamp), gtid=True, cluster=self._opts.cluster)
                txn, row_index = self._tracker_open(), 0
                if getattr(event, "flags", 0) & FL_PREPARED_XA and isinstance(event, MariadbGtidEvent):
                    self._flush_packs()     # earlier transactions' rows are not held
                    self._xa = XaGroup(self._opts.settings.xa_buffer_rows)
            elif isinstance(event, XAPrepareEvent):
                if txn is not None and self._xa is not None:
                    held = self._xa
                    if event.one_phase:            # MySQL's XA COMMIT ... ONE PHASE
                        self._xa = None
                        self._release(held, txn)
                        close_txn()
                    else:
                        self._prepared[held.xid] = Prepared(held, txn, close_txn(hold=True))
                        self._xa = None
                    txn = ctx = None
            elif type(event) in _ROW_EVENTS:
                if ctx is None:  # no GTID: the transaction starts at its first row event
                    ctx = self._file_pos_context(stream, event, info)
                    txn, row_index = self._tracker_open(), 0
                schema, table = maps.table_of(event, where)
                row_index = self._publish_rows(event, ctx, txn, row_index, schema, table, where)
            elif isinstance(event, (XidEvent, QueryEvent)):
                text = _query_text(event) if isinstance(event, QueryEvent) else "COMMIT"
                xa = xa_statement(text) if text.startswith(("XA", "xa")) else None
                if xa is not None:
                    if txn is None and xa[0] in ("START", "COMMIT", "ROLLBACK"):
                        # no GTID event: the group starts at this statement
                        ctx = self._file_pos_context(stream, event, info)
                        txn, row_index = self._tracker_open(), 0
                    if txn is not None and self._on_xa(xa, text, ctx, txn, row_index):
                        continue                   # XA START / END: the group goes on
                    if txn is not None:
                        close_txn()
                    txn = ctx = self._xa = None
                    continue
                changes = [] if text in _TXN_MARKERS else table_changes(
                    text, _schema_of(event), self._matched.statement_tables(),
                    self._matched.matches) or self._altered_columns(text, _schema_of(event))
                if changes:
                    if ctx is None:   # no GTID: the event group starts at this statement
                        ctx = self._file_pos_context(stream, event, info)
                        txn, row_index = self._tracker_open(), 0
                    row_index = self._publish_table_events(changes, text, ctx, txn, row_index)
                elif text not in _TXN_MARKERS:
                    # DDL: its own event group. Row decoding keeps working because
                    # binlog_row_metadata=FULL puts column names in every table map.
                    log.info("DDL in binlog: %s", _SECRETS.sub(r"\1'***'", text)[:200])
                if (self._types is not None and text not in _TXN_MARKERS
                        and statement_kind(text) != STATEMENT):
                    self._types.after_ddl(text, _schema_of(event))   # types follow ALTERs
                # a DML statement is inside its transaction; anything else but BEGIN ends one
                ends_group = text == "COMMIT" or (text != "BEGIN"
                                                  and statement_kind(text) != STATEMENT)
                if ends_group and txn is not None:
                    close_txn()
                    txn = ctx = None
            if time.monotonic() - last_save >= save_every:
                self._save_checkpoint()
                last_save = time.monotonic()
            if self._stop.is_set():
                break

    def _undecoded(self, event: UndecodedEvent, maps: TableMaps, ctx: TxnContext, txn,
                   row_index: int, where: Callable[[], str]) -> int:
        """An event that may carry rows cachesync cannot decode (eventtypes): the table its
        table id names, or every mapped table, invalidated as a whole; counted."""
        self.undecoded_events += 1
        named = maps.named(event.table_id) if event.table_id is not None else None
        if named is not None:
            mapping = self._mappings.get(*named)
            tables = [named] if mapping is not None and mapping.keys else []
        else:
            tables = self._matched.statement_tables()
        log.warning("binlog event %s (type %d) at %s may carry row changes cachesync cannot "
                    "decode: invalidating %s", event.name, event.code, where(),
                    f"{named[0]}.{named[1]}" if named else "every mapped table")
        changes = [TableChange(db, t, "undecoded_event") for db, t in tables]
        return self._publish_table_events(changes, f"{event.name} at {where()}", ctx, txn,
                                          row_index)

    def _version_not_newer(self, gtid, before: int, after: int) -> None:
        """Counted and logged: the versions of this transaction's rows are not above the
        previous one's, so update-mode fences may refuse its writes (delete mode is unaffected)."""
        self.versions_not_newer += 1
        log.warning("transaction %s does not advance the GTID history (%d after %d; MariaDB "
                    "without gtid_strict_mode?): update-mode tables may keep older values for "
                    "its rows until their TTL; check gtid_strict_mode=ON", gtid, after, before)

    def _tracker_open(self):
        if self._packer is not None and (not self._span or time.monotonic()
                                         - self._partitions_read >= 1.0):
            if self._span:      # spanning packs share one partition count: re-read each second
                self._flush_packs()
            self._partitions = len(self._publisher.partitions(self._opts.topic))
            self._partitions_read = time.monotonic()
        with self._lock:
            return self._tracker.open(None)

    def _flush_packs(self, txn=None) -> None:
        """Send every open pack (``txn``: the transaction of packs not counted yet)."""
        if self._packer:
            for pack in self._packer.drain():
                self._send_pack(pack, txn)

    def _publish_rows(self, event, ctx: TxnContext, txn, row_index: int, schema: str,
                      table: str, where: Callable[[], str]) -> int:
        op = _ROW_EVENTS[type(event)]
        if self._outbox is not None and self._outbox.covers(schema, table):
            self._publish_outbox(event, op, txn, schema, table, where)
            return row_index     # outbox rows take no row index: the ids of the others stay
        mapping = self._mappings.get(schema, table)
        if mapping is None:
            return row_index     # decided here, by the names of this event group's map
        if mapping.pattern is not None and self._matched.seen(mapping) \
                and self._types is not None:
            self._types.track(schema, table)     # a new table: its key columns' types
        if self._xa is not None:
            self._xa.touch(schema, table)
        keep = self._keep_columns(mapping, event.primary_key)
        table_obj = event.table_map[event.table_id]
        # key text corrected only where a kept column needs it (trimmed columns never count)
        specs = kept_specs(table_obj, keep, self._types.of(schema, table) if self._types else ())
        absent = event_absence(event, table_obj)
        partial = PartialRows(self, mapping, ctx, schema, table) if absent[0] or absent[1] else None
        diffs = type(event) is PartialUpdateRowsEvent    # JSON after values may be diffs
        for row in self._decode(event, schema, table, where):
            unknown = ()
            if diffs:             # applied to the before image's documents (jsoncolumns)
                row, unknown = self._resolve_json(row, schema, table, ctx)
            row = key_images(row, specs)   # values whose text is the server's (key text)
            if op == "update":
                before, after = row["before_values"], row["after_values"]
            elif op == "insert":
                before, after = None, row["values"]
            else:
                before, after = row["values"], None
            images = None
            if partial is not None or unknown:     # left-out columns are not NULLs: drop them
                partial = partial or PartialRows(self, mapping, ctx, schema, table)
                images = unknown_after(known_images(op, before, after, absent), unknown)
                before, after = images.before, images.after
            if keep is not None:
                before, after = trim_image(before, keep), trim_image(after, keep)
            if self._opts.row_filter is not None and not self._opts.row_filter(
                    event.schema, event.table, after if after is not None else before):
                row_index += 1       # ids of the rows that follow do not depend on the filter
                continue
            row_index = self._publish_row(event, op, ctx, txn, row_index, mapping, before,
                                          after, images, partial)
        if partial is not None:
            row_index = partial.finish(txn, row_index)
        return row_index

    def _publish_row(self, event, op: str, ctx: TxnContext, txn, row_index: int, mapping,
                     before, after, images, partial) -> int:
        """Publish one row, or (a row that cannot be keyed) have its table invalidated."""
        if images is None and hotpath.record is not None:    # compiled, else None: below
            compiled = hotpath.record(ctx, row_index, event.schema, event.table, op,
                                      event.primary_key, before, after,
                                      self._opts.max_record_bytes)
            if compiled is not None:
                self._publish(event.schema, event.table, *compiled, txn)
                return row_index + 1
        try:
            if images is not None and partial.unkeyed(images, op, event.primary_key):
                raise ValueError("the primary key is not in the logged image")
            change = row_change(ctx, row_index, event.schema, event.table, op,
                                event.primary_key, before, after)
            if images is not None:
                change = partial.marked(change, images)
            key = kafka_key(change.db, change.table, change.pk)
        except (ValueError, TypeError, KeyError) as e:    # a value: invalidate the table
            self.unkeyable += 1
            partial = partial or PartialRows(self, mapping, ctx, event.schema, event.table)
            partial.unkeyable(e, txn, row_index)    # the table event takes the row's index
            return row_index + 1
        self._publish(change.db, change.table, key, self._encode(change, mapping),
                      change.id, txn)
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
            rows = decode_rows(event)      # the per-table fast decoder, or None: the library's
            return rows if rows is not None else event.rows
        except DECODE_ERRORS as e:
            raise decode_error(e, where(), f"{schema}.{table}") from e

    def _publish_outbox(self, event, op: str, txn, schema: str, table: str,
                        where: Callable[[], str]) -> None:
        """An outbox table's rows: each insert goes out as the event it carries; deletes
        (the purge) and updates (a relay's bookkeeping) carry none."""
        if op != "insert":
            return
        rows = self._decode(event, schema, table, where)
        for rec in self._outbox.records(schema, table, [r["values"] for r in rows]):
            if self._xa is not None:   # too large to hold: its aggregates' tables are invalidated
                self._xa.touch(schema, rec.aggregate_type)
            self._publish(schema, rec.aggregate_type, rec.key, rec.value, rec.msg_id, txn)

    def _publish(self, db: str, table: str, key: str, value: bytes, msg_id: str, txn) -> None:
        """Send one encoded event, alone or in the pack of its (db, table, partition)."""
        if self._packer is None:
            self._send(key, value, msg_id, txn, 1, None)
        elif len(value) > self._opts.settings.pack_bytes:   # alone, after every pack opened before it
            self._flush_packs(txn)
            self._send(key, value, msg_id, txn, 1, None)
        else:
            counted = txn if self._span and self._xa is None else None
            if counted is not None:     # a spanning pack: its rows are in flight from now on
                with self._lock:
                    self._tracker.sent(txn, 1)
            full = self._packer.add(db, table, key, value, msg_id, self._partitions, counted)
            if full is not None:
                self._send_pack(full, txn)

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

    def _encode(self, change, mapping) -> bytes:
        """The event's record value: only the columns the mapping needs; over Kafka's record
        limit, the keys-only form (counted, WARNING naming the table)."""
        value = encode(change)
        if len(value) <= self._opts.max_record_bytes:
            return value
        self.oversized += 1
        log.warning("row of %s at %s is %d bytes encoded, over the %d-byte Kafka record limit: "
                    "published invalidate-only (keys, no values)", mapping.table,
                    change.source.position, len(value), self._opts.max_record_bytes)
        return encode(invalidate_only(change, key_columns(mapping), "over_record_limit"))

    def _send_pack(self, pack: Pack, txn) -> None:
        if pack.txns:      # rows of transactions counted when they entered the pack
            self._send(pack.key, pack.record_value(), pack.msg_id, pack.txns, pack.rows,
                       pack.partition, counted=True)
        else:
            self._send(pack.key, pack.record_value(), pack.msg_id, txn, pack.rows,
                       pack.partition)

    def _send(self, key: str, value: bytes, msg_id: str, txn, rows: int,
              partition: int | None, row: bool = True, counted: bool = False) -> None:
        """``counted``: ``txn`` is a pack's [transaction, rows] list, already counted."""
        if self._xa is not None and not counted:    # an XA group: held until its XA COMMIT
            self._xa.hold((key, value, msg_id, rows, partition, row), rows)
            return
        if counted:
            on_ack = lambda: self._on_acks(txn)     # noqa: E731
        else:
            with self._lock:
                self._tracker.sent(txn, rows)
            on_ack = lambda: self._on_ack(txn, rows)    # noqa: E731
        try:
            self._publisher.send(self._opts.topic, key, value, msg_id,
                                 on_ack=on_ack, on_error=self._on_error, partition=partition)
        except KafkaError as e:   # e.g. buffer full / metadata timeout, raised synchronously
            if is_permanent(e):
                raise FatalError(f"Kafka refused a record for good ({type(e).__name__}: {e}); "
                                 "not retrying, the checkpoint stays before it") from e
            raise RetryableError(f"Kafka send failed: {e}") from e
        self.published += rows if row else 0
        if self._tracker.pending >= self._opts.settings.max_inflight:
            self._publisher.flush()
            self._raise_if_failed()

    def _on_ack(self, txn, rows: int) -> None:
        with self._lock:
            self._tracker.acked(txn, rows)
            self.acked += rows

    def _on_acks(self, txns: list) -> None:
        with self._lock:
            for txn, rows in txns:
                self._tracker.acked(txn, rows)
                self.acked += rows

    def _on_error(self, error: Exception) -> None:
        # Called on the Kafka I/O thread: record it; the main loop stops the tailer
        # before the checkpoint can move past the failed send.
        self._failure = error

    def _raise_if_failed(self) -> None:
        if self._failure is not None and is_permanent(self._failure):
            raise FatalError(f"Kafka refused a record for good ({type(self._failure).__name__}: "
                             f"{self._failure}); not retrying, the checkpoint stays before it. "
                             "Check the topic name, its ACLs and its max.message.bytes"
                             ) from self._failure
        if self._failure is not None:
            raise RetryableError(f"Kafka send failed after retries, stopping before the "
                                 f"checkpoint moves: {self._failure}") from self._failure

    def _save_checkpoint(self) -> None:
        with self._lock:
            safe = self._tracker.advance()
        if safe is not None:
            self._checkpoints.save(safe)
            self.committed = safe

    def _drain(self) -> None:
        """On a clean stop: send the open packs, wait for acks, then store the last safe
        checkpoint."""
        if self._failure is None:
            if self._span:      # counted rows; otherwise the open transaction's, not closed
                self._flush_packs()
            self._publisher.flush(timeout_s=30)
        if self._failure is None:
            self._save_checkpoint()


_ER_PARSE_ERROR = 1064


def _binlog_status(cur):
    """(file, position, ...) of the server's binlog: SHOW BINARY LOG STATUS (MySQL >= 8.2;
    8.4 removed SHOW MASTER STATUS), else SHOW MASTER STATUS (MariaDB, older MySQL)."""
    try:
        cur.execute("SHOW BINARY LOG STATUS")
    except pymysql.err.ProgrammingError as e:
        if not e.args or e.args[0] != _ER_PARSE_ERROR:
            raise
        cur.execute("SHOW MASTER STATUS")
    return cur.fetchone()


def _schema_of(event) -> str | None:
    schema = getattr(event, "schema", None)
    return schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema


def _query_text(event: QueryEvent) -> str:
    query = event.query
    return (query.decode("utf-8", "replace") if isinstance(query, bytes) else query).strip()

