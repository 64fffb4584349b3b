"""Durable tailer checkpoints in MySQL (the cachesync_checkpoint table)."""

from __future__ import annotations

from dataclasses import dataclass

from cachesync.runtime.mysql import Session, ensure_state_tables


@dataclass(frozen=True)
class Checkpoint:
    """Where to resume: a GTID state (preferred) or a file+pos, both at a transaction boundary."""

    server: str
    gtid: str | None = None
    log_file: str | None = None
    log_pos: int | None = None

    def describe(self) -> str:
        return f"gtid={self.gtid}" if self.gtid else f"{self.log_file}:{self.log_pos}"


class MySQLCheckpointStore:
    """Reads and writes one named checkpoint row; every save is its own committed transaction.

    Both methods raise RetryableError or FatalError.
    """

    in_order = True         # one resume position (ports.CheckpointStore)

    def __init__(self, connect, name: str):
        self._session = Session(connect, setup=ensure_state_tables)
        self._name = name

    def load(self) -> Checkpoint | None:
        """The stored checkpoint, or None before the first save."""
        def work(cur):
            cur.execute("SELECT server, gtid, log_file, log_pos FROM cachesync_checkpoint "
                        "WHERE name = %s", (self._name,))
            return cur.fetchone()
        row = self._session.run(work)
        if row is None:
            return None
        server, gtid, log_file, log_pos = row
        return Checkpoint(server, gtid or None, log_file, int(log_pos) if log_pos is not None else None)

    def save(self, cp: Checkpoint) -> None:
        """Store ``cp`` durably."""
        self._session.run(lambda cur: cur.execute(
            "INSERT INTO cachesync_checkpoint (name, server, gtid, log_file, log_pos, updated_at) "
            "VALUES (%s, %s, %s, %s, %s, NOW(6)) ON DUPLICATE KEY UPDATE server=VALUES(server), "
            "gtid=VALUES(gtid), log_file=VALUES(log_file), log_pos=VALUES(log_pos), "
            "updated_at=VALUES(updated_at)",
            (self._name, cp.server, cp.gtid, cp.log_file, cp.log_pos)))

    def close(self) -> None:
        self._session.close()


class HeldCheckpoints:
    """``start`` (default: a store's checkpoint) read, and progress kept in memory only: a
    run whose progress must not move the stored position (the tailer invalidating directly
    while Kafka does not serve: the stored checkpoint stays at what Kafka acknowledged)."""

    in_order = True

    def __init__(self, store, start: Checkpoint | None = None):
        self._store, self._start = store, start
        self.latest: Checkpoint | None = None   # the progress of this run

    def load(self) -> Checkpoint | None:
        return self._start or self._store.load()

    def save(self, cp: Checkpoint) -> None:
        self.latest = cp

    def close(self) -> None:
        self._store.close()
