"""MySQL JSON columns end to end: `cachesync tail` (both readers) against MySQL 8 binlog bytes.

The replay primary (tests/support/replay_primary.py) serves a binlog holding a table
``docs (id INT PRIMARY KEY, doc JSON)``; its JSON values are binary documents recorded
from real MySQL servers (the shared folder's recorded/, sources in its README), the events
around them are built from MySQL's documented format (tests/support/mysqlbinlog.py), and
so is the partial update's diff vector (``Json_diff::write_binary``, no recording of one
with operations exists). Kafka, Redis and the state database are the devstack's; the
python engine applies the events.
"""

from __future__ import annotations

import json
import struct

import pytest

from tests.support import wait_for
from tests.support import mysqlbinlog as mb
from tests.support.binlog import UUID
from tests.support.shared import recorded
from tests.support.replay_primary import ReplayPrimary

# recorded from real MySQL servers (shared recorded/, sources in its README); a module
# without the shared folder skips (fails under CI)
_RECORDED = recorded("mysql-binary-json.json")
RECORDED_DOCS = _RECORDED["RECORDED_DOCS"]

pytestmark = pytest.mark.integration

JSON_TYPE, PARTIAL_UPDATE_ROWS = 245, 39
DOC, DOC_TEXT = RECORDED_DOCS[4]       # an object with a string member "a"
SMALL, SMALL_TEXT = RECORDED_DOCS[1]   # an object with a number member "a"


class DocsTable:
    """``docs (id INT PRIMARY KEY, doc JSON)``: its table map and row events, as bytes."""

    def __init__(self, db: str, table_id: int = 201):
        self.db, self.table_id = db, table_id

    def map_body(self) -> bytes:
        """TABLE_MAP_EVENT, binlog_row_metadata=FULL; a JSON column's metadata is its
        length-prefix size (4)."""
        optional = (mb._tlv(1, b"\0") + mb._tlv(4, mb.lenenc(2) + b"id" + mb.lenenc(3) + b"doc")
                    + mb._tlv(8, mb.lenenc(0)))
        return (self.table_id.to_bytes(6, "little") + struct.pack("<H", 1)
                + bytes([len(self.db)]) + self.db.encode() + b"\0" + b"\x04docs\0"
                + mb.lenenc(2) + bytes([mb.LONG, JSON_TYPE]) + mb.lenenc(1) + b"\x04"
                + b"\x02" + optional)

    @staticmethod
    def image(id_: int, doc: bytes | None) -> bytes:
        """A row image: every column present (``doc`` None: MINIMAL, the key only)."""
        if doc is None:
            return b"\0" + struct.pack("<i", id_)
        return b"\0" + struct.pack("<iI", id_, len(doc)) + doc

    def rows_body(self, kind: int, bitmaps: list[bytes], rows: bytes) -> bytes:
        return (self.table_id.to_bytes(6, "little") + struct.pack("<HH", mb.STMT_END_F, 2)
                + mb.lenenc(2) + b"".join(bitmaps) + rows)

    def transaction(self, kind: int, bitmaps: list[bytes], rows: bytes, xid: int) -> list:
        return [(mb.QUERY, mb.query("BEGIN")), (mb.TABLE_MAP, self.map_body()),
                (kind, self.rows_body(kind, bitmaps, rows)), (mb.XID, mb.xid(xid))]


def replace_diff(path: str, value: bytes) -> bytes:
    """A diff vector of one REPLACE (Json_diff_vector::write_binary): 4-byte length, then
    operation 0, net-length path, net-length binary JSON value."""
    body = b"\x00" + mb.lenenc(len(path)) + path.encode() + mb.lenenc(len(value)) + value
    return struct.pack("<I", len(body)) + body


def partial_after(id_: int, diff: bytes) -> bytes:
    """A PARTIAL_UPDATE_ROWS_EVENT after image: value_options PARTIAL_JSON, the partial bit
    of the one JSON column, the null bitmap, id, the diff vector."""
    return b"\x01" + b"\x01" + b"\0" + struct.pack("<i", id_) + diff


class Replay:
    def __init__(self, lab):
        self.lab = lab
        self.docs = DocsTable(lab.db)
        self.primary = ReplayPrimary([mb.Binlog("binlog.000001")])
        self.gno, self.xid = 0, 100

    def write(self, kind: int, bitmaps: list[bytes], rows: bytes) -> None:
        self.gno += 1
        self.xid += 1
        self.primary.files[-1].transaction(self.docs.transaction(kind, bitmaps, rows, self.xid),
                                           sid=UUID, gno=self.gno)
        self.primary.appended()

    def start(self, tables: dict, reader: str):
        cfg = self.lab.write_config(tables, tailer={
            "source_hosts": f"127.0.0.1:{self.primary.port}", "reader": reader})
        self.lab.start_tailer(cfg)
        return self.lab.start_engine(cfg)


@pytest.fixture
def replay(lab):
    r = Replay(lab)
    with r.primary:
        yield r
    assert not r.primary.unanswered, r.primary.unanswered


def cached_value(lab, key: str):
    raw = lab.redis.get(lab.prefix + key)
    return None if raw is None else json.loads(raw)


FULL = b"\x03"


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_a_json_key_column_invalidates_the_key_the_server_text_makes(replay, lab, reader):
    """The application keys rows by CAST(doc AS CHAR); the binlog's binary document renders
    that same text, so inserting and deleting the row invalidates the application's key."""
    replay.start({"docs": {"keys": ["doc:{doc}"]}}, reader)
    lab.cache(f"doc:{DOC_TEXT}", f"doc:{SMALL_TEXT}")
    replay.write(mb.WRITE_ROWS, [FULL], DocsTable.image(1, DOC))
    replay.write(mb.DELETE_ROWS, [FULL], DocsTable.image(2, SMALL))
    wait_for(lambda: not lab.cached(f"doc:{DOC_TEXT}", f"doc:{SMALL_TEXT}"), 60, interval=0.2,
             what="the JSON-text keys invalidated")


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_update_mode_writes_the_server_text_then_applies_a_partial_update(replay, lab, reader):
    """Update mode caches the document as the server prints it; a PARTIAL_JSON update
    (JSON_SET(doc, '$.a', 7) with a FULL before image) writes the document after the diff."""
    engine = replay.start({"docs": {"keys": ["d:{id}"], "mode": "update"}}, reader)
    replay.write(mb.WRITE_ROWS, [FULL], DocsTable.image(1, DOC))
    wait_for(lambda: cached_value(lab, "d:1") == {"id": 1, "doc": DOC_TEXT}, 60, interval=0.2,
             what="the inserted document cached as the server's text")
    replay.write(PARTIAL_UPDATE_ROWS, [FULL, FULL], DocsTable.image(1, DOC) + partial_after(
        1, replace_diff("$.a", bytes([5, 7, 0]))))
    after = json.dumps({**json.loads(DOC_TEXT), "a": 7})     # MySQL's text: order kept
    wait_for(lambda: cached_value(lab, "d:1") == {"id": 1, "doc": after}, 60, interval=0.2,
             what="the partially updated document cached")
    # the value is written before its batch is counted: await the count, then check it
    wait_for(lambda: engine.stats.consumed >= 2, 60, what="the update's batch counted")
    assert engine.stats.consumed == 2


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_a_partial_update_without_its_before_document_invalidates_and_writes_nothing(
        replay, lab, reader):
    """binlog_row_image=MINIMAL in the writing session: the before image has only the key,
    so the diff cannot be applied; the key is invalidated (a fenced delete), no value goes
    in, and the next full write is cached again."""
    replay.start({"docs": {"keys": ["d:{id}"], "mode": "update"}}, reader)
    replay.write(mb.WRITE_ROWS, [FULL], DocsTable.image(3, SMALL))
    wait_for(lambda: cached_value(lab, "d:3") == {"id": 3, "doc": SMALL_TEXT}, 60,
             interval=0.2, what="the inserted document cached")
    replay.write(PARTIAL_UPDATE_ROWS, [b"\x01", FULL], DocsTable.image(3, None) + partial_after(
        3, replace_diff("$.a", bytes([5, 9, 0]))))
    wait_for(lambda: cached_value(lab, "d:3") is None, 60, interval=0.2,
             what="the key of the unresolvable partial update invalidated")
    records = [d.event for d in lab.topic_events()]
    assert [(e.op, e.extra.get("invalidate_only")) for e in records] == [
        ("insert", None), ("update", "partial_row_image")]
