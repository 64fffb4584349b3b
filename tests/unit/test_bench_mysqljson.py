"""bench/mysqljson.py runs (small), its readers agree, and the library reader is restored."""

from pymysqlreplication.packet import BinLogPacketWrapper

from bench import mysqljson
from cachesync.producer_outbox.decode import jsoncolumns
from tests.support import shared

shared.shared_dir()     # the documents are read from the shared folder: skip (fail under CI) without it


def test_the_benchmark_reports_each_reader_and_restores_cachesyncs_reader(monkeypatch):
    monkeypatch.setitem(mysqljson.SIZES, "quick", 50)
    out = mysqljson.run(None, quick=True, runs=2)
    assert set(out["median"]) == {"baseline_rows_s", "library_rows_s", "fast_rows_s"}
    assert all(v > 0 for v in out["median"].values()) and out["rows"] == 50
    assert BinLogPacketWrapper.read_binary_json is jsoncolumns._read_binary_json


def test_the_documents_are_read_from_the_shared_folder():
    recorded = shared.recorded("mysql-binary-json.json")
    doc = recorded["RECORDED_DOCS"][mysqljson.DOC_AT]
    row = recorded["RECORDED_ROWS"][mysqljson.ROW_AT]
    docs = mysqljson.documents()
    assert docs[0] == doc
    assert docs[1][1] == row[1] and docs[1][0] in row[0]
