"""The failover benchmark's pure parts: a partition's stall, and keys sorted into partitions."""

from __future__ import annotations

import pytest

from bench.failover import Progress, _fault_medians, longest_stall
from cachesync.schema.partition import partition_for


@pytest.mark.parametrize("events, stall", [
    ([], 0.0),
    # steady: each key gone 0.1 s after its commit, one commit per second
    ([(0.0, 0.1), (1.0, 1.1), (2.0, 2.1)], 0.1),
    # idle between keys is not a stall: nothing was outstanding from 0.1 to 1.0
    ([(0.0, 0.1), (1.0, 1.2)], 0.2),
    # a stall: keys committed at 1.0 and 1.5 wait until 9.0
    ([(0.0, 0.1), (1.0, 9.0), (1.5, 9.0), (9.5, 9.6)], 8.0),
    # progress during the wait shortens the stall: the key of 0.5 went at 4.0
    ([(0.5, 4.0), (1.0, 9.0)], 5.0),
    # out of order: a later commit went first; the earliest outstanding key counts
    ([(1.0, 6.0), (2.0, 3.0)], 3.0),
])
def test_longest_stall(events, stall):
    assert longest_stall(events) == pytest.approx(stall)


def test_progress_files_each_key_under_the_partition_the_tailer_uses():
    progress = Progress("db1", partitions=3)
    for row_id in range(30):
        progress(f"bench:x:lag:{row_id}", float(row_id), row_id + 0.5)
    for p in range(3):
        expected = [i for i in range(30) if partition_for(f"db1.lag:{i}".encode(), 3) == p]
        assert [c for c, _ in progress.events(p, since=0.0)] == [float(i) for i in expected]
    assert progress.first_gone(0, after=100.0) is None
    assert sorted(progress.latencies_ms(since=10.0)) == [500.0] * 20


def test_fault_medians_give_each_figure_its_target_and_whether_it_was_met():
    run = {"consumer_static_restart": {"killed_stall_s": 4.0, "survivor_stall_s": 1.5},
           "consumer_dynamic_lost": {"figure_s": 7.0}, "tailer_standby": {"figure_s": 11.0},
           "kafka_restart": {"figure_s": 3.0},
           "mariadb_promotion": {"figure_s": None, "reason": "needs devstack mariadb-replica"}}
    out = _fault_medians([{"faults": run}])
    assert out["consumer_static_restart"] == {
        "killed": {"figure_s": 4.0, "target_s": 5.0, "met": True},
        "survivor": {"figure_s": 1.5, "target_s": 1.0, "met": False}}
    assert out["consumer_dynamic_lost"] == {"figure_s": 7.0, "target_s": 10.0, "met": True}
    assert out["tailer_standby"]["met"] is False
    assert out["mariadb_promotion"] == {"figure_s": None, "target_s": 8.0, "met": None,
                                        "reason": "needs devstack mariadb-replica"}
