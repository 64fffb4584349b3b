"""Replay: apply a range of the change topic again, invalidate-only, rate-limited, or count it.

Replay is for repairing a cache after an incident (a consumer bug, a restored Redis, a
table reloaded behind cachesync's back). It deletes keys only, even for tables whose
mapping writes values: a delete is correct in any order and any number of times, so
a replay may run beside the live consumer, out of order, and twice. It does not use
the consumer's dedup namespace (every id there is done: a replay would skip them all);
ids repeated inside the replayed range are applied once. Poison records are counted,
not dead-lettered again (the consumer did that when it met them). A table-level event's
partition copies share one scan of the table's keys (``ScanOnce``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.consumer.applier import Applier
from cachesync.consumer.core.offsets import Record
from cachesync.consumer.core.table_jobs import job_id
from cachesync.consumer.ports import CacheWriter
from cachesync.schema.mapping import MappingSet

_PARTITION_OFFSETS = re.compile(r"^\d+:\d+(,\d+:\d+)*$")
KEEP_JOBS = 100_000         # table events remembered as scanned (a replay range's worth)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bound:
    """One end of a replay range: ``earliest``, ``latest``, an offset, per-partition offsets
    (``0:120,1:98``) or a time (ISO 8601, or ``@<epoch ms>``)."""

    kind: str                                   # earliest | latest | offset | offsets | time
    offset: int | None = None
    offsets: Mapping[int, int] | None = None
    time_ms: int | None = None


def parse_bound(text: str) -> Bound:
    """Parse a --from/--to value; raises ValueError with the accepted forms."""
    text = text.strip()
    if text in ("earliest", "latest"):
        return Bound(text)
    if text.isdigit():
        return Bound("offset", offset=int(text))
    if _PARTITION_OFFSETS.match(text):
        pairs = (p.split(":") for p in text.split(","))
        return Bound("offsets", offsets={int(p): int(o) for p, o in pairs})
    if text.startswith("@") and text[1:].isdigit():
        return Bound("time", time_ms=int(text[1:]))
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r}: expected earliest, latest, an offset (120), partition "
                         "offsets (0:120,1:98), an ISO 8601 time or @<epoch ms>") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return Bound("time", time_ms=int(when.timestamp() * 1000))


def resolve_ranges(consumer, topic: str, start: Bound, end: Bound) -> dict[int, tuple[int, int]]:
    """``{partition: (first offset, end offset exclusive)}`` for a kafka-python consumer.

    Offsets are clamped to what the topic holds; a partition missing from a
    per-partition ``start`` is not replayed, one missing from ``end`` runs to its end.
    """
    from kafka import TopicPartition
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not tps:
        raise ValueError(f"topic {topic!r} has no partitions (does it exist?)")
    first, last = consumer.beginning_offsets(tps), consumer.end_offsets(tps)

    def at(bound: Bound, tp, missing: int) -> int:
        if bound.kind == "earliest":
            return first[tp]
        if bound.kind == "latest":
            return last[tp]
        if bound.kind == "offset":
            return bound.offset
        if bound.kind == "offsets":
            return bound.offsets.get(tp.partition, missing)
        found = consumer.offsets_for_times({tp: bound.time_ms})[tp]
        return last[tp] if found is None else found.offset

    ranges = {}
    for tp in tps:
        lo = min(max(at(start, tp, last[tp]), first[tp]), last[tp])
        hi = min(max(at(end, tp, last[tp]), lo), last[tp])
        ranges[tp.partition] = (lo, hi)
    return ranges


def invalidate_only(mappings: MappingSet) -> MappingSet:
    """The same tables with every mode forced to ``delete`` (no delayed second delete):
    safe under reordering."""
    return mappings.replace_each(
        lambda m: dataclasses.replace(m, mode="delete", double_delete_s=None))


def key_prefixes(tables: Sequence[str]) -> tuple[bytes, ...]:
    """Kafka key prefixes of ``db.table`` names (the key is ``db.table:pk``)."""
    return tuple(f"{t}:".encode() for t in tables)


class RateLimiter:
    """At most ``rate`` events per second on average; ``None`` means unlimited."""

    def __init__(self, rate: float | None, clock=time.monotonic, sleep=time.sleep):
        self._rate, self._clock, self._sleep = rate, clock, sleep
        self._next = None

    def acquire(self, n: int) -> None:
        """Wait until ``n`` more events fit under the rate (pays for the previous call)."""
        if not self._rate or n <= 0:
            return
        now = self._clock()
        self._next = now if self._next is None else max(self._next, now)
        if self._next > now:
            self._sleep(self._next - now)
        self._next += n / self._rate


@dataclass
class ReplayCounts:
    """What a replay (or its dry run) touched: distinct keys per table, events, poison."""

    keys: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    events: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    records: int = 0           # records read in the range (before the table filter)
    poison: int = 0            # undecodable or unmapped: counted, not dead-lettered again
    keys_existed: int = 0      # deletes that found the key (0 in a dry run)
    key_totals: dict[str, int] | None = None    # distinct keys counted elsewhere (Spark)

    def distinct_keys(self) -> dict[str, int]:
        if self.key_totals is not None:
            return dict(self.key_totals)
        return {t: len(keys) for t, keys in self.keys.items()}


class ScanOnce:
    """The applier's table-job hook for replay: the first partition copy of a table-level
    event scans the table's keys, in the batch; its other copies in the range reuse that
    scan (a replay commits no offsets: nothing to hold, nobody else to share it with).
    Replay's mappings delete only: no table fence."""

    def __init__(self, cache: CacheWriter):
        self._cache = cache
        self._scanned: dict[str, int] = {}          # job id -> keys its scan removed
        self.applier: Applier | None = None         # set once the applier exists

    def submit(self, ep, origin=None) -> None:
        stats = self.applier.stats
        stats.table_invalidations += 1
        job = job_id(ep.event)
        if job in self._scanned:
            stats.table_scans_reused += 1
            return
        removed = self.applier.call("redis table invalidation",
                                    lambda: self._cache.invalidate_table(ep.table, None))
        if len(self._scanned) >= KEEP_JOBS:
            self._scanned.pop(next(iter(self._scanned)))
        self._scanned[job] = removed
        stats.table_scans += 1
        stats.table_keys_deleted += removed
        log.warning("table-level change of %s (%s): invalidated every key of its templates, "
                    "%d removed (once for every partition copy)", ep.event.qualified_table,
                    ep.event.extra.get("reason", "?"), removed,
                    extra={"table": ep.event.qualified_table})


class ReplayApplier:
    """Applies batches of records invalidate-only, with no claims; ``cache=None`` only counts
    (an in-memory cache takes the deletes)."""

    def __init__(self, mappings: MappingSet, cache: CacheWriter | None,
                 tables: Sequence[str] = (), batch_size: int = 2000):
        self._prefixes = key_prefixes(tables)
        cache = cache or MemoryCache()
        scans = ScanOnce(cache)
        self._applier = Applier(cache, invalidate_only(mappings),
                                ConsumerSettings(batch_size=batch_size), table_jobs=scans)
        scans.applier = self._applier
        self._seen: set[str] = set()     # ids applied already: a repeat in the range counts once
        self.counts = ReplayCounts()

    def apply(self, records: Sequence[Record]) -> None:
        self.counts.records += len(records)
        if self._prefixes:
            records = [r for r in records if r.key and r.key.startswith(self._prefixes)]
        if not records:
            return
        result = self._applier.apply(records)
        for ep in result.applied:
            if ep.event.id in self._seen:
                continue
            self._seen.add(ep.event.id)
            table = ep.event.qualified_table
            self.counts.events[table] += 1
            self.counts.keys[table].update(ep.keys)
        for ep in result.salvaged:      # a poison event's other keys are deleted too
            self.counts.keys[ep.event.qualified_table].update(ep.keys)
        self.counts.poison += len(result.dead_lettered)
        self.counts.keys_existed += result.keys_existed


@dataclass
class ReplayReport:
    engine: str
    dry_run: bool
    ranges: dict[int, tuple[int, int]]
    records: int
    poison: int
    keys_existed: int
    tables: dict[str, dict[str, int]]          # table -> {"events": n, "keys": distinct keys}
    elapsed_s: float

    @property
    def events_per_s(self) -> float:
        return round(self.records / self.elapsed_s, 1) if self.elapsed_s else 0.0

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "events_per_s": self.events_per_s,
                "ranges": {str(p): list(r) for p, r in self.ranges.items()}}


def report_from_counts(engine: str, dry_run: bool, ranges, counts: ReplayCounts,
                       elapsed_s: float) -> ReplayReport:
    keys = counts.distinct_keys()
    tables = {t: {"events": counts.events.get(t, 0), "keys": keys.get(t, 0)}
              for t in sorted(set(keys) | set(counts.events))}
    return ReplayReport(engine, dry_run, dict(ranges), counts.records, counts.poison,
                        counts.keys_existed, tables, round(elapsed_s, 3))


# what replay_python needs of its group-less kafka-python consumer
READER_OPTIONS = {"isolation_level": "read_committed", "max_partition_fetch_bytes": 4 * 1024 * 1024}


def replay_python(consumer, topic: str, ranges: Mapping[int, tuple[int, int]],
                  applier: ReplayApplier, rate: float | None = None, batch_size: int = 2000,
                  progress: Callable[[int], None] = lambda n: None) -> ReplayCounts:
    """Read the ranges with a group-less consumer (READER_OPTIONS; closed here) and apply
    them in batches."""
    from kafka import TopicPartition
    try:
        todo = {TopicPartition(topic, p): hi for p, (lo, hi) in ranges.items() if hi > lo}
        consumer.assign(list(todo))
        for tp in todo:
            consumer.seek(tp, ranges[tp.partition][0])
        limiter = RateLimiter(rate)
        while todo:
            batch = _poll_range(consumer, todo, batch_size)
            limiter.acquire(len(batch))
            applier.apply(batch)
            progress(len(batch))
    finally:
        consumer.close()
    return applier.counts


def _poll_range(consumer, todo: dict, batch_size: int) -> list[Record]:
    """One poll, records past a partition's end dropped; finished partitions leave ``todo``."""
    out = []
    for tp, records in consumer.poll(timeout_ms=500, max_records=batch_size).items():
        end = todo.get(tp)
        out += [Record(r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers or ()),
                       r.timestamp) for r in records if end is not None and r.offset < end]
    for tp in list(todo):
        if consumer.position(tp) >= todo[tp]:
            consumer.pause(tp)
            del todo[tp]
    return out

