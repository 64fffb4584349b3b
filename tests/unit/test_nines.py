"""The per-change figure, pure: nines, the 3/n bound, percentiles, and the apply watch."""

from __future__ import annotations

import math

import pytest

from cachesync.apply_watch import ApplyWatch
from cachesync.consumer.core.nines import LagFigures, nines, share, summary, upper_bound
from cachesync.schema.errors import RetryableError


@pytest.mark.parametrize("failed, total, expected", [
    (1, 100, 2.0), (1, 10_000, 4.0), (5, 1_000_000, 5.3), (0, 100, None), (3, 0, None)])
def test_nines_are_minus_log10_of_the_failed_share(failed, total, expected):
    assert nines(failed, total) == expected


def test_when_nothing_failed_the_95_percent_bound_is_three_over_n():
    assert upper_bound(0, 10_000_000) == 3e-7
    assert upper_bound(1, 100) is None and upper_bound(0, 0) is None
    s = share(0, 10_000_000)
    assert s["ratio"] == 1.0 and s["nines"] is None
    assert s["upper_bound"] == 3e-7 and s["nines_at_least"] == round(-math.log10(3e-7), 2)
    assert share(0, 2)["nines_at_least"] is None       # 3/2: the bound says nothing


def test_lag_figures_count_each_bound_exactly_and_percentiles_within_one_percent():
    f = LagFigures()
    lags = [0.001 * i for i in range(1, 1001)] + [2.5]     # 1 ms .. 1 s, and one at 2.5 s
    f.add(lags)
    fig = f.figures()
    assert fig["changes"] == 1001
    assert fig["within"]["100ms"]["failed"] == 901          # 101 ms .. 1 s and 2.5 s
    assert fig["within"]["1s"]["failed"] == 1               # exactly 1.0 is within
    assert fig["within"]["1s"]["nines"] == round(-math.log10(1 / 1001), 2)
    assert 500 <= fig["p50_ms"] <= 501 * 1.01
    assert 990 <= fig["p99_ms"] <= 991 * 1.01
    assert fig["p99.9_ms"] <= 1001 * 1.01 and fig["max_ms"] == 2500.0


def test_lag_figures_merge_and_are_empty_before_the_first_change():
    empty = LagFigures().figures()
    assert empty["changes"] == 0 and empty["p99.9_ms"] is None
    assert empty["within"]["1s"]["ratio"] is None
    a, b = LagFigures(), LagFigures()
    a.add([0.05, 0.2])
    b.add([1.5])
    a.merge(b)
    assert a.figures()["within"]["1s"]["failed"] == 1 and a.count == 3


def test_summary_states_nines_or_the_bound():
    f = LagFigures()
    f.add([0.01] * 1000)
    text = summary(f.figures())
    assert text.startswith("1,000 changes: 100 % (>= 2.52 nines, 95 % bound) within 100ms")
    assert "p99.9 10" in text


class _Source:
    def __init__(self, kind="binlog"):
        self.kind, self.commit_ts = kind, 100.0


class _Event:
    def __init__(self, msg_id, kind="binlog", after=None):
        self.id, self.source, self.after = msg_id, _Source(kind), after


def test_the_watch_counts_done_marks_and_gives_up_on_changes_never_applied():
    now = [100.5]
    done = {"a": 100.05, "b": 101.5}
    failing = []

    def done_at(ids):
        if failing:
            raise RetryableError("redis down")
        return {i: done[i] for i in ids if i in done}
    watch = ApplyWatch(done_at, wait_s=1.0, give_up_s=10.0, clock=lambda: now[0])
    watch.offer([_Event("a"), _Event("b"), _Event("c")])
    assert watch.check() == 0                      # not due yet
    now[0] = 101.6
    failing.append(1)
    assert watch.check() == 0 and watch.failures == 1
    failing.clear()
    assert watch.check() == 2                      # a and b; c not done: looked at again
    now[0] = 111.0
    assert watch.check() == 1                      # c given up: late at every bound
    rows = watch.figures.figures()["rows"]
    assert rows["changes"] == 3
    assert rows["within"]["100ms"]["failed"] == 2 and rows["within"]["1s"]["failed"] == 2


def test_the_collector_labels_each_quantile_by_its_share():
    from cachesync.runtime.metrics import ChangeFigures, ChangeFiguresCollector
    figures = ChangeFigures()
    figures.add("rows", [0.05, 0.2, 2.0])
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in ChangeFiguresCollector("p", figures).collect() for s in fam.samples}
    quantiles = {dict(labels)["quantile"]: v for (name, labels), v in samples.items()
                 if name == "p_commit_to_apply_quantile_seconds" and dict(labels)["kind"] == "rows"}
    assert sorted(quantiles) == ["0.5", "0.99", "0.999"]
    assert quantiles["0.999"] == pytest.approx(2.0, rel=0.01)
    assert samples[("p_changes_total", (("kind", "rows"),))] == 3
