"""The peer comparison's pure parts: no JDK means null figures with a reason, and every
reader compared on the same basis (first row to last) with the target ratios."""

from __future__ import annotations

import pytest

from bench import peers


def _shape(rows, baseline, unpacked, packed, debezium=None, canal=None, process=None,
           python_rows=None):
    """bench/tailer.py's figures of one shape; each reader one run of (elapsed_s, startup_s)."""
    def runs(elapsed, startup):
        return {"runs": [{"rows": rows, "elapsed_s": elapsed, "startup_s": startup}]}
    out = {"table": {"rows": rows, "txn_rows": [1, 1]}, "baseline": runs(*baseline),
           "unpacked": runs(*unpacked), "contender": runs(*packed)}
    if python_rows is not None:
        out["python_rows"] = runs(*python_rows)
    # the peers and the tail process report rows/s first row to last themselves
    for peer, rate in (("debezium", debezium), ("canal", canal), ("process", process)):
        if rate is not None:
            out[peer] = {"runs": [{"rows": rows, "seconds": rows / rate, "rows_per_s": rate}]}
    return out


def test_without_their_tools_the_peers_are_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(peers.shutil, "which",
                        lambda tool: None if tool in ("mvn", "go") else "/usr/bin/" + tool)
    assert peers.unavailable_reason("canal") == "not on PATH: mvn"
    assert peers.unavailable_reason("gomysql") == "not on PATH: go"
    missing = ("debezium: not on PATH: mvn; canal: not on PATH: mvn; "
               "gomysql: not on PATH: go")
    assert peers.prepare() == ((), missing)
    with pytest.raises(peers.PeerUnavailable, match="mvn"):
        peers.build("canal")
    with pytest.raises(peers.PeerUnavailable, match="go"):
        peers.build("gomysql")
    out = peers.compare({"S": _shape(1000, (1.1, 0.1), (2.1, 0.1), (1.1, 0.1))}, missing)
    assert out["peers_missing"] == missing
    assert out["S"]["readers"]["debezium"]["rows_per_s"] is None
    assert out["S"]["readers"]["gomysql"]["rows_per_s"] is None
    assert out["S"]["targets"] == [
        {"target": ">= 1.0x Debezium (must)", "value": None, "met": None},
        {"target": ">= 1.0x Canal (goal)", "value": None, "met": None}]


def test_every_reader_is_measured_first_row_to_last_and_the_targets_follow():
    # 1,000 rows: baseline 1.0 s after its 0.5 s start; tailer 2.0 s after 0.5 s; packed 1.0 s;
    # the tail process 1.25 s from its first row's append to its last's
    out = peers.compare({"M": _shape(1000, (1.5, 0.5), (2.5, 0.5), (1.25, 0.25),
                                     debezium=400.0, canal=2000.0, process=800.0,
                                     python_rows=(2.5, 0.5))}, None)
    m = out["M"]
    assert {k: v["rows_per_s"] for k, v in m["readers"].items()} == {
        "baseline": 1000.0, "unpacked": 500.0, "contender": 1000.0, "process": 800.0,
        "debezium": 400.0, "canal": 2000.0, "python_rows": 500.0, "gomysql": None}
    # the default packs (the contender); one record per row is reported beside it
    assert m["ratios"] == {"cachesync_default_to_debezium": 2.5,
                           "cachesync_default_to_canal": 0.5}
    assert m["ratios_unpacked"] == {"cachesync_unpacked_to_debezium": 1.25,
                                    "cachesync_unpacked_to_canal": 0.25}
    # the targets are on what users run: the tail process
    assert m["ratios_process"] == {"cachesync_process_to_debezium": 2.0,
                                   "cachesync_process_to_canal": 0.4}
    assert m["targets"] == [
        {"target": ">= 1.0x Debezium (must)", "value": 2.0, "met": True},
        {"target": ">= 1.0x Canal (goal)", "value": 0.4, "met": False}]


def test_the_median_of_three_runs_is_taken_per_reader():
    shape = _shape(1000, (1.0, 0.0), (1.0, 0.0), (1.0, 0.0), debezium=1.0, canal=1.0)
    shape["debezium"]["runs"] = [{"seconds": 1.0, "rows_per_s": r} for r in (300.0, 100.0, 200.0)]
    shape["contender"]["runs"] = [{"rows": 1000, "elapsed_s": e, "startup_s": 0.0}
                                  for e in (4.0, 1.0, 2.0)]
    m = peers.compare({"S": shape}, None)["S"]
    assert m["readers"]["debezium"]["rows_per_s"] == 200.0
    assert m["readers"]["contender"]["rows_per_s"] == 500.0
    assert m["ratios"]["cachesync_default_to_debezium"] == 2.5


def test_shape_s_draws_one_operation_per_transaction_with_the_mix_weights():
    import random
    from bench.tailer import _split
    rng = random.Random(7)
    assert _split(rng, 1, 0, single_row=True) == (1, 0, 0)       # nothing live: an insert
    drawn = [_split(rng, 1, 100, single_row=True) for _ in range(10_000)]
    assert all(sum(d) == 1 for d in drawn)
    shares = [sum(d[i] for d in drawn) / len(drawn) for i in range(3)]
    assert shares == pytest.approx([0.5, 0.3, 0.2], abs=0.02)
    # shape M keeps its fixed shares (and its 1-row tail transaction stays an insert)
    assert _split(rng, 40, 100, single_row=False) == (20, 12, 8)
    assert _split(rng, 1, 100, single_row=False) == (1, 0, 0)


def test_each_readers_cpu_per_100k_rows_is_its_median_where_measured():
    shape = _shape(1000, (1.0, 0.0), (1.0, 0.0), (1.0, 0.0), canal=1000.0)
    shape["canal"]["median"] = {"cpu_s_per_100k_rows": 3.5}
    shape["gomysql"] = {"runs": [{"seconds": 0.1, "rows_per_s": 10000.0}],
                        "median": {"cpu_s_per_100k_rows": 0.9}}
    readers = peers.compare({"S": shape}, None)["S"]["readers"]
    assert readers["canal"]["cpu_s_per_100k_rows"] == 3.5
    assert readers["gomysql"] == {"name": dict(peers.READERS)["gomysql"], "rows_per_s": 10000.0,
                                  "cpu_s_per_100k_rows": 0.9}
    assert readers["baseline"]["cpu_s_per_100k_rows"] is None      # not measured
