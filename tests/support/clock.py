"""A clock and a sleep for unit tests of code that waits: sleeping moves the clock."""

from __future__ import annotations


class FakeClock:
    """``clock()`` (or ``monotonic()``) reads ``now``; ``sleep(s)`` records ``s`` (rounded to
    the microsecond) in ``slept`` and moves ``now`` on by it."""

    def __init__(self, now: float = 1000.0):
        self.now, self.slept = now, []

    def __call__(self) -> float:
        return self.now

    monotonic = __call__

    def sleep(self, s: float) -> None:
        self.slept.append(round(s, 6))
        self.now += s
