"""Direct mode: the tailer hands its events to the python engine in the same process.

No Kafka. ``InProcessQueue`` is both the Tailer's publisher and the engine's
Source: ``send()`` queues an encoded event, the engine polls it, plans, claims the
id in the dedup table, deletes the keys, confirms, and then "commits" it, which is
the ack the tailer's InflightTracker waits for. So the checkpoint moves only past
transactions whose invalidations reached Redis, exactly as it moves only past
transactions Kafka acknowledged in the two-process pipeline; a kill -9 anywhere
re-reads the binlog from that checkpoint and the re-applied deletes are harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, Mapping

from cachesync.consumer.core.offsets import Record
from cachesync.consumer.engine import PythonEngine
from cachesync.runtime.linger import Linger
from cachesync.producer_outbox.tailer import Tailer
from cachesync.schema.errors import FatalError

log = logging.getLogger(__name__)

PARTITION = 0   # one in-process "partition": offsets are the send order
# The engine's poll waits this long for more when changes arrive closer together than this
# (the last two sends): at 1,000 commits/s each commit would otherwise be its own batch, with
# its own Redis call and the engine's Python per batch. Below that rate nothing waits.
LINGER_S = 0.002


class InProcessQueue:
    """Publisher (for the Tailer) and Source (for the engine) over one in-memory queue."""

    def __init__(self, linger_s: float = LINGER_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """``linger_s``: how long a poll waits for more when changes arrive closer together
        than that (0: never)."""
        self._cond = threading.Condition()
        self._queued: deque[Record] = deque()
        self._callbacks: dict[int, tuple[Callable[[], None], Callable[[Exception], None]]] = {}
        self._next_offset = 0
        self._failure: Exception | None = None
        self._linger = Linger(linger_s, linger_s, clock, sleep)   # the sends' pace

    # -- publisher side (tailer thread) --------------------------------------------
    def send(self, topic: str, key: str, value: bytes, msg_id: str,
             on_ack: Callable[[], None], on_error: Callable[[Exception], None],
             partition: int | None = None, flush: bytes | None = None) -> None:
        """One in-process partition: ``partition`` has nothing to choose from, ``flush``
        nothing to gather (a flush is one batch already)."""
        with self._cond:
            if self._failure is not None:
                on_error(self._failure)
                return
            offset = self._next_offset
            self._next_offset += 1
            self._linger.arrived()
            self._queued.append(Record(topic, PARTITION, offset, key.encode("utf-8"), value,
                                       (("id", msg_id.encode("ascii")),),
                                       int(time.time() * 1000)))
            self._callbacks[offset] = (on_ack, on_error)
            self._cond.notify_all()

    def partitions(self, topic: str, timeout_s: float | None = None) -> list[int]:
        """One in-process partition (the tailer sends a table-level event to each)."""
        return [PARTITION]

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every sent event was applied (or failed), at most ``timeout_s``."""
        with self._cond:
            self._cond.wait_for(lambda: not self._callbacks or self._failure is not None,
                                timeout=timeout_s)

    # -- source side (engine thread) -----------------------------------------------
    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records``, waiting up to ``timeout_s`` for the first; when the changes
        come closer together than ``linger_s``, the rest of ``linger_s`` after the newest is
        waited for first (outside the lock: the tailer's sends do not wake this thread), so
        that one batch takes the ones arriving meanwhile."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._queued), timeout=timeout_s)
            wait = self._linger.remaining() if 0 < len(self._queued) < max_records else 0.0
        if wait > 0:
            self._linger.sleep(wait)
        with self._cond:
            batch = []
            while self._queued and len(batch) < max_records:
                batch.append(self._queued.popleft())
            return batch

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """The engine applied everything below these offsets: ack it to the tailer."""
        upto = max(offsets.values(), default=0)
        with self._cond:
            done = sorted(o for o in self._callbacks if o < upto)
            acks = [self._callbacks.pop(o)[0] for o in done]
            self._cond.notify_all()
        for on_ack in acks:         # outside our lock: on_ack takes the tailer's
            on_ack()

    def fail(self, error: Exception) -> None:
        """The engine stopped for good: fail every pending send so the tailer stops too."""
        with self._cond:
            self._failure = error
            errbacks = [cb[1] for cb in self._callbacks.values()]
            self._callbacks.clear()
            self._cond.notify_all()
        for on_error in errbacks:
            on_error(error)

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._callbacks)


class DirectSidecar:
    """One tailer run with its engine thread; stop() ends both, the engine last."""

    def __init__(self, tailer: Tailer, engine: PythonEngine, queue: InProcessQueue):
        self.tailer, self.engine, self._queue = tailer, engine, queue

    def run(self) -> None:
        """Tail and apply until stop(); raises what the tailer raises (a failed engine
        surfaces as the tailer's RetryableError caused by the engine's error)."""
        thread = threading.Thread(target=self._run_engine, name="cachesync-direct-engine",
                                  daemon=True)
        thread.start()
        try:
            self.tailer.run()    # on a clean stop it drains: waits until the queue is applied
        finally:
            self.engine.stop()
            thread.join()
            self.engine.close()

    def stop(self) -> None:
        self.tailer.stop()

    @property
    def published(self) -> int:
        return self.tailer.published

    @property
    def committed(self):
        return self.tailer.committed

    def _run_engine(self) -> None:
        try:
            self.engine.run()
        except Exception as e:   # noqa: BLE001 - handed to the tailer thread, which raises it
            if not isinstance(e, FatalError):
                log.error("direct-mode engine failed: %s", e)
            self._queue.fail(e)


class LogDeadLetters:
    """Dead letters of direct mode (there is no Kafka topic): one ERROR line each, with the
    reason and the event, so nothing is dropped silently."""

    def __init__(self) -> None:
        self.count = 0

    def send(self, record: Record, reason: str, detail: str) -> None:
        self.count += 1
        value = (record.value or b"").decode("utf-8", "replace")
        log.error("dead letter (%s): %s; event %s", reason, detail, value)

    def flush(self) -> None:
        """Nothing buffered: every dead letter was logged when it was sent."""
