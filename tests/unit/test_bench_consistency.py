"""The consistency lab's pure parts: stale-read accounting, the window rule, nines, targets,
the fault injector and the strategies' cachesync mapping."""

from __future__ import annotations

import json
import math
import random

import pytest

from bench.consistency import large, measure
from bench.consistency.faults import CLASSES, Faults, Injector, shape
from bench.consistency.strategies import (APP, BY_NAME, CACHESYNC, decode, headline,
                                          tables_config)
from cachesync.schema.mapping import parse_mappings


def _history() -> measure.History:
    """Row 1: value 10 (base, seq 0) superseded at t=1.0 by value 11, superseded at t=2.0 by 12."""
    h = measure.History()
    h.base(1, 0, 10)
    h.commit(1, 1, 11, 1.0)
    h.commit(1, 2, 12, 2.0)
    return h


def test_history_knows_when_each_value_was_superseded():
    h = _history()
    assert h.superseded_at(10) == 1.0
    assert h.superseded_at(11) == 2.0
    assert h.superseded_at(12) is None          # the newest: not superseded
    assert h.superseded_at(99) is None          # never committed (a SET before its commit)
    assert h.writes() == 2                      # the base state is not a write


@pytest.mark.parametrize("read, window, stale", [
    ((1.5, 10, False), 0.4, True),    # superseded 0.5 s before the read: beyond a 0.4 s window
    ((1.3, 10, False), 0.4, False),   # superseded 0.3 s before: within the window, allowed
    ((1.4, 10, False), 0.4, False),   # exactly the window: allowed
    ((5.0, 12, False), 0.0, False),   # the newest value is never stale
    ((0.5, 10, False), 0.0, False),   # read before the superseding commit
    ((9.0, 99, True), 0.0, False),    # a value never committed is not "old"
])
def test_a_read_is_stale_only_beyond_the_window(read, window, stale):
    out = measure.stale_reads([read], _history(), window)
    assert bool(out) is stale
    if stale:
        assert out[0][3] == pytest.approx(read[0] - 1.0)   # its age since superseded


def test_the_window_is_the_slowest_probe_and_needs_one():
    assert measure.window([0.01, 0.5, 0.2]) == 0.5
    with pytest.raises(ValueError, match="no cachesync probe"):
        measure.window([])


@pytest.mark.parametrize("stale, total, nines", [
    (1, 100, 2.0), (1, 1000, 3.0), (5, 1000, 2.3), (0, 1000, None), (0, 0, None), (3, 0, None)])
def test_nines(stale, total, nines):
    assert measure.nines(stale, total) == nines


def test_verdict_counts_stale_reads_keys_left_and_the_longest_stale_time():
    reads = [(1.5, 10, True), (1.6, 10, False), (1.7, 11, False), (2.6, 11, False)]
    out = measure.verdict(reads, _history(), 0.4, left=[3.0, None], seconds=2.0)
    assert out["reads"] == 4 and out["reads_per_s"] == 2.0 and out["writes"] == 2
    assert out["stale_reads"] == 3                 # 1.5 and 1.6 (value 10), 2.6 (value 11)
    assert out["stale_read_ratio"] == 0.75
    assert out["stale_from_db_load"] == 1
    assert out["stale_keys_after"] == 2
    assert out["longest_stale_ms"] == 3000.0       # the key left stale, 3 s after superseded
    assert out["nines"] == pytest.approx(round(-math.log10(0.75), 2))


def test_verdict_without_stale_reads_or_keys():
    out = measure.verdict([(1.0, 12, False)], _history(), 0.0, left=[], seconds=1.0)
    assert (out["stale_reads"], out["stale_keys_after"], out["longest_stale_ms"],
            out["nines"]) == (0, 0, 0.0, None)


def _cell(ratio, keys, reads=1000):
    return {"stale_read_ratio": ratio, "stale_reads": int(ratio * reads), "reads": reads,
            "reads_per_s": reads / 2, "writes": 100, "stale_keys_after": keys,
            "longest_stale_ms": 0.0, "stale_from_db_load": 0,
            "injected": {"crashes": 1, "lost_cache_calls": 0, "outside_writes": 0}}


def test_medians_over_runs_and_nines_of_the_median_ratio():
    out = measure.medians([_cell(0.01, 1), _cell(0.001, 0), _cell(0.1, 3)])
    assert out["stale_read_ratio"] == 0.01 and out["stale_keys_after"] == 1
    assert out["nines"] == 2.0
    assert out["injected"] == {"crashes": 1, "lost_cache_calls": 0, "outside_writes": 0}


@pytest.mark.parametrize("mine, others, reads, keys_zero", [
    # others leave stale reads, cachesync none
    (_cell(0, 0), [_cell(0.01, 2), _cell(0.001, 0)], "met (zero)", True),
    # nobody stale: reported as such
    (_cell(0, 0), [_cell(0, 0), _cell(0, 0)], "zero against zero", True),
    # 100x lower than the best other: met; 10x: missed
    (_cell(0.00001, 0), [_cell(0.01, 2), _cell(0.001, 0)], "met", True),
    (_cell(0.0001, 0), [_cell(0.01, 2), _cell(0.001, 0)], "missed", True),
    # the best other has no stale read (another one leaves a key): cachesync must be zero
    (_cell(0.0001, 1), [_cell(0, 1), _cell(0.01, 0)], "missed", False),
    # nobody else is stale, cachesync is
    (_cell(0.0001, 0), [_cell(0, 0)], "missed: others zero, cachesync not", True),
])
def test_targets(mine, others, reads, keys_zero):
    table = {"cachesync": mine, **{f"o{i}": c for i, c in enumerate(others)}}
    out = measure.target(table, "cachesync", tuple(f"o{i}" for i in range(len(others))))
    assert out["stale_reads"] == reads
    assert out["stale_keys_zero"] is keys_zero


def test_injector_rolls_each_fault_at_its_probability_and_counts_it():
    faults = Faults("x", "x", crash_p=0.1, cache_fail_p=0.2, outside_share=0.3)
    inj = Injector(faults, random.Random(7))
    sent = []
    for _ in range(10_000):
        inj.crashed()
        inj.outside()
        inj.cache_call(sent.append, 1)
    assert inj.counts["crashes"] == pytest.approx(1000, rel=0.1)
    assert inj.counts["outside_writes"] == pytest.approx(3000, rel=0.1)
    assert inj.counts["lost_cache_calls"] == pytest.approx(2000, rel=0.1)
    assert len(sent) + inj.counts["lost_cache_calls"] == 10_000   # a lost call is not sent


def test_no_fault_class_injects_nothing():
    inj = Injector(CLASSES[0], random.Random(1))
    sent = []
    for _ in range(1000):
        assert not inj.crashed() and not inj.outside()
        inj.cache_call(sent.append, 1)
    assert len(sent) == 1000 and set(inj.counts.values()) == {0}


def test_fault_classes_each_alone_and_all_together():
    by = {f.name: f for f in CLASSES}
    assert list(by) == ["none", "crash", "cache_fail", "outside_writes", "replica_lag",
                        "hot_rows", "all"]
    every = by["all"]
    assert every.crash_p and every.cache_fail_p and every.outside_share
    assert every.replica_reads and every.hot_rows
    hot = shape({"rows": 32, "writers": 2, "readers": 4, "write_rate": 120}, by["hot_rows"])
    assert hot["writers"] >= 8 and hot["rows"] <= 4
    assert shape({"rows": 32, "writers": 2}, by["none"]) == {"rows": 32, "writers": 2}


def test_strategies_and_their_cachesync_mapping_loads():
    assert len(APP) == 5 and CACHESYNC == ("cachesync", "cachesync_update",
                                          "cachesync_double_delete", "cachesync_replica_guard",
                                          "cachesync_tail_replica")
    tables = tables_config("db", "p:")
    parse_mappings(tables)                         # raises ConfigError on a bad setting
    assert tables["db.acct_up"]["mode"] == "update"
    assert tables["db.acct_dd"]["double_delete"] > 0
    assert tables["db.acct_rg"] == {"keys": ["p:acct_rg:{id}"], "mode": "delete"}
    assert BY_NAME["cachesync_replica_guard"].replica_guard
    assert "db.acct" not in tables                 # the app strategies' table: cachesync stays out
    assert not BY_NAME["db_then_delete"].cachesync and BY_NAME["cachesync"].cachesync


def test_the_replica_tailing_strategy_has_its_own_pipeline_and_probe():
    """Its table is only in the replica tailer's mapping (in both, the primary's earlier
    invalidation would be the one measured), and each tailer has its own probe table."""
    primary, replica = tables_config("db", "p:"), tables_config("db", "p:", tail_replica=True)
    parse_mappings(replica)
    assert replica == {"db.acct_tr": {"keys": ["p:acct_tr:{id}"], "mode": "delete"},
                       "db.probe_tr": {"keys": ["p:probe_tr:{id}"]}}
    assert "db.acct_tr" not in primary and "db.probe" in primary
    assert not set(primary) & set(replica)
    assert BY_NAME["cachesync_tail_replica"].tail_replica


def test_the_headline_cachesync_strategy_follows_the_readers_source():
    assert headline(replica_reads=False) == "cachesync"
    assert headline(replica_reads=True) == "cachesync_tail_replica"
    replica_classes = {f.name for f in CLASSES if f.replica_reads}
    assert replica_classes == {"replica_lag", "all"}


@pytest.mark.parametrize("cached, v", [(b"42", 42), ("7", 7), (b'{"v":9}', 9),
                                       (json.dumps({"v": 12}).encode(), 12)])
def test_decode_reads_fills_and_update_mode_values(cached, v):
    assert decode(cached) == v


def test_decode_refuses_anything_else():
    with pytest.raises(ValueError):
        decode(b"garbage")


def test_report_renders_every_strategy_and_fault_class():
    from bench.consistency.report import markdown
    cells = {"a": {**_cell(0.012, 3), "longest_stale_ms": 1500.0, "nines": 1.92},
             "cachesync": _cell(0, 0)}
    lab = {"median": {"none": cells}, "strategies": {"a": "app A", "cachesync": "cs"},
           "lag_window_ms": {"none": {"median": 380.5}},
           "targets": {"none": {"cachesync": measure.target(cells, "cachesync", ("a",))}},
           "headline": {"none": "cachesync"},
           "tail_replica_lag_ms": {"none": {"p50": 90.4, "max": 327.1}}}
    text = markdown(lab)
    assert "| app A | 1.2 % (1.92 nines) · 3 |" in text
    assert "| cs | 0 · 0 |" in text
    assert "| a | 1500 · 500/s |" in text
    assert "| lag window (median) | 380.5 ms |" in text
    assert "| none | **cachesync** | yes | met (zero) | a (1.2 %) | 0 |" in text
    assert "| lag through the replica's tailer (p50 / max) | 90.4 / 327.1 ms |" in text


# -- the large cells' verdicts ---------------------------------------------------------------
def test_supersessions_map_each_value_to_the_commit_that_replaced_it():
    base = {1: (0, 10), 2: (5, 20)}
    changes = [(1, 2, 12, 2.0), (1, 1, 11, 1.0), (2, 6, 21, 1.5)]     # any order
    assert measure.supersessions(base, changes) == {10: 1.0, 11: 2.0, 20: 1.5}


def test_stale_reads_are_judged_strictly_and_beyond_the_lag_and_outage_reads_apart():
    superseded = {10: 1.0, 11: 2.0}
    times = [0.5, 1.2, 1.8, 2.05, 3.0, 4.0]
    values = [10, 10, 10, 11, 12, 10]      # fresh, stale 0.2, stale 0.8, stale 0.05, fresh, 3.0
    c = measure.stale_read_counts(times, values, superseded, window=0.5)
    assert (c["reads"], c["stale"], c["stale_beyond_lag"], c["skipped"]) == (6, 4, 2, 0)
    assert c["beyond_lag_examples"] == [(1.8, 10, 1.0), (4.0, 10, 1.0)]
    c = measure.stale_read_counts(times, values, superseded, 0.5, skip=[(3.5, 4.5), (1.7, 1.9)])
    assert (c["reads"], c["stale"], c["stale_beyond_lag"]) == (4, 2, 0)
    assert c["beyond_lag_examples"] == []          # inside the skips: counted apart
    assert (c["skipped"], c["stale_in_skip"], c["stale_beyond_lag_in_skip"]) == (2, 2, 2)


def test_reads_stale_beyond_the_lag_are_named_by_the_row_and_seq_they_returned():
    raw = {"changes": [(1, 1, 11, 5.0), (1, 2, 12, 6.0)], "base": {1: (0, 10)}}
    kept = large.beyond_lag_reads(raw, [(7.5, 10, 5.0), (8.0, 11, 6.0)])
    assert kept == [{"read": 2.5, "row_seq": (1, 0), "superseded": 0.0},
                    {"read": 3.0, "row_seq": (1, 1), "superseded": 1.0}]


def test_an_outage_moves_the_deadline_of_the_changes_it_delayed():
    outages = [(10.0, 15.0), (15.5, 20.0)]                   # chained: 15.5 < 15.0 + 1
    due = measure.deadlines([1.0, 9.5, 12.0, 25.0], outages, grace=1.0)
    assert due == [(2.0, False), (21.0, True), (21.0, True), (26.0, False)]
    assert measure.merged([(3, 4), (1, 2), (1.5, 2.5)]) == [(1, 2.5), (3, 4)]


def test_a_read_figure_is_nines_or_the_three_over_n_bound():
    f = measure.read_figure({"reads": 10_000_000, "stale": 6, "stale_beyond_lag": 0})
    assert f["stale"]["nines"] == round(-math.log10(6e-7), 2)
    assert f["beyond_lag"]["nines"] is None and f["beyond_lag"]["upper_bound"] == 3e-7


def test_the_kill_class_checks_every_invalidation_against_its_outage():
    from bench.consistency import large
    from bench.consistency.load import NEVER
    outages = [("kafka", 10.0, 30.0)]
    pairs = [(1.0, 1.05), (9.8, 30.9), (20.0, 31.5), (40.0, 40.2), (41.0, NEVER)]
    clear, check = large.outage_check(pairs, outages)
    assert clear == [(1.0, 1.05), (40.0, 40.2), (41.0, NEVER)]
    assert check["changes_delayed_by_an_outage"] == 2
    assert check["missed_deadline"] == 2 and check["never_applied"] == 1
    assert check["worst_miss_ms"] == 500.0
    assert check["landed_by_deadline"] == 3                  # 31.5 > 31.0, NEVER > 42.0
    assert large.read_skips(pairs, outages) == [(10.0, 31.5)]
    figures = large.change_figures(pairs, end=50.0)
    assert figures["never_applied"] == 1 and figures["within"]["1s"]["failed"] == 3


def test_each_outage_says_when_the_last_change_it_delayed_was_applied():
    from bench.consistency import large
    from bench.consistency.load import NEVER
    outages = [("consume", 10.0, 12.0), ("kafka", 20.0, 30.0), ("tail", 40.0, 41.0)]
    pairs = [(9.5, 12.3), (11.0, 12.2), (25.0, 30.6), (29.9, NEVER), (35.0, 35.1)]
    assert large.last_delayed(pairs, outages) == [12.3, 30.6, None]
    assert large.read_skips(pairs, outages) == [(10.0, 13.0), (20.0, 31.0), (40.0, 42.0)]


def test_report_shows_each_outage_with_its_recovery_and_the_cpu_of_cachesyncs_cells():
    from bench.consistency.report import cpu_markdown, _fault
    assert _fault({"what": "kafka", "seconds": 30.3,
                   "last_delayed_applied_after_end_s": 0.52}) == "kafka 30.3 s (+0.52)"
    assert _fault({"what": "tail", "seconds": 2.0,
                   "last_delayed_applied_after_end_s": None}) == "tail 2 s"
    cpu = {"seconds": 100.0, "host_busy_cpu_s": 190.0, "host_cpus": 2,
           "processes": {"cachesync consume": {"cpu_share": 0.31, "waited_share": 0.4}}}
    text = cpu_markdown({"classes": {"crash": {"cachesync": {"cpu": cpu}, "a": {}}}})
    assert "| crash | cachesync consume | 0.31 | 0.40 | 1.90 of 2 cores |" in text


def test_a_cpu_sample_counts_each_thread_from_its_first_reading_to_its_last(monkeypatch):
    from bench.consistency import cpu
    readings = iter([{1: (1.0, 0.5), 2: (2.0, 0.0)},      # first: two threads
                     {1: (1.5, 1.5)},                      # thread 2 ended: kept at its last
                     {1: (3.0, 2.0), 3: (0.25, 0.25)}])    # a new thread counts from here
    monkeypatch.setattr(cpu, "schedstat", lambda pid: next(readings))
    monkeypatch.setattr(cpu, "host_busy", lambda: 0.0)
    sample = cpu.CpuSample()
    for now in (0.0, 1.0, 2.0):
        sample.update({"p": [7]}, now)
    p = sample.figures()["processes"]["p"]
    assert (p["cpu_s"], p["waited_for_cpu_s"], p["cpu_share"]) == (2.0, 1.5, 1.0)


def test_the_series_groups_late_changes_into_bursts_and_splits_the_worst():
    from bench.consistency import series

    def change(sent, applied, heard=None):
        return {"row": 1, "seq": 1, "sent": sent, "returned": sent + 0.002, "heard": heard,
                "applied": applied}
    rows = [change(0.0, 0.05), change(1.0, 2.5, heard=1.0),
            change(1.5, 2.6), change(3.0, 3.1), change(9.0, 10.2)]
    bursts = series.bursts(rows)
    assert [(b["first"], b["last"], b["late"]) for b in bursts] == [(1.0, 1.5, 2), (9.0, 9.0, 1)]
    assert bursts[0]["worst"] == {"sent": 1.0, "lag": 1.5, "commit_rtt": 0.002,
                                  "watcher_late": 0.0}
    s = series.summary({"changes": rows})
    assert s["lag"]["over_1s"] == 3 and s["within_1s_from_sent"] == 0.4


def test_the_series_says_what_followed_each_outage_s_end():
    from bench.consistency import series

    def change(sent, applied):
        return {"row": 1, "seq": 1, "sent": sent, "returned": sent, "heard": None,
                "applied": applied}
    # an outage from 10 to 30 s: the changes committed from 9 s until 30 s waited for it
    rows = [change(5.0, 5.1), change(9.5, 30.4), change(20.0, 30.9), change(29.9, 31.6),
            change(30.5, 31.7)]
    s = series.summary({"changes": rows, "outages": [{"what": "kafka", "start": 10.0,
                                                      "end": 30.0}]})
    assert s["outages"] == [{"what": "kafka", "start": 10.0, "end": 30.0, "delayed": 3,
                             "landed_by_end_plus_1s": 2, "first_applied_after_end_s": 0.4,
                             "last_applied_after_end_s": 1.6}]


def test_the_cpu_timeline_is_each_interval_s_share_per_process(monkeypatch):
    from bench.consistency import cpu
    readings = iter([{7: (1.0, 0.5)}, {7: (1.4, 1.5)}, {7: (2.0, 1.5)}])
    monkeypatch.setattr(cpu, "schedstat", lambda pid: next(readings))
    monkeypatch.setattr(cpu, "host_busy", lambda: 0.0)
    sample = cpu.CpuSample()
    for now in (0.0, 1.0, 2.0):
        sample.update({"consume": [7]}, now)
    assert [(t["t"], t["processes"]["consume"]) for t in sample.timeline()] == [
        (1.0, (0.4, 1.0)), (2.0, (0.6, 0.0))]


def test_a_cachesync_cell_states_the_labs_own_share_of_its_lags():
    from bench.consistency import series
    changes = [[1, 5, 100, 10.0, float("inf"), 10.002], [2, 7, 101, 11.0, float("inf"), 11.3]]
    raw = {"changes": changes, "marker_set": {(1, 5): 10.0, (2, 7): 11.25},
           "watcher_realtime": True}
    figures = series.instrument(raw)
    assert figures["commit_round_trip"]["max_ms"] == 300.0
    assert figures["watcher_heard_late"] == {"p99_ms": 250.0, "p99.9_ms": 250.0,
                                             "max_ms": 250.0}
    assert figures["watcher_realtime"] is True


def test_the_nines_plot_shows_cachesync_also_outside_the_outage_windows():
    from bench.consistency.plot import _nines_columns
    apart = {"per_change": {}, "per_read": {}}
    cells = {"cachesync": {"stale_keys_after": 0, "outside_outages": apart},
             "double_delete": {"stale_keys_after": 3, "outside_outages": {"per_change": {}}}}
    columns = _nines_columns(cells, ["cachesync", "double_delete"])
    assert [(name, label) for name, label, _ in columns] == [
        ("cachesync", "cachesync\n0 stale keys left"),
        ("cachesync", "cachesync\noutside the outages"),
        ("double_delete", "double_delete\n3 stale keys left")]
    assert columns[1][2] is apart
    # a class without outages: one column per strategy
    assert len(_nines_columns({"cachesync": {"stale_keys_after": 0}}, ["cachesync"])) == 1
