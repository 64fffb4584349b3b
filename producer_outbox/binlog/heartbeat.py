"""Heartbeat rows: keep commit->apply lag measurable while the application is idle.

``cachesync tail`` rewrites one row of ``<state_db>.cachesync_heartbeat`` every few
seconds. The tailer publishes the table's rows (``with_heartbeat`` adds it to the
tables it reads) as events of source kind ``heartbeat``, which the consumer's planner
passes over (no key, no NULL-key skip) and its metrics measure lag with. The keyless
mapping only selects the table for the tailer (and plans the ``binlog``-kind
heartbeats of tailers older than the heartbeat kind to no key).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from cachesync.runtime.mysql import Session, ensure_state_tables
from cachesync.schema.errors import ConfigError, FatalError, RetryableError
from cachesync.schema.event import HEARTBEAT_TABLE
from cachesync.schema.mapping import MappingSet, TableMapping

log = logging.getLogger(__name__)

def heartbeat_table(state_db: str) -> str:
    return f"{state_db}.{HEARTBEAT_TABLE}"


def with_heartbeat(mappings: MappingSet, state_db: str) -> MappingSet:
    """``mappings`` plus the internal heartbeat table (a new set; the argument is unchanged);
    raises ConfigError when a mapped table takes the heartbeat table's reserved name."""
    taken = [t for t in mappings.tables if t.split(".", 1)[-1] == HEARTBEAT_TABLE]
    if taken:
        raise ConfigError(f"tables: {', '.join(taken)}: {HEARTBEAT_TABLE} is cachesync's own "
                          "heartbeat table; its rows are lag probes, never cache keys")
    name = heartbeat_table(state_db)
    return replace(mappings, tables={**mappings.tables, name: TableMapping(table=name, keys=())})


class HeartbeatWriter:
    """Upserts this tailer's heartbeat row; ``run(stop)`` until ``stop`` is set."""

    def __init__(self, connect, name: str, interval_s: float):
        self._session = Session(connect, setup=ensure_state_tables)
        self._name, self._interval = name, interval_s
        self.written = 0
        self.failures = 0
        self.last_written_at: float | None = None     # time.time() of the newest beat

    def beat(self) -> None:
        """Write one heartbeat; raises RetryableError or FatalError."""
        self._session.run(lambda cur: cur.execute(
            # NOW(6) in UNIX_TIMESTAMP is the statement time in UTC, whatever the session zone.
            f"INSERT INTO {HEARTBEAT_TABLE} (name, beat_us) "
            "VALUES (%s, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)) "
            "ON DUPLICATE KEY UPDATE beat_us = VALUES(beat_us)", (self._name,)))
        self.written += 1
        self.last_written_at = time.time()

    def run(self, stop: threading.Event) -> None:
        """Beat every interval; failures are logged (once per outage) and retried next time."""
        failing = False
        while not stop.is_set():
            try:
                self.beat()
                if failing:
                    log.info("heartbeat writes resumed")
                failing = False
            except (RetryableError, FatalError) as e:
                self.failures += 1
                if not failing:
                    log.warning("heartbeat write failed (retrying every %.1fs): %s", self._interval, e)
                failing = True
            stop.wait(self._interval)

    def close(self) -> None:
        self._session.close()


def own_rows_only(state_db: str, name: str):
    """A tailer row filter: every tailer on a server sees every heartbeat row; it publishes
    only the one it writes, so N tailers do not multiply each other's heartbeats."""
    def keep(db: str, table: str, row) -> bool:
        return not (db == state_db and table == HEARTBEAT_TABLE) or row.get("name") == name
    keep.tables = frozenset({(state_db, HEARTBEAT_TABLE)})    # rows of others: always kept
    return keep
