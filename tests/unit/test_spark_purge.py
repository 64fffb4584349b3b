"""The Spark driver's periodic dedup purge (the tasks only apply batches)."""

import time

from cachesync.commands.consume_spark import dedup_purge
from cachesync.runtime.config import load
from cachesync.consumer.adapters.memory import MemoryDedupStore
from cachesync.consumer.applier import Stats
from cachesync.devstack import wait_for


class ClosingStore(MemoryDedupStore):
    closed = False

    def close(self):
        self.closed = True


def test_the_driver_purges_done_records_on_its_interval_and_closes_the_store(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("consumer: {purge_interval_s: 0.01, dedup_retention_s: 0, purge_batch: 2}\n"
                   "tables: {a.b: {keys: ['b:{id}']}}\n")
    store = ClosingStore()
    token, _ = store.claim(["x", "y", "z"], 30)
    store.confirm(token, ["x", "y", "z"])
    store._clock = lambda: time.monotonic() + 1          # done records are now past retention
    stats = Stats()
    with dedup_purge(load(str(cfg), {}), stats, build=lambda _settings: store):
        wait_for(lambda: not store.rows, timeout=10, what="the driver's purge")
    assert not store.rows and stats.purged == 3 and store.closed
