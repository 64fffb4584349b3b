"""A faster binlog reader: the dump stream's hot events parsed directly, the rest by the library.

``DumpStreamReader`` is a ``BinLogStreamReader`` that reads whole socket chunks, parses the hot
events itself (MariaDB GTID and XID, table maps seen before, row events) and frames a whole
buffered transaction with one compiled call where it can; everything else goes to the library's
own ``fetchone`` unchanged. ``reader_kind`` picks this reader or the plain library
(``tailer.reader``; ``auto`` is this one): the same tests run on both. What it parses, skips
and hands back: docs/internals.md, "The dump stream reader".
"""

from __future__ import annotations

import errno
import os
import select
import struct
from typing import Callable

import pymysql
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import (DeleteRowsEvent, TableMapEvent, UpdateRowsEvent,
                                          WriteRowsEvent)

from cachesync.producer_outbox.binlog.eventtypes import TABLE_MAP, is_own, length_encoded
from cachesync.producer_outbox.binlog.packets import BODY, COMMON_HEADER
from cachesync.producer_outbox.decode.fastrows import GIVE_UP, table_decoder
from cachesync.producer_outbox.encode.hotpath import NO_SPEEDUPS
from cachesync.runtime.library_adapter import (library_event, packet_bytes,
                                                       post_header_lengths, stream_connection,
                                                       uses_checksum)
from cachesync.runtime.linger import Linger
from cachesync.producer_outbox.binlog.libraryrows import library_rows
from cachesync.producer_outbox.binlog.framing import (FramedConnection, GtidPositioned, RowsGuarded,
                                               own_event)
from cachesync.schema.gtid import MARIADB, Gtid

try:
    from cachesync._speedups import scan_group as _scan_group
except ImportError:          # no C compiler at install: every event takes the per-event path
    _scan_group = None

READERS = ("auto", "fast", "library")

# Binlog event types (MySQL/MariaDB log_event.h)
_XID, _TABLE_MAP = 16, TABLE_MAP
_ROWS_V1 = {23: WriteRowsEvent, 24: UpdateRowsEvent, 25: DeleteRowsEvent}
_ROWS_V2 = {30: WriteRowsEvent, 31: UpdateRowsEvent, 32: DeleteRowsEvent}
_MARIADB_ANNOTATE, _MARIADB_CHECKPOINT, _MARIADB_GTID, _MARIADB_GTID_LIST = 160, 161, 162, 163
_SKIPPED = frozenset((_MARIADB_ANNOTATE, _MARIADB_CHECKPOINT, _MARIADB_GTID_LIST))
_HOT = frozenset((_XID, _TABLE_MAP, _MARIADB_GTID, *_ROWS_V1, *_ROWS_V2, *_SKIPPED))
_COM_BINLOG_DUMP, _COM_BINLOG_DUMP_GTID = 0x12, 0x1E
_MAX_PACKET = 0xFFFFFF          # a payload this long continues in the next packet
_CHUNK = 1 << 18                # bytes asked of the socket per read
_HEAD_READ = 1 << 14            # a read this short found the reader at the head of the binlog
# what a read at the head lingers for at most (Linger's enough): about 16 single-row
# transactions (some 250 bytes each), so a busy head is read in steps of about that size
# rather than every read_linger_s, and its lag falls as its rate rises
_HEAD_ENOUGH = 1 << 12
_TABLE_CACHE = 4096             # table-map bodies remembered (cleared when full)

_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_GTID_BODY = struct.Struct("<QIB")      # MariaDB GTID: seq_no, domain_id, flags


def reader_kind(setting: str) -> str:
    """``fast`` or ``library`` for the ``tailer.reader`` setting; raises ValueError."""
    if setting not in READERS:
        raise ValueError(f"tailer.reader must be one of {', '.join(READERS)}, not {setting!r}")
    return "library" if setting == "library" else "fast"


class _Hot(Exception):
    """Raised inside the library's fetchone: the next packet is one the fast path handles."""

    def __init__(self, raw: bytes):
        super().__init__()
        self.raw = raw


class _Idle(Exception):
    """Raised inside a read (the library's fetchone included), before any byte of the next
    packet is taken: the socket stayed silent (``DumpConnection._arrives``); ``fetchone``
    returns IDLE."""


class Idle:
    """What ``DumpStreamReader.fetchone`` returns when every byte received was read and
    nothing more arrived (within its ``idle_wait_s``, or at once after a short read that came
    alone: ``DumpConnection._arrives``): the caller may flush what it batches; the next
    ``fetchone`` waits for the server."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IDLE"


IDLE = Idle()


class DumpConnection(FramedConnection):
    """pymysql connection that, once the binlog dump started, reads packets in whole chunks.

    Before the dump command everything is pymysql's own. After it, ``next_raw`` returns
    each packet's payload (compressed events expanded, framing.FramedConnection);
    ``read_packet`` (what the library calls) returns the packet ``handoff`` gave it, or the
    next one from the socket, or raises ``_Hot`` for one the reader handles itself.
    With ``idle_wait_s`` above 0, a read that finds the buffer empty and the socket silent
    that long (no time at all after a short read that came alone, or before a wait for the
    ``linger``) raises ``_Idle`` once (nothing consumed), then waits. With a ``linger`` (the
    reader's ``read_linger_s`` above 0), at the head of the binlog (a short read) while
    transactions arrive closer together than twice that, a read waits until
    ``read_linger_s`` after the one before it, so that one read takes in several
    transactions: at 1,000 commits/s each would otherwise wake the reader and run its Python
    on its own. Reading from behind (full reads), or transactions further apart, never waits.
    ``before_wait`` (when set) is called with nothing buffered, right before a read that may
    wait for the server, with whether the newest arrival came alone (idleness follows): the
    caller's chance to do what it would otherwise wake another thread for (the tailer serves
    its publisher's acknowledgements then).
    """

    dumping = False
    handoff: bytes | None = None
    handoff_error: Exception | None = None
    idle_wait_s = 0.0     # how long the socket may stay silent before a read says idle
    linger: Linger | None = None   # the reads' pace at the head (read_linger_s; None: never)
    before_wait: Callable[[bool], None] | None = None     # see the class doc
    seq = 0               # the sequence number of the next packet from the server
    _idle_said = False    # idleness was said since the last bytes arrived

    def write_bytes(self, data) -> None:
        if len(data) > 4 and data[4] in (_COM_BINLOG_DUMP, _COM_BINLOG_DUMP_GTID):
            self._buf, self._pos = b"", 0
            self.seq = (data[3] + 1) % 256      # the server's replies follow the command's
        super().write_bytes(data)

    def read_packet(self, packet_type=MysqlPacket):
        if not self.dumping:
            return self.pymysql_read_packet(packet_type)
        if self.handoff_error is not None:
            error, self.handoff_error = self.handoff_error, None
            raise error
        raw, self.handoff = self.handoff, None
        if raw is None:
            raw = self.next_raw()
            if len(raw) >= BODY and raw[0] == 0 and (
                    raw[5] in _HOT or is_own(raw[5], raw[18] | raw[19] << 8)):
                raise _Hot(raw)
        self.last_raw = raw
        packet = packet_type(raw, self.encoding)
        if packet.is_error_packet():
            packet.raise_for_error()
        return packet

    def _wire_raw(self) -> bytes:
        """The next packet's payload; raises pymysql's OperationalError when the connection is lost."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos >= 4:
            length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            end = pos + 4 + length
            if end <= len(buf) and length < _MAX_PACKET:
                self._check_seq(buf[pos + 3])
                self._pos = end
                return buf[pos + 4:end]
        return self._next_raw_slow()

    def _next_raw_slow(self) -> bytes:
        """A packet not wholly buffered (or continued): read until it is."""
        parts = []
        while True:
            header = self._take(4, between_packets=not parts)
            length = header[0] | header[1] << 8 | header[2] << 16
            self._check_seq(header[3])
            parts.append(self._take(length, between_packets=False))
            if length < _MAX_PACKET:
                return parts[0] if len(parts) == 1 else b"".join(parts)

    def _take(self, n: int, between_packets: bool) -> bytes:
        """``n`` bytes; ``between_packets``: no packet is partly read (the stream may be idle)."""
        while len(self._buf) - self._pos < n:
            self._fill(between_packets and self._pos == len(self._buf))
        start = self._pos
        self._pos += n
        return self._buf[start:self._pos]

    def _fill(self, maybe_idle: bool) -> None:
        if maybe_idle and self.idle_wait_s > 0 and not self._idle_said and (
                self._lingers() or not self._arrives()):
            self._idle_said = True      # before a linger: what was read leaves now, not after
            raise _Idle()
        if maybe_idle and self.linger is not None:
            self.linger.pause()
        if maybe_idle and self.before_wait is not None:
            self.before_wait(self.linger is not None and self.linger.alone)
        try:
            chunk = self.read_chunk(_CHUNK)
        except OSError as e:
            if e.errno == errno.EINTR:
                return
            self.force_close()
            raise pymysql.err.OperationalError(
                CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({e})") from e
        if not chunk:
            self.force_close()
            raise pymysql.err.OperationalError(CR.CR_SERVER_LOST,
                                               "Lost connection to MySQL server during query")
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        self._idle_said = False
        if self.linger is not None:
            self.linger.arrived(len(chunk) < _HEAD_READ, len(chunk))

    def _lingers(self) -> bool:
        """Whether the next read waits for the linger (what was read is all there is until
        then)."""
        return self.linger is not None and self.linger.remaining() > 0

    def _arrives(self) -> bool:
        """Whether more bytes arrive within ``idle_wait_s`` (a reader that drained the
        socket mid-burst should not be taken for idle); with a ``linger``, none after a
        short read that came alone (not within its ``close_s`` of the one before): at the
        head of the binlog, a transaction arriving alone is followed by idleness at once, so
        nothing waits ``idle_wait_s`` behind it and the reader's thread is not woken again
        to say so. Reading from behind, or arrivals close together, wait as before."""
        wait = 0.0 if self.linger is not None and self.linger.alone else self.idle_wait_s
        sock = self.raw_socket()
        if sock is None:
            return False
        if getattr(sock, "pending", None) is not None and sock.pending():   # TLS: decrypted bytes
            return True
        try:
            return bool(select.select([sock], [], [], wait)[0])
        except (OSError, ValueError):
            return True          # let the read report the failure

    def _check_seq(self, seq: int) -> None:
        if seq != self.seq:
            self.force_close()
            if seq == 0:    # MariaDB sends an error packet with sequence 0 when shutting down
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
            raise pymysql.err.InternalError(
                f"Packet sequence number wrong - got {seq} expected {self.seq}")
        self.seq = (seq + 1) % 256


# -- the hot events, as the library's classes -------------------------------------------

class FastGtidEvent(MariadbGtidEvent):
    """A MariaDB GTID event read by the fast path (constructor not run); ``parsed`` is its
    GTID as ``schema.gtid.parse_gtid`` reads ``gtid``, so the tailer does not parse it again."""

    def __init__(self):   # noqa: D107 -- the library's needs a packet wrapper
        pass


class FastXidEvent(XidEvent):
    """An XID event read by the fast path."""

    def __init__(self):
        pass


class FastTableMapEvent(TableMapEvent):
    """A table map whose table was parsed by the library from an identical earlier map."""

    def __init__(self):
        pass


class _FastRows:
    """Row events read by the fast path; ``rows`` decodes with the generated decoder,
    falling back to the library's event built from the same packet."""

    def __init__(self):
        pass

    @property
    def rows(self) -> list[dict]:
        """The rows by the generated decoder, else (bytes it does not read as the library
        does, rows that overrun the packet: None) by the library, in a bounded loop."""
        decoder, raw, start, end = self._decode
        try:
            rows = decoder(raw, start, end)
        except GIVE_UP:
            rows = None
        return rows if rows is not None else library_rows(self._library_event())

    def _library_event(self):
        return self._reader.library_event(raw=self._decode[1], kind=self._kind,
                                          table_map={self.table_id: self._table})


class FastWriteRowsEvent(_FastRows, WriteRowsEvent):
    pass


class FastUpdateRowsEvent(_FastRows, UpdateRowsEvent):
    pass


class FastDeleteRowsEvent(_FastRows, DeleteRowsEvent):
    pass


# fast row event class -> the library's class it stands for
FAST_ROW_EVENTS = {FastWriteRowsEvent: WriteRowsEvent, FastUpdateRowsEvent: UpdateRowsEvent,
                   FastDeleteRowsEvent: DeleteRowsEvent}
_FAST_OF = {lib: fast for fast, lib in FAST_ROW_EVENTS.items()}


class FastGroup:
    """One MariaDB transaction framed at once: its GTID event, its table-map and rows
    events, its XID event, each with the binlog position after it (``*_pos``, ``events``
    holds (position, event) pairs)."""

    __slots__ = ("gtid", "gtid_pos", "events", "xid", "xid_pos")

    def __init__(self, gtid: FastGtidEvent, gtid_pos: int, events: list, xid: FastXidEvent,
                 xid_pos: int):
        self.gtid, self.gtid_pos, self.events = gtid, gtid_pos, events
        self.xid, self.xid_pos = xid, xid_pos


class PlainRun:
    """Consecutive MariaDB transactions the compiled run (``_speedups.plain_run``) took
    from the read buffer whole: their records, the state's ordinal after them, the last
    (server id, seq_no) per GTID domain, the first one's (GTID text, timestamp, ordinal),
    the binlog position after the last, and how many there were."""

    __slots__ = ("records", "ordinal", "gtids", "first", "xid_pos", "taken")

    def __init__(self, records: list, ordinal: int, gtids: dict, first: tuple, xid_pos: int,
                 taken: int):
        self.records, self.ordinal, self.gtids = records, ordinal, gtids
        self.first, self.xid_pos, self.taken = first, xid_pos, taken


class DumpStreamReader(GtidPositioned, RowsGuarded, BinLogStreamReader):
    """``BinLogStreamReader`` with the hot events parsed from the raw packets (module doc).

    ``idle_wait_s`` (above 0): ``fetchone`` returns IDLE when every received byte was read
    and nothing more arrived within that time (none after a short read that came alone, with
    ``read_linger_s``), before it waits for the server (the caller may flush what it
    batches). ``groups``: ``fetchone`` may return a whole transaction as
    one FastGroup (the binlog source reads them), and ``plain_run`` takes whole
    transactions for the compiled run. ``read_linger_s`` and ``before_wait``:
    DumpConnection's.
    """

    def __init__(self, *args, idle_wait_s: float = 0.0, groups: bool = False,
                 read_linger_s: float = 0.0, before_wait: Callable[[bool], None] | None = None,
                 **kwargs):
        if kwargs.get("pymysql_wrapper") or kwargs.get("end_log_pos") or kwargs.get(
                "skip_to_timestamp") or kwargs.get("only_tables") or kwargs.get("only_schemas"):
            raise ValueError("DumpStreamReader does not support pymysql_wrapper, end_log_pos, "
                             "skip_to_timestamp or table/schema filters")
        kwargs["pymysql_wrapper"] = self._connection
        self.idle_wait_s, self.groups, self.read_linger_s = idle_wait_s, groups, read_linger_s
        self.before_wait = before_wait
        super().__init__(*args, **kwargs)
        allowed = frozenset(kwargs.get("only_events") or ())
        self._fast_allowed = frozenset(f for f, lib in _LIBRARY_CLASS.items() if lib in allowed)
        # whole groups at once: compiled, switched on, every one of their event types asked
        # for (the tailer asks for all)
        self._scan = (_scan_group if _scan_group is not None and not os.environ.get(NO_SPEEDUPS)
                      and self._fast_allowed >= _GROUP_CLASSES else None)
        # table-map body -> the fields of its FastTableMapEvent (the library's Table parsed
        # from the first map of these bytes among them)
        self._tables: dict[bytes, dict] = {}
        # (table id, class, bitmaps, columns) -> (the Table, the fields and the decoder
        # every rows event of that shape shares)
        self._row_shapes: dict[tuple, tuple] = {}
        self._post_ok: tuple = (object(), 0)    # (the post-header lengths, their mask)

    @property
    def signals_idle(self) -> bool:
        """Whether ``fetchone`` may return IDLE."""
        return self.idle_wait_s > 0

    def _connection(self, **settings) -> DumpConnection:
        conn = DumpConnection(**settings)
        conn.idle_wait_s, conn.before_wait = self.idle_wait_s, self.before_wait
        if self.read_linger_s > 0:      # reads spaced by the linger: "close" is twice that
            conn.linger = Linger(self.read_linger_s, 2 * self.read_linger_s, enough=_HEAD_ENOUGH)
        return self._framed(conn)

    def fetchone(self):
        """The next event, a FastGroup of a whole transaction, or IDLE (class doc)."""
        group = self._group()
        if group is not None:
            return group
        try:
            return self._fetch_event()
        except _Idle:
            return IDLE

    def _fetch_event(self):
        raw = None
        while True:
            if raw is None:
                raw = self._next_raw()
            if raw is not None:
                event = self._fast_event(raw)
                if event is not None:
                    raw = None
                    if event is _SKIP:
                        continue
                    return event
                stream_connection(self).handoff = raw     # the library reads this one
                raw = None
            try:
                event = super().fetchone()
            except _Hot as hot:
                raw = hot.raw
                continue
            if type(event) is TableMapEvent:
                self._remember(event)
            return event

    def _next_raw(self) -> bytes | None:
        """The next packet if the dump is running (None: let the library connect or fail)."""
        conn = stream_connection(self)
        if conn is None or not conn.dumping or conn.handoff_error is not None:
            return None         # (a failed read's error is the library's to raise)
        try:
            return conn.next_raw()
        except pymysql.err.MySQLError as e:
            conn.handoff_error = e      # raised where the library reads: it reconnects or raises
            return None

    def await_bytes(self) -> bool | Idle:
        """When the read buffer is drained, wait for the server's next bytes into it, as a
        packet read would (the read linger, idleness): at the head of the binlog a commit's
        events arrive in one read, and once buffered the whole transaction is taken at once
        (``plain_run``, ``buffered_group``) instead of event by event. True: a read was
        made (an interrupted one brings nothing: the next read waits again); IDLE: the
        server stayed silent (said once, as ``fetchone`` says it, ``DumpConnection._arrives``);
        False: nothing done (bytes still buffered, no dump running, or a failed read left for
        the library, which reconnects or raises, as after a failed packet read)."""
        conn = self._buffered_connection()
        if conn is None or conn._pos < len(conn._buf):
            return False
        try:
            conn._fill(True)
        except _Idle:
            return IDLE
        except pymysql.err.MySQLError as e:
            conn.handoff_error = e
            return False
        return True

    def buffered_group(self) -> FastGroup | None:
        """The next transaction as ``fetchone`` returns it with ``groups`` on, if the read
        buffer already holds all of it in the common shape; else None, nothing consumed.
        Never waits for the server (the binlog source takes what is buffered at once)."""
        return self._group()

    def plain_run(self, run: Callable, max_txns: int, plans: dict, domains: dict,
                  consts: tuple) -> PlainRun | bool | None:
        """``run`` (``_speedups.plain_run``) over the read buffer: the whole transactions of
        the common shape it takes (up to ``max_txns``), their packets consumed; when it
        takes none (nothing consumed), False if the buffer held one, else None. ``plans``,
        ``domains`` and the first seven ``consts`` as plain_run takes them; the reader adds
        its checksum and post-header lengths. None without ``groups``."""
        conn = self._buffered_connection()
        if conn is None:
            return None
        found = run(conn._buf, conn._pos, conn.seq, max_txns, plans, domains,
                    (*consts, uses_checksum(self), self._rows_post_ok()))
        if not found:
            return found
        end, seq, taken, records, ordinal, gtids, first, xid_pos = found
        conn._pos, conn.seq = end, seq
        self.log_pos = xid_pos
        return PlainRun(records, ordinal, gtids, first, xid_pos, taken)

    def _rows_post_ok(self) -> int:
        """The rows event types whose post-header the server declares as ``_rows`` reads
        it, as a bit mask by type (worked out again when the server declares anew)."""
        lengths = post_header_lengths(self)
        if self._post_ok[0] is not lengths:
            self._post_ok = (lengths, sum(1 << etype for etype, size in _ROWS_POST_HEADER.items()
                                          if self._post_header_len(etype) == size))
        return self._post_ok[1]

    def _group(self) -> FastGroup | None:
        """The next transaction as a FastGroup if the buffer holds all of it in the common
        shape (``scan_group``), its packets consumed; else None, nothing consumed."""
        conn = self._buffered_connection()
        if conn is None:
            return None
        buf = conn._buf
        found = self._scan(buf, conn._pos, conn.seq, conn.checksum)
        if found is None:
            return None
        end, seq, frames = found
        events = []
        gtid = gtid_pos = None
        for etype, timestamp, server_id, log_pos, _flags, start, stop in frames:
            if etype == _MARIADB_ANNOTATE:
                continue
            if gtid is None:
                gtid, gtid_pos = self._gtid(buf, timestamp, server_id, start + BODY), log_pos
            elif etype == _XID:
                xid = FastXidEvent()
                xid.timestamp, xid.xid = timestamp, _U64.unpack_from(buf, start + BODY)[0]
                conn._pos, conn.seq = end, seq
                self.log_pos = log_pos
                return FastGroup(gtid, gtid_pos, events, xid, log_pos)
            else:
                raw = buf[start:stop]
                event = (self._table_map(raw, timestamp) if etype == _TABLE_MAP
                         else self._rows(raw, etype, timestamp))
                if event is None or type(event) not in self._fast_allowed:
                    return None     # a table map not seen yet, a table without decoders
                events.append((log_pos, event))
        return None

    def _buffered_connection(self) -> DumpConnection | None:
        """The dump connection when whole transactions may be taken from its read buffer
        (``groups``, compiled, nothing handed to the library or expanded pending)."""
        if not self.groups or self._scan is None:
            return None
        conn = stream_connection(self)
        if (conn is None or not conn.dumping or conn.handoff is not None
                or conn.handoff_error is not None or conn._expanded):
            return None
        return conn

    def _remember(self, event: TableMapEvent) -> None:
        """Keep the Table the library parsed, under the bytes of its map."""
        raw = packet_bytes(event.packet.packet)
        if len(self._tables) >= _TABLE_CACHE:
            self._tables.clear()
        table = self.table_map[event.table_id]
        # the fields of every FastTableMapEvent of these bytes (their timestamps differ)
        body = raw[BODY:self._body_end(raw)]
        self._tables[body] = {
            "table_id": event.table_id, "schema": table.schema, "table": table.table,
            "table_obj": table, "columns": table.columns, "primary_key": table.primary_key,
            "body": body}

    def _body_end(self, raw: bytes) -> int:
        return len(raw) - 4 if uses_checksum(self) else len(raw)

    def _fast_event(self, raw: bytes):
        """The event of ``raw`` (or _SKIP), or None: the library handles it."""
        if len(raw) < BODY or raw[0] != 0:
            return None
        etype = raw[5]
        timestamp, _type, server_id, _size, log_pos, flags = COMMON_HEADER.unpack_from(raw, 1)
        if etype not in _HOT:
            if not is_own(etype, flags):
                return None
            event = own_event(raw, uses_checksum(self))
            if log_pos:
                self.log_pos = log_pos
            return event            # whatever only_events says: never filtered out
        if etype in _SKIPPED:
            event = _SKIP
        elif etype == _MARIADB_GTID:
            event = self._gtid(raw, timestamp, server_id)
        elif etype == _XID:
            event = FastXidEvent()
            event.timestamp, event.xid = timestamp, _U64.unpack_from(raw, BODY)[0]
        elif etype == _TABLE_MAP:
            event = self._table_map(raw, timestamp)
        else:
            event = self._rows(raw, etype, timestamp)
        if event is None:
            return None
        if log_pos:
            self.log_pos = log_pos
        if event is not _SKIP and type(event) not in self._fast_allowed:
            return _SKIP      # parsed (a table map still counts) but not asked for
        return event

    @staticmethod
    def _gtid(raw: bytes, timestamp: int, server_id: int, at: int = BODY) -> FastGtidEvent:
        """The GTID event whose body starts at ``raw[at]``."""
        event = FastGtidEvent()
        seq, domain, flags = _GTID_BODY.unpack_from(raw, at)
        event.timestamp, event.server_id, event.gtid_seq_no = timestamp, server_id, seq
        event.domain_id, event.flags = domain, flags
        event.gtid = f"{domain}-{server_id}-{seq}"
        event.parsed = Gtid(MARIADB, str(domain), seq, server_id)   # what parse_gtid(gtid) gives
        return event

    def _table_map(self, raw: bytes, timestamp: int) -> FastTableMapEvent | None:
        fields = self._tables.get(raw[BODY:self._body_end(raw)])
        if fields is None:
            return None
        self.table_map[fields["table_id"]] = fields["table_obj"]
        event = FastTableMapEvent()
        event.__dict__.update(fields)
        event.timestamp = timestamp
        return event

    def _rows(self, raw: bytes, etype: int, timestamp: int) -> _FastRows | None:
        """A row event on the fast path, or None (another layout or table: the library)."""
        kind = _ROWS_V1.get(etype)
        pos = BODY + 8             # table id (6), flags (2)
        if kind is None:
            kind = _ROWS_V2[etype]
            if _U16.unpack_from(raw, pos)[0] != 2:     # extra row info: the library reads it
                return None
            pos += 2
        if self._post_header_len(etype) != pos - BODY:
            return None
        table_id = int.from_bytes(raw[BODY:BODY + 6], "little")
        table = self.table_map.get(table_id)
        if table is None:
            return None
        try:
            columns, pos = length_encoded(raw, pos)
        except ValueError:      # not a well-formed rows event: the library reads it
            return None
        width = (columns + 7) >> 3
        bitmap, pos = raw[pos:pos + width], pos + width
        bitmap2 = None
        if kind is UpdateRowsEvent:
            bitmap2, pos = raw[pos:pos + width], pos + width
        shape = self._row_shapes.get((table_id, kind, bitmap, bitmap2, columns))
        if shape is None or shape[0] is not table:
            shape = self._row_shape(table_id, table, kind, bitmap, bitmap2, columns)
            if shape is None:
                return None
        event = _FAST_OF[kind]()
        event.__dict__.update(shape[1])
        event.timestamp, event.table_map = timestamp, self.table_map
        event._decode = (shape[2], raw, pos, self._body_end(raw))
        return event

    def _row_shape(self, table_id: int, table, kind, bitmap: bytes, bitmap2: bytes | None,
                   columns: int) -> tuple | None:
        """(table, the fields every rows event of this shape has, its generated decoder),
        remembered; None where the generated decoders do not cover it."""
        decoder = table_decoder(table, kind, bitmap, bitmap2, False, columns)
        if decoder is None:
            return None
        fields = {"table_id": table_id, "_table": table, "_kind": kind, "schema": table.schema,
                  "table": table.table, "primary_key": table.primary_key,
                  "columns": table.columns, "number_of_columns": columns,
                  "columns_present_bitmap": bitmap, "_reader": self,
                  # an update's after image (partial images)
                  "columns_present_bitmap2": bitmap2}
        if len(self._row_shapes) >= _TABLE_CACHE:
            self._row_shapes.clear()
        shape = self._row_shapes[(table_id, kind, bitmap, bitmap2, columns)] = (
            table, fields, decoder)
        return shape

    def _post_header_len(self, etype: int) -> int | None:
        """The post-header length the server declared for ``etype`` (None: not declared)."""
        lengths = post_header_lengths(self)
        if not lengths or etype - 1 >= len(lengths):
            return _ROWS_POST_HEADER[etype]
        return lengths[etype - 1]

    def library_event(self, raw: bytes, kind, table_map: dict):
        """The library's event for ``raw`` (a packet payload), built as its fetchone does."""
        return library_event(self, raw, kind, table_map)


_SKIP = object()
_GROUP_CLASSES = frozenset((FastGtidEvent, FastXidEvent, FastTableMapEvent, *FAST_ROW_EVENTS))
_LIBRARY_CLASS = {FastGtidEvent: MariadbGtidEvent, FastXidEvent: XidEvent,
                  FastTableMapEvent: TableMapEvent, **FAST_ROW_EVENTS}
_ROWS_POST_HEADER = {**dict.fromkeys(_ROWS_V1, 8), **dict.fromkeys(_ROWS_V2, 10)}
