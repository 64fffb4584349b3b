"""The Spark driver's periodic dedup purge (the tasks only apply batches)."""

import time

from cachesync.commands.consume_spark import DedupPurger
from cachesync.config import load
from cachesync.consumer.adapters.memory import MemoryDedupStore


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
    purger = DedupPurger(load(str(cfg), {}), build=lambda _settings: store)
    purger.start()
    deadline = time.monotonic() + 10
    while store.rows and time.monotonic() < deadline:
        time.sleep(0.01)                                   # awaiting the purge thread's work
    purger.stop()
    assert not store.rows and purger.purged == 3 and store.closed
