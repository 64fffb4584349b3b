"""The consistency monitor's decisions (cachesync.consumer.consistency): sampling, the rate
cap, which keys a check reads, the verdict per key, and when a suspicion becomes stale."""

from __future__ import annotations

import json
import queue
import threading
import time

import pytest

from cachesync.consumer.consistency import (CONSISTENT, MISSING, STALE, UNSETTLED, UNVERIFIABLE,
                                            RateLimit, Sample, judge, keys_to_read, next_step,
                                            row_identity, sampled)
from cachesync.schema.mapping import parse_mappings

MAPS = parse_mappings({
    "app.users": {"keys": ["user:{id}", "user:email:{email}"]},
    "app.items": {"keys": ["item:{id}", "item:sku:{sku}"], "mode": "update"},
    "app.pairs": {"keys": ["pair:{a}{b}"], "mode": "update"},
    "app.hashes": {"keys": ["h:{id}"], "mode": "update", "value": "hash"},
})
USERS, ITEMS, PAIRS, HASHES = (MAPS.tables[f"app.{t}"]
                              for t in ("users", "items", "pairs", "hashes"))
ROW = {"id": 7, "email": "a@x", "name": "Ann"}
ITEM = {"id": 7, "sku": "S-1", "price": "9.50"}


def test_sampling_is_a_stable_share_of_the_ids():
    ids = [f"0-1-{n}:{i}" for n in range(2000) for i in range(5)]
    picked = [i for i in ids if sampled(i, 0.1)]
    assert 0.08 * len(ids) < len(picked) < 0.12 * len(ids)
    assert picked == [i for i in ids if sampled(i, 0.1)]          # every monitor picks the same
    assert all(sampled(i, 1.0) for i in ids[:50]) and not any(sampled(i, 0.0) for i in ids)


def test_the_rate_cap_allows_rate_per_second_and_refills():
    now = [0.0]
    limit = RateLimit(5, lambda: now[0])
    assert [limit.take() for _ in range(7)] == [True] * 5 + [False] * 2
    now[0] = 0.4                                        # 0.4 s refills 2 tokens
    assert [limit.take() for _ in range(3)] == [True, True, False]
    now[0] = 100.0                                      # never more than one second's worth
    assert sum(limit.take() for _ in range(20)) == 5


@pytest.mark.parametrize("mapping, row, pk, expected", [
    (USERS, ROW, {"id": 7}, ["user:7", "user:email:a@x"]),
    (USERS, {**ROW, "email": None}, {"id": 7}, ["user:7"]),             # NULL: no such key
    (USERS, None, {"id": 7}, ["user:7"]),                               # gone: pk-only templates
    (ITEMS, ITEM, {"id": 7}, ["item:7", "item:sku:S-1"]),
    # update mode never writes a key another row could render: nothing to compare it with
    (PAIRS, {"a": "1", "b": "23"}, {"a": "1", "b": "23"}, []),
])
def test_keys_to_read(mapping, row, pk, expected):
    assert keys_to_read(mapping, row, pk) == expected


ITEM_JSON = json.dumps(ITEM, separators=(",", ":")).encode()


@pytest.mark.parametrize("mapping, row, cached, expected", [
    # update mode: the value cachesync renders from the row, or nothing
    (ITEMS, ITEM, {"item:7": ITEM_JSON}, CONSISTENT),
    (ITEMS, ITEM, {"item:7": json.dumps({**ITEM, "price": "8.00"}).encode()}, STALE),
    (ITEMS, ITEM, {"item:7": None}, MISSING),
    (ITEMS, None, {"item:7": ITEM_JSON}, STALE),                  # the row is gone, its value not
    (ITEMS, None, {"item:7": None}, MISSING),
    (HASHES, {"id": 1, "n": 2}, {"h:1": {b"id": b"1", b"n": b"2"}}, CONSISTENT),
    (HASHES, {"id": 1, "n": 2}, {"h:1": {b"id": b"1", b"n": b"3"}}, STALE),
    (HASHES, {"id": 1, "n": 2}, {"h:1": {}}, MISSING),
    # delete mode: absent is fine; an application's JSON fill is compared field by field
    (USERS, ROW, {"user:7": None}, MISSING),
    (USERS, ROW, {"user:7": b'{"id": 7, "name": "Ann"}'}, CONSISTENT),
    (USERS, ROW, {"user:7": b'{"id": 7, "name": "Bob"}'}, STALE),
    (USERS, ROW, {"user:7": b"Ann|a@x"}, UNVERIFIABLE),           # not JSON: the format is the app's
    (USERS, ROW, {"user:7": b'{"nick": "A"}'}, UNVERIFIABLE),      # no column in common
    (USERS, None, {"user:7": b'{"id": 7, "name": "Ann"}'}, STALE),
    (USERS, None, {"user:7": b"none"}, UNVERIFIABLE),             # maybe the app's "not found"
])
def test_verdicts(mapping, row, cached, expected):
    assert set(judge(mapping, row, cached).values()) == {expected}


A, B = row_identity({"id": 1, "n": 1}), row_identity({"id": 1, "n": 2})
FIRST = Sample("app.items", (("id", 1),), due=10.0)
SUSPECT_A = Sample("app.items", (("id", 1),), due=12.0, attempt=1, suspect=A)
OK, BAD = {"item:1": CONSISTENT}, {"item:1": STALE}


@pytest.mark.parametrize("sample, before, after, verdicts, expected", [
    (FIRST, A, A, OK, ("count", OK)),
    (FIRST, A, A, BAD, ("recheck", (1, A))),            # a first disagreement is only suspected
    (SUSPECT_A, A, A, BAD, ("count", BAD)),             # the same row a window later: stale
    (SUSPECT_A, A, A, OK, ("count", OK)),               # the invalidation was late, not lost
    (SUSPECT_A, B, B, BAD, ("recheck", (2, B))),        # the row moved on: a new suspicion
    (FIRST, A, B, OK, ("recheck", (1, None))),          # the row changed under the read
    (FIRST, A, B, BAD, ("recheck", (1, None))),
    (Sample("t", (), 0.0, attempt=2), A, B, BAD, ("count", {"item:1": UNSETTLED})),
    (Sample("t", (), 0.0, attempt=2, suspect=A), B, B, BAD, ("count", {"item:1": UNSETTLED})),
    (FIRST, None, None, {"item:1": MISSING}, ("count", {"item:1": MISSING})),
])
def test_a_key_is_stale_only_when_the_row_stood_still_for_a_window(sample, before, after,
                                                                   verdicts, expected):
    step = next_step(sample, before, after, verdicts, now=20.0, window_s=2.0, max_attempts=3)
    if expected[0] == "count":
        assert step.recheck is None and step.verdicts == expected[1]
    else:
        assert step.verdicts is None
        assert (step.recheck.attempt, step.recheck.suspect) == expected[1]
        assert step.recheck.due == 22.0 and step.recheck.pk == sample.pk


@pytest.mark.parametrize("monitor", [{"enabled": False}, {"sample_ratio": 0.0}])
def test_a_monitor_that_checks_nothing_is_not_built(monitor, tmp_path):
    # no thread, no connection, no metrics: consume runs exactly as without the monitor
    from cachesync.runtime.config import load
    from cachesync.operate import monitor_hook
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"tables": {"app.users": {"keys": ["user:{id}"]}},
                                "monitor": monitor}))
    settings = load(path, {})
    assert monitor_hook(settings, ops=None) == []


class _HeldReader:
    """A row reader whose first read waits until ``release`` is set (a check in progress)."""

    def __init__(self):
        import threading
        self.reading, self.release = threading.Event(), threading.Event()
        self.reads = 0

    def read(self, mapping, pk):
        self.reads += 1
        self.reading.set()
        assert self.release.wait(10)
        return dict(pk)

    def forget(self):
        pass

    def close(self):
        pass


def test_a_sample_being_checked_stays_pending_until_its_result_is_counted():
    """A scrape that reads ``pending`` 0 must find every result in the counts: the sample in
    hand (taken off the queue, its rows being read) is still pending."""
    from cachesync.runtime.config import MonitorSettings
    from cachesync.consumer.adapters.memory import MemoryCache
    from cachesync.consumer.core.plan import EventPlan
    from cachesync.devstack import wait_for
    from cachesync.monitor import ConsistencyMonitor
    from tests.support.events import event

    maps = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})
    reader = _HeldReader()
    monitor = ConsistencyMonitor(MonitorSettings(sample_ratio=1.0, window_s=0.01), maps, reader,
                                 MemoryCache(), clock=lambda: 1e12)   # every sample is due
    monitor.offer([EventPlan(event("m1", 7), ("user:7",))], due=0.0)
    assert monitor.pending == 1
    monitor.start()
    try:
        assert reader.reading.wait(10)              # taken off the queue, being checked
        assert monitor.pending == 1 and dict(monitor.counts) == {}
        reader.release.set()
        wait_for(lambda: monitor.pending == 0, 10, what="the check to finish")
        assert dict(monitor.counts) == {("shop.users", MISSING): 1}   # user:7 not cached
    finally:
        monitor.close()


class _RecordingQueue(queue.Queue):
    """A queue that records the timeout of every blocking ``get``."""

    def __init__(self, size: int):
        super().__init__(size)
        self.waits, self.waiting = [], threading.Event()

    def get(self, block=True, timeout=None):
        self.waits.append(timeout)
        self.waiting.set()
        return super().get(block, timeout)


def test_an_idle_monitor_waits_for_a_sample_without_a_beat_and_close_wakes_it():
    """With nothing queued and nothing due, the checking thread blocks until a sample comes
    (no periodic wake-up while the consumer is idle); ``close`` wakes it at once."""
    from cachesync.runtime.config import MonitorSettings
    from cachesync.consumer.adapters.memory import MemoryCache
    from cachesync.monitor import JOIN_S, ConsistencyMonitor

    maps = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})
    monitor = ConsistencyMonitor(MonitorSettings(sample_ratio=1.0), maps, _HeldReader(),
                                 MemoryCache())
    monitor._queue = recording = _RecordingQueue(monitor._settings.queue_size)
    monitor.start()
    assert recording.waiting.wait(10)
    assert recording.waits == [None]            # no timeout: it sleeps until a sample comes
    started = time.monotonic()
    monitor.close()
    assert not monitor._thread.is_alive()
    assert time.monotonic() - started < JOIN_S / 2
