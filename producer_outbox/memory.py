"""In-memory twins of the producer's ports, for unit tests and dry runs (pure).

They keep the contract the real adapters keep (tests/contract/test_producer_ports.py runs
both): a publisher acknowledges each record once, in send order per partition, or fails
it; a checkpoint store in order gives back what was saved last, one of progress per group
keeps every group saved.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from cachesync.producer_outbox.ports import Change
from cachesync.schema.partition import partition_for

if TYPE_CHECKING:       # checkpoint.py holds the MySQL store too
    from cachesync.producer_outbox.binlog.checkpoint import Checkpoint


@dataclass(frozen=True)
class Sent:
    """One record as the memory publisher received it."""

    topic: str
    key: str
    value: bytes
    msg_id: str
    partition: int      # the one given, else Kafka's default partitioner's for the key
    flush: bytes | None = None      # the flush header (schema.flushes)


class MemoryPublisher:
    """Records what was sent; acknowledges at once (``auto_ack``) or when told to."""

    def __init__(self, partitions: int = 1, auto_ack: bool = True):
        self._partitions = partitions
        self.auto_ack = auto_ack
        self.sent: list[Sent] = []
        self._waiting: list[tuple[Callable[[], None], Callable[[Exception], None], str]] = []
        self._lock = threading.Lock()
        self.closed = False

    def send(self, topic: str, key: str, value: bytes, msg_id: str,
             on_ack: Callable[[], None], on_error: Callable[[Exception], None],
             partition: int | None = None, flush: bytes | None = None) -> None:
        if partition is None:
            partition = partition_for(key.encode("utf-8"), self._partitions)
        with self._lock:
            self.sent.append(Sent(topic, key, value, msg_id, partition, flush))
            if not self.auto_ack:
                self._waiting.append((on_ack, on_error, msg_id))
                return
        on_ack()

    def partitions(self, topic: str, timeout_s: float | None = None) -> list[int]:
        return list(range(self._partitions))

    def ack_all(self, msg_ids: Iterable[str] | None = None) -> int:
        """Acknowledge every record sent and not yet acknowledged (``msg_ids``: those of
        them with these ids); returns how many."""
        waiting = self._take(msg_ids)
        for on_ack, _, _ in waiting:
            on_ack()
        return len(waiting)

    def fail_all(self, error: Exception, msg_ids: Iterable[str] | None = None) -> int:
        """Fail every record not yet acknowledged (``msg_ids``: those with these ids), as a
        send that failed after retries."""
        waiting = self._take(msg_ids)
        for _, on_error, _ in waiting:
            on_error(error)
        return len(waiting)

    def _take(self, msg_ids: Iterable[str] | None) -> list:
        wanted = None if msg_ids is None else set(msg_ids)
        with self._lock:
            taken = [w for w in self._waiting if wanted is None or w[2] in wanted]
            self._waiting = [w for w in self._waiting if wanted is not None
                             and w[2] not in wanted]
        return taken

    def flush(self, timeout_s: float | None = None) -> None:
        """Nothing is in flight with ``auto_ack``; otherwise the test acknowledges."""

    def close(self, timeout_s: float = 10) -> None:
        self.closed = True


class MemoryCheckpointStore:
    """The last saved checkpoint (and every save, in order, for tests); ``in_order=False``:
    a store of progress per group, which keeps every group saved (``done``)."""

    def __init__(self, initial: Checkpoint | None = None, in_order: bool = True):
        self.in_order = in_order
        self.saved: list = []
        self.done: set = set()
        self._current = initial
        self.closed = False

    def load(self) -> Checkpoint | None:
        return self._current if self.in_order else None

    def save(self, checkpoint: Checkpoint) -> None:
        self._current = checkpoint
        self.saved.append(checkpoint)

    def save_each(self, checkpoints: Sequence) -> None:
        self.saved.extend(checkpoints)
        self.done.update(checkpoints)

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
