"""How a table-level scan shares Redis with the row stream (pure: the caller sleeps).

Redis runs one command at a time. A table-level invalidation reads the whole keyspace with
SCAN; issued back to back, its calls keep Redis busy for their whole duration and every
claim, delete and confirm of the other tables' changes waits behind them. ``ScanPace`` says
how long to pause after each call of the scan so that its calls take at most ``busy_share``
of the time, measured as the caller sees the call: a call that took longer (a large keyspace,
a busy or CPU-starved Redis) is followed by a longer pause, so the share holds whatever the
server's speed, and the row stream's round trips find Redis free most of the time.
``keys_per_s`` (optional) bounds the keys SCAN examines per second on top of it.
"""

from __future__ import annotations

from dataclasses import dataclass

# never pause longer than this after one call: a call that stalled (a network hiccup, a
# blocked server) must not stop the scan for long on its own
MAX_PAUSE_S = 1.0


@dataclass(frozen=True)
class ScanPace:
    """A table-level scan's pace: ``busy_share`` of the time in Redis calls (1 = back to
    back), at most ``keys_per_s`` keys examined per second (0 = no bound)."""

    busy_share: float = 1.0
    keys_per_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.busy_share <= 1:
            raise ValueError(f"busy_share: expected 0 < x <= 1, got {self.busy_share}")
        if self.keys_per_s < 0:
            raise ValueError(f"keys_per_s: expected >= 0, got {self.keys_per_s}")

    def pause_after(self, call_s: float, examined: int) -> float:
        """Seconds to wait after a call that took ``call_s`` and examined ``examined`` keys
        (SCAN's COUNT; 0 for a call that examines none, such as an UNLINK pipeline)."""
        pause = call_s * (1 - self.busy_share) / self.busy_share
        if self.keys_per_s and examined:
            pause = max(pause, examined / self.keys_per_s - call_s)
        return min(max(0.0, pause), MAX_PAUSE_S)
