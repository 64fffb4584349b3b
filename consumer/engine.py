"""The python engine: the loop that owns poll, commit and stop around the shared applier.

poll -> ``Applier.apply`` (decode -> plan -> claim -> apply -> confirm -> dead letters)
-> commit offsets -> hooks. Offsets are committed only after the cache was updated and
the ids confirmed; a crash anywhere before that re-delivers the batch, and the dedup
table plus idempotent deletes make the redelivery harmless. The source is any
``Source``: Kafka, or direct mode's in-process queue.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from cachesync.collector import paced
from cachesync.config import ConsumerSettings
from cachesync.consumer.applier import Applier, BatchResult, Stats
from cachesync.consumer.core.offsets import commit_offsets
from cachesync.consumer.hooks import Hook, Hooks, consumer_hooks
from cachesync.consumer.ports import CacheWriter, DeadLetters, DedupStore, Source
from cachesync.schema.mapping import MappingSet
from cachesync.schema.retry import RetryPolicy, Stopped

__all__ = ["PythonEngine", "Stats", "BatchResult", "Stopped"]


class PythonEngine:
    """``run()`` until ``stop()``; ``stats`` counts what the applier and the hooks did,
    ``tables`` (the applier's TableTally) what it could not apply exactly, per table."""

    def __init__(self, source: Source, dedup: DedupStore, cache: CacheWriter,
                 dead_letters: DeadLetters, mappings: MappingSet,
                 options: ConsumerSettings = ConsumerSettings(), retry: RetryPolicy = RetryPolicy(),
                 on_batch: Callable[[BatchResult], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, hooks: Sequence[Hook] = ()):
        self._source, self._dedup, self._cache, self._dlq = source, dedup, cache, dead_letters
        self._opts, self._retry = options, retry
        self._stop = threading.Event()
        self.stats = Stats()
        self.applier = Applier(cache, mappings, options, dedup, dead_letters, retry, self._stop,
                               self.stats)
        self.tables = self.applier.tables    # per-table counts of inexact applies (metrics)
        self.hooks = Hooks([consumer_hooks(cache, dedup, options, self.stats, clock=clock,
                                           retry=retry, stop=self._stop, on_batch=on_batch),
                            *hooks])
        # the most events one record held in the last batch (packed records hold many);
        # the first poll of a packed topic is bounded by the source's fetch size instead
        self._events_per_record = 1

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Release every adapter; closing the Kafka source leaves the consumer group at
        once, so a replacement gets the partitions without waiting for the session timeout."""
        for adapter in (self._source, self._dedup, self._cache, self._dlq):
            close = getattr(adapter, "close", None)
            if close is not None:
                close()

    def run(self) -> None:
        """Consume until stop(); transient errors are retried forever, fatal ones raise.
        The collector is paced for the loop while it runs (cachesync.collector)."""
        try:
            with paced():
                while not self._stop.is_set():
                    try:
                        self.step()
                    except Stopped:
                        break
        finally:
            self.hooks.close()

    def step(self) -> BatchResult | None:
        """One poll, applied and committed; None when the poll was empty."""
        self.hooks.tick()
        # batch_size counts events; a packed record carries many of them
        max_records = max(1, self._opts.batch_size // self._events_per_record)
        records = self.applier.call("poll", lambda: self._source.poll(max_records,
                                                               self._opts.poll_timeout_s))
        if not records:
            return None
        result = self.applier.apply(records)
        self._events_per_record = max(1, result.widest)
        self.applier.call("commit offsets", lambda: self._source.commit(commit_offsets(records)))
        self.hooks.after_batch(result)
        return result


