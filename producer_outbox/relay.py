"""The outbox relay: publish committed outbox rows to Kafka, at least once.

Each round: record the acks that arrived (``published_at``), purge old rows now and
then, lease up to ``burst_limit`` due rows (attempts + 1, lease = redeliver interval),
send them. A row is marked published only after Kafka acknowledged it; a relay that
dies leaves leased rows that any relay redelivers once the lease ends, with the same
event id, so the consumer drops the duplicate. Unconfirmed sends are bounded.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kafka.errors import KafkaError

from cachesync.schema.retry import RetryPolicy, Stopped, call, purge_in_batches
from cachesync.config import RelaySettings
from cachesync.producer_outbox.outbox import OutboxRow, event_kafka_key, to_event
from cachesync.producer_outbox.relay_store import OutboxStore
from cachesync.schema.errors import RetryableError
from cachesync.schema.event import encode

log = logging.getLogger(__name__)

KAFKA_SLOW_S = 5.0          # an unconfirmed send older than this is worth a log line
WAIT_LOG_EVERY_S = 5.0
PURGE_BATCHES_PER_ROUND = 100
SHUTDOWN_FLUSH_S = 10.0


class Unconfirmed:
    """Sends Kafka has not acknowledged yet, and acks not yet recorded in MySQL.

    Thread-safe: acks and errors arrive on the Kafka client's I/O thread.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._sent: dict[str, float] = {}
        self._acked: list[str] = []
        self.failures: list[tuple[str, Exception]] = []

    def add(self, event_id: str, now: float) -> bool:
        """False if ``event_id`` is still in flight here (a re-claim only renewed its lease)."""
        with self._lock:
            if event_id in self._sent:
                return False
            self._sent[event_id] = now
            return True

    def acked(self, event_id: str) -> None:
        with self._lock:
            if self._sent.pop(event_id, None) is not None:
                self._acked.append(event_id)

    def failed(self, event_id: str, error: Exception) -> None:
        with self._lock:
            self._sent.pop(event_id, None)
            self.failures.append((event_id, error))

    def take_acked(self) -> list[str]:
        with self._lock:
            out, self._acked = self._acked, []
            return out

    def restore_acked(self, event_ids: list[str]) -> None:
        with self._lock:
            self._acked[:0] = event_ids

    def take_failures(self) -> list[tuple[str, Exception]]:
        with self._lock:
            out, self.failures = self.failures, []
            return out

    @property
    def pending(self) -> int:
        return len(self._sent)

    def oldest_age(self, now: float) -> float:
        with self._lock:
            return now - min(self._sent.values()) if self._sent else 0.0


class Relay:
    """Publishes one outbox table; ``run()`` until ``stop()``."""

    def __init__(self, store: OutboxStore, publisher_factory: Callable[[], object],
                 settings: RelaySettings, topic: str, db: str, server: str,
                 retry: RetryPolicy = RetryPolicy(base_s=0.2, cap_s=10.0),
                 clock: Callable[[], float] = time.monotonic, from_binlog: bool = False):
        """``from_binlog``: the tailer publishes this table too (tailer.outbox_tables); the
        purge then goes by creation time, since no row is ever marked published."""
        self._store, self._factory, self._opts = store, publisher_factory, settings
        self._from_binlog = from_binlog
        self._topic = topic
        self._db, self._server, self._retry, self._clock = db, server, retry, clock
        self._publisher = None
        self._unconfirmed = Unconfirmed()
        self._stop = threading.Event()
        self._last_purge = float("-inf")
        self._waiting_since_log: float | None = None
        self.published = 0          # rows marked published by this process
        self.last_published_at: float | None = None   # time.time() of the newest marking
        self.sent = 0

    def stop(self) -> None:
        self._stop.set()

    @property
    def from_binlog(self) -> bool:
        return self._from_binlog

    def run(self) -> None:
        """Relay until stop(); transient errors back off and retry, FatalError raises."""
        log.info("relay starting: %s outbox -> topic %s (burst %d, redeliver after %.1fs)",
                 self._db, self._topic, self._opts.burst_limit,
                 self._opts.redeliver_interval_s)
        if self._from_binlog:
            log.warning("relay: the %s outbox is also in tailer.outbox_tables: both publish "
                        "every event (the consumer skips the second copy by id); run the relay "
                        "only to switch over, or `relay --purge-only`", self._db)
        try:
            while not self._stop.is_set():
                claimed = call(self.round, "relay round", self._stop, self._retry)
                if claimed < self._opts.burst_limit:
                    self._stop.wait(self._opts.poll_interval_s)
        except Stopped:
            pass
        finally:
            self._shutdown()

    def round(self) -> int:
        """One poll: record acks, purge if due, lease and send; returns rows claimed."""
        self._record_acks()
        self._handle_failures()
        self._maybe_purge()
        self._log_waiting()
        room = self._opts.max_unconfirmed - self._unconfirmed.pending
        if room <= 0:
            return 0       # back-pressure: wait for Kafka's acks before claiming more
        publisher = self._ensure_publisher()
        rows = self._store.claim(min(self._opts.burst_limit, room),
                                 self._opts.redeliver_interval_s)
        self._warn_repeated(rows)
        for row in rows:
            self._send(publisher, row)
        return len(rows)

    def purge_all(self, progress: Callable[[int], None] = lambda _n: None) -> int:
        """Purge every row published longer than the retention ago, in bounded batches;
        ``progress`` hears each batch's count."""
        def batch(n: int) -> int:
            done = self._purge(n)
            progress(done)
            return done
        return purge_in_batches(batch, self._opts.purge_batch)

    # -- sending ---------------------------------------------------------------------
    def _warn_repeated(self, rows: list[OutboxRow]) -> None:
        """One line per round for the rows reaching a multiple of warn_after_attempts."""
        due = [r for r in rows if _warn_due(r.attempts, self._opts.warn_after_attempts)]
        if due:
            worst = max(due, key=lambda r: r.attempts)
            log.warning("%d outbox event(s) leased again without a confirmed publish; the most "
                        "retried: %s (seq %d, %s %s) at attempt %d", len(due), worst.event_id,
                        worst.seq, worst.aggregate_type, worst.aggregate_id, worst.attempts)

    def _send(self, publisher, row: OutboxRow) -> None:
        if not self._unconfirmed.add(row.event_id, self._clock()):
            return
        event_id = row.event_id
        try:
            value = encode(to_event(row, self._db, self._server))
            publisher.send(self._topic, event_kafka_key(row, self._db), value, event_id,
                           on_ack=lambda: self._unconfirmed.acked(event_id),
                           on_error=lambda e: self._unconfirmed.failed(event_id, e))
        except (KafkaError, ValueError, TypeError) as e:
            self._unconfirmed.failed(event_id, e)
            return
        self.sent += 1

    def _ensure_publisher(self):
        if self._publisher is None:
            self._publisher = self._factory()      # raises RetryableError if Kafka is down
            log.info("relay connected to Kafka")
        return self._publisher

    def _handle_failures(self) -> None:
        """Failed sends stay unpublished and are redelivered when their lease ends."""
        failures = self._unconfirmed.take_failures()
        if not failures:
            return
        event_id, error = failures[-1]
        self._reset_publisher()
        raise RetryableError(f"Kafka did not acknowledge {len(failures)} outbox event(s) "
                             f"(last {event_id}: {type(error).__name__}: {error}); they will be "
                             f"redelivered after relay.redeliver_interval_s")

    def _reset_publisher(self) -> None:
        if self._publisher is not None:
            publisher, self._publisher = self._publisher, None
            try:
                publisher.close(0)
            except KafkaError as e:
                log.info("closing the Kafka producer: %s", e)

    # -- bookkeeping -----------------------------------------------------------------
    def _record_acks(self) -> None:
        acked = self._unconfirmed.take_acked()
        if not acked:
            return
        try:
            self.published += self._store.mark_published(acked)
            self.last_published_at = time.time()
        except Exception:
            self._unconfirmed.restore_acked(acked)   # keep them; marked on the next round
            raise

    def _maybe_purge(self) -> None:
        now = self._clock()
        if now - self._last_purge < self._opts.purge_interval_s:
            return
        self._last_purge = now
        total = purge_in_batches(self._purge, self._opts.purge_batch, PURGE_BATCHES_PER_ROUND)
        if total:
            log.info("purged %d outbox rows %s more than %.0fs ago", total,
                     "created" if self._from_binlog else "published", self._opts.retention_s)

    def _purge(self, limit: int) -> int:
        return self._store.purge(self._opts.retention_s, limit, by_created=self._from_binlog)

    def _log_waiting(self) -> None:
        now = self._clock()
        oldest = self._unconfirmed.oldest_age(now)
        if oldest >= KAFKA_SLOW_S:
            if self._waiting_since_log is None or now - self._waiting_since_log >= WAIT_LOG_EVERY_S:
                log.warning("waiting for Kafka: %d send(s) unconfirmed, the oldest for %.0fs; "
                            "nothing is marked published until Kafka acknowledges",
                            self._unconfirmed.pending, oldest)
                self._waiting_since_log = now
        elif self._waiting_since_log is not None:
            log.info("Kafka is acknowledging again; %d send(s) unconfirmed",
                     self._unconfirmed.pending)
            self._waiting_since_log = None

    def _shutdown(self) -> None:
        if self._publisher is not None:
            try:
                self._publisher.flush(SHUTDOWN_FLUSH_S)
            except KafkaError as e:
                log.warning("relay stopping with unconfirmed sends (redelivered later): %s", e)
        try:
            self._record_acks()
        except RetryableError as e:
            log.warning("relay stopping; acknowledged rows not marked (redelivered later): %s", e)
        self._reset_publisher()
        self._store.close()
        log.info("relay stopped: %d sent, %d marked published", self.sent, self.published)


def _warn_due(attempts: int, warn_after: int) -> bool:
    """Warn at the N-th attempt and every N attempts after it, not on every lease."""
    return attempts >= warn_after and attempts % warn_after == 0
