"""Rows events whose bytes do not divide into rows: the library's row loop bounded by the
event (``libraryrows``), the generated decoders stepping aside, and the tailer invalidating
the table (a value) instead of stalling or stopping. Real events of this kind come from the
fuzz test (tests/unit/test_binlog_fuzz.py); these are the same shapes, built by hand."""

from __future__ import annotations

import pytest
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from cachesync.producer_outbox.decode import fastrows
from cachesync.producer_outbox.binlog.libraryrows import MalformedRowsError, library_rows
from tests.unit.test_fastrows_unit import column, event

COLUMNS = [column("id", FIELD_TYPE.LONG), column("n", FIELD_TYPE.TINY)]
ROW = b"\x00" + (7).to_bytes(4, "little") + b"\x05"      # null bitmap, id 7, n 5


def test_rows_are_the_librarys_and_cached_on_the_event():
    ev = event(WriteRowsEvent, COLUMNS, ROW * 2)
    rows = library_rows(ev)
    assert [r["values"] for r in rows] == [{"id": 7, "n": 5}] * 2
    assert ev.rows is rows


@pytest.mark.parametrize("kind", [WriteRowsEvent, UpdateRowsEvent])
def test_no_column_present_is_malformed_not_an_endless_loop(kind):
    """A columns-present bitmap of zeros: every row is zero bytes long, so the library's
    ``while read_bytes < event_size`` would append empty rows until memory runs out."""
    ev = event(kind, COLUMNS, ROW, bitmaps=[b"\x00", b"\x00"])
    assert fastrows.decode_rows(ev) is None       # the generated decoder steps aside
    with pytest.raises(MalformedRowsError, match="consumed no bytes"):
        library_rows(ev)


def test_a_row_past_the_events_end_is_malformed():
    ev = event(WriteRowsEvent, COLUMNS, ROW + ROW[:3], packet_tail=ROW[3:] + b"\0\0\0\0")
    with pytest.raises(MalformedRowsError, match="past the event"):
        library_rows(ev)


def test_an_undecodable_rows_event_invalidates_its_table_and_the_tailer_goes_on(caplog):
    from tests.support.binlog import COMMIT_TS, mariadb_gtid, rows, u, xid
    from tests.unit.test_row_edges import _tail
    broken = event(WriteRowsEvent, COLUMNS, ROW, bitmaps=[b"\x00"], table="users")
    broken.schema, broken.primary_key, broken.timestamp = "app", "id", COMMIT_TS
    tailer, sent = _tail([mariadb_gtid(0, 1, 42), broken, xid(1),
                          mariadb_gtid(0, 1, 43), rows(WriteRowsEvent, u(2, "b@x")), xid(2)])
    assert [(e.op, e.extra.get("reason")) for e in sent] == [
        ("truncate", "undecodable_rows"), ("truncate", "undecodable_rows"), ("insert", None)]
    assert tailer.undecodable_rows == 1
    assert ("app.users at 0-1-42: the rows event at binlog.000003:" in caplog.text
            and "cannot be decoded (MalformedRowsError" in caplog.text)


class _Failing:
    """The library's reader, reading ``raw`` and failing to construct its event; its stream
    connection is ``conn`` (the test points framing's ``opened_connection`` at it)."""

    def __init__(self, raw: bytes, error: Exception):
        self.conn = type("Conn", (), {"last_raw": None})()
        self._raw, self._error, self.log_pos = raw, error, 0

    def fetchone(self):
        self.conn.last_raw = self._raw
        raise self._error


def _packet(etype: int, body: bytes) -> bytes:
    import struct
    return b"\0" + struct.pack("<IBIIIH", 1_700_000_000, etype, 9, 19 + len(body), 4321, 0) + body


def test_a_rows_event_the_library_cannot_construct_is_an_undecoded_event_of_its_table(
        monkeypatch):
    from cachesync.producer_outbox.binlog import framing
    from cachesync.producer_outbox.binlog.framing import RowsGuarded, UndecodedEvent
    monkeypatch.setattr(framing, "opened_connection", lambda reader: reader.conn)

    class Reader(RowsGuarded, _Failing):
        pass
    reader = Reader(_packet(30, (1234).to_bytes(6, "little") + b"\x01\x00\x02\x00\x03"),
                    AssertionError("Result length not requested length"))
    event = reader.fetchone()
    assert isinstance(event, UndecodedEvent)
    assert (event.code, event.table_id, event.server_id, event.log_pos) == (30, 1234, 9, 4321)
    assert "AssertionError: Result length" in event.name and reader.log_pos == 4321
    table_map = Reader(_packet(19, bytes(12)), ValueError("0 is not a valid MetadataFieldType"))
    with pytest.raises(ValueError, match="MetadataFieldType"):     # not a rows event: it stands
        table_map.fetchone()
