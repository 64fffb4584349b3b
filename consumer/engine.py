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

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Sequence

from cachesync.runtime import startup
from cachesync.runtime.gc_pacing import paced
from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.applier import Applier, BatchResult, Stats
from cachesync.consumer.core.offsets import commit_offsets
from cachesync.consumer.core.table_jobs import held_back
from cachesync.consumer.hooks import Hook, Hooks, consumer_hooks
from cachesync.consumer.ports import CacheWriter, DeadLetters, DedupStore, Source
from cachesync.consumer.table_jobs import TableInvalidator, paced_by
from cachesync.schema.mapping import MappingSet
from cachesync.schema.retry import RetryPolicy, Stopped

__all__ = ["PythonEngine", "Stats", "BatchResult", "Stopped"]

# the longest wait between two polls that failed (a broker away): a failed poll has already
# spent its time on the client's own connection attempts, and a longer backoff would leave
# the consumer asleep for that long after the broker serves again, with the backlog of the
# whole outage waiting
POLL_RETRY_CAP_S = 0.25


class PythonEngine:
    """``run()`` until ``stop()``; ``stats`` counts what the applier and the hooks did,
    ``tables`` (the applier's TableTally) what it could not apply exactly, per table."""

    def __init__(self, source: Source, dedup: DedupStore, cache: CacheWriter,
                 dead_letters: DeadLetters, mappings: MappingSet,
                 options: ConsumerSettings = ConsumerSettings(), retry: RetryPolicy = RetryPolicy(),
                 on_batch: Callable[[BatchResult], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, hooks: Sequence[Hook] = (),
                 table_jobs=None):
        self._source, self._dedup, self._cache, self._dlq = source, dedup, cache, dead_letters
        self._opts, self._retry = options, retry
        self._poll_retry = dataclasses.replace(retry, cap_s=min(retry.cap_s, POLL_RETRY_CAP_S))
        self._stop = threading.Event()
        self.stats = Stats()
        # table_jobs (a job store, RedisTableJobs): table-level scans run beside the rows,
        # once per event, each copy's offset held until its scan completes
        self.table_scans = None if table_jobs is None else TableInvalidator(
            cache, table_jobs, self.stats, retry, self._stop, lease_s=options.claim_lease_s,
            **paced_by(options))
        self._wanted: dict = {}        # partition -> the offset its applied batches reached
        self._short: dict = {}         # partition -> offset committed short of it (a scan held it)
        self.applier = Applier(cache, mappings, options, dedup, dead_letters, retry, self._stop,
                               self.stats, table_jobs=self.table_scans)
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
        if self.table_scans is not None:
            self.table_scans.close()
        for adapter in (self._source, self._dedup, self._cache, self._dlq):
            close = getattr(adapter, "close", None)
            if close is not None:
                close()

    def run(self) -> None:
        """Consume until stop(); transient errors are retried forever, fatal ones raise.
        The collector is paced for the loop while it runs (cachesync.runtime.gc_pacing).

        With ``consumer.overlap_batches`` (the default) a worker thread applies each
        batch while this thread polls, decodes and plans the next one (``_overlapped``);
        otherwise every batch is polled, applied and committed in turn (``step``).
        """
        startup.done("first poll")
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
        self._release()
        records = self._poll(self._wait_s())
        if not records:
            return None
        return self._finish(records, self.applier.apply(records))

    def _wait_s(self) -> float:
        """How long a poll may wait for records (it returns as soon as some arrive):
        ``consumer.poll_timeout_s``, or less when a hook's next tick is due sooner. With
        nothing arriving, the loop wakes only for that (no fixed beat while idle)."""
        due = self.hooks.due_in()
        return self._opts.poll_timeout_s if due is None else min(self._opts.poll_timeout_s, due)

    def _poll(self, timeout_s: float) -> list:
        # batch_size counts events; a packed record carries many of them
        self._asked = max(1, self._opts.batch_size // self._events_per_record)
        return self.applier.call("poll", lambda: self._source.poll(self._asked, timeout_s),
                                 self._poll_retry)

    def _finish(self, records, result: BatchResult) -> BatchResult:
        """Commit an applied batch's offsets (none past a table event still being scanned),
        then its hooks."""
        self._events_per_record = max(1, result.widest)
        offsets = commit_offsets(records)
        if self.table_scans is not None:
            offsets = self._held(offsets)
        self.applier.call("commit offsets", lambda: self._source.commit(offsets))
        self.hooks.after_batch(result)
        return result

    def _held(self, offsets: dict) -> dict:
        """``offsets`` held back at the table events whose scans run (``_short`` remembers
        where); raises what made a scan fail."""
        self.table_scans.check()
        for tp, offset in offsets.items():
            self._wanted[tp] = max(self._wanted.get(tp, 0), offset)
        held = held_back(offsets, self.table_scans.holds())
        for tp, offset in held.items():
            if offset < self._wanted[tp]:
                self._short[tp] = offset
            else:
                self._short.pop(tp, None)
        return held

    def _release(self) -> None:
        """Between batches: commit the offsets completed scans no longer hold back."""
        if self.table_scans is None or not self._short:
            return
        before = dict(self._short)
        held = self._held({tp: self._wanted[tp] for tp in before})
        moved = {tp: offset for tp, offset in held.items() if offset != before[tp]}
        if moved:
            self.applier.call("commit offsets", lambda: self._source.commit(moved))

    def _overlapped(self) -> None:
        """The loop with a worker thread that applies the batches.

        This thread alone polls and commits (the Kafka consumer is not thread-safe),
        decodes and plans; the worker only runs ``Applier.apply`` on what was prepared.
        When a poll came back full (a backlog: more records are waiting), the next batch
        is polled and prepared while the worker applies this one, and handed over only
        once this one is done and committed; a batch from a poll that came back short is
        applied on this thread (the worker is idle then, and a hand-off would cost two
        wake-ups per batch). The cache, the dedup store and the hooks
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
                    records = self._poll(0.0 if flight else self._wait_s())
                    prepared = self.applier.prepare(records) if records else None
                    if prepared is not None:      # sizes the next poll (packed records)
                        self._events_per_record = max(1, prepared.decoded.widest)
                    if flight is not None:
                        done, flight = flight, None
                        self._finish(done[0], done[1].result())
                    self.hooks.tick()
                    self._release()
                    if not records:
                        continue
                    if len(records) >= self._asked:
                        flight = (records, worker.submit(self.applier.apply, records, prepared))
                    else:
                        # no backlog: nothing to overlap, so no hand-off to the worker and
                        # back (two wake-ups and GIL hand-offs per batch, at the head of the
                        # binlog one per commit)
                        self._finish(records, self.applier.apply(records, prepared))
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
