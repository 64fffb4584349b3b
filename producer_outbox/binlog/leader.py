"""One active tailer per ``tailer.name``: a MySQL named lock, held on a connection of its own.

Any number of ``cachesync tail`` processes may run with one name; the one holding
``GET_LOCK('cachesync:tailer:<name>')`` tails, the others wait for it as hot standbys.

Why the lock and not a lease row: the server releases a named lock the moment the
holding connection ends, so a killed tailer (kill -9, OOM) hands over at once, with no
lease to run out. A host that is lost or cut off holds no TCP teardown; the lock
connection's ``wait_timeout`` is set to ``tailer.lock_lease_s`` and the holder queries it
every second, so the server drops it, and the lock, that long after the last query.

Split brain: the old holder checks its lock every second and stops tailing as soon as it
cannot confirm it, but in the second before it notices, both may publish. That is
harmless: message ids derive from the binlog position (deterministic), so the consumer
skips every duplicate; a checkpoint one of them stores behind the other's only means a
re-read of events already published.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from typing import Callable

import pymysql

from cachesync.runtime.mysql import classify, close_quietly, ensure_state_tables
from cachesync.schema.errors import RetryableError

log = logging.getLogger(__name__)

LOCK_PREFIX = "cachesync:tailer:"
MAX_LOCK_NAME = 64            # MariaDB and MySQL refuse longer lock names
WAIT_STEP_S = 1               # GET_LOCK waits this long per call, so stop() is seen promptly
CHECK_EVERY_S = 1.0           # how often the holder confirms it still holds the lock
RETRY_S = 2.0                 # wait after MySQL could not be reached


def lock_name(tailer: str) -> str:
    """``cachesync:tailer:<name>``, or a digest of it when that is too long for MySQL."""
    name = LOCK_PREFIX + tailer
    if len(name) <= MAX_LOCK_NAME:
        return name
    return LOCK_PREFIX + hashlib.sha256(tailer.encode()).hexdigest()[:MAX_LOCK_NAME - len(LOCK_PREFIX)]


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class TailerLock:
    """The named lock of one tailer name; ``acquire`` waits for it, ``held`` confirms it.

    Threads share it: the lock watcher and a tailer restarting on its own thread both ask
    ``held``. Its one connection answers them in turn (``_guard``), since two queries
    written at once on a MySQL connection read each other's replies, and a lock taken for
    lost on that account stops an active tailer that still holds it."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], tailer: str,
                 lease_s: float, holder: str | None = None):
        self._connect, self._tailer, self._lease_s = connect, tailer, lease_s
        self.name, self.holder = lock_name(tailer), holder or holder_id()
        self._conn: pymysql.connections.Connection | None = None
        self._guard = threading.RLock()     # release() drops under it

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this process holds the lock (True) or ``stop`` is set (False).

        MySQL being unreachable is waited out; FatalError (wrong password, no grant) raises.
        """
        told = False
        while not stop.is_set():
            try:
                if self._try_once():
                    log.info("tailer %r is active here (%s); lock %s", self._tailer, self.holder,
                             self.name)
                    return True
            except RetryableError as e:
                log.warning("tailer lock %s: %s; trying again in %.0fs", self.name, e, RETRY_S)
                self._drop()
                stop.wait(RETRY_S)
                continue
            if not told:
                log.info("standby: tailer %r is active elsewhere (%s); waiting to take over",
                         self._tailer, self.active() or "unknown")
                told = True
        return False

    def try_acquire(self) -> bool:
        """Take the lock if it is free now, without waiting (False: held elsewhere, or MySQL
        unreachable, which ``acquire`` then waits out); FatalError raises."""
        try:
            taken = self._try_once(wait_s=0)
        except RetryableError:
            self._drop()
            return False
        if taken:
            log.info("tailer %r is active here (%s); lock %s", self._tailer, self.holder, self.name)
        return taken

    def held(self) -> bool:
        """True while the server confirms this connection holds the lock (it also keeps the
        connection from idling past its wait_timeout)."""
        with self._guard:
            if self._conn is None:
                return False
            try:
                with self._conn.cursor() as cur:
                    cur.execute("SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", (self.name,))
                    return bool(cur.fetchone()[0])
            except pymysql.err.MySQLError:
                return False

    def active(self) -> str | None:
        """Who holds the lock, as it recorded itself (None when unknown)."""
        with self._guard:
            conn = self._conn
            if conn is None:
                return None
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT holder FROM cachesync_tailer_lock WHERE name = %s",
                                (self._tailer,))
                    row = cur.fetchone()
                return row[0] if row else None
            except pymysql.err.MySQLError:
                return None

    def release(self) -> None:
        with self._guard:
            if self._conn is not None:
                try:
                    with self._conn.cursor() as cur:
                        cur.execute("SELECT RELEASE_LOCK(%s)", (self.name,))
                except pymysql.err.MySQLError:
                    pass          # the connection is gone: so is the lock
            self._drop()

    def _try_once(self, wait_s: float = WAIT_STEP_S) -> bool:
        with self._guard:
            return self._get_lock(wait_s)

    def _get_lock(self, wait_s: float) -> bool:
        conn = self._connection()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT GET_LOCK(%s, %s)", (self.name, wait_s))
                if cur.fetchone()[0] != 1:
                    return False
                cur.execute("INSERT INTO cachesync_tailer_lock (name, holder, since) "
                            "VALUES (%s, %s, NOW(6)) ON DUPLICATE KEY UPDATE "
                            "holder = VALUES(holder), since = VALUES(since)",
                            (self._tailer, self.holder))
            return True
        except pymysql.err.MySQLError as e:
            raise _classified(e) from e

    def _connection(self) -> pymysql.connections.Connection:
        if self._conn is None or not self._conn.open:
            conn = self._connect()
            try:
                ensure_state_tables(conn)
                conn.autocommit(True)
                with conn.cursor() as cur:
                    cur.execute("SET SESSION wait_timeout = %s", (max(1, round(self._lease_s)),))
            except pymysql.err.MySQLError as e:
                close_quietly(conn)
                raise _classified(e) from e
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        with self._guard:
            close_quietly(self._conn)
            self._conn = None


def _classified(error: pymysql.err.MySQLError) -> Exception:
    """classify(), with anything it leaves unmapped treated as transient."""
    mapped = classify(error)
    return mapped if mapped is not error else RetryableError(f"MySQL error: {error}")
