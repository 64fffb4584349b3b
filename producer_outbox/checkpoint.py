"""Durable tailer checkpoints in MySQL (the cachesync_checkpoint table)."""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from producer_outbox.mysql import classify, ensure_state_tables


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
    """Reads and writes one named checkpoint row; every save is its own committed transaction."""

    def __init__(self, connect, name: str):
        self._connect = connect
        self._name = name
        self._conn: pymysql.connections.Connection | None = None

    def _cursor(self):
        if self._conn is None or not self._conn.open:
            self._conn = self._connect()
            ensure_state_tables(self._conn)
        return self._conn.cursor()

    def load(self) -> Checkpoint | None:
        """The stored checkpoint or None; raises RetryableError / FatalError."""
        try:
            with self._cursor() as cur:
                cur.execute("SELECT server, gtid, log_file, log_pos FROM cachesync_checkpoint "
                            "WHERE name = %s", (self._name,))
                row = cur.fetchone()
            self._conn.commit()
        except pymysql.err.MySQLError as e:
            self.close()
            raise classify(e) from e
        if row is None:
            return None
        server, gtid, log_file, log_pos = row
        return Checkpoint(server, gtid or None, log_file, int(log_pos) if log_pos is not None else None)

    def save(self, cp: Checkpoint) -> None:
        """Store ``cp`` durably; raises RetryableError / FatalError."""
        try:
            self._save(cp)
        except pymysql.err.MySQLError as e:
            self.close()
            raise classify(e) from e

    def _save(self, cp: Checkpoint) -> None:
        with self._cursor() as cur:
            cur.execute(
                "INSERT INTO cachesync_checkpoint (name, server, gtid, log_file, log_pos, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, NOW(6)) ON DUPLICATE KEY UPDATE server=VALUES(server), "
                "gtid=VALUES(gtid), log_file=VALUES(log_file), log_pos=VALUES(log_pos), "
                "updated_at=VALUES(updated_at)",
                (self._name, cp.server, cp.gtid, cp.log_file, cp.log_pos))
        self._conn.commit()

    def close(self) -> None:
        if self._conn is not None and self._conn.open:
            try:
                self._conn.close()
            except pymysql.err.MySQLError:
                pass   # closing a broken connection; nothing left to release
        self._conn = None
