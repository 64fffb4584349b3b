"""The outbox relay's change source: leased outbox rows, each a group of one record.

Each poll purges old rows now and then, leases up to ``burst_limit`` due rows
(``OutboxStore.claim``: attempts + 1, lease = redeliver interval) and yields each as its
own group, ``Begin``, ``Record``, ``Commit(OutboxMark)``. The pipeline sends it; once
Kafka acknowledged it, ``OutboxCheckpoints`` marks the row published. A row whose send
fails stays unpublished and is leased again when its lease ends, with the same event id,
so the consumer drops a duplicate. Rows yielded and not yet marked are bounded by
``max_unconfirmed``: the source claims no more until marks come in.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterator

from cachesync.runtime.config import RelaySettings
from cachesync.producer_outbox.outbox import OutboxRow, event_kafka_key, to_event
from cachesync.producer_outbox.ports import PULSE, Begin, Change, Commit, Record
from cachesync.producer_outbox.outbox_relay.store import OutboxMark, OutboxStore
from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.schema.event import encode
from cachesync.schema.retry import purge_in_batches

log = logging.getLogger(__name__)

KAFKA_SLOW_S = 5.0          # a row unconfirmed for longer than this is worth a log line
WAIT_LOG_EVERY_S = 5.0
PURGE_BATCHES_PER_ROUND = 100


class OutboxSource:
    """Due outbox rows of one table, polled until ``stop`` is set (ports.ChangeSource).

    ``changes`` raises RetryableError or FatalError (the store's). Single-threaded: ``forget`` is called from the pipeline's saves on the same thread.
    """

    signals_idle = False

    def __init__(self, store: OutboxStore, settings: RelaySettings, db: str, server: str,
                 stop: threading.Event, clock: Callable[[], float] = time.monotonic,
                 from_binlog: bool = False):
        self._store, self._opts, self._db, self._server = store, settings, db, server
        self._stop, self._clock, self._from_binlog = stop, clock, from_binlog
        self._unconfirmed: dict[str, float] = {}   # event id -> when yielded, until marked
        self._last_purge = float("-inf")
        self._waiting_since_log: float | None = None
        self.unencodable = 0        # leases of rows that could not be encoded (metrics)

    @property
    def unconfirmed(self) -> int:
        """Rows yielded and not yet marked published."""
        return len(self._unconfirmed)

    def changes(self) -> Iterator[Change]:
        while not self._stop.is_set():
            rows = self.poll()
            for row in rows:
                yield from self._group(row)
            if len(rows) < self._opts.burst_limit:
                self._stop.wait(self._opts.poll_interval_s)
            yield PULSE                 # the pipeline saves its marks and sees a stop

    def poll(self) -> list[OutboxRow]:
        """Purge if due, then lease due rows (fewer when many are unconfirmed); returns the
        rows leased that are not already in flight here."""
        self._maybe_purge()
        self._log_waiting()
        room = self._opts.max_unconfirmed - len(self._unconfirmed)
        if room <= 0:
            return []      # back-pressure: wait for Kafka's acks before claiming more
        rows = self._store.claim(min(self._opts.burst_limit, room),
                                 self._opts.redeliver_interval_s)
        _warn_repeated(rows, self._opts.warn_after_attempts)
        # a row still in flight here whose lease ended was leased again: that renewed its
        # lease; it is not sent twice
        return [r for r in rows if r.event_id not in self._unconfirmed]

    def forget(self, event_ids: list[str]) -> None:
        """These rows were marked published."""
        for event_id in event_ids:
            self._unconfirmed.pop(event_id, None)

    def forget_all(self) -> None:
        """The pipeline that sent the unconfirmed rows is gone: they are redelivered when
        their lease ends."""
        self._unconfirmed.clear()

    def close(self) -> None:
        """Nothing to close: the relay closes the store (shared with OutboxCheckpoints)."""

    def purge_due(self) -> int:
        """Purge every row published (``from_binlog``: created) more than the retention ago,
        at most PURGE_BATCHES_PER_ROUND batches."""
        return purge_in_batches(self.purge, self._opts.purge_batch, PURGE_BATCHES_PER_ROUND)

    def purge(self, limit: int) -> int:
        return self._store.purge(self._opts.retention_s, limit, by_created=self._from_binlog)

    def _group(self, row: OutboxRow) -> tuple[Change, ...]:
        """The row's group; none for a row that cannot be encoded (a payload that is not
        JSON, written around ``emit``): it stays unpublished, warned and counted at every
        lease. Its keys are in the unreadable text, so nothing can be invalidated for it:
        the metric and the WARNING are what an operator alerts on."""
        try:
            value = encode(to_event(row, self._db, self._server))
        except (ValueError, TypeError) as e:
            self.unencodable += 1
            log.warning("outbox event %s (seq %d, %s %s) cannot be encoded; it stays "
                        "unpublished and is leased again after relay.redeliver_interval_s: "
                        "%s", row.event_id, row.seq, row.aggregate_type, row.aggregate_id, e,
                        extra={"table": f"{self._db}.{row.aggregate_type}"})
            return ()
        self._unconfirmed[row.event_id] = self._clock()
        ctx = TxnContext(self._server, str(row.seq), row.seq, row.created_ts)
        return (Begin(ctx),
                Record(self._db, row.aggregate_type, event_kafka_key(row, self._db), value,
                       row.event_id),
                Commit(OutboxMark(row.seq, row.event_id)))

    def _maybe_purge(self) -> None:
        now = self._clock()
        if now - self._last_purge < self._opts.purge_interval_s:
            return
        self._last_purge = now
        total = self.purge_due()
        if total:
            log.info("purged %d outbox rows %s more than %.0fs ago", total,
                     "created" if self._from_binlog else "published", self._opts.retention_s)

    def _log_waiting(self) -> None:
        now = self._clock()
        oldest = now - next(iter(self._unconfirmed.values()), now)   # dicts keep yield order
        if oldest >= KAFKA_SLOW_S:
            if self._waiting_since_log is None or now - self._waiting_since_log >= WAIT_LOG_EVERY_S:
                log.warning("waiting for Kafka: %d send(s) unconfirmed, the oldest for %.0fs; "
                            "nothing is marked published until Kafka acknowledges",
                            len(self._unconfirmed), oldest)
                self._waiting_since_log = now
        elif self._waiting_since_log is not None:
            log.info("Kafka is acknowledging again; %d send(s) unconfirmed",
                     len(self._unconfirmed))
            self._waiting_since_log = None


def _warn_repeated(rows: list[OutboxRow], warn_after: int) -> None:
    """One line per poll for the rows reaching a multiple of warn_after_attempts."""
    due = [r for r in rows if _warn_due(r.attempts, warn_after)]
    if due:
        worst = max(due, key=lambda r: r.attempts)
        log.warning("%d outbox event(s) leased again without a confirmed publish; the most "
                    "retried: %s (seq %d, %s %s) at attempt %d", len(due), worst.event_id,
                    worst.seq, worst.aggregate_type, worst.aggregate_id, worst.attempts)


def _warn_due(attempts: int, warn_after: int) -> bool:
    """Warn at the N-th attempt and every N attempts after it, not on every lease."""
    return attempts >= warn_after and attempts % warn_after == 0

