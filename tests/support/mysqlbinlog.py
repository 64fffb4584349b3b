"""MySQL 8.x binlog events built as bytes, for the replay primary and unit tests.

No recording of these exact transactions exists, so the bytes are built from MySQL's
documented format (the MySQL source, libs/mysql/binlog/event: control_events.h,
rows_event.h, statement_events.h; the MySQL Serialization Library page for the tagged
GTID event and tagged GTID sets). Bytes real servers wrote are read from the shared test
data folder instead (tests/support/shared.py), never copied here.

Every builder returns an event *body* (post-header + payload); ``Binlog`` adds the
19-byte common header, the end position and the CRC32 checksum, as a server writes them.
"""

from __future__ import annotations

import struct
import uuid as uuidlib
import zlib
from dataclasses import dataclass, field

import zstandard

# event types (MySQL binlog_event.h)
QUERY, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP = 2, 4, 15, 16, 19
WRITE_ROWS, UPDATE_ROWS, DELETE_ROWS = 30, 31, 32
GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS, TRANSACTION_PAYLOAD, GTID_TAGGED = 33, 34, 35, 40, 42
HEARTBEAT = 27
# column types (MySQL field_types.h)
LONG, VARCHAR, LONGLONG = 3, 15, 8
HEADER_LEN = 19
OK_BYTE = b"\x00"     # a dump reply's first byte when an event follows
SERVER_VERSION = "8.4.3"
# post-header lengths a MySQL 8.4/9.x server declares in its format description, by type - 1,
# each the length its event class in libs/mysql/binlog/event declares (0: none, or an event
# type the server no longer writes); tests/unit/test_binlog_framing.py checks them against the
# format descriptions real 9.0.1 and 9.6.0 servers wrote
_EVENT_TYPES = 42
_POST_HEADER = {
    QUERY: 13,                  # Query_event: thread id, time, db length, error, status length
    ROTATE: 8,                  # position
    9: 4, 11: 4, 17: 4,         # APPEND_BLOCK, DELETE_FILE, BEGIN_LOAD_QUERY: file id
    FORMAT_DESCRIPTION: 2 + 50 + 4 + 1 + _EVENT_TYPES,   # version, server, time, header, these
    18: 13 + 4 + 4 + 4 + 1,     # EXECUTE_LOAD_QUERY: Query_event's, file id, start, end, dup
    TABLE_MAP: 8,               # table id (6), flags (2)
    26: 2,                      # INCIDENT: the incident number
    WRITE_ROWS: 10, UPDATE_ROWS: 10, DELETE_ROWS: 10, 39: 10,  # table id, flags, extra length
    GTID: 42, ANONYMOUS_GTID: 42,   # flags, sid, gno, lt type, last committed, sequence number
    36: 18,                     # TRANSACTION_CONTEXT
    37: 52,                     # VIEW_CHANGE
    TRANSACTION_PAYLOAD: 40,
}
POST_HEADER_LENGTHS = bytes(_POST_HEADER.get(t, 0) for t in range(1, _EVENT_TYPES + 1))
CHECKSUM_CRC32 = 1
STMT_END_F = 1


def lenenc(n: int) -> bytes:
    """A length-encoded integer (client/server protocol)."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + struct.pack("<Q", n)


def varlen(n: int) -> bytes:
    """An unsigned integer in the MySQL serialization library's variable-length form: the
    count of trailing one bits of the first byte, plus one, is the byte count."""
    data_bits = n.bit_length()
    size = next((b for b in range(1, 9) if data_bits <= 7 * b), 9)
    if size == 9:
        return b"\xff" + struct.pack("<Q", n)
    return ((n << size) | ((1 << (size - 1)) - 1)).to_bytes(size, "little")


def varlen_signed(n: int) -> bytes:
    return varlen(n << 1 if n >= 0 else ((-(n + 1)) << 1) | 1)


# -- event bodies ---------------------------------------------------------------------

def format_description(checksum: bool = True) -> bytes:
    version = SERVER_VERSION.encode().ljust(50, b"\0")
    return (struct.pack("<H", 4) + version + struct.pack("<I", 0) + bytes([HEADER_LEN])
            + POST_HEADER_LENGTHS + bytes([CHECKSUM_CRC32 if checksum else 0]))


def rotate(position: int, name: str) -> bytes:
    return struct.pack("<Q", position) + name.encode()


def gtid_set_bytes(members: list[tuple[str, str, list[tuple[int, int]]]]) -> bytes:
    """A GTID set as Gtid_set::encode writes it: (uuid, tag, [(lo, hi) inclusive]) members;
    the tagged format (8.3+) when any member has a tag."""
    tagged = any(tag for _, tag, _ in members)
    n = len(members)
    out = struct.pack("<Q", (1 << 56) | (n << 8) | 1 if tagged else n)
    for sid, tag, intervals in members:
        out += uuidlib.UUID(sid).bytes
        if tagged:
            out += varlen(len(tag)) + tag.encode()
        out += struct.pack("<Q", len(intervals))
        for lo, hi in intervals:
            out += struct.pack("<QQ", lo, hi + 1)
    return out


def gtid(sid: str, gno: int, last_committed: int = 0, commit_us: int = 1_700_000_000_000_000,
         length: int = 0) -> bytes:
    """GTID_LOG_EVENT (33) as MySQL 8.0.14+ writes it."""
    return (b"\x00" + uuidlib.UUID(sid).bytes + struct.pack("<Q", gno) + b"\x02"
            + struct.pack("<QQ", last_committed, last_committed + 1)
            + commit_us.to_bytes(7, "little") + lenenc(length) + struct.pack("<I", 80403))


def tagged_gtid(sid: str, tag: str, gno: int, last_committed: int = 0,
                commit_us: int = 1_700_000_000_000_000) -> bytes:
    """GTID_TAGGED_LOG_EVENT (42): serialization-library message, format version 2:
    version(1), payload size, last non-ignorable field id, then (field id, value) pairs."""
    fields = (varlen(0) + varlen(0)                                          # gtid_flags
              + varlen(1) + b"".join(varlen(b) for b in uuidlib.UUID(sid).bytes)  # sid
              + varlen(2) + varlen_signed(gno)                               # gno
              + varlen(3) + varlen(len(tag)) + tag.encode()                  # tag
              + varlen(4) + varlen_signed(last_committed)                    # last_committed
              + varlen(5) + varlen_signed(last_committed + 1)                # sequence_number
              + varlen(6) + varlen(commit_us))                               # immediate ts
    lnif = varlen(6)
    fixed = 1 + len(lnif) + len(fields)     # the size counts the whole message, itself too
    size = fixed + 1
    while fixed + len(varlen(size)) != size:
        size = fixed + len(varlen(size))
    return bytes([2]) + varlen(size) + lnif + fields


def query(sql: str, db: str = "") -> bytes:
    return (struct.pack("<IIBHH", 1, 0, len(db.encode()), 0, 0) + db.encode() + b"\0"
            + sql.encode())


def xid(n: int) -> bytes:
    return struct.pack("<Q", n)


@dataclass(frozen=True)
class Column:
    name: str
    type: int
    max_bytes: int = 0      # VARCHAR: the column's byte length (chars x 4 for utf8mb4)


@dataclass(frozen=True)
class Table:
    table_id: int
    db: str
    name: str
    columns: tuple[Column, ...]
    pk: tuple[int, ...] = (0,)

    def map_body(self) -> bytes:
        """TABLE_MAP_EVENT with binlog_row_metadata=FULL optional metadata."""
        cols = self.columns
        meta = b"".join(struct.pack("<H", c.max_bytes) if c.type == VARCHAR else b""
                        for c in cols)
        numeric = [c for c in cols if c.type in (LONG, LONGLONG)]
        optional = (_tlv(1, bytes((len(numeric) + 7) // 8))                 # signedness
                    + _tlv(2, lenenc(255))                                   # default charset
                    + _tlv(4, b"".join(lenenc(len(c.name)) + c.name.encode() for c in cols))
                    + _tlv(8, b"".join(lenenc(i) for i in self.pk)))         # simple PK
        return (self.table_id.to_bytes(6, "little") + struct.pack("<H", 1)
                + bytes([len(self.db)]) + self.db.encode() + b"\0"
                + bytes([len(self.name)]) + self.name.encode() + b"\0"
                + lenenc(len(cols)) + bytes(c.type for c in cols) + lenenc(len(meta)) + meta
                + bytes((len(cols) + 7) // 8) + optional)

    def row(self, values: tuple) -> bytes:
        """One row image, every column present, none NULL."""
        out = bytes((len(self.columns) + 7) // 8)
        for col, value in zip(self.columns, values):
            if col.type == LONG:
                out += struct.pack("<i", value)
            elif col.type == LONGLONG:
                out += struct.pack("<q", value)
            else:
                data = value.encode()
                out += (bytes([len(data)]) if col.max_bytes < 256
                        else struct.pack("<H", len(data))) + data
        return out

    def rows_body(self, kind: int, images: list, flags: int = STMT_END_F) -> bytes:
        """WRITE/UPDATE/DELETE_ROWS_EVENT v2; ``images``: value tuples (update: pairs)."""
        width = (len(self.columns) + 7) // 8
        present = bytes([0xFF] * width)
        body = (self.table_id.to_bytes(6, "little") + struct.pack("<HH", flags, 2)
                + lenenc(len(self.columns)) + present + (present if kind == UPDATE_ROWS else b""))
        for image in images:
            body += (self.row(image[0]) + self.row(image[1]) if kind == UPDATE_ROWS
                     else self.row(image))
        return body


def _tlv(kind: int, value: bytes) -> bytes:
    return bytes([kind]) + lenenc(len(value)) + value


# -- whole events -----------------------------------------------------------------------

def event(etype: int, body: bytes, log_pos: int, server_id: int = 1, timestamp: int = 1_700_000_000,
          checksum: bool = True, flags: int = 0) -> bytes:
    """The event as written: common header, body, CRC32 (``checksum``)."""
    size = HEADER_LEN + len(body) + (4 if checksum else 0)
    header = struct.pack("<IBIIIH", timestamp, etype, server_id, size, log_pos, flags)
    data = header + body
    return data + struct.pack("<I", zlib.crc32(data) & 0xFFFFFFFF) if checksum else data


def payload(inner: list[tuple[int, bytes]], server_id: int = 1) -> bytes:
    """TRANSACTION_PAYLOAD_EVENT body: the inner events (no checksum, end position 0, as
    MySQL copies them from the transaction cache) compressed with zstd, after the
    header fields."""
    raw = b"".join(event(t, b, 0, server_id, checksum=False) for t, b in inner)
    data = zstandard.ZstdCompressor().compress(raw)
    return payload_header(len(data), len(raw)) + data


def payload_header(size: int, uncompressed: int, kind: int = 0) -> bytes:
    """The type-length-value header fields of a TRANSACTION_PAYLOAD_EVENT in the order
    servers write them: compression type (0 = zstd), uncompressed size, payload size, then
    the end mark."""
    return _field(2, kind) + _field(3, uncompressed) + _field(1, size) + b"\0"


def _field(kind: int, value: int) -> bytes:
    """One payload header field as Transaction_payload_event writes it: type, length and
    value each a length-encoded integer (the length counts the value's bytes)."""
    data = lenenc(value)
    return lenenc(kind) + lenenc(len(data)) + data


@dataclass
class Binlog:
    """One binlog file being written: events appended with positions and checksums."""

    name: str
    server_id: int = 1
    checksum: bool = True
    events: list[tuple[int, bytes]] = field(default_factory=list)   # (start position, bytes)
    gtids: dict[int, tuple[str, str, int]] = field(default_factory=dict)  # start -> uuid, tag, gno

    def __post_init__(self):
        self.add(FORMAT_DESCRIPTION, format_description(self.checksum))
        self.add(PREVIOUS_GTIDS, gtid_set_bytes([]))

    @property
    def end(self) -> int:
        return self.events[-1][0] + len(self.events[-1][1]) if self.events else 4

    def add(self, etype: int, body: bytes, flags: int = 0) -> int:
        """Append one event; returns its end position."""
        start = self.end
        size = HEADER_LEN + len(body) + (4 if self.checksum else 0)
        self.events.append((start, event(etype, body, start + size, self.server_id,
                                         checksum=self.checksum, flags=flags)))
        return start + size

    def transaction(self, inner: list[tuple[int, bytes]], sid: str | None = None, gno: int = 0,
                    tag: str = "", compressed: bool = False) -> int:
        """A GTID (``sid``:``tag``:``gno``; none without ``sid``), then ``inner`` as such or
        in one TRANSACTION_PAYLOAD_EVENT; returns the end position."""
        if sid is not None:
            self.gtids[self.end] = (sid, tag, gno)
            self.add(GTID_TAGGED if tag else GTID,
                     tagged_gtid(sid, tag, gno) if tag else gtid(sid, gno))
        else:       # gtid_mode=OFF: MySQL 8 still opens each transaction with one
            self.add(ANONYMOUS_GTID, gtid("00000000-0000-0000-0000-000000000000", 0))
        if compressed:
            return self.add(TRANSACTION_PAYLOAD, payload(inner, self.server_id))
        for etype, body in inner:
            self.add(etype, body)
        return self.end


def row_transaction(table: Table, kind: int, images: list, xid_no: int) -> list[tuple[int, bytes]]:
    """BEGIN, table map, one rows event, XID: a single-statement row transaction."""
    return [(QUERY, query("BEGIN")), (TABLE_MAP, table.map_body()),
            (kind, table.rows_body(kind, images)), (XID, xid(xid_no))]
