"""The python engine: poll -> decode -> claim -> plan -> apply -> confirm -> commit.

Offsets are committed only after the cache was updated and the ids confirmed;
a crash anywhere before that re-delivers the batch, and the dedup table plus
idempotent deletes make the redelivery harmless.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from cachesync.consumer.core.dedup import decide
from cachesync.consumer.core.offsets import Record, commit_offsets
from cachesync.consumer.core.plan import (EventPlan, batch_keys, batch_writes, plan_batch,
                                          split_at_tables)
from cachesync.consumer.core.writes import padded
from cachesync.consumer.core.retry import RetryPolicy
from cachesync.consumer.ports import CacheWriter, DeadLetters, DedupStore, Source
from cachesync.schema.errors import DecodeError, RetryableError
from cachesync.schema.event import ChangeEvent, decode_record, encode
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import MappingSet

log = logging.getLogger(__name__)


class Stopped(Exception):
    """Stop was requested while a batch was waiting; nothing of it was committed."""


@dataclass(frozen=True)
class EngineOptions:
    batch_size: int = 2000
    poll_timeout_s: float = 0.2
    claim_lease_s: float = 30.0
    # Done dedup records older than this are purged; it must exceed the topic's
    # retention, or a message still in Kafka could be applied again after a rewind.
    dedup_retention_s: float = 8 * 24 * 3600.0
    purge_interval_s: float = 300.0     # 0 turns the periodic purge off
    purge_batch: int = 5000
    purge_batches_per_run: int = 20     # bounds the time one purge takes from consuming


@dataclass
class Stats:
    consumed: int = 0
    applied: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    keys_deleted: int = 0
    keys_written: int = 0
    fenced: int = 0                # update-mode writes refused: Redis held a newer version
    oversized: int = 0             # values over max_value_bytes, invalidated instead
    unversioned: int = 0           # NULL version column, invalidated instead
    null_key_skips: int = 0
    double_deletes: int = 0        # delayed second deletes run
    purged: int = 0                # done dedup records purged
    batches: int = 0
    retries: int = 0
    table_invalidations: int = 0   # table-level events (truncate, drop, rename, statement)
    table_keys_deleted: int = 0    # keys those removed


@dataclass
class BatchResult:
    consumed: int = 0          # events decoded, plus records that could not be decoded
    widest: int = 0            # the most events one record held
    applied: list[EventPlan] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    dead_lettered: list[tuple[Record, str]] = field(default_factory=list)
    applied_at: float = 0.0


class PythonEngine:
    def __init__(self, source: Source, dedup: DedupStore, cache: CacheWriter,
                 dead_letters: DeadLetters, mappings: MappingSet,
                 options: EngineOptions = EngineOptions(), retry: RetryPolicy = RetryPolicy(),
                 on_batch: Callable[[BatchResult], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._source, self._dedup, self._cache = source, dedup, cache
        self._dlq, self._mappings = dead_letters, mappings
        self._opts, self._retry, self._on_batch = options, retry, on_batch
        self._clock = clock
        self._stop = threading.Event()
        self._delayed: list[tuple[float, int, list[str]]] = []   # (due, seq, keys) heap
        self._delayed_seq = 0
        self._next_purge = clock() + options.purge_interval_s
        # the most events one record held in the last batch (packed records hold many);
        # the first poll of a packed topic is bounded by the source's fetch size instead
        self._events_per_record = 1
        self.stats = Stats()

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
        """Consume until stop(); transient errors are retried forever, fatal ones raise."""
        try:
            while not self._stop.is_set():
                try:
                    self.step()
                except Stopped:
                    break
        finally:
            self._run_delayed_deletes(force=True)

    def step(self) -> BatchResult | None:
        self._run_delayed_deletes()
        self._maybe_purge()
        # batch_size counts events; a packed record carries many of them
        max_records = max(1, self._opts.batch_size // self._events_per_record)
        records = self._with_retry("poll", lambda: self._source.poll(max_records,
                                                                     self._opts.poll_timeout_s))
        if not records:
            return None
        result = self.process(records)
        self._events_per_record = max(1, result.widest)
        self._with_retry("commit offsets", lambda: self._source.commit(commit_offsets(records)))
        if self._on_batch is not None:
            self._on_batch(result)
        return result

    def process(self, records: Sequence[Record]) -> BatchResult:
        """Apply one batch up to (not including) the offset commit."""
        result = BatchResult()
        events, origins = self._decode(records, result)
        plan = plan_batch(events, self._mappings)
        if plan.poison:
            position = {id(event): i for i, event in enumerate(events)}
            for event, error in plan.poison:
                record, index = origins[position[id(event)]]
                if index is not None:      # one element of a pack: dead-letter it alone
                    record = pack_element(record, index, encode(event),
                                          kafka_key(event.db, event.table, event.pk), event.id)
                self._dead_letter(record, error.reason, error.detail, result)
        by_id = {ep.event.id: ep for ep in plan.events}
        claims = self._claim_all(list(by_id), result)
        apply_ids = [i for _, ids in claims for i in ids]
        applied = [by_id[i] for i in apply_ids]
        self._apply(applied)
        for token, ids in claims:
            self._with_retry("dedup confirm", lambda t=token, i=ids: self._dedup.confirm(t, i))
        if result.dead_lettered:
            self._with_retry("dead-letter flush", self._dlq.flush)
        result.applied = applied
        result.applied_at = time.time()
        result.duplicates += _repeats(ep.event.id for ep in plan.events)
        self._count(records, plan.null_skips, result)
        return result

    def _apply(self, applied: list[EventPlan]) -> None:
        # -- issue 12: a table-level event splits the batch; rows before it apply first
        for rows, table_event in split_at_tables(applied):
            self._apply_rows(rows)
            if table_event is not None:
                self._apply_table(table_event)

    def _apply_table(self, ep: EventPlan) -> None:
        """Invalidate every key of the table; update mode also fences older writes."""
        event, mapping = ep.event, ep.table
        fence = padded(event.version) if mapping.updates else None
        removed = self._with_retry("redis table invalidation",
                                   lambda: self._cache.invalidate_table(mapping, fence))
        self.stats.table_invalidations += 1
        self.stats.table_keys_deleted += removed
        log.warning("table-level change of %s (%s): invalidated every key of its templates, "
                    "%d removed", event.qualified_table, event.extra.get("reason", "?"), removed)
    # -- end issue 12

    def _apply_rows(self, applied: list[EventPlan]) -> None:
        """Invalidate, then write the fenced values; schedule delayed second deletes."""
        keys = batch_keys(applied)
        if keys:
            self.stats.keys_deleted += self._with_retry("redis delete",
                                                        lambda: self._cache.delete(keys))
        writes = batch_writes(applied)
        if writes:
            done = self._with_retry("redis fenced write", lambda: self._cache.write(writes))
            self.stats.keys_written += done.applied
            self.stats.fenced += done.refused
        for ep in applied:
            self.stats.oversized += ep.oversized
            self.stats.unversioned += ep.unversioned
            if ep.double_delete_s and ep.keys:
                self._delayed_seq += 1
                heapq.heappush(self._delayed, (self._clock() + ep.double_delete_s,
                                               self._delayed_seq, list(ep.keys)))

    def _run_delayed_deletes(self, force: bool = False) -> None:
        """The seeds' delayed double delete: invalidate again once the delay has passed.

        It is an extra, not the guarantee (the first delete, fencing and leases are):
        on stop the pending ones run early, and a crash loses them.
        """
        now, keys = self._clock(), []
        while self._delayed and (force or self._delayed[0][0] <= now):
            keys += heapq.heappop(self._delayed)[2]
        if not keys:
            return
        keys = list(dict.fromkeys(keys))
        try:
            if force:
                self._cache.delete(keys)
            else:
                self._with_retry("delayed delete", lambda: self._cache.delete(keys))
            self.stats.double_deletes += len(keys)
        except RetryableError as e:
            log.warning("stopping with %d delayed second delete(s) not run: %s", len(keys), e)

    def _maybe_purge(self) -> None:
        """Purge done dedup records past the retention, a bounded amount per run."""
        if self._opts.purge_interval_s <= 0 or self._clock() < self._next_purge:
            return
        self._next_purge = self._clock() + self._opts.purge_interval_s
        try:
            total = purge_dedup(self._dedup, self._opts.dedup_retention_s, self._opts.purge_batch,
                                self._opts.purge_batches_per_run)
        except RetryableError as e:
            log.warning("dedup purge skipped until the next interval: %s", e)
            return
        self.stats.purged += total
        if total:
            log.info("purged %d dedup record(s) done more than %.0fs ago", total,
                     self._opts.dedup_retention_s)

    def _decode(self, records, result) -> tuple[list[ChangeEvent], list[tuple[Record, int | None]]]:
        """Events in record order, and beside each its record and index in the pack
        (None: the record holds only that event). A poison element of a pack is
        dead-lettered alone, so the rest of the pack still applies.
        """
        events, origins = [], []
        for record in records:
            try:
                items = decode_record(record.value or b"")
            except DecodeError as e:
                result.consumed += 1
                self._dead_letter(record, e.reason, e.detail, result)
                continue
            result.consumed += len(items)
            result.widest = max(result.widest, len(items))
            if len(items) == 1 and not isinstance(items[0], DecodeError):
                events.append(items[0])
                origins.append((record, None))
                continue
            for index, item in enumerate(items):
                if isinstance(item, DecodeError):
                    self._dead_letter(pack_element(record, index, item.raw), item.reason,
                                      item.detail, result)
                    continue
                events.append(item)
                origins.append((record, index))
        return events, origins

    def _claim_all(self, ids: list[str], result: BatchResult) -> list[tuple[str, list[str]]]:
        """Claim until every id is ours or done; busy ids wait for their lease to expire."""
        claims, pending, attempt = [], ids, 0
        while pending:
            token, states = self._with_retry("dedup claim",
                                             lambda: self._dedup.claim(pending, self._opts.claim_lease_s))
            decision = decide(pending, states)
            if decision.apply:
                claims.append((token, list(decision.apply)))
            result.duplicates += decision.duplicates
            pending = list(decision.busy)
            if pending:
                attempt += 1
                wait = min(self._opts.claim_lease_s, self._retry.backoff(attempt) + 0.1)
                log.info("%d message(s) claimed by another consumer; waiting %.1fs for the lease",
                         len(pending), wait)
                if self._stop.wait(wait):
                    raise Stopped()
        return claims

    def _dead_letter(self, record: Record, reason: str, detail: str, result: BatchResult) -> None:
        self._dlq.send(record, reason, detail)
        result.dead_lettered.append((record, reason))

    def _count(self, records, null_skips: int, result: BatchResult) -> None:
        s = self.stats
        s.batches += 1
        s.consumed += result.consumed
        s.applied += len(result.applied)
        s.duplicates += len(result.duplicates)
        s.dead_lettered += len(result.dead_lettered)
        s.null_key_skips += null_skips

    def _with_retry(self, what: str, fn):
        attempt = 0
        while True:
            try:
                return fn()
            except RetryableError as e:
                attempt += 1
                if not self._retry.should_retry(e, attempt):
                    raise
                wait = self._retry.backoff(attempt)
                self.stats.retries += 1
                log.warning("%s failed (attempt %d), retrying in %.2fs: %s", what, attempt, wait, e)
                if self._stop.wait(wait):
                    raise Stopped() from e


def purge_dedup(dedup: DedupStore, retention_s: float, batch: int,
                max_batches: int | None = None) -> int:
    """Delete done records older than ``retention_s`` in batches of ``batch``; returns the count.

    Stops at the first short batch, or after ``max_batches`` (None: until done).
    """
    total, n = 0, 0
    while max_batches is None or n < max_batches:
        deleted = dedup.purge(retention_s, batch)
        total, n = total + deleted, n + 1
        if deleted < batch:
            break
    return total


def pack_element(record: Record, index: int, value: bytes | None, key: str | None = None,
                 msg_id: str | None = None) -> Record:
    """Element ``index`` of a packed record as a record of its own, for the dead-letter topic.

    Same origin (topic, partition, offset), the element's bytes, a ``pack_index``
    header, and the element's own key and ``id`` header when they are known (the
    record's ``id`` header names its first element, so it is not kept).
    """
    headers = [(k, v) for k, v in record.headers if k != "id"]
    if msg_id:
        headers.append(("id", msg_id.encode()))
    headers.append(("pack_index", str(index).encode()))
    return Record(record.topic, record.partition, record.offset,
                  key.encode() if key is not None else record.key, value, tuple(headers),
                  record.timestamp_ms)


def _repeats(ids) -> list[str]:
    """Ids seen more than once in one batch (a tailer re-publish landing in the same poll)."""
    seen: set[str] = set()
    out = []
    for msg_id in ids:
        if msg_id in seen:
            out.append(msg_id)
        seen.add(msg_id)
    return out
