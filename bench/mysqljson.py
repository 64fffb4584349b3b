"""MySQL JSON columns: rows decoded per second, in the server's text, by each reader.

CPU only (no server: MariaDB cannot write MySQL's binary JSON). One WRITE_ROWS event of
N rows of ``(id INT, doc JSON, name VARCHAR(64))`` is decoded, whole, in each run by:

* baseline: python-mysql-replication's own reader (``event.rows`` with the library's JSON
  reader): what the tailer ran before, returning dicts with bytes keys, not the text;
* library: ``event.rows`` with cachesync's JSON reader (``jsoncolumns``): the text;
* fast: ``fastrows.decode_rows``, the generated decoder, the text (``tailer.reader: fast``).

The two documents are binary JSON recorded from MySQL by other projects (vitess's
binlog_json_test.go and go-mysql's row_event_test.go), read from the shared data folder's
``recorded/mysql-binary-json.json`` (``$CACHESYNC_SHARED``, by default the checkout's
``../shared``; its README names the sources). Runs alternate their order; the host may be
shared, so compare the ratios, measured in the same run.
"""

from __future__ import annotations

import json
import struct
import time

from pymysql.protocol import MysqlPacket
from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import WriteRowsEvent
from pymysqlreplication.table import Table

from bench.common import log, ratio, shared_file, summarize
from cachesync.producer_outbox.decode import fastrows, jsoncolumns
from cachesync.runtime.library_adapter import bare_rows_event, bare_wrapper

NAME = "mysqljson"
SIZES = {"full": 20_000, "quick": 2_000}
RECORDED = ("recorded", "mysql-binary-json.json")
# the benchmark's documents: RECORDED_DOCS[4] (an object of strings and an array), and the
# JSON column of RECORDED_ROWS[1] (an object of two strings; the row is a null bitmap, the
# column's 4-byte length and document, then a DECIMAL)
DOC_AT, ROW_AT = 4, 1


def documents() -> list[tuple[bytes, str]]:
    """The benchmark's two binary JSON documents and the text MySQL printed for each
    (module doc); raises FileNotFoundError without the shared folder."""
    recorded = json.loads(shared_file(*RECORDED).read_text())
    doc, doc_text = recorded["RECORDED_DOCS"][DOC_AT]
    row, row_text = recorded["RECORDED_ROWS"][ROW_AT]
    body = bytes.fromhex(row["hex"])
    in_row = body[5:5 + struct.unpack_from("<I", body, 1)[0]]
    return [(bytes.fromhex(doc["hex"]), doc_text), (in_row, row_text)]


def _column(name: str, type_: int, **metadata) -> Column:
    return Column(**{"type": type_, "name": name, "unsigned": False, "is_primary": False,
                     "charset_id": None, "character_set_name": "utf8mb4", "collation_name": None,
                     "enum_values": None, "set_values": None, "visibility": False, **metadata})


COLUMNS = [_column("id", FIELD_TYPE.LONG), _column("doc", FIELD_TYPE.JSON, length_size=4),
           _column("name", FIELD_TYPE.VARCHAR, max_length=256)]


def rows_section(n: int) -> bytes:
    docs, out = [doc for doc, _ in documents()], []
    for i in range(n):
        doc, name = docs[i % len(docs)], f"name-{i}".encode()
        out.append(b"\0" + struct.pack("<iI", i, len(doc)) + doc + struct.pack("<H", len(name))
                   + name)
    return b"".join(out)


def write_event(body: bytes) -> WriteRowsEvent:
    """The library's WRITE_ROWS event positioned at its rows, as the stream reader hands it."""
    wrapper = bare_wrapper(MysqlPacket(body + b"\0\0\0\0", "utf8"), event_type=30)
    return bare_rows_event(
        WriteRowsEvent, wrapper, table_map={7: Table(7, "bench", "docs", COLUMNS)}, table_id=7,
        schema="bench", table="docs", columns=COLUMNS, number_of_columns=len(COLUMNS),
        event_type=30, event_size=len(body), complete=True, columns_present_bitmap=b"\x07")


def _timed(decode, body: bytes, n: int) -> float:
    ev = write_event(body)
    t0 = time.perf_counter()
    rows = decode(ev)
    elapsed = time.perf_counter() - t0
    assert len(rows) == n
    return round(n / elapsed)


def _library_rows(ev):
    return ev.rows


def _baseline_rows(ev):
    """The library with its own JSON reader (restored around the call)."""
    BinLogPacketWrapper.read_binary_json = jsoncolumns.LIBRARY_READER
    try:
        return ev.rows
    finally:
        jsoncolumns.install_reader()


def run(stack, quick: bool, runs: int) -> dict:
    n = SIZES["quick" if quick else "full"]
    body, docs = rows_section(n), documents()
    fast, library = fastrows.decode_rows(write_event(body)), write_event(body).rows
    assert fast == library, "readers differ"
    assert [r["values"]["doc"] for r in fast[:len(docs)]] == [text for _, text in docs]
    contenders = {"baseline_rows_s": _baseline_rows, "library_rows_s": _library_rows,
                  "fast_rows_s": fastrows.decode_rows}
    results = []
    for i in range(runs):
        order = list(contenders.items())
        order = order if i % 2 == 0 else order[::-1]
        results.append({field: _timed(decode, body, n) for field, decode in order})
        log(f"mysqljson run {i + 1}/{runs}: {results[-1]}")
    out = summarize(results, list(contenders))
    med = out["median"]
    sizes = "/".join(str(len(doc)) for doc, _ in docs)
    out.update(rows=n, columns=f"id INT, doc JSON ({sizes} bytes), name VARCHAR(64)",
               fast_vs_baseline=ratio(med["fast_rows_s"], med["baseline_rows_s"]),
               library_vs_baseline=ratio(med["library_rows_s"], med["baseline_rows_s"]),
               note="baseline is the library's own JSON reader: dicts with bytes keys, not "
                    "the server's text; library and fast give the text")
    return out
