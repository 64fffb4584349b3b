"""In-memory twins of the producer's ports, for unit tests and dry runs (pure).

They keep the contract the real adapters keep (tests/contract/test_producer_ports.py runs
both): a publisher acknowledges each record once, in send order per partition, or fails
it; a checkpoint store gives back what was saved last.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from cachesync.producer_outbox.ports import Change
from cachesync.schema.partition import partition_for

if TYPE_CHECKING:       # checkpoint.py holds the MySQL store too
    from cachesync.producer_outbox.checkpoint import Checkpoint


@dataclass(frozen=True)
class Sent:
    """One record as the memory publisher received it."""

    topic: str
    key: str
    value: bytes
    msg_id: str
    partition: int      # the one given, else Kafka's default partitioner's for the key


class MemoryPublisher:
    """Records what was sent; acknowledges at once (``auto_ack``) or when told to."""

    def __init__(self, partitions: int = 1, auto_ack: bool = True):
        self._partitions = partitions
        self.auto_ack = auto_ack
        self.sent: list[Sent] = []
        self._waiting: list[tuple[Callable[[], None], Callable[[Exception], None]]] = []
        self._lock = threading.Lock()
        self.closed = False

    def send(self, topic: str, key: str, value: bytes, msg_id: str,
             on_ack: Callable[[], None], on_error: Callable[[Exception], None],
             partition: int | None = None) -> None:
        if partition is None:
            partition = partition_for(key.encode("utf-8"), self._partitions)
        with self._lock:
            self.sent.append(Sent(topic, key, value, msg_id, partition))
            if not self.auto_ack:
                self._waiting.append((on_ack, on_error))
                return
        on_ack()

    def partitions(self, topic: str) -> list[int]:
        return list(range(self._partitions))

    def ack_all(self) -> int:
        """Acknowledge every record sent and not yet acknowledged; returns how many."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for on_ack, _ in waiting:
            on_ack()
        return len(waiting)

    def fail_all(self, error: Exception) -> int:
        """Fail every record not yet acknowledged (a send that failed after retries)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for _, on_error in waiting:
            on_error(error)
        return len(waiting)

    def flush(self, timeout_s: float | None = None) -> None:
        """Nothing is in flight with ``auto_ack``; otherwise the test acknowledges."""

    def close(self, timeout_s: float = 10) -> None:
        self.closed = True


class MemoryCheckpointStore:
    """The last saved checkpoint (and every save, in order, for tests)."""

    def __init__(self, initial: Checkpoint | None = None):
        self.saved: list[Checkpoint] = []
        self._current = initial
        self.closed = False

    def load(self) -> Checkpoint | None:
        return self._current

    def save(self, checkpoint: Checkpoint) -> None:
        self._current = checkpoint
        self.saved.append(checkpoint)

    def close(self) -> None:
        self.closed = True


class MemorySource:
    """Yields the given items once, in order (a change source with nothing to read)."""

    signals_idle = False

    def __init__(self, items: Iterable[Change]):
        self._items = list(items)
        self.closed = False

    def changes(self) -> Iterator[Change]:
        yield from self._items

    def close(self) -> None:
        self.closed = True
