"""Side jobs of the consumer, attached the same way by every driver (dramatiq-style middleware).

A driver (the Kafka loop, a Spark task's worker, direct mode) calls ``tick()`` between
batches, ``after_batch(result)`` after each applied batch, and ``close()`` once at the
end. Delayed second deletes, the dedup purge and the metrics/lag hooks live here, once;
``Ticker`` ticks a hook from a thread where no loop does (the Spark driver and workers).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from typing import Callable, Iterable

from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.applier import BatchResult, Stats
from cachesync.consumer.ports import CacheWriter, DedupStore
from cachesync.schema.errors import RetryableError
from cachesync.schema.retry import RetryPolicy, Stopped, call, purge_in_batches

log = logging.getLogger(__name__)

TICK_S = 0.1        # how often a Ticker ticks its hook (delayed deletes are due to ~this)
JOIN_S = 30.0       # how long stopping a Ticker waits for its tick in progress


class Hook:
    """No-op base: override what the side job needs."""

    def tick(self) -> None:
        """Between batches: run what is due."""

    def due_in(self) -> float | None:
        """Seconds until ``tick`` has work to do (None: none scheduled), so that a loop with
        nothing to poll can wait that long instead of ticking on a fixed beat."""
        return None

    def after_batch(self, result: BatchResult) -> None:
        """After a batch was applied (and, in the Kafka loop, committed)."""

    def close(self) -> None:
        """Once, when the driver stops."""


class Hooks(Hook):
    """Several hooks called in order."""

    def __init__(self, hooks: Iterable[Hook]):
        self.hooks = list(hooks)

    def tick(self) -> None:
        for hook in self.hooks:
            hook.tick()

    def due_in(self) -> float | None:
        due = [d for d in (hook.due_in() for hook in self.hooks) if d is not None]
        return min(due) if due else None

    def after_batch(self, result: BatchResult) -> None:
        for hook in self.hooks:
            hook.after_batch(result)

    def close(self) -> None:
        for hook in self.hooks:
            hook.close()


class OnBatch(Hook):
    """A plain callable run after each batch (metrics and lag recording: ``metrics.on_batch``)."""

    def __init__(self, fn: Callable[[BatchResult], None]):
        self._fn = fn

    def after_batch(self, result: BatchResult) -> None:
        self._fn(result)


class DelayedDeletes(Hook):
    """The seeds' delayed double delete: invalidate a delete-mode event's keys again once
    ``double_delete_s`` has passed.

    It is an extra, not the guarantee (the first delete, fencing and leases are): on
    close the pending ones run early, and a crash loses them.
    """

    def __init__(self, cache: CacheWriter, stats: Stats, clock: Callable[[], float] = time.monotonic,
                 retry: RetryPolicy = RetryPolicy(), stop: threading.Event | None = None):
        self._cache, self._stats, self._clock = cache, stats, clock
        self._retry, self._stop = retry, stop
        self._due: list[tuple[float, int, list[str]]] = []   # (due, seq, keys) heap
        self._seq = 0
        self._lock = threading.Lock()     # a Spark worker's tasks schedule, its Ticker runs

    def after_batch(self, result: BatchResult) -> None:
        now = self._clock()
        with self._lock:
            for ep in result.applied:
                if ep.double_delete_s and ep.keys:
                    self._seq += 1
                    heapq.heappush(self._due, (now + ep.double_delete_s, self._seq, list(ep.keys)))

    def due_in(self) -> float | None:
        with self._lock:
            return max(0.0, self._due[0][0] - self._clock()) if self._due else None

    def tick(self) -> None:
        keys = self._take(force=False)
        if keys:
            call(lambda: self._cache.delete(keys), "delayed delete", self._stop, self._retry)
            self._stats.double_deletes += len(keys)

    def close(self) -> None:
        keys = self._take(force=True)
        if not keys:
            return
        try:
            self._cache.delete(keys)
            self._stats.double_deletes += len(keys)
        except RetryableError as e:
            log.warning("stopping with %d delayed second delete(s) not run: %s", len(keys), e)

    def _take(self, force: bool) -> list[str]:
        now, keys = self._clock(), []
        with self._lock:
            while self._due and (force or self._due[0][0] <= now):
                keys += heapq.heappop(self._due)[2]
        return list(dict.fromkeys(keys))


class DedupPurge(Hook):
    """Purge done dedup records past ``dedup_retention_s`` every ``purge_interval_s``,
    at most ``purge_batches_per_run`` statements per run (0 interval: never)."""

    def __init__(self, dedup: DedupStore, settings: ConsumerSettings, stats: Stats,
                 clock: Callable[[], float] = time.monotonic):
        self._dedup, self._settings, self._stats, self._clock = dedup, settings, stats, clock
        self._next = clock() + settings.purge_interval_s

    def due_in(self) -> float | None:
        if self._settings.purge_interval_s <= 0:
            return None
        return max(0.0, self._next - self._clock())

    def tick(self) -> None:
        s = self._settings
        if s.purge_interval_s <= 0 or self._clock() < self._next:
            return
        self._next = self._clock() + s.purge_interval_s
        try:
            total = purge_dedup(self._dedup, s.dedup_retention_s, s.purge_batch,
                                s.purge_batches_per_run)
        except RetryableError as e:
            self._stats.purge_failures += 1
            log.warning("dedup purge skipped until the next interval: %s", e)
            return
        self._stats.purged += total
        if total:
            log.info("purged %d dedup record(s) done more than %.0fs ago", total,
                     s.dedup_retention_s)


def purge_dedup(dedup: DedupStore, retention_s: float, batch: int,
                max_batches: int | None = None) -> int:
    """Delete done records older than ``retention_s``, ``batch`` per statement, until a
    short batch or ``max_batches`` (None: until done); returns the count."""
    return purge_in_batches(lambda n: dedup.purge(retention_s, n), batch, max_batches)


def consumer_hooks(cache: CacheWriter, dedup: DedupStore | None, settings: ConsumerSettings,
                   stats: Stats, *, clock: Callable[[], float] = time.monotonic,
                   retry: RetryPolicy = RetryPolicy(), stop: threading.Event | None = None,
                   on_batch: Callable[[BatchResult], None] | None = None) -> Hooks:
    """The consumer's side jobs: delayed deletes, the dedup purge (given a store) and
    ``on_batch`` (metrics, lag recording)."""
    hooks: list[Hook] = [DelayedDeletes(cache, stats, clock, retry, stop)]
    if dedup is not None:
        hooks.append(DedupPurge(dedup, settings, stats, clock))
    if on_batch is not None:
        hooks.append(OnBatch(on_batch))
    return Hooks(hooks)


class Ticker(threading.Thread):
    """Ticks a hook every ``interval_s`` from a daemon thread; ``stop()`` ends it and closes
    the hook. Give the hook the same ``stop`` event, so a retry in progress ends too."""

    def __init__(self, hook: Hook, name: str, stop: threading.Event | None = None,
                 interval_s: float = TICK_S):
        super().__init__(name=name, daemon=True)
        self.hook, self._interval = hook, interval_s
        self._stopping = stop or threading.Event()

    def run(self) -> None:
        try:
            while not self._stopping.wait(self._interval):
                self.hook.tick()
        except Stopped:
            pass

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(JOIN_S)
        self.hook.close()
