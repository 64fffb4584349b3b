"""The MySQL/MariaDB binlog as a change source (``ports.ChangeSource``).

Reads either binlog reader (python-mysql-replication through ``framing.LibraryStreamReader``,
or our ``dumpstream.DumpStreamReader``: the same events) and yields committed transaction
groups as ``ports`` items: ``Begin`` at a GTID (or, without GTIDs, at a group's first
event), the records of its rows events (``rowevents.RowEncoder``), table-level events
(TRUNCATE and the like, DML logged as a statement, ALTERs that can leave keys stale,
events whose rows cannot be decoded), ``Commit`` with the checkpoint after the group; and
the XA items of a prepared transaction (held at PREPARE, published at XA COMMIT).
"""

from __future__ import annotations

import logging
import re
from typing import Callable, Iterator

from pymysqlreplication.event import (GtidEvent, HeartbeatLogEvent, MariadbGtidEvent,
                                      QueryEvent, RotateEvent, XAPrepareEvent, XidEvent)
from pymysqlreplication.row_event import TableMapEvent

from cachesync.producer_outbox.unlogged_changes.altercolumns import (ALTER_COLUMNS, altered_table,
                                                    column_changes, concerns)
from cachesync.producer_outbox.binlog.reading import TableMaps, read_events
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.compiled_runs import FAST_BATCH, CompiledRuns
from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.binlog.dumpstream import (IDLE, DumpStreamReader, FastGroup,
                                                  FastTableMapEvent, PlainRun, reader_kind)
from cachesync.producer_outbox.binlog.framing import LibraryStreamReader, UndecodedEvent
from cachesync.producer_outbox.decode.matched import MatchedTables
from cachesync.producer_outbox.ports import (IDLE as IDLE_ITEM, PULSE, Begin, Change, Commit,
                                             Decide, Group, Hold, Prepared, Record, Release,
                                             TableEvent, Unhold)
from cachesync.producer_outbox.binlog.preflight import ServerInfo
from cachesync.runtime.mysql import binlog_status
from cachesync.producer_outbox.encode.rowevents import ROW_EVENTS, RowEncoder
from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.producer_outbox.binlog.statements import (STATEMENT, TableChange, statement_kind,
                                                  table_changes)
from cachesync.producer_outbox.binlog.xa import FL_PREPARED_XA, xa_statement
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.gtid import MARIADB, Gtid, GtidState, parse_gtid
from cachesync.schema.ids import file_pos_ordinal
from cachesync.schema.mapping import MappingSet

log = logging.getLogger(__name__)

STREAM_HEARTBEAT_S = 1.0    # the binlog stream's heartbeat period (the server's, not our row's)
_TXN_MARKERS = {"BEGIN", "COMMIT"}
# passwords in account statements (CREATE/ALTER USER ... IDENTIFIED BY, SET PASSWORD) never
# reach the log
_SECRETS = re.compile(r"""((?:IDENTIFIED\s+(?:(?:WITH|VIA)\s+\S+\s+)?(?:BY|AS|USING)|PASSWORD\s*=)\s*"""
                      r"""(?:PASSWORD\s*\(?\s*)?|PASSWORD\s*\(\s*)('(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.)*")""", re.I)
# MySQL's GtidEvent ("uuid:gno") and MariaDB's ("domain-server-seq"); both open a transaction.
_GTID_EVENTS = (GtidEvent, MariadbGtidEvent)
# what may come at a checkpoint's position before its first transaction's GTID event
_BEFORE_FIRST_TRANSACTION = (*_GTID_EVENTS, HeartbeatLogEvent, RotateEvent)


class BinlogSource:
    """Committed groups of one binlog stream from ``start``; ``changes()`` raises
    RetryableError when the stream is cut inside a group, FatalError for an unreadable
    start, and the decode error of ``binlog_read`` for bytes no reader can decode.
    ``changes()`` yields ``IDLE`` where the stream says it is idle (``signals_idle``).

    ``reopen``: the stream was opened at ``start``'s file and position (``by_position``),
    and ``reopen()`` opens it at ``start``'s GTID state. The first transaction read there
    must be the one right after that state in its domain (``GtidState.is_next``); if it is
    not, or anything else comes first, or reading there fails, nothing read there is used:
    the stream is opened again by ``reopen()`` (``resumed_by`` says which held)."""

    def __init__(self, stream, info: ServerInfo, start: Checkpoint, mappings: MappingSet,
                 matched: MatchedTables, encoder: RowEncoder, cluster: str = "",
                 reopen: Callable[[], object] | None = None):
        self._stream, self._info, self._start = stream, info, start
        self._reopen = reopen
        self._mappings, self._matched, self._encoder = mappings, matched, encoder
        self._cluster = cluster
        self._identity = info.identity      # read twice per transaction
        try:
            self._gtids: GtidState | None = GtidState.parse(start.gtid)
            self._bad_start = None
        except ValueError as e:             # raised by changes(), as every start problem
            self._gtids, self._bad_start = None, e
        self._ctx: TxnContext | None = None     # the open group, None between groups
        self._index = 0                         # the next row index of the open group
        self._xa: str | None = None             # the open group is XA (its xid, once known)
        self._event_pos: int | None = None      # the event being encoded (inside a FastGroup)
        # the position is unconfirmed: the first transaction must follow the GTID state
        self._confirming = reopen is not None and bool(self._gtids)
        if reopen is not None and not self._confirming and self._bad_start is None:
            stream.close()      # nothing would confirm the position (not connected yet)
            self._stream = stream = reopen()
        self.resumed_by = "position" if self._confirming else "gtid"
        self._runs = self._compiled_runs(stream)
        self.versions_not_newer = 0     # GTIDs that did not advance the history (versions)
        self.undecoded_events = 0       # events with rows cachesync cannot decode: table level

    @property
    def plain_txns(self) -> int:
        """Transactions the compiled run took."""
        return self._runs.taken if self._runs is not None else 0

    @property
    def signals_idle(self) -> bool:
        """Whether ``changes()`` yields IDLE when the stream has nothing buffered."""
        return getattr(self._stream, "signals_idle", False)

    def close(self) -> None:
        self._stream.close()

    def _compiled_runs(self, stream) -> CompiledRuns | None:
        """Whole transactions written in C from the fast reader's buffer (where compiled)."""
        run = hotpath.compiled_run() if hasattr(stream, "plain_run") else None
        return (CompiledRuns(run, stream, self._encoder, self._identity, self._cluster)
                if run is not None else None)

    # -- the groups -----------------------------------------------------------------------
    def changes(self) -> Iterator[Change]:
        if self._bad_start is not None:
            raise FatalError(f"stored checkpoint has an unreadable GTID state: "
                             f"{self._bad_start}") from self._bad_start
        while True:
            try:
                yield from self._changes()
                return
            except (_Unconfirmed, RetryableError, FatalError) as e:
                if not self._confirming:
                    raise
                self._resume_by_gtid(e.__cause__ or e)     # the server's words, if any

    def _resume_by_gtid(self, why: Exception) -> None:
        """The position was not confirmed: the stream again, at the GTID state. Nothing
        read at the position was yielded but IDLE and PULSE items."""
        log.info("tailer: not resuming at %s:%s by file and position (%s): connecting by "
                 "GTID %s", self._start.log_file, self._start.log_pos, why, self._start.gtid)
        self._confirming = False
        self._stream.close()
        self._stream = self._reopen()
        self._runs = self._compiled_runs(self._stream)
        self._event_pos = None
        self.resumed_by = "gtid"

    def _confirm(self, event) -> None:
        """Raises _Unconfirmed unless ``event`` is one that may come before the first
        transaction at the position (a GTID event is checked where it is read)."""
        if not isinstance(event, _BEFORE_FIRST_TRANSACTION):
            raise _Unconfirmed(f"{type(event).__name__} before any GTID event")

    def _changes(self) -> Iterator[Change]:
        maps = TableMaps()
        events = read_events(self._stream, self._where)
        while True:
            if (self._runs is not None and self._ctx is None and self._xa is None
                    and not self._confirming):
                # a drained buffer (at the head of the binlog) takes the next read first, so
                # that a commit arriving alone is taken whole (nothing buffered: no read)
                if self._stream.await_bytes() is IDLE:
                    yield IDLE_ITEM
                    continue
                run = self._runs.take(self._gtids)      # whole transactions, written in C
                if run is not None:
                    yield self._plain_group(run)
                    continue
            event = next(events, None)
            if event is None:
                return
            if event is IDLE:                   # the reader has nothing buffered
                yield IDLE_ITEM
                continue
            if type(event) is FastGroup:        # a whole transaction framed at once
                yield from self._fast_group(event, maps)
                continue
            if self._confirming:
                self._confirm(event)
            if isinstance(event, TableMapEvent):
                maps.add(event.table_id, event.schema, event.table)
                continue
            if isinstance(event, UndecodedEvent):   # its table map, if any, stays in force
                yield from self._undecoded(event, maps)
                continue
            if type(event) not in ROW_EVENTS and not isinstance(event, HeartbeatLogEvent):
                maps.reset()     # any other event ends or starts an event group
            if isinstance(event, _GTID_EVENTS):
                yield self._gtid(event)
                if getattr(event, "flags", 0) & FL_PREPARED_XA \
                        and isinstance(event, MariadbGtidEvent):
                    yield from self._hold("")
                continue          # a Begin: the Pulse comes with the group's next event
            if isinstance(event, XidEvent):     # COMMIT: ends the open group
                if self._ctx is not None:
                    yield self._commit()        # (a Commit does what a Pulse does)
                    continue
            elif isinstance(event, XAPrepareEvent):
                yield from self._xa_prepare(event)
            elif type(event) in ROW_EVENTS:
                if self._ctx is None:  # no GTID: the group starts at its first row event
                    yield self._begin(self._file_pos_context(event))
                schema, table = maps.table_of(event, self._where)
                # the one per-rows-event call: records and table-level events, next index
                items, self._index = self._encoder.rows_to_records(
                    event, self._ctx, self._index, schema, table, self._where)
                yield from items
            elif isinstance(event, QueryEvent):
                text = _query_text(event)
                xa = xa_statement(text) if text.startswith(("XA", "xa")) else None
                if xa is not None:
                    yield from self._xa_statement(xa, text, event)
                    continue
                yield from self._statement(text, event)
            yield PULSE

    def _fast_group(self, group: FastGroup, maps: TableMaps) -> Iterator[Change]:
        """Transactions the fast reader framed at once (GTID, table maps, rows, XID): this
        one and each next one its buffer already holds (``buffered_group``, up to
        FAST_BATCH), as one ``Group`` with the checkpoint after the last, when their rows
        make records only; else the same transactions as one group of separate items
        (Begin, records and table-level events, Commit). Never the Pulse after each rows
        event (the group's end does what a Pulse does). One group for several
        transactions keeps at-least-once: the checkpoint moves past all of them or none."""
        buffered = getattr(self._stream, "buffered_group", None)
        runs = self._runs
        out: list = []
        first, plain = None, True
        for taken in range(1, FAST_BATCH + 1):
            ctx, only_records = self._fast_txn(group, maps, out)
            first, plain = first or ctx, plain and only_records
            if runs is not None:
                runs.passed()
            if (not plain or taken == FAST_BATCH or buffered is None
                    or (runs is not None and runs.wanted())):   # the compiled run next
                break
            group = buffered()
            if group is None:
                break
        commit = self._commit()
        if plain:
            yield Group(first, out, commit.checkpoint)
            return
        yield Begin(first)      # a table-level event among them: one by one
        yield from out
        yield commit

    def _plain_group(self, run: PlainRun) -> Group:
        """The transactions of a PlainRun as one Group, the GTID state moved past them."""
        for domain, (server_id, seq) in run.gtids.items():
            self._gtids.add(Gtid(MARIADB, str(domain), seq, server_id))
        if self._gtids.ordinal != run.ordinal:      # the compiled run counts as GtidState does
            raise AssertionError(f"compiled run ordinal {run.ordinal} != {self._gtids.ordinal}")
        text, timestamp, ordinal = run.first
        ctx = TxnContext(self._identity, text, ordinal, float(timestamp), gtid=True,
                         cluster=self._cluster)
        return Group(ctx, run.records, self._commit().checkpoint)

    def _fast_txn(self, group: FastGroup, maps: TableMaps, out: list) -> tuple[TxnContext, bool]:
        """One framed transaction's items appended to ``out``: its context, and whether
        they are records only. Errors and file:pos contexts point at each event
        (``_event_pos``); the stream is after its XID."""
        maps.reset()
        self._event_pos = group.gtid_pos
        ctx = self._ctx = self._gtid_context(group.gtid)
        self._index = 0
        encode, where = self._encoder.rows_to_records, self._where
        plain = True
        runs = self._runs
        bodies = {} if runs is not None else None    # table id -> its map's body
        for log_pos, event in group.events:
            self._event_pos = log_pos
            if type(event) is FastTableMapEvent:
                maps.add(event.table_id, event.schema, event.table)
                if bodies is not None:
                    bodies[event.table_id] = event.body
                continue
            schema, table = maps.table_of(event, where)
            items, self._index = encode(event, ctx, self._index, schema, table, where)
            for item in items:
                if type(item) is not Record:
                    plain = False
            out += items
            if bodies is not None and plain:
                runs.learn(bodies[event.table_id], event, schema, table)
        self._event_pos = None
        maps.reset()
        self._ctx = None        # closed; the Commit after the last one carries the checkpoint
        return ctx, plain

    def _begin(self, ctx: TxnContext) -> Begin:
        self._ctx, self._index = ctx, 0
        return Begin(ctx)

    def _commit(self) -> Commit:
        """End the open group: the checkpoint after it."""
        stream = self._stream
        cp = Checkpoint(self._identity, str(self._gtids) or None, stream.log_file,
                        stream.log_pos)
        if cp.gtid is not None:
            # python-mysql-replication reconnects on its own from auto_position;
            # keep it at the last group boundary so a dropped connection
            # resumes here instead of replaying everything since start.
            stream.resume_from(cp.gtid)
        self._ctx = None
        return Commit(cp)

    def _where(self) -> str:
        stream = self._stream
        if not stream.log_file:
            return self._start.describe()
        return f"{stream.log_file}:{self._event_pos or stream.log_pos}"

    def _gtid(self, event) -> Begin:
        return self._begin(self._gtid_context(event))

    def _gtid_context(self, event) -> TxnContext:
        """The context of the group a GTID event opens; raises RetryableError when one is
        still open."""
        if self._ctx is not None:
            # Every event group ends in XID, COMMIT or DDL. A new GTID with one open
            # means the stream was cut and replayed (the library reconnects silently):
            # restart from the stored checkpoint rather than declare half a group done.
            raise RetryableError(f"binlog stream broke inside transaction {self._ctx.position}")
        gtid = getattr(event, "parsed", None)
        if gtid is not None:            # the fast reader's: its text is the canonical one
            text = event.gtid
        else:
            gtid = parse_gtid(event.gtid)
            text = str(gtid)
        if self._confirming:
            self._confirm_gtid(gtid)
        before = self._gtids.ordinal
        self._gtids.add(gtid)
        if self._gtids.ordinal <= before:
            self._version_not_newer(gtid, before, self._gtids.ordinal)
        # the version orders by the stream's place in the history, not by the GTID's
        # own number: that survives a failover (schema.gtid, GtidState.ordinal)
        return TxnContext(self._identity, text, self._gtids.ordinal, float(event.timestamp),
                          gtid=True, cluster=self._cluster)

    def _confirm_gtid(self, gtid: Gtid) -> None:
        """The first transaction at the position: raises _Unconfirmed unless it is the one
        right after the checkpoint's GTID state."""
        if not self._gtids.is_next(gtid):      # (the state is still the checkpoint's)
            raise _Unconfirmed(f"the first transaction there is {gtid}, not the one after "
                               f"{self._start.gtid}")
        log.info("tailer resumed at %s:%s by file and position: its first transaction %s "
                 "follows the checkpoint's GTID state", self._start.log_file,
                 self._start.log_pos, gtid)
        self._confirming = False

    def _statement(self, text: str, event) -> Iterator[Change]:
        """A COMMIT (XID), BEGIN, DML logged as a statement, or DDL."""
        schema = _schema_of(event)
        changes = [] if text in _TXN_MARKERS else table_changes(
            text, schema, self._matched.statement_tables(),
            self._matched.matches) or self._altered_columns(text, schema)
        if changes:
            if self._ctx is None:   # no GTID: the event group starts at this statement
                yield self._begin(self._file_pos_context(event))
            for change in changes:
                yield TableEvent(self._ctx, self._index, change, text)
                self._index += 1
        elif text not in _TXN_MARKERS:
            # DDL: its own event group. Row decoding keeps working because
            # binlog_row_metadata=FULL puts column names in every table map.
            log.info("DDL in binlog: %s", _SECRETS.sub(r"\1'***'", text)[:200])
        types = self._encoder.types
        if text not in _TXN_MARKERS and statement_kind(text) != STATEMENT:
            if types is not None:
                types.after_ddl(text, schema)   # types follow ALTERs
            if self._encoder.cascades is not None:
                self._encoder.cascades.after_ddl(text)     # and so do foreign keys
        # a DML statement is inside its group; anything else but BEGIN ends one
        ends_group = text == "COMMIT" or (text != "BEGIN" and statement_kind(text) != STATEMENT)
        if ends_group and self._ctx is not None:
            yield self._commit()

    # -- XA ---------------------------------------------------------------------------------
    def _hold(self, xid: str) -> Iterator[Change]:
        self._xa = xid
        self._encoder.hold_xa()
        yield Hold()

    def _xa_done(self) -> tuple[tuple[str, str], ...]:
        """The tables the XA group's rows touched; the group is no longer held."""
        self._xa = None
        return self._encoder.end_xa()

    def _xa_prepare(self, event) -> Iterator[Change]:
        """XA_PREPARE_LOG_EVENT: the held group is prepared (or, one-phase, committed)."""
        if self._ctx is None or self._xa is None:
            return
        if event.one_phase:            # MySQL's XA COMMIT ... ONE PHASE
            yield Release(self._ctx, self._index, self._xa_done(), "XA COMMIT ONE PHASE")
            yield self._commit()
        else:
            xid, commit = self._xa, self._commit()
            yield Prepared(xid, commit.checkpoint, self._xa_done())

    def _xa_statement(self, xa: tuple[str, str, bool], text: str, event) -> Iterator[Change]:
        verb, xid, one_phase = xa
        if self._ctx is None and verb in ("START", "COMMIT", "ROLLBACK"):
            # no GTID event: the group starts at this statement
            yield self._begin(self._file_pos_context(event))
        if self._ctx is not None:
            if verb == "START":                       # MySQL: the group is XA from here
                yield from self._hold(xid)
                return
            if verb in ("END", "PREPARE"):            # the group goes on
                if self._xa is not None:
                    self._xa = xid
                return
            if verb == "COMMIT" and one_phase and self._xa is not None:
                yield Release(self._ctx, self._index, self._xa_done(), text)
            elif verb in ("COMMIT", "ROLLBACK"):
                yield Decide(xid, verb == "COMMIT", self._ctx, self._index, text,
                             tuple(self._matched.statement_tables()))
            yield self._commit()
        if self._xa is not None:
            self._xa_done()
            yield Unhold()

    # -- table level ------------------------------------------------------------------------
    def _undecoded(self, event: UndecodedEvent, maps: TableMaps) -> Iterator[Change]:
        """An event that may carry rows cachesync cannot decode (eventtypes): the table its
        table id names, or every mapped table, invalidated as a whole; counted."""
        alone = self._ctx is None
        if alone:    # between groups: a group of its own
            yield self._begin(self._file_pos_context(event))
        self.undecoded_events += 1
        named = maps.named(event.table_id) if event.table_id is not None else None
        if named is not None:
            mapping = self._mappings.get(*named)
            tables = [named] if mapping is not None and mapping.keys else []
        else:
            tables = self._matched.statement_tables()
        where = self._where()
        log.warning("binlog event %s (type %d) at %s may carry row changes cachesync cannot "
                    "decode: invalidating %s", event.name, event.code, where,
                    f"{named[0]}.{named[1]}" if named else "every mapped table")
        for db, t in tables:
            yield TableEvent(self._ctx, self._index, TableChange(db, t, "undecoded_event"),
                             f"{event.name} at {where}")
            self._index += 1
        if alone:
            yield self._commit()

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

    def _file_pos_context(self, event) -> TxnContext:
        stream = self._stream
        return TxnContext(self._identity, f"{stream.log_file}:{stream.log_pos}",
                          file_pos_ordinal(stream.log_file, stream.log_pos),
                          float(event.timestamp), cluster=self._cluster)

    def _version_not_newer(self, gtid, before: int, after: int) -> None:
        """Counted and logged: the versions of this group's rows are not above the previous
        one's, so update-mode fences may refuse its writes (delete mode is unaffected)."""
        self.versions_not_newer += 1
        log.warning("transaction %s does not advance the GTID history (%d after %d; MariaDB "
                    "without gtid_strict_mode?): update-mode tables may keep older values for "
                    "its rows until their TTL; check gtid_strict_mode=ON", gtid, after, before)


class _Unconfirmed(Exception):
    """What was read at a checkpoint's file and position does not follow its GTID state."""


def by_position(start: Checkpoint, info: ServerInfo) -> bool:
    """Whether a stored checkpoint is resumed by its file and position: it has a GTID state
    (which confirms the position, ``BinlogSource``) and a position, and was written reading
    this server. A server finds a GTID by reading its current binlog file from the start
    (MariaDB before 11.4 without ``binlog_gtid_index``, and MySQL), which takes about a
    second per few hundred MB; a position is found at once."""
    return bool(start.gtid and start.log_file and start.log_pos
                and start.server == info.identity)


def open_stream(client_options: dict, server_id: int, reader: str, info: ServerInfo,
                start: Checkpoint, heartbeat_s: float = STREAM_HEARTBEAT_S, blocking: bool = True,
                idle_wait_s: float = 0.0, position: bool = False, read_linger_s: float = 0.0,
                before_wait: Callable[[bool], None] | None = None):
    """The binlog stream from ``start``: our fast reader (whole transactions at once) or the
    library's (``reader``); ``blocking=False`` ends at the end of the server's binlog (a
    whole file read once). ``idle_wait_s`` above 0: the fast reader yields IDLE when the
    server stayed silent that long with nothing buffered, or at once after a short read that
    came alone when ``read_linger_s`` is above 0 (the library's never does).
    ``read_linger_s`` above 0: the fast reader's reads at the head of the binlog wait that
    long after the one before while transactions arrive close together (DumpConnection).
    ``before_wait``: called by the fast reader before a read that may wait for the server
    (DumpConnection).
    ``start`` is connected to by its GTID state when it has one, unless ``position``."""
    kwargs = {"is_mariadb": info.flavor == "mariadb"}
    if start.gtid is not None and not position:
        # MariaDB: @slave_connect_state; MySQL: COM_BINLOG_DUMP_GTID with the GTID set.
        kwargs.update(auto_position=start.gtid)
    else:
        kwargs.update(log_file=start.log_file, log_pos=start.log_pos, resume_stream=True)
    if reader_kind(reader) == "fast":
        kwargs.update(groups=True, idle_wait_s=idle_wait_s, read_linger_s=read_linger_s,
                      before_wait=before_wait)
    return (DumpStreamReader if "groups" in kwargs else LibraryStreamReader)(
        connection_settings=client_options, server_id=server_id, blocking=blocking,
        # No only_schemas/only_tables: the library would drop the table maps of the
        # tables it filters and decode a reused table id with a stale map
        # (see binlog_read). TableMapEvent is listed so the source sees each map.
        only_events=[*_GTID_EVENTS, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
                     TableMapEvent, XAPrepareEvent, *ROW_EVENTS],
        slave_heartbeat=heartbeat_s, **kwargs)



def current_position(connect: Callable, info: ServerInfo) -> Checkpoint:
    """The server's current binlog position (a first start begins there); raises FatalError
    when binary logging is off."""
    conn = connect()
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
            row = binlog_status(cur)
    finally:
        conn.close()
    if row is None:
        raise FatalError("binary logging is off (SHOW BINARY LOG STATUS is empty): set log_bin")
    return Checkpoint(info.identity, gtid, row[0], int(row[1]))


def _schema_of(event) -> str | None:
    schema = getattr(event, "schema", None)
    return schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema


def _query_text(event: QueryEvent) -> str:
    return (event.query.decode("utf-8", "replace") if isinstance(event.query, bytes)
            else event.query).strip()
