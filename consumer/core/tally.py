"""Per-table counts and rate-limited warnings for what the consumer could not apply exactly.

No silent staleness: a key skipped, invalidated instead of written, or left to a dead
letter is counted per table (``cachesync.runtime.metrics`` exports the counts) and logged as a
WARNING naming the table and the reason, at most once per ``WARN_INTERVAL_S`` per
(table, reason), with the number of repeats it stood for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Callable, Iterable

log = logging.getLogger(__name__)

WARN_INTERVAL_S = 60.0
# counter name -> metric help; labels: table, and reason where one counter has several
NULL_KEY_SKIPS = "null_key_skips"
VERSION_BACKWARDS = "version_backwards"
UNRENDERABLE = "unrenderable_templates"
INSTEAD = "invalidated_instead_of_written"
UNWATCHED = "unwatched_updates"   # updates of no watched column: nothing to do (not a warning)
UNTRUSTED = "untrusted_keys"      # reasons: cachesync.schema.trust (reserved_key, key_not_allowed)
# reasons of INSTEAD
AMBIGUOUS, OVERSIZED, NULL_VERSION = "ambiguous_key", "oversized_value", "null_version"


class TableTally:
    """Counts by (counter, table, reason); thread-safe (the metrics scrape reads it)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 warn_interval_s: float = WARN_INTERVAL_S):
        self._counts: Counter = Counter()
        self._lock = threading.Lock()
        self._clock, self._interval = clock, warn_interval_s
        self._last_warned: dict[tuple[str, str], float] = {}
        self._repeats: Counter = Counter()

    def add(self, counter: str, table: str, n: int = 1, reason: str = "") -> None:
        if n:
            with self._lock:
                self._counts[(counter, table, reason)] += n

    def merge(self, counts: dict[tuple[str, str, str], int]) -> None:
        """Add another tally's ``snapshot()`` (a Spark task's, which warned already)."""
        with self._lock:
            self._counts.update(counts)

    def snapshot(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._counts)

    def observe(self, plans: Iterable) -> None:
        """Count and warn about what the applied (or salvaged) event plans left inexact."""
        for ep in plans:
            if ep.unwatched:
                self.add(UNWATCHED, ep.event.qualified_table)
                continue
            if not (ep.null_skips or ep.oversized or ep.unversioned or ep.ambiguous
                    or ep.unrenderable):
                continue                     # applied exactly: nothing to count (add skips 0)
            table = ep.event.qualified_table
            self.add(NULL_KEY_SKIPS, table, ep.null_skips)
            self.add(INSTEAD, table, ep.oversized, OVERSIZED)
            self.add(INSTEAD, table, int(ep.unversioned), NULL_VERSION)
            self.add(INSTEAD, table, len(ep.ambiguous), AMBIGUOUS)
            self.add(UNRENDERABLE, table, ep.unrenderable)
            if ep.oversized:
                self.warn(table, OVERSIZED, "a value over max_value_bytes: its keys were "
                                            "invalidated instead of written")
            if ep.unversioned:
                self.warn(table, NULL_VERSION, "the version column is NULL: the keys were "
                                               "invalidated instead of written")
            for key, why in ep.ambiguous:
                self.warn(table, AMBIGUOUS, f"key {key!r} invalidated instead of written: {why}")
            if ep.unrenderable:
                self.warn(table, UNRENDERABLE,
                          f"{ep.unrenderable} template(s) name a column the row does not have; "
                          "its other keys were invalidated and the event dead-lettered "
                          "(missing_column): fix the mapping, then `cachesync dlq replay`")

    def untrusted(self, table: str, reason: str, detail: str) -> None:
        """Count and warn about an event refused at the trust boundary (dead-lettered)."""
        self.add(UNTRUSTED, table, 1, reason)
        self.warn(table, reason, f"event dead-lettered at the trust boundary: {detail}; keys "
                                 "the table allows were still invalidated")

    def backwards(self, table: str, keys: Iterable[str]) -> None:
        for key in keys:
            self.add(VERSION_BACKWARDS, table)
            self.warn(table, VERSION_BACKWARDS,
                      f"key {key!r}: the version column went backwards (a newer change carries "
                      "a lower version); the key was invalidated instead of written")

    def warn(self, table: str, reason: str, detail: str) -> None:
        """A WARNING for (table, reason), at most one per interval; repeats are counted."""
        now = self._clock()
        with self._lock:
            last = self._last_warned.get((table, reason))
            if last is not None and now - last < self._interval:
                self._repeats[(table, reason)] += 1
                return
            self._last_warned[(table, reason)] = now
            repeats = self._repeats.pop((table, reason), 0)
        more = f" ({repeats} more since the last warning)" if repeats else ""
        log.warning("%s: %s: %s%s", table, reason, detail, more, extra={"table": table})
