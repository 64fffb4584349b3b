"""The batch applier every engine shares: decode -> plan -> claim -> apply -> confirm -> dead letters.

It takes records and returns what it did; it has no source and commits nothing. The
Kafka loop (``cachesync.consumer.engine``), the Spark tasks, direct mode and replay
all call it, and attach their side jobs as hooks (``cachesync.consumer.hooks``).
Transient errors are retried (``cachesync.schema.retry.call``) and never skipped;
without a dedup store (replay) nothing is claimed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Sequence

from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.core.dedup import decide
from cachesync.consumer.core.delivery import Decoded, decode_records
from cachesync.consumer.core.offsets import Record
from cachesync.consumer.core.plan import (EventPlan, Plan, batch_keys, batch_writes,
                                          plan_batch, split_at_tables)
from cachesync.consumer.core.tally import TableTally
from cachesync.consumer.core.writes import padded
from cachesync.consumer.ports import CacheWriter, DeadLetters, DedupStore
from cachesync.schema.mapping import MappingSet
from cachesync.schema.retry import RetryPolicy, Stopped, call
from cachesync.schema.trust import UntrustedKeyError

log = logging.getLogger(__name__)

# claimed by another consumer: wait at least this long (plus backoff) before asking again
BUSY_WAIT_S = 0.1


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
    double_deletes: int = 0        # delayed second deletes run (hook)
    purged: int = 0                # done dedup records purged (hook)
    purge_failures: int = 0        # periodic purges that failed (hook)
    batches: int = 0
    retries: int = 0
    table_invalidations: int = 0   # table-level events (truncate, drop, rename, statement)
    table_keys_deleted: int = 0    # keys those removed
    table_scans: int = 0           # table-level scans run (one per event, not per copy)
    table_scans_reused: int = 0    # events whose scan another consumer ran

    def summary(self) -> str:
        return (f"{self.consumed} consumed, {self.applied} applied, {self.duplicates} duplicates, "
                f"{self.dead_lettered} dead-lettered")

    def add(self, other: "Stats | dict") -> None:
        """Add another Stats (or its dict, as a Spark task returns it) into this one."""
        values = other if isinstance(other, dict) else vars(other)
        for name in sorted(values, key=lambda n: n == "consumed"):   # consumed last (_count)
            setattr(self, name, getattr(self, name) + values[name])


@dataclass
class BatchResult:
    consumed: int = 0          # events decoded, plus records that could not be decoded
    widest: int = 0            # the most events one record held
    applied: list[EventPlan] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    dead_lettered: list[tuple[Record, str]] = field(default_factory=list)
    keys_existed: int = 0      # invalidated keys that were in Redis
    applied_at: float = 0.0
    salvaged: list[EventPlan] = field(default_factory=list)   # dead-lettered, other keys deleted


class Prepared(NamedTuple):
    """A batch decoded and planned (``Applier.prepare``)."""

    decoded: Decoded
    plan: Plan


class Applier:
    """Applies batches of records; ``stats`` sums every batch (and the retries), ``tables``
    counts per table what could not be applied exactly (and warns about it)."""

    def __init__(self, cache: CacheWriter, mappings: MappingSet,
                 settings: ConsumerSettings = ConsumerSettings(), dedup: DedupStore | None = None,
                 dead_letters: DeadLetters | None = None, retry: RetryPolicy = RetryPolicy(),
                 stop: threading.Event | None = None, stats: Stats | None = None,
                 tables: TableTally | None = None, table_jobs=None):
        self._cache, self._mappings, self._settings = cache, mappings, settings
        # consumer.table_jobs.TableInvalidator: table-level events scanned beside the rows,
        # once per event; None: scanned here, in the batch, once per copy (Spark, replay)
        self._table_jobs = table_jobs
        self._dedup, self._dlq, self._retry = dedup, dead_letters, retry
        self._stop = stop or threading.Event()
        self.stats = stats or Stats()
        self.tables = tables or TableTally()
        self._retry_lock = threading.Lock()

    def prepare(self, records: Sequence[Record]) -> Prepared:
        """Decode and plan a batch: pure work, no I/O and no counting (``apply`` does
        both), so an engine may prepare the next batch while this applier applies one."""
        decoded = decode_records(records)
        return Prepared(decoded, plan_batch(decoded.deliveries, self._mappings))

    def apply(self, records: Sequence[Record], prepared: Prepared | None = None) -> BatchResult:
        """Apply one batch (``prepared``: what ``prepare(records)`` returned); raises
        Stopped if stop was requested while it waited, or what is not transient (the
        caller must not commit the batch then)."""
        result = BatchResult()
        decoded, plan = prepared if prepared is not None else self.prepare(records)
        result.consumed, result.widest = decoded.consumed, decoded.widest
        self._set_aside_poison(decoded, plan.poison, result)
        self._salvage(plan.salvaged, result)
        by_id = {ep.event.id: ep for ep in plan.events}
        scanned = self._scanned_apart(plan, decoded)
        pending, unlinked = [i for i in by_id if i not in scanned], []
        if self._unlinks_with_claim(plan):
            unlinked, pending = self._claim_unlink(pending, by_id, result)
        claims = self._claim_all(pending, result,
                                 {i: ep.event.source.commit_ts for i, ep in by_id.items()})
        if scanned:         # in batch order, the table events among the claimed rows
            claimed = {i for _, ids in claims for i in ids}
            result.applied = [ep for i, ep in by_id.items() if i in claimed or i in scanned]
        else:
            result.applied = [by_id[i] for _, ids in claims for i in ids]
        self._write(result, scanned)
        if unlinked:
            result.applied = [*(by_id[i] for i in unlinked), *result.applied]
        for token, ids in claims:
            if token is not None:
                self.call("dedup confirm", lambda t=token, i=ids: self._dedup.confirm(t, i))
        if result.dead_lettered and self._dlq is not None:
            self.call("dead-letter flush", self._dlq.flush)
        result.applied_at = time.time()
        result.duplicates += _repeats(ep.event.id for ep in plan.events)
        self._count(result, plan.null_skips)
        return result

    def _set_aside_poison(self, decoded: Decoded, poison, result: BatchResult) -> None:
        """Dead-letter what could not be decoded or planned, each as it was published."""
        for bad in decoded.undecodable:
            self._dead_letter(bad.record, bad.error.reason, bad.error.detail, result)
        for delivery, error in poison:
            self._dead_letter(delivery.dead_letter(), error.reason, error.detail, result)
            if isinstance(error, UntrustedKeyError):
                self.tables.untrusted(error.table, error.reason, error.detail)

    def _scanned_apart(self, plan: Plan, decoded: Decoded) -> dict:
        """``{id: ((topic, partition), offset)}`` of the batch's table-level events when a
        TableInvalidator scans them: not claimed in the dedup store (its job record makes
        each scan once, and a crash mid-scan must deliver the event again)."""
        if self._table_jobs is None:
            return {}
        ids = {ep.event.id for ep in plan.events if ep.table is not None}
        return {d.event.id: ((d.record.topic, d.record.partition), d.record.offset)
                for d in decoded.deliveries if d.event.id in ids}

    def _write(self, result: BatchResult, scanned: dict | None = None) -> None:
        """Apply the batch in order: a table-level event splits it, rows before it apply first."""
        for rows, table_event in split_at_tables(result.applied):
            self._write_rows(rows, result)
            if table_event is None:
                continue
            if self._table_jobs is not None:
                self._table_jobs.submit(table_event, (scanned or {}).get(table_event.event.id))
            else:
                self._apply_table(table_event)

    def _apply_table(self, ep: EventPlan) -> None:
        """Invalidate every key of the table; update mode also fences older writes."""
        event, mapping = ep.event, ep.table
        fence = padded(event.version) if mapping.updates else None
        removed = self.call("redis table invalidation",
                            lambda: self._cache.invalidate_table(mapping, fence))
        self.stats.table_invalidations += 1
        self.stats.table_scans += 1
        self.stats.table_keys_deleted += removed
        log.warning("table-level change of %s (%s): invalidated every key of its templates, "
                    "%d removed", event.qualified_table, event.extra.get("reason", "?"), removed,
                    extra={"table": event.qualified_table})

    def _write_rows(self, applied: list[EventPlan], result: BatchResult) -> None:
        """Invalidate, then write the fenced values (update mode)."""
        s = self.stats
        self._delete(batch_keys(applied), result)
        writes = batch_writes(applied)
        if writes:
            done = self.call("redis fenced write", lambda: self._cache.write(writes))
            s.keys_written += done.applied
            s.fenced += done.refused
            self._count_backwards(applied, done.backwards)
        self._observe(applied)

    def _observe(self, applied: list[EventPlan]) -> None:
        """Count what the applied events could not do exactly."""
        self.tables.observe(applied)
        for ep in applied:
            self.stats.oversized += ep.oversized
            self.stats.unversioned += ep.unversioned

    def _delete(self, keys: list[str], result: BatchResult) -> None:
        if keys:
            existed = self.call("redis delete", lambda: self._cache.delete(keys))
            result.keys_existed += existed
            self.stats.keys_deleted += existed

    # -- what could not be applied exactly ----------------------------------------------
    def _salvage(self, salvaged: list[EventPlan], result: BatchResult) -> None:
        """Invalidate the renderable keys of dead-lettered events. Not claimed in the dedup
        table: replaying the dead letter once the mapping is fixed applies it in full."""
        self._delete(batch_keys(salvaged), result)
        self.tables.observe(salvaged)
        result.salvaged = salvaged

    def _count_backwards(self, applied: list[EventPlan], keys: Sequence[str]) -> None:
        if keys:
            table_of = {w.key: ep.event.qualified_table for ep in applied for w in ep.writes}
            for key in keys:
                self.tables.backwards(table_of.get(key, "?"), [key])

    def _unlinks_with_claim(self, plan: Plan) -> bool:
        """True when the dedup store can claim, invalidate and confirm the batch in one
        round trip: it shares the cache's Redis server, and the batch only deletes keys
        (no fenced writes, no table-level event)."""
        return (getattr(self._dedup, "unlinks", False)
                and all(not ep.writes and ep.table is None for ep in plan.events))

    def _claim_unlink(self, ids: list[str], by_id: Mapping[str, EventPlan],
                      result: BatchResult) -> tuple[list[str], list[str]]:
        """Claim, invalidate and confirm ``ids`` in one call: ``(applied, busy)``; the busy
        ones go the usual way (claim, wait for the lease, apply, confirm)."""
        if not ids:
            return [], []
        states, existed = self.call("dedup claim and invalidate", lambda: self._dedup.claim_unlink(
            [(i, by_id[i].keys) for i in ids]))
        decision = decide(ids, states)
        result.duplicates += decision.duplicates
        result.keys_existed += existed
        self.stats.keys_deleted += existed
        self._observe([by_id[i] for i in decision.apply])
        return list(decision.apply), list(decision.busy)

    def _claim_all(self, ids: list[str], result: BatchResult, commit_ts: Mapping[str, float]
                   ) -> list[tuple[str | None, list[str]]]:
        """Claim until every id is ours or done; busy ids wait for their lease to expire.
        Without a dedup store every id is applied, unclaimed (token None)."""
        if self._dedup is None:
            return [(None, ids)] if ids else []
        claims, pending, attempt, lease = [], ids, 0, self._settings.claim_lease_s
        while pending:
            token, states = self.call(
                "dedup claim", lambda: self._dedup.claim(pending, lease, commit_ts))
            decision = decide(pending, states)
            if decision.apply:
                claims.append((token, list(decision.apply)))
            result.duplicates += decision.duplicates
            pending = list(decision.busy)
            if pending:
                attempt += 1
                wait = min(lease, self._retry.backoff(attempt) + BUSY_WAIT_S)
                log.info("%d message(s) claimed by another consumer; waiting %.1fs for the lease",
                         len(pending), wait)
                if self._stop.wait(wait):
                    raise Stopped("stop requested while waiting for a claim")
        return claims

    def _dead_letter(self, record: Record, reason: str, detail: str, result: BatchResult) -> None:
        if self._dlq is not None:
            self._dlq.send(record, reason, detail)
        result.dead_lettered.append((record, reason))

    def _count(self, result: BatchResult, null_skips: int) -> None:
        # ``consumed`` moves last: a reader in another thread (a scrape, a test) that sees a
        # batch's records consumed then sees its other counts too
        s = self.stats
        s.batches += 1
        s.applied += len(result.applied)
        s.duplicates += len(result.duplicates)
        s.dead_lettered += len(result.dead_lettered)
        s.null_key_skips += null_skips
        s.consumed += result.consumed

    def call(self, what: str, fn: Callable, retry: RetryPolicy | None = None):
        """``fn()`` retried under this applier's policy (or ``retry``) and stop; retries are
        counted."""
        return call(fn, what, self._stop, retry or self._retry, self._count_retry)

    def _count_retry(self, error: BaseException, attempt: int) -> None:
        with self._retry_lock:      # the engine's thread and its worker both retry
            self.stats.retries += 1


def _repeats(ids) -> list[str]:
    """Ids seen more than once in one batch (a tailer re-publish landing in the same poll)."""
    seen: set[str] = set()
    out = []
    for msg_id in ids:
        if msg_id in seen:
            out.append(msg_id)
        seen.add(msg_id)
    return out
