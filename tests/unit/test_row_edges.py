"""Rows at the edges, pure: partial row images, TIME2 bytes, MariaDB INET4/INET6/UUID text."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest

from cachesync.producer_outbox.decode.images import RowImages, absent_columns, known_images
from cachesync.producer_outbox.decode.keycolumns import time2_delta
from cachesync.schema.keytext import inet4_text, inet6_text, time_text, uuid_text
from tests.support.fakedb import FakeConnection

NAMES = ["id", "email", "name", "bio"]


@pytest.mark.parametrize("bitmap, absent", [
    (b"\x0f", set()), (b"\xff", set()), (b"\x01", {"email", "name", "bio"}),
    (b"\x0b", {"name"}), (b"", set(NAMES)), (None, set())])
def test_absent_columns_read_the_bitmap(bitmap, absent):
    assert absent_columns(bitmap, NAMES) == absent


def test_minimal_update_carries_unchanged_columns_from_the_before_image():
    row = known_images("update", {"id": 3, "email": None, "name": None, "bio": None},
                       {"id": None, "email": "new@x", "name": None, "bio": None},
                       (frozenset({"email", "name", "bio"}), frozenset({"id", "name", "bio"})))
    assert row == RowImages({"id": 3}, {"id": 3, "email": "new@x"},
                            frozenset({"email", "name", "bio"}), frozenset({"name", "bio"}))
    assert row.absent() == {"before": ["bio", "email", "name"], "after": ["bio", "name"]}
    assert row.unknown({"id", "email"}) == {"email"}


def test_full_nodup_after_image_is_completed_exactly():
    before = {"id": 1, "email": "a@x", "name": "n", "bio": "b"}
    row = known_images("update", before, {"id": None, "email": None, "name": "m", "bio": None},
                       (frozenset(), frozenset({"id", "email", "bio"})))
    assert row.after == {"id": 1, "email": "a@x", "name": "m", "bio": "b"}
    assert row.unknown(NAMES) == frozenset()


@pytest.mark.parametrize("op, absent, before, after", [
    ("insert", (frozenset({"bio"}), frozenset({"bio"})), None, {"id": 1, "email": "e", "name": "n"}),
    ("delete", (frozenset({"bio"}), frozenset({"bio"})), {"id": 1, "email": "e", "name": "n"}, None),
])
def test_single_image_events_use_their_one_bitmap(op, absent, before, after):
    image = {"id": 1, "email": "e", "name": "n", "bio": None}
    row = known_images(op, image if before else None, image if after else None, absent)
    assert (row.before, row.after) == (before, after)
    assert row.unknown({"bio"}) == {"bio"}


def time2_bytes(value: dt.timedelta, fsp: int) -> tuple[int, int]:
    """The server's TIME2 bytes of ``value`` (my_time_packed_to_binary), split as the
    decoders read them: the 3-byte integer part and the fraction."""
    micro = abs(value) // dt.timedelta(microseconds=1)
    seconds, frac = divmod(micro, 1_000_000)
    hms = (seconds // 3600) << 12 | (seconds // 60 % 60) << 6 | seconds % 60
    packed = ((hms << 24) + frac) * (-1 if value < dt.timedelta(0) else 1)
    nbytes = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}[fsp]
    if nbytes == 3:
        whole = packed + (0x800000 << 24)
        return whole >> 24, whole & 0xFFFFFF
    intpart = packed >> 24                          # arithmetic: floor
    rest = packed - (intpart << 24)                 # 0 <= rest < 2**24
    if nbytes == 0:
        return intpart + 0x800000, 0
    if rest and packed < 0:                         # C's truncating % on a negative value
        rest -= 1 << 24
    unit = 10000 if nbytes == 1 else 100
    return intpart + 0x800000, (rest // unit) % (1 << 8 * nbytes)


@pytest.mark.parametrize("text, fsp", [
    ("-00:00:00.000001", 6), ("-00:00:01.000001", 6), ("-838:59:58.999999", 6),
    ("00:00:00.999999", 6), ("-00:00:00.00001", 5), ("-00:00:00.0001", 4),
    ("-01:02:03.9999", 4), ("-00:00:01.500", 3), ("-00:00:00.01", 2), ("-00:00:00.1", 1),
    ("-838:59:59", 0), ("00:00:00", 0), ("12:34:56.5", 1)])
def test_time2_reads_negative_fractions_as_the_server(text, fsp):
    sign = -1 if text.startswith("-") else 1
    h, m, s = text.lstrip("-").split(":")
    value = sign * dt.timedelta(hours=int(h), minutes=int(m), seconds=float(s))
    value = dt.timedelta(microseconds=round(value / dt.timedelta(microseconds=1)))
    assert time_text(time2_delta(*time2_bytes(value, fsp), fsp), fsp) == text


@pytest.mark.parametrize("address, text", [
    ("::1", "::1"), ("::", "::"), ("2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"),
    ("::ffff:1.2.3.4", "::ffff:1.2.3.4"), ("::1.2.3.4", "::1.2.3.4"),
    ("1:0:2:3:4:5:6:7", "1::2:3:4:5:6:7"),     # MariaDB shortens a single zero word too
    ("1:0:0:2:0:0:0:3", "1:0:0:2::3"), ("fe80::", "fe80::"), ("1:0:0:2:3:0:0:4", "1::2:3:0:0:4"),
])
def test_inet6_text_is_mariadbs(address, text):
    assert inet6_text(ipaddress.IPv6Address(address).packed) == text


def test_inet4_and_uuid_text():
    assert inet4_text(bytes([10, 0, 0, 1])) == "10.0.0.1"
    raw = bytes.fromhex("123e4567e89b12d3a456426655440000")
    assert uuid_text(raw) == "123e4567-e89b-12d3-a456-426655440000"


def test_source_id_enters_message_ids_only_when_set():
    from cachesync.producer_outbox.decode.rows import TxnContext, row_change, table_change
    one = TxnContext("mariadb:1", "0-1-42", 42, 0.0, gtid=True)
    named_a = TxnContext("mariadb:1", "0-1-42", 42, 0.0, gtid=True, cluster="east")
    named_b = TxnContext("mariadb:9", "0-1-42", 42, 0.0, gtid=True, cluster="west")
    ids = [row_change(c, 0, "d", "t", "insert", "id", None, {"id": 1}).id
           for c in (one, named_a, named_b)]
    assert ids[0] == row_change(TxnContext("other", "0-1-42", 42, 0.0, gtid=True), 0, "d", "t",
                                "insert", "id", None, {"id": 1}).id   # unchanged: GTID only
    assert len(set(ids)) == 3
    # a replica of cluster "east" (another server) gives east's ids
    replica = TxnContext("mariadb:2", "0-1-42", 42, 0.0, gtid=True, cluster="east")
    assert row_change(replica, 0, "d", "t", "insert", "id", None, {"id": 1}).id == ids[1]
    assert (table_change(named_a, 0, 0, "d", "t", "partition", "x").id
            != table_change(named_b, 0, 0, "d", "t", "partition", "x").id)


# -- the tailer on partial images, no server (tests/support/binlog) ------------------------

def _partial(event, bitmap: bytes, bitmap2: bytes | None = None):
    """``event`` as logged with these columns-present bitmaps (columns id, email)."""
    import types

    from pymysqlreplication.constants import FIELD_TYPE
    cols = [types.SimpleNamespace(name=n, type=FIELD_TYPE.LONG) for n in ("id", "email")]
    event.table_map = {event.table_id: types.SimpleNamespace(columns=cols)}
    event.columns_present_bitmap = bitmap
    if bitmap2 is not None:
        event.columns_present_bitmap2 = bitmap2
    return event


def _tail(events, row_filter=None):
    from cachesync.runtime.config import TailerSettings
    from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
    from cachesync.runtime.mysql import MySQLParams
    from cachesync.producer_outbox.tailer import Tailer, TailerOptions
    from tests.support.binlog import MAPPINGS, MARIADB, _Checkpoints, _Stream, with_table_maps

    class Publisher(__import__("tests.support.binlog", fromlist=["_Publisher"])._Publisher):
        def partitions(self, topic):
            return [0, 1]
    publisher = Publisher()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(), MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1),
                                  row_filter=row_filter))
    tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps(events)), MARIADB,
                 Checkpoint(MARIADB.identity, "0-1-41", "binlog.000003", 4)))
    return tailer, [e for _, e in publisher.sent]


def _refuse_all(tables=None):
    def refuse(db, table, row):
        seen.append((db, table, dict(row)))
        return False
    seen: list = []
    if tables is not None:
        refuse.tables = tables
    return refuse, seen


@pytest.mark.parametrize("tables, published", [
    (None, 0),                                  # a filter of every table sees every row
    (frozenset({("app", "users")}), 0),         # one that names the table too
    (frozenset({("cachesync", "cachesync_heartbeat")}), 2),    # not this one: never asked
])
def test_a_row_filter_sees_the_trimmed_rows_of_the_tables_it_names(tables, published):
    from pymysqlreplication.row_event import WriteRowsEvent

    from tests.support.binlog import mariadb_gtid, rows, xid
    row_filter, seen = _refuse_all(tables)
    image = {"id": 1, "email": "a@x", "unmapped": "z"}
    _, sent = _tail([mariadb_gtid(0, 1, 42), rows(WriteRowsEvent, image, {**image, "id": 2}),
                     xid(1)], row_filter)
    assert len(sent) == published
    assert seen == ([] if published else [("app", "users", {"id": 1, "email": "a@x"}),
                                           ("app", "users", {"id": 2, "email": "a@x"})])
    assert [e.after for e in sent] == ([] if not published else
                                       [{"id": 1, "email": "a@x"}, {"id": 2, "email": "a@x"}])


def test_the_heartbeat_filter_names_its_table():
    from cachesync.producer_outbox.binlog.heartbeat import own_rows_only
    from cachesync.schema.event import HEARTBEAT_TABLE
    keep = own_rows_only("state", "me")
    assert keep.tables == {("state", HEARTBEAT_TABLE)}
    assert keep("state", HEARTBEAT_TABLE, {"name": "me"}) and not keep(
        "state", HEARTBEAT_TABLE, {"name": "other"})


def test_minimal_update_publishes_what_it_knows_and_invalidates_the_table():
    from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

    from tests.support.binlog import mariadb_gtid, rows, u, xid
    update = _partial(rows(UpdateRowsEvent, ({"id": 1, "email": None}, {"id": None, "email": "n@x"})),
                      b"\x01", b"\x02")
    tailer, sent = _tail([mariadb_gtid(0, 1, 42), update, xid(1),
                          mariadb_gtid(0, 1, 43), rows(WriteRowsEvent, u(2, "b@x")), xid(2)])
    row, *tables, later = sent
    assert (row.op, row.pk, row.before, row.after) == ("update", (("id", 1),), {"id": 1},
                                                       {"id": 1, "email": "n@x"})
    assert row.extra["absent"] == {"before": ["email"], "after": []}
    assert [(t.op, t.extra["reason"]) for t in tables] == [("truncate", "partial_row_image")] * 2
    assert later.op == "insert"              # the tailer goes on
    assert (tailer.partial_rows, tailer.table_events, tailer.unkeyable) == (1, 1, 0)


def test_a_row_that_cannot_be_keyed_invalidates_its_table_and_the_tailer_goes_on():
    from pymysqlreplication.row_event import DeleteRowsEvent, WriteRowsEvent

    from tests.support.binlog import mariadb_gtid, rows, u, xid
    keyless = _partial(rows(DeleteRowsEvent, {"id": None, "email": "a@x"}), b"\x02")
    tailer, sent = _tail([mariadb_gtid(0, 1, 42), keyless, xid(1),
                          mariadb_gtid(0, 1, 43), rows(WriteRowsEvent, u(2, "b@x")), xid(2)])
    assert [(e.op, e.extra.get("reason")) for e in sent] == [
        ("truncate", "unkeyable_row"), ("truncate", "unkeyable_row"), ("insert", None)]
    assert tailer.unkeyable == 1


def test_a_row_value_of_a_type_it_cannot_encode_invalidates_its_table_and_goes_on(caplog):
    """A column value type the event encoder does not know (a library upgrade may bring one)
    is a data problem, not an exception: at the same row after every restart it would stop
    the tailer for every table."""
    from pymysqlreplication.row_event import WriteRowsEvent

    from tests.support.binlog import mariadb_gtid, rows, u, xid
    odd = rows(WriteRowsEvent, {"id": 1, "email": complex(1, 2)})
    tailer, sent = _tail([mariadb_gtid(0, 1, 42), odd, xid(1),
                          mariadb_gtid(0, 1, 43), rows(WriteRowsEvent, u(2, "b@x")), xid(2)])
    assert [(e.op, e.extra.get("reason")) for e in sent] == [
        ("truncate", "unkeyable_row"), ("truncate", "unkeyable_row"), ("insert", None)]
    assert tailer.unkeyable == 1
    assert "a row whose key or value cannot be rendered (TypeError" in caplog.text


def test_a_table_without_primary_key_is_keyed_with_its_nulls():
    from cachesync.schema.keys import kafka_key
    assert kafka_key("d", "t", (("a", None), ("b", "\\N"), ("c", 1))) == "d.t:\\N,\\\\N,1"


class _Conn(FakeConnection):
    """A connection answering information_schema with ``rows``; counts the queries."""

    def __init__(self, rows, queries):
        self.rows, self.queries = rows, queries

    def execute(self, sql, args):
        self.versioning = "SYSTEM VERSIONED" in sql     # read with the types: none here
        if not self.versioning:
            self.queries.append(args)

    def fetchall(self):
        return [] if self.versioning else self.rows

    def close(self):
        pass


def test_column_types_are_read_at_start_on_first_use_and_after_ddl():
    from cachesync.producer_outbox.decode.servertypes import ColumnTypes
    queries = []
    types = ColumnTypes(lambda: _Conn([("d", "T", "Ip", "inet6")], queries), [("d", "t")])
    types.load()
    assert types.of("d", "t") == (("ip", "inet6"),) and len(queries) == 1
    assert types.of("d", "matched") == () and len(queries) == 2    # a pattern's table: once
    assert types.of("d", "matched") == () and len(queries) == 2
    types.after_ddl("ALTER TABLE t MODIFY ip INET6", "d")
    types.after_ddl("ALTER TABLE unrelated ADD x INT", "d")
    assert len(queries) == 3


def test_column_types_unreadable_keep_what_is_known_and_are_not_asked_per_event():
    import pymysql

    from cachesync.producer_outbox.decode.servertypes import ColumnTypes
    attempts = []

    def down():
        attempts.append(1)
        raise pymysql.err.OperationalError(2003, "down")
    types = ColumnTypes(down, [("d", "t")])
    types.load()
    assert types.of("d", "t") == () and types.of("d", "t") == () and len(attempts) == 1


def test_a_rows_event_plan_is_reused_per_table_map_and_made_again_after_a_types_reload(
        monkeypatch):
    """What every rows event of one table map shares (mapping, kept columns, key-text specs)
    is worked out once, and again once the column types were reloaded (a DDL naming the
    table): the key text then follows the new types."""
    from pymysqlreplication.row_event import WriteRowsEvent

    from cachesync.producer_outbox.encode import rowevents
    from cachesync.producer_outbox.decode.matched import MatchedTables
    from cachesync.producer_outbox.encode.rowevents import RowEncoder
    from cachesync.producer_outbox.decode.rows import TxnContext
    from cachesync.producer_outbox.decode.servertypes import ColumnTypes
    from tests.support.binlog import MAPPINGS, rows, u

    asked = []
    real = rowevents.kept_specs
    monkeypatch.setattr(rowevents, "kept_specs",
                        lambda table, keep, types=(): asked.append(types) or real(table, keep, types))
    answer = [[]]
    types = ColumnTypes(lambda: _Conn(answer[0], []), [("app", "users")])
    types.load()
    encoder = RowEncoder(MAPPINGS, MatchedTables(MAPPINGS), types=types)
    event = rows(WriteRowsEvent, u(1, "a@x"))
    ctx = TxnContext("mariadb:1", "0-1-42", 42, 0.0, gtid=True)
    for _ in range(3):
        encoder.rows_to_records(event, ctx, 0, "app", "users", lambda: "here")
    assert asked == [()]                        # once for three events of one table map
    answer[0] = [("app", "users", "email", "inet6")]
    types.after_ddl("ALTER TABLE users MODIFY email INET6", "app")
    encoder.rows_to_records(event, ctx, 0, "app", "users", lambda: "here")
    assert asked == [(), (("email", "inet6"),)]
