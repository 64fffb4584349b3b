"""bench/mysqljson.py runs (small), its readers agree, and the library reader is restored."""

from pymysqlreplication.packet import BinLogPacketWrapper

from bench import mysqljson
from cachesync.producer_outbox.decode import jsoncolumns
from tests.support.shared import shared_dir

shared_dir()     # the documents are read from the shared folder: skip (fail under CI) without it


def test_the_benchmark_reports_each_reader_and_restores_cachesyncs_reader(monkeypatch):
    monkeypatch.setitem(mysqljson.SIZES, "quick", 50)
    out = mysqljson.run(None, quick=True, runs=2)
    assert set(out["median"]) == {"baseline_rows_s", "library_rows_s", "fast_rows_s"}
    assert all(v > 0 for v in out["median"].values()) and out["rows"] == 50
    assert BinLogPacketWrapper.read_binary_json is jsoncolumns._read_binary_json


def test_the_documents_are_read_from_the_shared_folder():
    docs = mysqljson.documents()
    assert [len(d) for d in docs] == [61, 41]        # as the benchmark's output describes them
    assert b"key1key2" in docs[1]
