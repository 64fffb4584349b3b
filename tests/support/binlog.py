"""Binlog events built for unit tests of the tailer, no server.

GTID and XID events are built by python-mysql-replication's own classes from bytes made
here as the server sends them (post-header layout from the MySQL/MariaDB sources); row
events carry the attributes the library exposes once it decoded a row (schema,
table, primary_key, rows), because decoding rows needs a table map from a server.
"""

from __future__ import annotations

import struct
import types
import uuid

from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import TableMapEvent, UpdateRowsEvent

from cachesync.runtime.library_adapter import cache_rows
from cachesync.producer_outbox.binlog.preflight import ServerInfo
from cachesync.schema.event import decode
from cachesync.schema.mapping import parse_mappings

# server UUIDs made up for these tests (UUID sorts before OTHER)
UUID = "1c2d3e4f-5a6b-4c7d-8e9f-a0b1c2d3e4f5"
OTHER = "6a7b8c9d-0e1f-4a2b-8c3d-4e5f6a7b8c9d"
MYSQL = ServerInfo("mysql", 1, UUID, {}, ())
MARIADB = ServerInfo("mariadb", 1, None, {}, ())
MAPPINGS = parse_mappings({"app.users": {"keys": ["user:{id}", "user:email:{email}"]}})
COMMIT_TS = 1_700_000_000


class _Packet:
    """What BinLogPacketWrapper gives an event constructor: header fields + a reader."""

    def __init__(self, event_type: int, payload: bytes, server_id: int = 1):
        self.event_type, self.timestamp, self.server_id = event_type, COMMIT_TS, server_id
        self._data, self.read_bytes = payload, 0

    def read(self, size):
        out, self._data = self._data[:size], self._data[size:]
        self.read_bytes += size
        return out

    def read_uint8(self):
        return struct.unpack("<B", self.read(1))[0]

    def read_uint32(self):
        return struct.unpack("<I", self.read(4))[0]

    def read_uint64(self):
        return struct.unpack("<Q", self.read(8))[0]


class _Ctl:
    def _get_dbms(self):
        return "mysql"


def mysql_gtid(sid: str, gno: int) -> GtidEvent:
    # Gtid_log_event: commit_flag(1) sid(16) gno(8) lt_type(1) last_committed(8) sequence_number(8)
    payload = (b"\x00" + uuid.UUID(sid).bytes + struct.pack("<Q", gno) + b"\x02"
               + struct.pack("<QQ", gno - 1, gno))
    return GtidEvent(_Packet(0x21, payload), len(payload), {}, _Ctl(), mysql_version=(8, 0, 36))


def mariadb_gtid(domain: int, server: int, seq: int) -> MariadbGtidEvent:
    # Gtid_log_event (MariaDB): seq_no(8) domain_id(4) flags(1); server id from the header
    payload = struct.pack("<QIB", seq, domain, 0)
    return MariadbGtidEvent(_Packet(0xA2, payload, server), len(payload), {}, _Ctl())


def xid(n: int) -> XidEvent:
    return XidEvent(_Packet(0x10, struct.pack("<Q", n)), 8, {}, _Ctl())


def rows(cls, *images, table="users"):
    """A decoded row event as python-mysql-replication yields it."""
    event = object.__new__(cls)
    event.schema, event.table, event.primary_key, event.timestamp = "app", table, "id", COMMIT_TS
    if cls is UpdateRowsEvent:
        decoded = [{"before_values": b, "after_values": a} for b, a in images]
    else:
        decoded = [{"values": v} for v in images]
    cache_rows(event, decoded)             # what RowsEvent.rows returns once fetched
    event.complete = False                 # no packet behind it: fastrows steps aside
    event.table_id = TABLE_IDS[table]
    event.table_map = {event.table_id: types.SimpleNamespace(columns=[])}   # no typed columns
    return event


TABLE_IDS = {"users": 25, "orders": 26}


def table_map(schema: str, table: str, table_id: int) -> TableMapEvent:
    event = object.__new__(TableMapEvent)
    event.schema, event.table, event.table_id = schema, table, table_id
    return event


def with_table_maps(events):
    """The stream as the server sends it: each row event preceded by its table's map."""
    out = []
    for event in events:
        if hasattr(event, "table_id") and not isinstance(event, TableMapEvent):
            out.append(table_map(event.schema, event.table, event.table_id))
        out.append(event)
    return out


def u(i, email):
    return {"id": i, "email": email}


class _Stream(list):
    """The reader's iteration plus the position attributes the tailer reads."""
    log_file, log_pos, auto_position = "binlog.000003", 4, None
    closed = False

    def resume_from(self, gtid: str) -> None:
        self.auto_position = gtid

    def close(self) -> None:
        self.closed = True


class _Publisher:
    def __init__(self):
        self.sent = []

    def send(self, topic, key, value, msg_id, on_ack, on_error, partition=None, flush=None):
        self.sent.append((key, decode(value)))
        on_ack()

    def flush(self, timeout_s=None):
        pass


class _Checkpoints:
    in_order = True         # one resume position, as MySQLCheckpointStore (ports.CheckpointStore)

    def __init__(self):
        self.saved = []

    def save(self, cp):
        self.saved.append(cp)
