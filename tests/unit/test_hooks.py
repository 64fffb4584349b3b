"""The consumer's side jobs as hooks, driven by hand (no loop) over the in-memory adapters."""

from __future__ import annotations

import logging
import threading

from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.adapters.memory import MemoryCache, MemoryDedupStore
from cachesync.consumer.applier import Applier, Stats
from cachesync.consumer.hooks import DedupPurge, DelayedDeletes, Hook, Ticker, consumer_hooks
from cachesync.devstack import wait_for
from cachesync.schema.errors import RetryableError
from cachesync.schema.mapping import parse_mappings
from tests.support.events import change, record

DOUBLE = parse_mappings({"shop.users": {"keys": ["user:{id}"], "double_delete": 0.5}})


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def applied(cache, *ids):
    return Applier(cache, DOUBLE).apply([record(i, change(m, i)) for i, m in enumerate(ids)])


def test_delayed_deletes_run_when_due_and_the_rest_on_close():
    clock, cache, stats = Clock(), MemoryCache(), Stats()
    hook = DelayedDeletes(cache, stats, clock)
    hook.after_batch(applied(cache, "a"))
    clock.now += 0.3
    hook.after_batch(applied(cache, "b", "c"))
    cache.deleted.clear()
    clock.now += 0.3                                  # a is due (0.6 s), b and c are not
    hook.tick()
    assert cache.deleted == ["user:0"] and stats.double_deletes == 1
    hook.close()                                      # stopping runs what is pending, once
    assert cache.deleted == ["user:0", "user:0", "user:1"] and stats.double_deletes == 3
    hook.close()
    assert stats.double_deletes == 3


class DownDedup(MemoryDedupStore):
    def purge(self, retention_s, limit):
        raise RetryableError("mysql down")


def done_records(store, n):
    token, _ = store.claim([f"d{i}" for i in range(n)], 30)
    store.confirm(token, [f"d{i}" for i in range(n)])


def test_the_purge_runs_on_its_interval_bounded_and_skips_an_outage(caplog):
    clock, stats = Clock(), Stats()
    store = MemoryDedupStore(clock)
    done_records(store, 25)
    settings = ConsumerSettings(dedup_retention_s=60, purge_interval_s=300, purge_batch=10,
                                purge_batches_per_run=2)
    hook = DedupPurge(store, settings, stats, clock)
    clock.now += 299
    hook.tick()
    assert stats.purged == 0
    clock.now += 2
    hook.tick()
    assert stats.purged == 20 and len(store.rows) == 5
    down = DedupPurge(DownDedup(clock), settings, stats, clock)
    clock.now += 301
    with caplog.at_level(logging.WARNING, logger="cachesync.consumer.hooks"):
        down.tick()
    assert "dedup purge skipped until the next interval: mysql down" in caplog.text


def test_consumer_hooks_purge_only_with_a_store_and_call_on_batch():
    seen, stats = [], Stats()
    hooks = consumer_hooks(MemoryCache(), None, ConsumerSettings(), stats, on_batch=seen.append)
    assert [type(h).__name__ for h in hooks.hooks] == ["DelayedDeletes", "OnBatch"]
    result = applied(MemoryCache(), "a")
    hooks.after_batch(result)
    assert seen == [result]
    with_store = consumer_hooks(MemoryCache(), MemoryDedupStore(), ConsumerSettings(), stats)
    assert [type(h).__name__ for h in with_store.hooks] == ["DelayedDeletes", "DedupPurge"]


class Counting(Hook):
    def __init__(self):
        self.ticks, self.closed = 0, False

    def tick(self):
        self.ticks += 1

    def close(self):
        self.closed = True


def test_a_ticker_ticks_its_hook_until_stopped_then_closes_it():
    hook, stop = Counting(), threading.Event()
    ticker = Ticker(hook, "test-ticker", stop, interval_s=0.01)
    ticker.start()
    wait_for(lambda: hook.ticks >= 3, 10, what="three ticks")
    ticker.stop()
    assert hook.closed and not ticker.is_alive() and stop.is_set()
