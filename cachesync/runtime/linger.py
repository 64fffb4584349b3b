"""Arrivals at the head of the binlog, paced: while they come close together, the next step
(a read, a batch) waits a little so that it takes in several.

At the head each transaction arrives alone, and every wake-up of a thread of Python code
runs it with the CPU's caches cold: what costs is the number of arrivals, not their size.
:class:`Linger` remembers when the last arrival came and whether it came within
``close_s`` of the one before; while it did, ``remaining()`` is the rest of ``linger_s``
after it. With ``enough`` (a size), the wait is shorter when arrivals are frequent: only as
long as ``enough`` takes to arrive at the pace of the last two (their sizes and gap), so a
busy stream is taken in steps of about that size, and the linger's lag is paid only where
the steps would otherwise be small. The binlog reader (DumpConnection) and direct mode's
queue (InProcessQueue) pace themselves with it.
"""

from __future__ import annotations

import time
from typing import Callable


class Linger:
    """``linger_s`` after the newest arrival, while arrivals come within ``close_s`` of each
    other (0: never waits)."""

    def __init__(self, linger_s: float, close_s: float,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, enough: int = 0):
        self.linger_s, self._close_s, self._enough = linger_s, close_s, enough
        self.clock, self.sleep = clock, sleep
        self._at = float("-inf")    # the newest arrival
        self._close = False         # it came within close_s of the one before
        self._alone = False         # it counts and did not
        self._wait = linger_s       # how long after it the next step waits, if close

    def arrived(self, counts: bool = True, size: int = 0) -> None:
        """An arrival now, of ``size`` (for ``enough``); ``counts``: one that may be
        lingered after (a read from behind, a full one, may not)."""
        now = self.clock()
        gap = now - self._at
        near = gap < self._close_s
        self._close, self._alone = counts and near, counts and not near
        self._at = now
        if self._enough and size > 0 and near:      # enough arrives in enough * gap / size
            self._wait = min(self.linger_s, self._enough * gap / size)
        else:
            self._wait = self.linger_s

    @property
    def alone(self) -> bool:
        """Whether the newest arrival counts and did not come within ``close_s`` of the one
        before (nothing suggests more is on the way)."""
        return self._alone

    def remaining(self) -> float:
        """How long the next step waits: the rest of ``linger_s`` (or of the time ``enough``
        takes to arrive, if shorter) after the newest arrival while arrivals come close
        together, else 0."""
        if not self._close:
            return 0.0
        return max(0.0, self._at + self._wait - self.clock())

    def pause(self) -> None:
        """Sleep ``remaining()``."""
        wait = self.remaining()
        if wait > 0:
            self.sleep(wait)
