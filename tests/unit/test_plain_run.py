"""The compiled run of whole buffered transactions (``cachesync._speedups.plain_run``)
against the Python path, on synthetic MariaDB packets.

For random rows of every column type, the run must write exactly the records the Python
path writes from the same bytes (the generated decoder, the row images trimmed to the
kept columns, ``hotpath.record``), with each transaction's GTID, ordinal and row indexes;
and wherever the Python path would decide something itself (the decoder gives up, the row
writer hands a row back, a partial image, a table map without a plan, a GTID that does not
advance) the run must stop before that transaction, never write it differently.

tests/integration/test_hotpath_differential.py runs both paths over a real server's binlog.
"""

from __future__ import annotations

import random
import struct

import pytest
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
from pymysqlreplication.table import Table

from cachesync.producer_outbox.decode import fastrows, rowdecode
from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.ports import Record
from cachesync.producer_outbox.publish.kafka_publisher import MAX_RECORD_BYTES
from cachesync.producer_outbox.encode.rowevents import row_images
from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.schema.values import canonical_text, to_json
from tests.unit.test_fastrows_unit import LAYOUT, column, row_image
from tests.unit.test_scan_group import (GTID, TABLE_MAP, XID, event, gtid_body, packets,
                                       with_crc)

speedups = pytest.importorskip("cachesync._speedups", reason="the C accelerator is not built")
pytestmark = pytest.mark.skipif(hotpath.compiled_run() is None,
                                reason="the compiled run is not built or switched off")

WRITE, UPDATE, DELETE = 30, 31, 32
OPS = {WRITE: (WriteRowsEvent, "insert"), UPDATE: (UpdateRowsEvent, "update"),
       DELETE: (DeleteRowsEvent, "delete")}
POST_OK = sum(1 << t for t in (23, 24, 25, 30, 31, 32))
SERVER, TABLE_ID = "mariadb:1", 7
DECODED = rowdecode.COMPILED_KINDS
MAP_BODY = TABLE_ID.to_bytes(6, "little") + b"\x00\x00\x02db\x00\x01t\x00"


def _layout_columns():
    return [c for c, _ in LAYOUT]


def rows_event(etype: int, ncols: int, body: bytes, bitmap: bytes | None = None,
               table_id: int = TABLE_ID, log_pos: int = 300) -> bytes:
    full = bitmap or bytes([0xFF]) * ((ncols + 7) // 8)
    bitmaps = full * (2 if etype == UPDATE else 1)
    head = table_id.to_bytes(6, "little") + b"\x00\x00" + struct.pack("<H", 2)
    return event(etype, head + bytes([ncols]) + bitmaps + body, log_pos=log_pos)


def transaction(gno: int, middle: list[bytes], domain: int = 0) -> list[bytes]:
    return [event(GTID, gtid_body(gno, domain), log_pos=gno * 1000 + 100), *middle,
            event(XID, struct.pack("<Q", gno), log_pos=gno * 1000 + 900)]


def run(payloads: list[bytes], plans: dict, domains: dict | None = None, ordinal: int = 0,
        checksum: bool = False):
    if checksum:
        payloads = [with_crc(p) for p in payloads]
    consts = ("gtid", SERVER, ordinal, MAX_RECORD_BYTES, to_json, canonical_text, Record,
              checksum, POST_OK)
    return speedups.plain_run(packets(payloads), 0, 1, 256, plans, domains or {}, consts)


def plan_of(columns, keep, pk="long"):
    specs = rowdecode.compiled_columns(rowdecode.table_plan(columns), keep)
    assert specs is not None
    return speedups.compile_plan("db", "t", "binlog", pk, specs)


def python_records(columns, keep, etype: int, body: bytes, ctx: TxnContext, pk="long"):
    """What the Python path publishes for one rows event's bytes, or None where it decides
    itself (the generated decoder gives up, or the row writer hands a row back)."""
    cls, op = OPS[etype]
    full = bytes([0xFF]) * ((len(columns) + 7) // 8)
    decoder = fastrows.table_decoder(Table(TABLE_ID, "db", "t", columns), cls, full,
                                     full if cls is UpdateRowsEvent else None, False,
                                     len(columns))
    try:
        rows = decoder(body + b"\0\0\0\0", 0, len(body))
    except fastrows.GIVE_UP:
        return None
    if rows is None:
        return None
    out = []
    for index, row in enumerate(rows):
        before, after = row_images(op, row)
        written = hotpath.record(ctx, index, "db", "t", op, pk, before, after,
                                 MAX_RECORD_BYTES, keep)
        if written is None:
            return None
        out.append(Record("db", "t", *written))
    return out


def _kept(rng, columns) -> frozenset:
    """The primary key and a random share of the columns the compiled run decodes."""
    decodable = [c.name for c in columns if rowdecode.column_plan(c).kind in DECODED]
    return frozenset({"long", *rng.sample(decodable, rng.randint(0, len(decodable)))})


@pytest.mark.parametrize("garbage", [0.0, 0.03])
@pytest.mark.parametrize("etype", [WRITE, UPDATE, DELETE])
def test_random_rows_of_every_type_make_the_python_paths_records(etype, garbage):
    """Valid values, and (``garbage``) some arbitrary bytes among them: where the Python
    path gives up on those, the run stops before their transaction."""
    rng = random.Random(f"plain-{etype}-{garbage}")
    columns = _layout_columns()
    images = 2 if etype == UPDATE else 1
    outcomes = {"taken": 0, "stopped": 0}
    for trial in range(150):
        keep = _kept(rng, columns)
        plans = {MAP_BODY: plan_of(columns, keep)}
        payloads, expected, gno, stopped = [], [], 10, False
        for _ in range(rng.randint(1, 4)):
            body = b"".join(row_image(rng, LAYOUT, range(len(columns)), garbage)
                            for _ in range(rng.randint(1, 3) * images))
            gno += 1
            ctx = TxnContext(SERVER, f"0-7-{gno}", gno, 1700000000.0, gtid=True)
            want = python_records(columns, keep, etype, body, ctx)
            payloads += transaction(gno, [event(TABLE_MAP, MAP_BODY, log_pos=200),
                                          rows_event(etype, len(columns), body)])
            if want is None:
                stopped = True
            if not stopped:
                expected += want
        found = run(payloads, plans)
        if not expected and stopped and found is False:
            outcomes["stopped"] += 1
            continue
        assert found, f"trial {trial}: nothing taken, Python wrote {len(expected)}"
        assert found[3] == expected, f"trial {trial}"
        outcomes["taken" if not stopped else "stopped"] += 1
    if garbage:       # most transactions hold a value the Python path gives up on
        assert outcomes["stopped"] > 100, outcomes
    else:             # most runs are taken whole
        assert outcomes["taken"] > 30 and outcomes["stopped"] > 3, outcomes


def test_the_run_reports_positions_gtids_and_ordinals():
    columns = [column("long", 3), column("s", 15, charset="utf8mb4", max_length=40)]
    plans = {MAP_BODY: plan_of(columns, frozenset({"long", "s"}))}
    body = b"\x00" + struct.pack("<i", 5) + b"\x02hi"
    payloads = [p for gno in (6, 7) for p in transaction(
        gno, [event(TABLE_MAP, MAP_BODY, log_pos=200), rows_event(WRITE, 2, body)])]
    buf = packets(payloads)
    end, seq, taken, records, ordinal, gtids, first, xid_pos = run(payloads, plans,
                                                                   {0: 5}, ordinal=40)
    assert (end, seq % 256, taken) == (len(buf), (1 + len(payloads)) % 256, 2)
    assert ordinal == 42 and gtids == {0: (7, 7)} and xid_pos == 7900
    assert first == ("0-7-6", 1700000000, 41)
    assert [type(r) for r in records] == [Record, Record]
    ctx = TxnContext(SERVER, "0-7-7", 42, 1700000000.0, gtid=True)
    assert records[1] == Record("db", "t", *hotpath.record(
        ctx, 0, "db", "t", "insert", "long", None, {"long": 5, "s": "hi"}, MAX_RECORD_BYTES,
        None))
    assert run(payloads, plans, {0: 5}, ordinal=40, checksum=True)[3] == records
    # a byte of the second transaction's rows changed: its CRC32 fails, the run stops before
    # it (the per-event path names the error); changed in the first, the run takes none
    for index, taken in ((len(payloads) // 2 + 2, 1), (2, None)):
        damaged = [with_crc(p) for p in payloads]
        damaged[index] = damaged[index][:-9] + bytes([damaged[index][-9] ^ 1]) + damaged[index][-8:]
        found = speedups.plain_run(packets(damaged), 0, 1, 256, plans, {0: 5}, (
            "gtid", SERVER, 40, MAX_RECORD_BYTES, to_json, canonical_text, Record, True, POST_OK))
        assert (found and found[2]) == taken


def test_unmapped_tables_make_no_records_and_annotations_are_skipped():
    other = (8).to_bytes(6, "little") + b"\x00\x00\x02db\x00\x01u\x00"
    columns = [column("long", 3)]
    plans = {MAP_BODY: plan_of(columns, None), other: None}
    payloads = transaction(3, [event(160, b"INSERT ..."), event(TABLE_MAP, other),
                               rows_event(WRITE, 1, b"\x00" + b"\x09\0\0\0", table_id=8),
                               event(TABLE_MAP, MAP_BODY),
                               rows_event(WRITE, 1, b"\x00" + b"\x01\0\0\0")])
    found = run(payloads, plans)
    assert found[2] == 1 and [r.key for r in found[3]] == ["db.t:1"]


@pytest.mark.parametrize("case", ["no plan", "partial image", "not newer", "no map",
                                  "extra row info", "trailing bytes"])
def test_what_the_python_path_decides_stops_the_run_before_its_transaction(case):
    columns = [column("long", 3), column("n", 3)]
    plans = {MAP_BODY: plan_of(columns, None)}
    good = transaction(3, [event(TABLE_MAP, MAP_BODY),
                           rows_event(WRITE, 2, b"\x00" + struct.pack("<ii", 1, 2))])
    rows = rows_event(WRITE, 2, b"\x00" + struct.pack("<ii", 3, 4))
    tmap = event(TABLE_MAP, MAP_BODY)
    if case == "no plan":
        tmap = event(TABLE_MAP, MAP_BODY[:-1] + b"\x01")
    elif case == "partial image":
        rows = rows_event(WRITE, 2, b"\x00" + struct.pack("<i", 3), bitmap=b"\x01")
    elif case == "no map":
        rows = rows_event(WRITE, 2, b"\x00" + struct.pack("<ii", 3, 4), table_id=9)
    elif case == "extra row info":
        rows = rows[:20 + 8] + struct.pack("<H", 5) + b"\x00\x00\x00" + rows[20 + 10:]
    elif case == "trailing bytes":
        rows += b"\x00"
    second = transaction(2 if case == "not newer" else 4, [tmap, rows])
    found = run(good + second, plans)
    assert found[2] == 1 and found[1] == 1 + len(good)     # stopped after the first
    # none taken of a whole one: False (None: the buffer held none)
    assert run(second, plans, {0: 3} if case == "not newer" else None) is False
    assert run(second[:-1], plans) is None


def test_compile_plan_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="column spec"):
        speedups.compile_plan("db", "t", "binlog", "id", ((99, 0, 0, None, None),))
    with pytest.raises(ValueError, match="column spec"):    # a kind only the twin reads
        speedups.compile_plan("db", "t", "binlog", "id", ((rowdecode.Kind.JSON, 4, 0, "j", None),))
