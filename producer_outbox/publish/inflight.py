"""Progress only moves past what Kafka acknowledged (Maxwell's InflightMessageList).

Pure and single-threaded; the tailer guards it with a lock because acks arrive
on the Kafka sender thread.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")


@dataclass
class _Txn(Generic[P]):
    position: P          # the checkpoint that is safe once this txn is fully acked
    pending: int = 0
    closed: bool = False


class InflightTracker(Generic[P]):
    """Tracks transactions in commit order and yields the newest safe checkpoint.

    A transaction is safe when it is closed (all its events were handed to the
    publisher) and every one of them was acknowledged; the checkpoint may only
    move to the last transaction of the unbroken safe prefix, never mid-transaction.
    """

    def __init__(self) -> None:
        self._txns: deque[_Txn[P]] = deque()
        self._pending_total = 0
        self._progress_at: float | None = None   # see stalled_since

    def open(self, position: P) -> _Txn[P]:
        """Start tracking a transaction; ``position`` is where to resume after it."""
        txn = _Txn(position)
        self._txns.append(txn)
        return txn

    def sent(self, txn: _Txn[P], events: int = 1, at: float | None = None) -> None:
        """``events`` rows went out in one record (more than one when packed); ``at``:
        when (any clock), for ``stalled_since``; only a send that finds nothing in flight
        needs it."""
        if self._pending_total == 0 and at is not None:
            self._progress_at = at
        txn.pending += events
        self._pending_total += events

    def acked(self, txn: _Txn[P], events: int = 1, at: float | None = None) -> None:
        """``at``: when (the clock of ``sent``)."""
        if txn.pending < events:
            raise ValueError("ack without a matching send")
        txn.pending -= events
        self._pending_total -= events
        if at is not None:
            self._progress_at = at

    def close(self, txn: _Txn[P], position: P | None = None) -> None:
        """All events of ``txn`` were sent; optionally correct its resume position."""
        if position is not None:
            txn.position = position
        txn.closed = True

    def advance(self) -> P | None:
        """Pop the safe prefix and return its last position (None if nothing new is safe)."""
        safe = None
        while self._txns and self._txns[0].closed and self._txns[0].pending == 0:
            safe = self._txns.popleft().position
        return safe

    def take_acknowledged(self) -> list[P]:
        """Pop every closed, fully acknowledged transaction wherever it stands, and return
        their positions in commit order: for progress kept per transaction (the outbox's
        rows), where an unacknowledged transaction holds back none after it."""
        done = [t.position for t in self._txns if t.closed and t.pending == 0]
        if done:
            self._txns = deque(t for t in self._txns if not (t.closed and t.pending == 0))
        return done

    def stalled_since(self) -> float | None:
        """Since when sends have been in flight without any acknowledgement: the later of
        the last acknowledgement and the send that found nothing in flight (None: nothing in
        flight, or never stamped). A long transaction whose sends keep being acknowledged
        is never stalled, however long it takes."""
        return self._progress_at if self._pending_total else None

    @property
    def pending(self) -> int:
        """Events sent but not yet acknowledged (bounded by the tailer: back-pressure)."""
        return self._pending_total

    @property
    def open_transactions(self) -> int:
        return len(self._txns)
