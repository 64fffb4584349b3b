"""The python engine: the loop that owns poll, commit and stop around the shared applier.

poll -> ``Applier.apply`` (decode -> plan -> claim -> apply -> confirm -> dead letters)
-> commit offsets -> hooks. Offsets are committed only after the cache was updated and
the ids confirmed; a crash anywhere before that re-delivers the batch, and the dedup
table plus idempotent deletes make the redelivery harmless. The source is any
``Source``: Kafka, or direct mode's in-process queue.

``run`` hands ``Applier.apply`` to a worker thread and, while a backlog lasts, polls and
prepares (decodes, plans) the next batch meanwhile (``consumer.overlap_batches``); the
batches still reach the cache and the dedup store one at a time, in order.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
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
        self._asked = 1         # records the last poll asked for

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
        The collector is paced for the loop while it runs (cachesync.collector).

        With ``consumer.overlap_batches`` (the default) a worker thread applies each
        batch while this thread polls, decodes and plans the next one (``_overlapped``);
        otherwise every batch is polled, applied and committed in turn (``step``).
        """
        try:
            with paced():
                if self._opts.overlap_batches:
                    self._overlapped()
                else:
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
        records = self._poll(self._opts.poll_timeout_s)
        if not records:
            return None
        return self._finish(records, self.applier.apply(records))

    def _poll(self, timeout_s: float) -> list:
        # batch_size counts events; a packed record carries many of them
        self._asked = max(1, self._opts.batch_size // self._events_per_record)
        return self.applier.call("poll", lambda: self._source.poll(self._asked, timeout_s))

    def _finish(self, records, result: BatchResult) -> BatchResult:
        """Commit an applied batch's offsets, then its hooks."""
        self._events_per_record = max(1, result.widest)
        self.applier.call("commit offsets", lambda: self._source.commit(commit_offsets(records)))
        self.hooks.after_batch(result)
        return result

    def _overlapped(self) -> None:
        """The loop with a worker thread that applies the batches.

        This thread alone polls and commits (the Kafka consumer is not thread-safe),
        decodes and plans; the worker only runs ``Applier.apply`` on what was prepared.
        When a poll came back full (a backlog: more records are waiting), the next batch
        is polled and prepared while the worker applies this one, and handed over only
        once this one is done and committed. The cache, the dedup store and the hooks
        therefore see every batch in order, one at a time, exactly as ``step`` does: what
        overlaps is this thread's Python with the worker's waits for Redis and MySQL. A
        poll that came back short (no backlog) waits for its batch before polling again,
        so that the next batch takes in everything that arrived meanwhile: polling ahead
        then would close the next batch early and add a batch's time to its records' lag.
        The hooks tick between two batches, never beside one.
        """
        with ThreadPoolExecutor(1, thread_name_prefix="cachesync-apply") as worker:
            flight = None      # (records, the future of their BatchResult)
            try:
                while not self._stop.is_set():
                    # with a batch in flight, take only what has arrived: its result is next
                    records = self._poll(0.0 if flight else self._opts.poll_timeout_s)
                    prepared = self.applier.prepare(records) if records else None
                    if prepared is not None:      # sizes the next poll (packed records)
                        self._events_per_record = max(1, prepared.decoded.widest)
                    if flight is not None:
                        done, flight = flight, None
                        self._finish(done[0], done[1].result())
                    self.hooks.tick()
                    if not records:
                        continue
                    future = worker.submit(self.applier.apply, records, prepared)
                    if len(records) >= self._asked:
                        flight = (records, future)
                    else:
                        self._finish(records, future.result())
            except Stopped:
                pass
            except BaseException:
                # this thread failed: the batch in flight gives up its retries (stop) and
                # stays uncommitted (delivered again, skipped as duplicates), and this
                # error is the one raised
                self._stop.set()
                if flight is not None:
                    wait([flight[1]])
                raise
            if flight is not None:
                self._land(*flight)

    def _land(self, records, future) -> None:
        """The batch in flight when the loop stopped: waited for (a stop makes its waits
        give up), committed if it was applied, as ``step`` would have; what it raised
        other than Stopped is raised here."""
        wait([future])
        error = future.exception()
        if error is not None:
            if not isinstance(error, Stopped):
                raise error
            return                  # not committed: delivered again, skipped as duplicates
        try:
            self._finish(records, future.result())
        except Stopped:
            pass
