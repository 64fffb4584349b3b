"""MySQL JSON columns through both readers and the tailer (jsoncolumns, fastrows, jsonrows).

Row events are real pymysqlreplication events around bytes recorded from MySQL servers (the
shared folder's recorded/mysql-binary-json.json, sources in its README, read at test time)
or, where marked "built", bytes made here from MySQL's documented row and diff formats; the
texts expected after a diff are worked out here from the recorded document's text. No
server: the tailer runs on its in-memory ports.
"""

from __future__ import annotations

import json
import logging
import struct

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import PartialUpdateRowsEvent, UpdateRowsEvent, WriteRowsEvent
from pymysqlreplication.table import Table

from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.decode import fastrows, jsoncolumns
from cachesync.producer_outbox.decode import mysqljson as mj
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.decode.images import ABSENT, PARTIAL_IMAGE, known_images
from cachesync.runtime.library_adapter import (bare_rows_event, bare_wrapper,
                                                       packet_bytes, set_packet_bytes)
from cachesync.runtime.mysql import MySQLParams
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from cachesync.schema.event import INVALIDATE_ONLY
from cachesync.schema.mapping import parse_mappings
from tests.support.binlog import COMMIT_TS, MYSQL, UUID, _Checkpoints, _Publisher, _Stream
from tests.support.binlog import mysql_gtid, table_map, xid
from tests.support.shared import recorded
from tests.unit.test_fastrows_unit import check, column, event

PARTIAL_JSON = 1              # the after image's value_options bit for partial JSON

# recorded from real MySQL servers (shared recorded/, sources in its README); a module
# without the shared folder skips (fails under CI)
_RECORDED = recorded("mysql-binary-json.json")
PARTIAL_AFTER_COLUMNS = _RECORDED["PARTIAL_AFTER_COLUMNS"]
PARTIAL_AFTER_IMAGE = _RECORDED["PARTIAL_AFTER_IMAGE"]
RECORDED_DOCS = _RECORDED["RECORDED_DOCS"]
RECORDED_ROWS = _RECORDED["RECORDED_ROWS"]

I = FIELD_TYPE    # noqa: E741


# -- both readers give the server's text ------------------------------------------------------

T10 = [column("c1", I.JSON, length_size=4), column("c2", I.NEWDECIMAL, precision=10, decimals=0)]


@pytest.mark.parametrize("body, text", RECORDED_ROWS)
def test_recorded_rows_read_the_same_text_in_both_readers(body, text):
    ev = event(WriteRowsEvent, T10, body, table="t10")
    assert check(ev, must_decode=True) == "decoded"          # fast path == library path
    assert ev.rows[0]["values"]["c1"] == text


def test_json_documents_read_the_same_text_in_both_readers():
    """Built rows (null bitmap, 4-byte length, the recorded document) of every recorded
    document, in one event: both readers give each document's server text."""
    columns = [column("id", I.LONG), column("doc", I.JSON, length_size=4)]
    body = b"".join(b"\0" + struct.pack("<iI", i, len(d)) + d
                    for i, (d, _) in enumerate(RECORDED_DOCS))
    ev = event(WriteRowsEvent, columns, body, table="docs")
    assert check(ev, must_decode=True) == "decoded"
    assert [r["values"]["doc"] for r in ev.rows] == [t for _, t in RECORDED_DOCS]


def test_undecodable_json_is_a_decode_error_on_both_paths():
    """Not binary JSON: the fast path steps aside and the library raises JsonError (a
    ValueError, which the tailer turns into its decode error naming the table)."""
    columns = [column("id", I.LONG), column("doc", I.JSON, length_size=4)]
    # a type byte between STRING (0x0C) and OPAQUE (0x0F) that the format does not define
    not_a_type = mj.STRING + 1
    ev = event(WriteRowsEvent, columns,
               b"\0" + struct.pack("<iI", 1, 2) + bytes([not_a_type, 1]), table="baddocs")
    assert fastrows.decode_rows(ev) is None
    with pytest.raises(mj.JsonError):
        ev.rows


# -- partial updates, decoded by the library with cachesync's JSON reader --------------------

def partial_event(columns, body: bytes, table: str = "p"):
    """A PARTIAL_UPDATE_ROWS_EVENT positioned at its rows (what the library builds for type 39
    in both readers: the fast reader hands that type to the library)."""
    wrapper = bare_wrapper(MysqlPacket(body + b"\0\0\0\0", "utf8"),
                           event_type=BINLOG.PARTIAL_UPDATE_ROWS_EVENT)
    full = bytes([0xFF]) * ((len(columns) + 7) // 8)
    return bare_rows_event(
        PartialUpdateRowsEvent, wrapper, table_map={7: Table(7, "app", table, columns)},
        table_id=7, schema="app", table=table, columns=columns, number_of_columns=len(columns),
        event_type=BINLOG.PARTIAL_UPDATE_ROWS_EVENT, event_size=len(body), complete=True,
        columns_present_bitmap=full, columns_present_bitmap2=full, primary_key="id",
        timestamp=COMMIT_TS)


def test_recorded_partial_after_image_with_empty_diffs_keeps_the_before_documents():
    """The recorded after image (go-mysql) carries empty diff vectors for its three JSON
    columns; the before image (built, FULL) holds documents; applied, they are unchanged."""
    columns = [column(f"c{i}", t, **m) for i, (t, m) in enumerate(PARTIAL_AFTER_COLUMNS)]
    docs = [RECORDED_DOCS[0], RECORDED_DOCS[3], RECORDED_DOCS[4]]
    before = (b"\0" + PARTIAL_AFTER_IMAGE[3:11]
              + b"".join(struct.pack("<I", len(d)) + d for d, _ in docs)
              + PARTIAL_AFTER_IMAGE[-14:])
    ev = partial_event(columns, before + PARTIAL_AFTER_IMAGE)
    assert check(ev, must_decode=True) == "decoded"          # fast path == library path
    row, unknown = jsoncolumns.resolve_partial(ev.rows[0])
    assert unknown == ()
    assert [row["after_values"][f"c{i}"] for i in (2, 3, 4)] == [t for _, t in docs]
    # the INT columns around them, where the after image holds them: after value options,
    # partial bits and null bitmap (a byte each) the first; the last is the image's end
    first, last = (struct.unpack_from("<i", PARTIAL_AFTER_IMAGE, at)[0]
                   for at in (3, len(PARTIAL_AFTER_IMAGE) - 4))
    assert row["after_values"]["c0"] == first and row["after_values"]["c7"] == last


def diff_vector(*diffs: bytes) -> bytes:
    body = b"".join(diffs)
    return struct.pack("<I", len(body)) + body


def replace(path: str, doc: bytes) -> bytes:
    """Built (Json_diff::write_binary): REPLACE, net-length path, net-length value."""
    return bytes([mj.REPLACE, len(path)]) + path.encode() + bytes([len(doc)]) + doc


DOC_COLUMNS = [column("id", I.LONG), column("doc", I.JSON, length_size=4)]
BEFORE_DOC = RECORDED_DOCS[4]          # an object with a string member "a" and an array
SMALL_DOC = RECORDED_DOCS[1]           # a one-member object
# the text MySQL prints for BEFORE_DOC after the diff of partial_update (``$.a`` replaced by
# 7): members keep their order, ", " and ": " separate
A_IS_7 = json.dumps({**json.loads(BEFORE_DOC[1]), "a": 7})


def partial_update(before_has_doc: bool = True, table: str = "p"):
    """Built: one PARTIAL_UPDATE row: before image (FULL, or MINIMAL without the JSON
    column), after image with value_options=PARTIAL_JSON, partial bit set, and a diff
    replacing $.a with 7."""
    doc = BEFORE_DOC[0]
    if before_has_doc:
        before, bitmap = b"\0" + struct.pack("<iI", 5, len(doc)) + doc, bytes([0b11])  # both
    else:
        before, bitmap = b"\0" + struct.pack("<i", 5), bytes([0b01])   # the id only
    after = bytes([PARTIAL_JSON, 0b1]) + b"\0" + struct.pack("<i", 5) + diff_vector(
        replace("$.a", bytes([mj.INT16, 7, 0])))
    ev = partial_event(DOC_COLUMNS, before + after, table)
    ev.columns_present_bitmap = bitmap
    return ev


@pytest.mark.parametrize("before_has_doc", [True, False])
def test_both_readers_read_a_partial_update_alike(before_has_doc):
    ev = partial_update(before_has_doc)
    assert check(ev, must_decode=True) == "decoded"
    after = ev.rows[0]["after_values"]["doc"]
    assert isinstance(after, mj.JsonDiffs) and len(after.diffs) == 1


def test_a_diff_is_applied_to_the_before_document():
    row, unknown = jsoncolumns.resolve_partial(partial_update().rows[0])
    assert unknown == ()
    assert row["after_values"]["doc"] == A_IS_7
    assert row["before_values"]["doc"] == BEFORE_DOC[1]


def test_a_diff_without_its_before_document_leaves_the_after_value_unknown():
    row, unknown = jsoncolumns.resolve_partial(partial_update(before_has_doc=False).rows[0])
    assert unknown == ("doc",)
    assert row["after_values"]["doc"] is None
    assert row["after_none_sources"]["doc"] == jsoncolumns.UNKNOWN_AFTER


def test_an_unknown_after_value_is_never_carried_from_the_before_image():
    """A column the after image leaves out keeps its before value (images.known_images); a
    JSON column whose diff could not be applied changed: it is unknown, not carried."""
    images = known_images("update", {"id": 5, "doc": '{"a": 1}'}, {"id": 5, "doc": None},
                          (frozenset(), frozenset()))
    marked = jsoncolumns.unknown_after(images, ("doc",))
    assert marked.after == {"id": 5} and marked.unknown_after == {"doc"}
    assert marked.before == images.before
    assert jsoncolumns.unknown_after(images, ()) is images


# -- the tailer -----------------------------------------------------------------------------

class _Partitioned(_Publisher):
    def partitions(self, topic):
        return [0, 1]


def tail(spec: dict, update) -> tuple[list, Tailer]:
    """Run the tailer over one MySQL transaction holding ``update``; (sent events, tailer)."""
    events = [mysql_gtid(UUID, 42), table_map("app", update.table, 7), update, xid(1)]
    publisher = _Partitioned()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(),
                    parse_mappings({f"app.{update.table}": spec}),
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    tailer.pipeline.run(tailer.binlog_source(_Stream(events), MYSQL, Checkpoint(MYSQL.identity, f"{UUID}:1-41", "b.1", 4)))
    return [e for _, e in publisher.sent], tailer


def test_the_tailer_publishes_the_applied_document_in_update_mode():
    sent, tailer = tail({"keys": ["p:{id}"], "mode": "update"}, partial_update())
    assert [(e.op, e.after["doc"]) for e in sent] == [("update", A_IS_7)]
    assert not sent[0].extra and tailer.json_unknown == 0


def test_an_unknown_value_goes_out_invalidate_only_with_a_warning(caplog):
    """MINIMAL before image (no document) + a diff: the after value is unknown; update mode
    invalidates the row's keys (fenced deletes) and writes no value, as for any partial image."""
    with caplog.at_level(logging.WARNING):
        sent, tailer = tail({"keys": ["p:{id}"], "mode": "update"}, partial_update(False))
    assert [(e.op, e.pk, e.extra.get(INVALIDATE_ONLY)) for e in sent] == [
        ("update", (("id", 5),), PARTIAL_IMAGE)]
    assert "doc" not in sent[0].after                    # no value to write
    assert sent[0].extra[ABSENT] == {"before": ["doc"], "after": ["doc"]}
    assert tailer.json_unknown == 1
    assert "app.p" in caplog.text and "column(s) doc not logged" in caplog.text


def test_an_unknown_key_field_invalidates_the_table(caplog):
    with caplog.at_level(logging.WARNING):
        sent, tailer = tail({"keys": ["p:{id}", "p:doc:{doc}"]}, partial_update(False))
    assert [(e.op, e.extra.get(INVALIDATE_ONLY)) for e in sent[:1]] == [("update", PARTIAL_IMAGE)]
    assert [(e.op, e.table, e.extra["reason"]) for e in sent[1:]] == [
        ("truncate", "p", PARTIAL_IMAGE)] * 2               # one copy per partition
    assert tailer.json_unknown == 1 and tailer.table_events == 1
    assert "app.p" in caplog.text and "invalidating the table as a whole" in caplog.text


def test_an_unknown_column_the_mapping_does_not_read_costs_nothing():
    sent, tailer = tail({"keys": ["p:{id}"]}, partial_update(False))
    assert [(e.op, e.pk, e.extra.get(INVALIDATE_ONLY)) for e in sent] == [
        ("update", (("id", 5),), None)]
    assert tailer.json_unknown == 1 and tailer.table_events == 0


def test_a_diff_the_before_document_rejects_is_reported(caplog):
    """FULL before image whose document lacks the replaced member (built; MySQL's replica
    rejects the same diff): the value is unknown, keys invalidated, a WARNING names why."""
    ev = partial_update()
    set_packet_bytes(ev.packet.packet, packet_bytes(ev.packet.packet).replace(b"$.a", b"$.q"))
    with caplog.at_level(logging.WARNING):
        sent, tailer = tail({"keys": ["p:{id}"], "mode": "update"}, ev)
    assert [(e.op, e.extra.get(INVALIDATE_ONLY)) for e in sent] == [("update", PARTIAL_IMAGE)]
    assert tailer.json_unknown == 1
    assert "partial JSON update of doc does not apply" in caplog.text


def test_an_update_of_a_json_key_column_renders_the_new_key_text():
    """FULL images of a plain UPDATE_ROWS_EVENT: both readers give the text, the key is it."""
    doc, text = SMALL_DOC
    image = b"\0" + struct.pack("<iI", 5, len(doc)) + doc
    assert check(event(UpdateRowsEvent, DOC_COLUMNS, image + image, table="p"),
                 must_decode=True) == "decoded"
    ev = event(UpdateRowsEvent, DOC_COLUMNS, image + image, table="p")
    ev.schema, ev.primary_key, ev.timestamp = "app", "id", COMMIT_TS
    sent, _ = tail({"keys": ["p:doc:{doc}"]}, ev)
    assert [(e.before["doc"], e.after["doc"]) for e in sent] == [(text, text)]


@pytest.mark.parametrize("options, bits", [(1, 0b10), (0, None)])
def test_partial_bits_count_the_tables_json_columns_in_both_readers(options, bits):
    """Built: two JSON columns; value options 1 with only the second column's partial bit
    set (the first carries a whole document), or value options 0 (no partial bits: every
    JSON value whole)."""
    columns = [column("id", I.LONG), column("a", I.JSON, length_size=4),
               column("b", I.JSON, length_size=4)]
    small, doc = SMALL_DOC[0], BEFORE_DOC[0]
    before = b"\0" + struct.pack("<iI", 1, len(small)) + small + struct.pack("<I", len(doc)) + doc
    second = (diff_vector(replace("$.a", bytes([mj.INT16, 7, 0]))) if bits
              else struct.pack("<I", len(small)) + small)
    after = (bytes([options]) + (bytes([bits]) if bits else b"") + b"\0" + struct.pack("<i", 1)
             + struct.pack("<I", len(small)) + small + second)
    ev = partial_event(columns, before + after, table="two")
    assert check(ev, must_decode=True) == "decoded"
    row, unknown = jsoncolumns.resolve_partial(ev.rows[0])
    assert unknown == ()
    assert row["after_values"]["a"] == SMALL_DOC[1]
    assert row["after_values"]["b"] == (A_IS_7 if bits else SMALL_DOC[1])
