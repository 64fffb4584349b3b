"""The per-change figure seen from outside the consumer: when did each change get applied?

``cachesync monitor`` applies nothing, so it cannot time the consumer's writes itself. Every
consumer marks each message id done in the dedup store right after applying its cache
operations, and the Redis and MySQL stores record when (``d <done_ms>``; ``done_at``). The
watch takes the changes the monitor reads (heartbeats, whose write times are exact, and the
sampled row changes), looks their ids up once they are due, and adds ``done - commit`` to a
:class:`~cachesync.runtime.metrics.ChangeFigures`: the consumer's commit -> apply lag from
production traffic, a little high (the mark follows the apply). A change still not done
``give_up_s`` after its commit is added with its lag so far: it counts as late at every bound.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Callable, Iterable

from cachesync.runtime.metrics import HEARTBEATS, ROWS, ChangeFigures
from cachesync.schema.errors import CachesyncError
from cachesync.schema.event import HEARTBEAT_KIND, beat_time

log = logging.getLogger(__name__)

GIVE_UP_S = 60.0        # a change not applied this long after its commit is counted late
LOOKUP_MAX = 1000       # ids per dedup lookup
PENDING_MAX = 100_000   # changes waiting at most; beyond, new ones are not watched (counted)


class ApplyWatch:
    """Changes waiting for their done mark, looked up in due order; ``figures`` per kind."""

    def __init__(self, done_at: Callable[[list[str]], dict[str, float]], wait_s: float,
                 give_up_s: float = GIVE_UP_S, clock: Callable[[], float] = time.time):
        self._done_at, self._wait_s, self._give_up_s = done_at, wait_s, give_up_s
        self._clock = clock
        self._pending: deque[tuple[float, str, str, float]] = deque()  # (due, id, kind, commit)
        self.figures = ChangeFigures()
        self.unwatched = 0        # changes not watched: too many pending
        self.failures = 0         # lookups that failed (retried at the next call)

    def offer(self, events: Iterable) -> None:
        """Watch ``events`` (ChangeEvents read now): each is looked up ``wait_s`` from now."""
        due = self._clock() + self._wait_s
        for event in events:
            if len(self._pending) >= PENDING_MAX:
                self.unwatched += 1
                continue
            kind, committed = ROWS, event.source.commit_ts
            if event.source.kind == HEARTBEAT_KIND:
                kind, committed = HEARTBEATS, beat_time(event.after) or committed
            self._pending.append((due, event.id, kind, committed))

    def check(self) -> int:
        """Look up the changes that are due (one lookup per LOOKUP_MAX); returns how many were
        counted. A failed lookup leaves them pending (logged, ``failures``)."""
        now = self._clock()
        due = []
        while self._pending and self._pending[0][0] <= now and len(due) < LOOKUP_MAX:
            due.append(self._pending.popleft())
        if not due:
            return 0
        try:
            done = self._done_at([msg_id for _, msg_id, _, _ in due])
        except CachesyncError as e:
            self.failures += 1
            log.warning("could not look up when changes were applied (retried): %s", e)
            self._pending.extendleft(reversed(due))
            return 0
        return self._count(due, done, now)

    def _count(self, due: list, done: dict[str, float], now: float) -> int:
        lags: dict[str, list[float]] = {}       # kind -> the lags of this lookup
        for _, msg_id, kind, committed in due:
            at = done.get(msg_id)
            if at is None and now - committed < self._give_up_s:
                self._pending.append((now + self._wait_s, msg_id, kind, committed))
                continue
            lags.setdefault(kind, []).append((at if at is not None else now) - committed)
        for kind, values in lags.items():       # one lock and one pass per kind
            self.figures.add(kind, values)
        return sum(map(len, lags.values()))
