"""The tailer on recorded binlog events, MySQL and MariaDB GTIDs, no server.

GTID and XID events are built by python-mysql-replication's own classes from the
bytes the server sends (post-header layout from the MySQL/MariaDB sources); row
events carry the attributes the library exposes once it decoded a row (schema,
table, primary_key, rows), because decoding rows needs a table map from a server.
"""

import struct
import uuid

import pymysql
import pytest
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import (DeleteRowsEvent, TableMapEvent, UpdateRowsEvent,
                                          WriteRowsEvent)

from cachesync.producer_outbox.checkpoint import Checkpoint
from cachesync.producer_outbox.mysql import MySQLParams
from cachesync.producer_outbox.preflight import ServerInfo
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from cachesync.schema.errors import RetryableError
from cachesync.schema.event import decode
from cachesync.schema.ids import binlog_message_id, binlog_version
from cachesync.schema.mapping import parse_mappings

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
OTHER = "4c9e3dfc-9d25-11e9-8d2e-0242ac1cfd7e"
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
    event._RowsEvent__rows = decoded       # what RowsEvent.rows returns once fetched
    event.complete = False                 # no packet behind it: fastrows steps aside
    event.table_id = TABLE_IDS[table]
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


class _Publisher:
    def __init__(self):
        self.sent = []

    def send(self, topic, key, value, msg_id, on_ack, on_error, partition=None):
        self.sent.append((key, decode(value)))
        on_ack()

    def flush(self, timeout_s=None):
        pass


class _Checkpoints:
    def __init__(self):
        self.saved = []

    def save(self, cp):
        self.saved.append(cp)


def tail(events, info, start_gtid):
    publisher, checkpoints = _Publisher(), _Checkpoints()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, checkpoints, MAPPINGS,
                    TailerOptions(topic="t", checkpoint_interval_s=0))
    tailer._loop(_Stream(with_table_maps(events)), info, Checkpoint(info.identity, start_gtid, "binlog.000003", 4))
    tailer._save_checkpoint()
    return publisher.sent, [cp.gtid for cp in checkpoints.saved]


MYSQL_EVENTS = [
    mysql_gtid(UUID, 6), rows(WriteRowsEvent, u(1, "a@x"), u(2, "b@x")), xid(100),
    mysql_gtid(UUID, 7), rows(UpdateRowsEvent, (u(1, "a@x"), u(1, "a2@x"))), xid(101),
    mysql_gtid(OTHER, 1), rows(DeleteRowsEvent, u(2, "b@x")), xid(102),
    mysql_gtid(UUID, 8), rows(WriteRowsEvent, u(9, "z@x"), table="orders"), xid(103),  # unmapped
]


def test_library_parses_the_recorded_gtid_bytes():
    assert mysql_gtid(UUID, 6).gtid == f"{UUID}:6"
    assert mariadb_gtid(0, 1, 42).gtid == "0-1-42"


def test_mysql_gtid_set_checkpoints_ids_and_versions():
    sent, checkpoints = tail(MYSQL_EVENTS, MYSQL, f"{UUID}:1-5")
    events = [e for _, e in sent]
    assert [(e.op, e.source.position, e.source.row_index) for e in events] == [
        ("insert", f"{UUID}:6", 0), ("insert", f"{UUID}:6", 1),
        ("update", f"{UUID}:7", 0), ("delete", f"{OTHER}:1", 0)]
    assert [e.id for e in events] == [binlog_message_id(UUID, f"{UUID}:6", 0),
                                      binlog_message_id(UUID, f"{UUID}:6", 1),
                                      binlog_message_id(UUID, f"{UUID}:7", 0),
                                      binlog_message_id(UUID, f"{OTHER}:1", 0)]
    assert [e.version for e in events] == [binlog_version(6, 0), binlog_version(6, 1),
                                           binlog_version(7, 0), binlog_version(1, 0)]
    assert [k for k, _ in sent] == ["app.users:1", "app.users:2", "app.users:1", "app.users:2"]
    # one checkpoint per transaction boundary, each a merged GTID set; the unmapped
    # transaction still advances it (its GTID is executed, nothing to publish)
    assert list(dict.fromkeys(checkpoints)) == [f"{UUID}:1-6", f"{UUID}:1-7",
                                                f"{UUID}:1-7,{OTHER}:1", f"{UUID}:1-8,{OTHER}:1"]


def test_mysql_replay_and_resume_give_the_same_ids():
    first, _ = tail(MYSQL_EVENTS, MYSQL, f"{UUID}:1-5")
    again, _ = tail(MYSQL_EVENTS, MYSQL, f"{UUID}:1-5")
    assert [e.id for _, e in again] == [e.id for _, e in first]
    # restart after the first transaction: the server sends what the set lacks
    resumed, checkpoints = tail(MYSQL_EVENTS[3:], MYSQL, f"{UUID}:1-6")
    assert [e.id for _, e in resumed] == [e.id for _, e in first[2:]]
    assert checkpoints[-1] == f"{UUID}:1-8,{OTHER}:1"


def test_mariadb_gtids_keep_their_ids_and_state():
    events = [mariadb_gtid(0, 1, 42), rows(WriteRowsEvent, u(1, "a@x")), xid(1),
              mariadb_gtid(1, 2, 7), rows(DeleteRowsEvent, u(1, "a@x")), xid(2)]
    sent, checkpoints = tail(events, MARIADB, "0-1-41")
    assert [e.id for _, e in sent] == [binlog_message_id("mariadb:1", "0-1-42", 0),
                                       binlog_message_id("mariadb:1", "1-2-7", 0)]
    assert [e.version for _, e in sent] == [binlog_version(42, 0), binlog_version(7, 0)]
    assert list(dict.fromkeys(checkpoints)) == ["0-1-42", "0-1-42,1-2-7"]


def test_gtid_inside_an_open_transaction_restarts_from_the_checkpoint():
    events = [mysql_gtid(UUID, 6), rows(WriteRowsEvent, u(1, "a@x")), mysql_gtid(UUID, 6)]
    with pytest.raises(RetryableError, match="inside transaction"):
        tail(events, MYSQL, f"{UUID}:1-5")


@pytest.mark.parametrize("info, gtid, is_mariadb", [
    (MYSQL, f"{UUID}:1-8,{OTHER}:1", False),
    (MARIADB, "0-1-42,1-2-7", True),
])
def test_resume_asks_the_server_by_gtid(info, gtid, is_mariadb):
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), _Publisher(), _Checkpoints(), MAPPINGS,
                    TailerOptions(topic="t"))
    stream = tailer._open_stream(info, Checkpoint(info.identity, gtid, "binlog.000003", 4))
    assert (stream.auto_position, stream.is_mariadb) == (gtid, is_mariadb)


class _Cursor:
    """Answers the tailer's first-start queries the way MySQL 8.0 with gtid_mode=ON does."""

    def __init__(self, answers):
        self._answers, self._row = answers, None

    def execute(self, sql):
        if sql not in self._answers:       # e.g. SHOW BINARY LOG STATUS before MySQL 8.2
            raise pymysql.err.ProgrammingError(1064, f"You have an error in your SQL syntax: {sql}")
        self._row = self._answers[sql]

    def fetchone(self):
        return self._row

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Server:
    def __init__(self, answers):
        self.answers = answers

    def connect(self, **_):
        server = self

        class Conn:
            def cursor(self):
                return _Cursor(server.answers)

            def close(self):
                pass
        return Conn()


@pytest.mark.parametrize("status", ["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"])  # 8.4 / 8.0
@pytest.mark.parametrize("mode, executed, expected", [
    ("ON", f"{OTHER.upper()}:1-3,\n{UUID}:1-5", f"{UUID}:1-5,{OTHER}:1-3"),
    ("ON", "", None),                           # GTIDs on, nothing executed yet
    ("OFF", "", None),                          # file:pos only
])
def test_first_start_on_mysql_begins_at_gtid_executed(status, mode, executed, expected):
    server = _Server({"SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_executed": (mode, executed),
                      status: ("binlog.000007", 1234)})
    tailer = Tailer(server, _Publisher(), _Checkpoints(), MAPPINGS, TailerOptions(topic="t"))
    assert tailer._current_position(MYSQL) == Checkpoint(UUID, expected, "binlog.000007", 1234)
