"""A table-level scan's pace: how long it leaves Redis to the row stream after each call."""

from __future__ import annotations

import threading

import pytest

from cachesync.consumer.adapters.memory import MemoryCache, MemoryTableJobs
from cachesync.consumer.applier import Stats
from cachesync.consumer.core.plan import EventPlan
from cachesync.consumer.core.scan_pace import MAX_PAUSE_S, ScanPace
from cachesync.consumer.table_jobs import TableInvalidator
from cachesync.producer_outbox.decode.rows import TxnContext, table_change
from cachesync.schema.mapping import parse_mappings


@pytest.mark.parametrize("pace, call_s, examined, pause", [
    (ScanPace(), 0.050, 5000, 0.0),                         # back to back
    (ScanPace(busy_share=0.5), 0.050, 5000, 0.050),         # as long as the call
    (ScanPace(busy_share=0.25), 0.010, 1000, 0.030),        # 10 ms busy in 40
    (ScanPace(busy_share=0.5), 0.004, 0, 0.004),            # an UNLINK pipeline too
    (ScanPace(busy_share=0.5), 5.0, 5000, MAX_PAUSE_S),     # one stalled call: bounded
    (ScanPace(keys_per_s=100_000), 0.010, 5000, 0.040),     # 5,000 keys take 50 ms at least
    (ScanPace(keys_per_s=100_000), 0.080, 5000, 0.0),       # the call alone took longer
    (ScanPace(keys_per_s=100_000), 0.004, 0, 0.0),          # a call examining no key
    (ScanPace(busy_share=0.5, keys_per_s=100_000), 0.030, 5000, 0.030),  # the longer pause
    (ScanPace(busy_share=0.5, keys_per_s=100_000), 0.010, 5000, 0.040),
])
def test_pause_after_a_call(pace, call_s, examined, pause):
    assert pace.pause_after(call_s, examined) == pytest.approx(pause)


@pytest.mark.parametrize("share, keys_per_s", [(0, 0), (-0.5, 0), (1.5, 0), (1, -1)])
def test_out_of_range_pace_is_refused(share, keys_per_s):
    with pytest.raises(ValueError):
        ScanPace(busy_share=share, keys_per_s=keys_per_s)


class _CallingCache(MemoryCache):
    """Reports ``calls`` round trips of ``call_s`` each to the scan's pace."""

    def __init__(self, calls: int, call_s: float):
        super().__init__()
        self.calls, self.call_s = calls, call_s
        self.scan_counts: list = []

    def invalidate_table(self, mapping, fence_version=None, progress=None, keep_newer=None,
                         pace=None, scan_count=0) -> int:
        self.scan_counts.append(scan_count)
        for _ in range(self.calls):
            pace(self.call_s, scan_count)
        return super().invalidate_table(mapping, fence_version, progress, keep_newer)


class _RecordingStop(threading.Event):
    """A stop event that records the waits asked of it (and does not wait)."""

    def __init__(self):
        super().__init__()
        self.waits: list = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        return self.is_set()


def test_the_invalidator_pauses_as_its_pace_says_and_counts_it():
    cache = _CallingCache(calls=4, call_s=0.02)
    cache.data.update({"user:1": b"v", "user:2": b"v", "order:1": b"o"})
    stop = _RecordingStop()
    scans = TableInvalidator(cache, MemoryTableJobs(), Stats(), stop=stop,
                             pace=ScanPace(busy_share=0.25), scan_count=1000)
    event = table_change(TxnContext("mariadb:1", "0-1-7", 7, 0.0), 0, 0, "app", "users",
                         "truncate", "TRUNCATE users")
    mapping = parse_mappings({"app.users": {"keys": ["user:{id}"]}}).tables["app.users"]
    scans.submit(EventPlan(event, (), table=mapping), None)
    assert scans.wait_idle(5)
    scan, = scans.scans()
    assert cache.scan_counts == [1000]
    # 20 ms in Redis, 60 ms away, per call; the memory cache's own one call took no time
    assert stop.waits == pytest.approx([0.06] * 4)
    assert scan.paused == pytest.approx(0.24) and scan.keys == 2
    assert "order:1" in cache.data and "user:1" not in cache.data
    scans.close()


def test_the_pauses_are_a_metric_per_table():
    from cachesync.runtime.metrics import TableScanCollector
    from cachesync.consumer.table_jobs import TableScan
    scan = TableScan("job", "app.users", "truncate", started=0.0, keys=5, finished=3.0,
                     paused=1.5)
    scan.done.set()
    families = {f.name: f for f in TableScanCollector(lambda: [scan]).collect()}
    sample, = families["cachesync_consumer_table_scan_paused_seconds"].samples
    assert sample.labels == {"table": "app.users"} and sample.value == 1.5
