"""The relay's SQL on the outbox table: claim due rows, mark them published, purge; and
``OutboxCheckpoints``, the pipeline's checkpoint store for the outbox (ports.CheckpointStore,
progress per row: an acknowledged row is marked published).

Claims select rows by state (``published_at IS NULL`` and the lease is over), never
by an id watermark, so a row whose auto-increment id committed after a higher id was
published is simply found on the next round.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, NamedTuple, Sequence

import pymysql

from cachesync.runtime.mysql import Session
from cachesync.producer_outbox.outbox import OutboxRow
from cachesync.schema.sqlnames import qualified

log = logging.getLogger(__name__)

CLAIM_LOCK_WAIT_S = 5       # how long a claim waits for another relay's claim to finish
_IN_CHUNK = 1000            # event ids per UPDATE ... IN (...)

# A row is claimable when it is unpublished, its lease is over, and no EARLIER
# unpublished event of the same aggregate is in flight (leased) elsewhere: that
# keeps one aggregate's events in seq order on Kafka across several relays.
_CLAIM = """
SELECT o.seq, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload,
       o.cache_keys, UNIX_TIMESTAMP(o.created_at), o.attempts
FROM {t} o FORCE INDEX (by_pending)
WHERE o.published_at IS NULL AND o.next_attempt_at <= NOW(6)
  AND NOT EXISTS (SELECT 1 FROM {t} p
                  WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
                    AND p.published_at IS NULL AND p.seq < o.seq AND p.next_attempt_at > NOW(6))
ORDER BY o.seq LIMIT %s
FOR UPDATE SKIP LOCKED"""
_LEASE = ("UPDATE {t} SET attempts = attempts + 1, "
          "next_attempt_at = NOW(6) + INTERVAL %s MICROSECOND WHERE seq IN ({marks})")
_MARK = "UPDATE {t} SET published_at = NOW(6) WHERE published_at IS NULL AND event_id IN ({marks})"
_PURGE = "DELETE FROM {t} WHERE published_at < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s"
# Read from the binlog (tailer.outbox_tables), rows are never marked published: the insert
# is in the binlog whatever happens to the row, so age alone decides. seq order: the oldest
# rows come first in the primary key, so a purge with little to do stops early.
_PURGE_CREATED = ("DELETE FROM {t} WHERE created_at < NOW(6) - INTERVAL %s MICROSECOND "
                  "ORDER BY seq LIMIT %s")


class OutboxStore:
    """One MySQL session on ``db.table``; every method raises RetryableError or FatalError."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], db: str,
                 table: str):
        self._session = Session(connect, setup=_read_committed)
        self._table = qualified(db, table)
        self._lock_name = f"cachesync_outbox_claim:{db}.{table}"

    def claim(self, limit: int, lease_s: float) -> list[OutboxRow]:
        """Lease up to ``limit`` due rows for ``lease_s`` seconds (attempts + 1) and return them.

        Claims of several relays are serialised by a named lock (GET_LOCK, no grant
        needed): the aggregate-order check must see the other relays' committed leases.
        """
        return self._session.run(lambda cur: self._claim(cur, limit, lease_s))

    def mark_published(self, event_ids: Sequence[str]) -> int:
        """Record Kafka's acknowledgement; returns how many rows changed."""
        def work(cur):
            changed = 0
            for i in range(0, len(event_ids), _IN_CHUNK):
                chunk = list(event_ids[i:i + _IN_CHUNK])
                changed += cur.execute(_MARK.format(t=self._table, marks=_marks(chunk)), chunk)
            return changed
        return self._session.run(work)

    def purge(self, retention_s: float, batch: int, by_created: bool = False) -> int:
        """Delete at most ``batch`` rows published (``by_created``: created) more than
        ``retention_s`` ago."""
        sql = (_PURGE_CREATED if by_created else _PURGE).format(t=self._table)
        return self._session.run(lambda cur: cur.execute(sql, (_micros(retention_s), batch)))

    def close(self) -> None:
        self._session.close()

    def _claim(self, cur, limit: int, lease_s: float) -> list[OutboxRow]:
        cur.execute("SELECT GET_LOCK(%s, %s)", (self._lock_name, CLAIM_LOCK_WAIT_S))
        if cur.fetchone()[0] != 1:
            return []          # another relay is claiming; the caller polls again
        try:
            cur.execute(_CLAIM.format(t=self._table), (limit,))
            rows = [_row(r) for r in cur.fetchall()]
            if rows:
                cur.execute(_LEASE.format(t=self._table, marks=_marks(rows)),
                            (_micros(lease_s), *[r.seq for r in rows]))
            cur.connection.commit()   # the lease must be visible before the lock is released
        finally:
            cur.execute("SELECT RELEASE_LOCK(%s)", (self._lock_name,))
        return rows


class OutboxMark(NamedTuple):
    """An outbox row's progress: the ``Commit`` checkpoint of its group."""

    seq: int
    event_id: str


class OutboxCheckpoints:
    """The outbox's checkpoint store: each row Kafka acknowledged is marked published,
    whatever became of the rows before it (a store not ``in_order``, ports.CheckpointStore).

    ``on_marked(event_ids)`` hears the rows marked (the source stops counting them as
    unconfirmed). Raises RetryableError or FatalError (OutboxStore's).
    """

    in_order = False

    def __init__(self, store: OutboxStore, on_marked: Callable[[list[str]], None]):
        self._store, self._on_marked = store, on_marked
        self.marked = 0                           # rows marked published by this process
        self.last_marked_at: float | None = None  # time.time() of the newest marking

    def load(self) -> None:
        """None: unpublished rows are found by their state, not from a position."""
        return None

    def save_each(self, marks: Sequence[OutboxMark]) -> None:
        event_ids = [m.event_id for m in marks]
        self.marked += self._store.mark_published(event_ids)
        self.last_marked_at = time.time()
        self._on_marked(event_ids)

    def close(self) -> None:
        self._store.close()


def _read_committed(conn: pymysql.connections.Connection) -> None:
    # No gap locks: a claim must never block the application's INSERTs.
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")


def _row(r) -> OutboxRow:
    seq, event_id, agg_type, agg_id, event_type, payload, keys, created, attempts = r
    return OutboxRow(int(seq), event_id, agg_type, agg_id, event_type, payload, keys,
                     float(created), int(attempts) + 1)   # attempts as leased now


def _marks(items) -> str:
    return ", ".join(["%s"] * len(items))


def _micros(seconds: float) -> int:
    return int(round(seconds * 1_000_000))
