"""The binlog stream below both readers: compressed events expanded, every event type ruled on.

Both readers (``dumpstream.DumpStreamReader`` and ``LibraryStreamReader``, the plain
python-mysql-replication path) read their packets through a ``FramedConnection``, which
once the dump started:

* verifies each event's CRC32 when the stream carries checksums (``checksums.verify``): an
  event whose bytes are not what the server wrote stops the reader with a named error;
* expands compressed events (``compressed.expand``) into the plain events they hold, so
  nothing above sees compression;
* makes table maps of newer servers readable by the library (``tablemaps.readable``:
  optional metadata it does not know skipped, VECTOR columns read as their bytes), and
  format descriptions whose server version it cannot parse (``serverversion.readable``);
* hands the events the library has no exact reading of to cachesync itself
  (``eventtypes.is_own``): a tagged GTID becomes a ``TaggedGtidEvent`` (a GtidEvent), any
  event that may carry rows cachesync cannot decode an ``UndecodedEvent``, which the tailer
  turns into table-level invalidation. Everything else is the library's.
* writes the GTID set of COM_BINLOG_DUMP_GTID itself (``schema.gtid.encode_gtid_set``), as
  the library's encoder knows no tags.

The checksum setting comes from the library's own choice: it sends
``SET @master_binlog_checksum`` on the stream connection exactly when it strips checksums.
"""

from __future__ import annotations

import struct
import uuid as uuidlib
from collections import deque
from dataclasses import dataclass

from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent

from cachesync.producer_outbox.binlog.reading import DECODE_ERRORS
from cachesync.producer_outbox.binlog.checksums import verify
from cachesync.producer_outbox.binlog.compressed import expand
from cachesync.producer_outbox.binlog.eventtypes import (EXPANDED_TYPES, FORMAT_DESCRIPTION,
                                                         GTID_TAGGED, LIBRARY_ROWS, TABLE_MAP,
                                                         event_type, is_own)
from cachesync.producer_outbox.binlog.packets import BODY, COMMON_HEADER, CRC
from cachesync.runtime.library_adapter import (PacketConnection, opened_connection,
                                                       packet_bytes)
from cachesync.producer_outbox.binlog.serverversion import readable as readable_version
from cachesync.producer_outbox.binlog.tablemaps import readable
from cachesync.schema.gtid import MYSQL, Gtid, GtidState, encode_gtid_set

COM_QUERY, COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID = 0x03, 0x12, 0x1E
_REWRITTEN = frozenset((TABLE_MAP, FORMAT_DESCRIPTION))    # made readable for the library
_MAP_CACHE = 4096       # table-map bodies whose rewriting is remembered (cleared when full)
# COM_BINLOG_DUMP_GTID as the library writes it: command, flags (2), server id (4), name
# size (4) = 3, name (3), position (8), data size (4), data
_DUMP_GTID_FIXED = 1 + 2 + 4 + 4 + 3 + 8
# what the library encodes when the set holds tags (its encoder knows none); the connection
# replaces the encoding with the real set's before it is sent
_STANDIN = "00000000-0000-0000-0000-000000000001:1"


class OwnEvent(Exception):
    """Raised inside the library's fetchone: the next packet is one cachesync reads itself."""

    def __init__(self, raw: bytes):
        super().__init__()
        self.raw = raw


class FramedConnection(PacketConnection):
    """A pymysql connection that expands compressed events and marks cachesync's own."""

    dumping = False
    checksum = False
    gtid_set = None          # callable: the GtidState to send in COM_BINLOG_DUMP_GTID
    last_raw: bytes | None = None   # the packet the library read last (RowsGuarded)
    _expanded: deque[bytes] | None = None     # events of an expanded one, not read yet
    _map_rewrites: dict[bytes, bool] | None = None    # table-map body -> readable() rewrites it

    def write_bytes(self, data) -> None:
        if len(data) > 4 and data[4] in (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID):
            self.dumping = True
            self._expanded = deque()
            if data[4] == COM_BINLOG_DUMP_GTID and self.gtid_set is not None:
                data = _dump_gtid(bytes(data), self.gtid_set())
        elif len(data) > 4 and data[4] == COM_QUERY and b"@master_binlog_checksum" in data:
            self.checksum = True
        self.pymysql_write_bytes(data)

    def next_raw(self) -> bytes:
        """The next packet payload, compressed events expanded; raises BinlogChecksumError
        for an event whose CRC32 does not verify (``checksums``)."""
        if self._expanded:
            return self._expanded.popleft()
        while True:
            raw = self._wire_raw()
            if self.checksum:
                verify(raw)
            # inline: this runs once per event on the hot path
            if len(raw) <= 5 or raw[5] not in EXPANDED_TYPES or raw[0] != 0:
                if len(raw) <= 5 or raw[5] not in _REWRITTEN:
                    return raw
                return (self._readable_map(raw) if raw[5] == TABLE_MAP
                        else readable_version(raw, self.checksum))
            if self._expanded is None:
                self._expanded = deque()
            self._expanded.extend(readable(e, self.checksum) for e in expand(raw, self.checksum))
            if self._expanded:
                return self._expanded.popleft()

    def _readable_map(self, raw: bytes) -> bytes:
        """``tablemaps.readable`` of a table-map packet. A table's map comes with each of its
        transactions and almost none needs rewriting: whether one does is remembered per
        body (without the header and checksum, which change with the position)."""
        body = raw[BODY:len(raw) - CRC] if self.checksum else raw[BODY:]
        rewrites = self._map_rewrites
        if rewrites is None:
            rewrites = self._map_rewrites = {}
        known = rewrites.get(body)
        if known is False:
            return raw
        out = readable(raw, self.checksum)
        if known is None:
            if len(rewrites) >= _MAP_CACHE:
                rewrites.clear()
            rewrites[body] = out is not raw
        return out

    def _wire_raw(self) -> bytes:
        """The next packet from the server (pymysql's reading; error packets raise)."""
        return packet_bytes(self.pymysql_read_packet(MysqlPacket))

    def read_packet(self, packet_type=MysqlPacket):
        if not self.dumping:
            return self.pymysql_read_packet(packet_type)
        raw = self.last_raw = self.next_raw()
        if len(raw) >= BODY and raw[0] == 0 and is_own(raw[5], _flags(raw)):
            raise OwnEvent(raw)
        return packet_type(raw, self.encoding)


def _flags(raw: bytes) -> int:
    return raw[18] | raw[19] << 8


def _dump_gtid(packet: bytes, state: GtidState) -> bytes:
    """The library's COM_BINLOG_DUMP_GTID packet with ``state`` encoded by cachesync."""
    data = encode_gtid_set(state)
    payload = packet[4:4 + _DUMP_GTID_FIXED] + struct.pack("<I", len(data)) + data
    return len(payload).to_bytes(3, "little") + packet[3:4] + payload


# -- cachesync's own events ------------------------------------------------------------

class TaggedGtidEvent(GtidEvent):
    """A MySQL 8.3+ GTID_TAGGED_LOG_EVENT, as the tailer reads a GtidEvent: ``gtid`` is
    ``uuid:tag:gno``, ``parsed`` the Gtid it stands for."""

    def __init__(self, gtid: Gtid, timestamp: int, server_id: int, log_pos: int):  # noqa: D107
        self.parsed, self.timestamp, self.server_id, self.log_pos = (gtid, timestamp, server_id,
                                                                     log_pos)
        self.sid, self.gno, self.flags = gtid.source, gtid.ordinal, 0

    @property
    def gtid(self) -> str:
        return str(self.parsed)

    def __repr__(self) -> str:
        return f"<TaggedGtidEvent {self.parsed}>"


@dataclass(frozen=True)
class UndecodedEvent:
    """An event that may carry row changes cachesync cannot decode exactly (eventtypes):
    the tailer invalidates ``table_id``'s table (when the event names one) or every mapped
    table, naming ``name`` in its WARNING."""

    code: int
    name: str
    table_id: int | None
    timestamp: int
    server_id: int
    log_pos: int


def own_event(raw: bytes, checksum: bool):
    """The TaggedGtidEvent or UndecodedEvent of packet ``raw``; raises ValueError for a
    tagged GTID event whose bytes do not parse."""
    timestamp, code, server_id, _size, log_pos, flags = COMMON_HEADER.unpack_from(raw, 1)
    body = raw[BODY:len(raw) - CRC] if checksum else raw[BODY:]
    if code == GTID_TAGGED:
        return TaggedGtidEvent(parse_tagged_gtid(body), timestamp, server_id, log_pos)
    kind = event_type(code, flags)
    table_id = int.from_bytes(body[:6], "little") if kind.rows_shaped and len(body) >= 6 else None
    return UndecodedEvent(code, kind.name, table_id, timestamp, server_id, log_pos)


def parse_tagged_gtid(body: bytes) -> Gtid:
    """The GTID of a GTID_TAGGED_LOG_EVENT body: a MySQL serialization-library message,
    format version 2: version (1 byte), message size, last non-ignorable field id, then
    (field id, value) pairs: 1 the uuid (16 varlen bytes), 2 the gno (signed varlen), 3 the
    tag (varlen size + bytes); others are skipped by their known sizes where cachesync needs
    none of them, so only fields 0-3 are read, in the order the server writes them."""
    if not body or body[0] != 2:
        raise ValueError(f"tagged GTID event of serialization version {body[:1].hex()}, not 2")
    size, at = _varlen(body, 1)
    _last, at = _varlen(body, at)
    end = min(size, len(body))
    sid, gno, tag = None, None, ""
    while at < end and (sid is None or gno is None or not tag):
        field, at = _varlen(body, at)
        if field == 0:                       # gtid flags
            _, at = _varlen(body, at)
        elif field == 1:
            octets = []
            for _ in range(16):
                value, at = _varlen(body, at)
                octets.append(value)
            sid = str(uuidlib.UUID(bytes=bytes(octets)))
        elif field == 2:
            value, at = _varlen(body, at)
            gno = value >> 1 if not value & 1 else -(value >> 1) - 1
        elif field == 3:
            length, at = _varlen(body, at)
            tag, at = body[at:at + length].decode("ascii").lower(), at + length
        else:
            break                            # fields after the tag: not needed
    if sid is None or gno is None or gno <= 0:
        raise ValueError("tagged GTID event without a uuid or a positive gno")
    return Gtid(MYSQL, f"{sid}:{tag}" if tag else sid, gno)


def _varlen(data: bytes, at: int) -> tuple[int, int]:
    """A serialization-library variable-length unsigned integer at ``at``."""
    first, ones = data[at], 0
    while ones < 8 and first >> ones & 1:
        ones += 1
    if ones == 8:
        return struct.unpack_from("<Q", data, at + 1)[0], at + 9
    size = ones + 1
    if at + size > len(data):
        raise ValueError("tagged GTID event ends inside an integer")
    return int.from_bytes(data[at:at + size], "little") >> size, at + size


# -- the readers' shared parts ------------------------------------------------------------

class GtidPositioned:
    """A stream reader whose ``auto_position`` may hold tagged GTIDs: the library is given a
    set it can parse, and the connection sends the real one (FramedConnection.gtid_set).

    Without a GTID state it connects by file and position on both flavors: the library's
    MariaDB connection ignores the file and position (it sends position 4 of the first
    file), so it is told the server is MariaDB only while it connects by GTID."""

    _auto_position_text: str | None = None
    _mariadb = False

    @property
    def is_mariadb(self) -> bool:
        return self._mariadb and bool(self._auto_position_text)

    @is_mariadb.setter
    def is_mariadb(self, value: bool) -> None:
        self._mariadb = value

    @property
    def auto_position(self):
        text = self._auto_position_text
        if not text or self._mariadb:
            return text
        return _STANDIN if ":" in text and _has_tag(text) else text

    @auto_position.setter
    def auto_position(self, text) -> None:
        self._auto_position_text = text

    def resume_from(self, gtid: str) -> None:
        """Reconnect (after a lost connection) from the GTID state ``gtid``."""
        self.auto_position = gtid

    def _framed(self, conn: FramedConnection) -> FramedConnection:
        conn.gtid_set = lambda: GtidState.parse(self._auto_position_text)
        return conn


def _has_tag(text: str) -> bool:
    state = GtidState.parse(text)
    return any(tag for _, tag, _ in state.members())


class RowsGuarded:
    """A stream reader whose rows events the library cannot even construct (their bytes
    malformed: a header, a bitmap or a count that does not fit the event) come back as an
    UndecodedEvent of their table id, which the tailer invalidates at table level, rather
    than as an error that would stop the tailer at that event after every restart. Any
    other event the library cannot decode raises the library's error."""

    def fetchone(self):
        conn = opened_connection(self)     # (none before the first connect)
        if conn is not None:
            conn.last_raw = None
        try:
            return super().fetchone()
        except DECODE_ERRORS as e:
            raw = getattr(opened_connection(self), "last_raw", None)
            if raw is None or len(raw) < BODY + 6 or raw[0] != 0 or raw[5] not in LIBRARY_ROWS:
                raise
            timestamp, code, server_id, _size, log_pos, _ = COMMON_HEADER.unpack_from(raw, 1)
            self.log_pos = log_pos
            return UndecodedEvent(code, f"{event_type(code, 0).name} the library cannot read "
                                  f"({type(e).__name__}: {str(e)[:120]})",
                                  int.from_bytes(raw[BODY:BODY + 6], "little"), timestamp,
                                  server_id, log_pos)


class LibraryStreamReader(GtidPositioned, RowsGuarded, BinLogStreamReader):
    """python-mysql-replication's reader on a FramedConnection: compressed events expanded,
    cachesync's own events returned from ``fetchone`` (module doc)."""

    def __init__(self, *args, **kwargs):
        kwargs["pymysql_wrapper"] = lambda **settings: self._framed(FramedConnection(**settings))
        super().__init__(*args, **kwargs)

    def fetchone(self):
        try:
            return super().fetchone()
        except OwnEvent as own:
            event = own_event(own.raw, opened_connection(self).checksum)
            if getattr(event, "log_pos", 0):
                self.log_pos = event.log_pos
            return event
