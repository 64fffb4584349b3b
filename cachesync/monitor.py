"""The online consistency monitor: a sample of applied events, checked against MySQL and Redis.

``ConsistencyMonitor`` is a consumer hook (``after_batch``) and also what ``cachesync
monitor`` feeds from its own consumer group. Taking a sample costs the caller a hash and a
``put_nowait``: a full queue or the rate cap drops the sample (counted), never blocks. One
thread does the checks with its own MySQL connection (read-only, ``SELECT`` on the mapped
tables) and its own Redis client (no connection is shared between threads), so a
slow MySQL or Redis slows the checks, not the apply path. The decisions are made in
:mod:`cachesync.consumer.consistency`, testable without a server.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from cachesync.runtime.config import MonitorSettings, Settings
from cachesync.consumer.applier import BatchResult
from cachesync.consumer.consistency import (STALE, RateLimit, Sample, judge, keys_to_read,
                                            next_step, row_identity, sampled)
from cachesync.consumer.core.plan import EventPlan
from cachesync.consumer.hooks import Hook
from cachesync.consumer.ports import CacheReader
from cachesync.runtime.mysql import Session
from cachesync.schema.errors import CachesyncError, FatalError
from cachesync.schema.keytext import row_value, server_text_sql
from cachesync.schema.mapping import MappingSet, TableMapping
from cachesync.schema.sqlnames import quote

log = logging.getLogger(__name__)

DROP_RATE, DROP_QUEUE = "rate_limit", "queue_full"
ERROR_PAUSE_S = 1.0          # after a failed check: MySQL or Redis is down, don't spin
JOIN_S = 10.0                # how long close() waits for the check in progress
_WAKE = None                 # queued by close(): the worker, waiting for a sample, stops


class RowReader:
    """Reads one row by primary key, each column as its key text turned back into the value
    the tailer publishes (as ``audit`` does), so the check renders what the consumer did."""

    def __init__(self, session: Session):
        self._session = session
        self._types: dict[str, dict[str, str]] = {}     # table -> column -> data_type
        self.reads = 0

    def read(self, mapping: TableMapping, pk: Iterable[tuple[str, Any]]) -> dict | None:
        """The row, or None when there is none; raises RetryableError / FatalError."""
        types = self._columns(mapping)
        if not types:
            raise FatalError(f"{mapping.table}: no column is visible to the monitor's account "
                             "(the table is missing, or it lacks SELECT on it)")
        pk = tuple(pk)
        texts = ", ".join(server_text_sql(c, t) for c, t in types.items())
        where = " AND ".join(f"{quote(c)} = %s" for c, _ in pk)
        sql = f"SELECT {texts} FROM {quote(mapping.db)}.{quote(mapping.name)} WHERE {where}"
        self.reads += 1
        found = self._session.run(lambda cur: _one(cur, sql, [v for _, v in pk]))
        if found is None:
            return None
        return {c: row_value(text, types[c]) for (c, _), text in zip(types.items(), found)}

    def _columns(self, mapping: TableMapping) -> dict[str, str]:
        if mapping.table not in self._types:
            rows = self._session.run(lambda cur: _all(cur, COLUMNS_SQL, (mapping.db, mapping.name)))
            self.reads += 1
            self._types[mapping.table] = {c: t for c, t in rows}
        return self._types[mapping.table]

    def close(self) -> None:
        self._session.close()

    def forget(self) -> None:
        """Drop the cached column lists (a failed read may come from a changed table)."""
        self._types.clear()


COLUMNS_SQL = ("SELECT column_name, data_type FROM information_schema.columns WHERE "
               "table_schema = %s AND table_name = %s ORDER BY ordinal_position")


def _one(cur, sql: str, params) -> tuple | None:
    cur.execute(sql, params)
    return cur.fetchone()


def _all(cur, sql: str, params) -> tuple:
    cur.execute(sql, params)
    return cur.fetchall()


def read_values(cache: CacheReader, mapping: TableMapping, keys: list[str]) -> dict[str, Any]:
    """key -> what Redis holds (bytes, a dict for update-mode hashes, None when absent)."""
    return dict(zip(keys, cache.read(mapping, keys))) if keys else {}


class ConsistencyMonitor(Hook):
    """Samples applied events and checks them on its own thread; ``counts`` per (table, result)."""

    def __init__(self, settings: MonitorSettings, mappings: MappingSet, reader: RowReader,
                 cache: CacheReader, clock: Callable[[], float] = time.time):
        self._settings, self._mappings, self._reader = settings, mappings, reader
        self._cache, self._clock = cache, clock
        self._limit = RateLimit(settings.max_checks_per_s, clock)
        self._queue: queue.Queue[Sample] = queue.Queue(settings.queue_size)
        self._due: list[tuple[float, int, Sample]] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._unfinished = 0     # samples accepted and not yet counted, dropped or abandoned
        self.counts: Counter = Counter()          # (table, result) -> key checks
        self.dropped: Counter = Counter()         # reason -> samples
        self.errors = 0
        self.last_check_at: float | None = None  # time.time() of the newest finished check
        self._warned: dict[str, float] = {}       # table -> when its last stale WARNING went out
        self._silenced: Counter = Counter()       # table -> stale keys not logged since
        self._failing = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cachesync-monitor", daemon=True)

    # -- the caller's side: never blocks ------------------------------------------------
    def start(self) -> "ConsistencyMonitor":
        self._thread.start()
        return self

    def after_batch(self, result: BatchResult) -> None:
        self.offer(result.applied, result.applied_at + self._settings.window_s)

    def offer(self, plans: Iterable[EventPlan], due: float | Callable[[EventPlan], float]) -> None:
        """Queue the sampled events of ``plans`` for a check at ``due`` (or ``due(plan)``)."""
        ratio = self._settings.sample_ratio
        for ep in plans:
            event = ep.event
            if event.table_level or not sampled(event.id, ratio):
                continue
            mapping = self._mappings.get(event.db, event.table)
            if mapping is None or not mapping.keys:
                continue
            if not self._limit.take():
                self._drop(DROP_RATE)
                continue
            when = due(ep) if callable(due) else due
            with self._lock:        # counted before it is queued: never pending uncounted
                self._unfinished += 1
            try:
                self._queue.put_nowait(Sample(mapping.table, event.pk, when))
            except queue.Full:
                self._drop(DROP_QUEUE)
                self._finished()

    def _drop(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] += 1

    def close(self) -> None:
        """Stop the checks (pending ones are abandoned) and release the connections."""
        self._stop.set()
        try:
            self._queue.put_nowait(_WAKE)    # a worker waiting for a sample wakes
        except queue.Full:
            pass                             # a full queue wakes it by itself
        if self._thread.is_alive():
            self._thread.join(JOIN_S)
        self._reader.close()
        self._cache.close()

    @property
    def pending(self) -> int:
        """Samples waiting for their check: queued, due later, or being checked (the one in
        hand counts until its result does, so 0 means every result is in the counts)."""
        return self._unfinished

    def _finished(self) -> None:
        with self._lock:
            self._unfinished -= 1

    # -- the checking thread -------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._take_queued()
            sample = self._next_due()
            if sample is None:
                continue
            if not self._check(sample):
                self._stop.wait(ERROR_PAUSE_S)

    def _take_queued(self) -> None:
        """Wait for the first sample due or a new one queued (with nothing due and nothing
        queued, until a sample comes or ``close``: an idle consumer's monitor sleeps), then
        take what is queued."""
        wait = None
        if self._due:
            wait = max(0.0, self._due[0][0] - self._clock())
        try:
            item = self._queue.get(timeout=wait) if wait != 0 else self._queue.get_nowait()
        except queue.Empty:
            return
        self._push(item)
        while len(self._due) < self._settings.queue_size:
            try:
                self._push(self._queue.get_nowait())
            except queue.Empty:
                return

    def _push(self, sample: Sample | None) -> None:
        if sample is _WAKE:
            return
        if len(self._due) >= self._settings.queue_size:
            self._drop(DROP_QUEUE)
            self._finished()
            return
        self._seq += 1
        heapq.heappush(self._due, (sample.due, self._seq, sample))

    def _next_due(self) -> Sample | None:
        if self._due and self._due[0][0] <= self._clock():
            return heapq.heappop(self._due)[2]
        return None

    def _check(self, sample: Sample) -> bool:
        """One look at the sample's row and keys; False when MySQL or Redis failed."""
        mapping = self._mappings.get(*sample.table.split(".", 1))
        try:
            before = self._reader.read(mapping, sample.pk)
            keys = keys_to_read(mapping, before, dict(sample.pk))
            cached = read_values(self._cache, mapping, keys)
            after = self._reader.read(mapping, sample.pk)
        except CachesyncError as e:
            self._failed(sample, e)
            self._finished()
            return False
        self._recovered()
        step = next_step(sample, row_identity(before), row_identity(after),
                         judge(mapping, before, cached), self._clock(),
                         self._settings.window_s, self._settings.max_attempts)
        if step.recheck is not None:
            self._push(step.recheck)
        else:
            self._count(sample.table, step.verdicts)
            self._finished()
        return True

    def _count(self, table: str, verdicts: Mapping[str, str]) -> None:
        with self._lock:
            for result in verdicts.values():
                self.counts[(table, result)] += 1
            self.last_check_at = time.time()
        stale = [key for key, result in verdicts.items() if result == STALE]
        if stale:
            self._warn_stale(table, stale)

    def _warn_stale(self, table: str, keys: list[str]) -> None:
        """One WARNING per table per ``warn_interval_s``, naming a key; the rest are counted."""
        now = self._clock()
        last = self._warned.get(table)
        if last is not None and now - last < self._settings.warn_interval_s:
            self._silenced[table] += len(keys)
            return
        silenced = self._silenced.pop(table, 0)
        self._warned[table] = now
        log.warning("stale cache key %s of %s: Redis disagrees with the row, which has not "
                    "changed for %.1fs (%d more stale key(s) of %s since the last warning; "
                    "cachesync_monitor_checks_total{result=\"stale\"})", keys[0], table,
                    self._settings.window_s, silenced + len(keys) - 1, table)

    def _failed(self, sample: Sample, error: Exception) -> None:
        with self._lock:
            self.errors += 1
        self._reader.forget()
        if not self._failing:
            log.warning("consistency check of %s failed, checks pause until MySQL and Redis "
                        "answer (the monitor needs SELECT on the mapped tables): %s",
                        sample.table, error)
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            log.info("consistency checks resumed")
        self._failing = False

    def snapshot(self) -> tuple[dict, dict, int, int]:
        with self._lock:
            return dict(self.counts), dict(self.dropped), self.errors, self._reader.reads


def build_monitor(settings: Settings) -> ConsistencyMonitor:
    """The monitor with its own read-only MySQL session and Redis client (not started)."""
    from cachesync import wiring
    session = Session(wiring.mysql_params(settings).connect, setup=_read_only)
    return ConsistencyMonitor(settings.monitor, settings.tables, RowReader(session),
                              wiring.build_cache_reader(settings))


def _read_only(conn) -> None:
    # the monitor only reads: the server refuses a write on this session whatever the grants
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION READ ONLY")
